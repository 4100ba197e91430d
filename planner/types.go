package planner

import (
	"fmt"
	"strings"
)

// DefaultBaseCost is the cost added to every shard group's bytes by
// ByDiskSize, so that empty shard groups still count (Citus's
// citus.rebalancer_by_disk_size_base_cost, 100 MiB).
const DefaultBaseCost int64 = 100 * 1024 * 1024

// Strategy names how the cost of a shard group is measured.
type Strategy int

const (
	_ Strategy = iota
	// ByShardCount gives every shard group cost 1 (Citus's by_shard_count).
	ByShardCount
	// ByDiskSize gives a shard group the bytes of all its shards plus
	// Input.BaseCost (Citus's by_disk_size).
	ByDiskSize
	// ByLoad gives a shard group its measured load (Group.Load, weighted
	// rows per second) plus a small base (see Input.LoadBase), so that
	// hot groups spread out even when bytes are even. Citus has no such
	// strategy.
	ByLoad
)

var strategyNames = [...]string{ByShardCount: "by_shard_count", ByDiskSize: "by_disk_size", ByLoad: "by_load"}

// StrategyNames lists the strategies' names, for messages.
const StrategyNames = "by_shard_count, by_disk_size, by_load"

// DefaultLoadBaseShare is the share of the mean group load that ByLoad
// adds to every group's load when Input.LoadBase is 0 (see LoadBase).
const DefaultLoadBaseShare = 0.1

// MinLoadBase is the smallest automatic ByLoad base, in the unit of
// Group.Load (weighted rows per second): a group below about one row a
// second is idle, and measurement noise on an idle cluster must not read as
// a hot group.
const MinLoadBase = 1.0

// String returns the strategy's name as the CLI and Citus spell it.
func (s Strategy) String() string {
	if s > 0 && int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// MarshalText writes the strategy's name, so JSON carries "by_disk_size".
func (s Strategy) MarshalText() ([]byte, error) {
	if s <= 0 || int(s) >= len(strategyNames) {
		return nil, fmt.Errorf("%w: unknown strategy %d", ErrInvalidInput, int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads a strategy name (see ParseStrategy).
func (s *Strategy) UnmarshalText(b []byte) error {
	v, err := ParseStrategy(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseStrategy returns the strategy with the given name. The error, which
// wraps ErrInvalidInput, lists the valid names.
func ParseStrategy(name string) (Strategy, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for i, s := range strategyNames {
		if i > 0 && s == n {
			return Strategy(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown strategy %q; use one of %s", ErrInvalidInput, name, StrategyNames)
}

// Reason says why a move is in the plan.
type Reason int

const (
	_ Reason = iota
	// ReasonDrain: the group's node may not hold shards (shouldhaveshards
	// is false, its capacity is 0, or it is being drained).
	ReasonDrain
	// ReasonIsolate: the group is isolated and moves to a node of its own,
	// or it moves off a node that an isolated group has reserved.
	ReasonIsolate
	// ReasonNotAllowed: a placement rule (PinnedTo, AvoidNodes, or
	// Input.Allowed) forbids the group on its current node.
	ReasonNotAllowed
	// ReasonBalance: the move brings node utilizations closer together
	// (Citus's rule accepts it at its point of the plan).
	ReasonBalance
	// ReasonSpread: the move spreads a colocation group's shards over the
	// nodes, or evens out the nodes' bytes (by_disk_size), without taking
	// any node further outside the band; Citus's rule alone would not make
	// it, often because it is one half of a swap.
	ReasonSpread
)

var reasonNames = [...]string{ReasonDrain: "drain", ReasonIsolate: "isolate", ReasonNotAllowed: "not_allowed", ReasonBalance: "balance", ReasonSpread: "spread"}

// String returns the reason's snake_case name.
func (r Reason) String() string {
	if r > 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// MarshalText writes the reason's name.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a reason's name.
func (r *Reason) UnmarshalText(b []byte) error {
	for i, s := range reasonNames {
		if i > 0 && s == string(b) {
			*r = Reason(i)
			return nil
		}
	}
	return fmt.Errorf("unknown move reason %q", string(b))
}

// SkipReason says why a move was considered and not made.
type SkipReason int

const (
	_ SkipReason = iota
	// SkipExcluded: the group had to move (drain, rule, isolation) but it is
	// excluded from moving.
	SkipExcluded
	// SkipNotAllowedAnywhere: the group had to move but no node that may
	// hold shards allows it (or, for an isolated group, no node is free).
	SkipNotAllowedAnywhere
	// SkipNoRoom: the group had to move but every node that allows it would
	// go over its MaxCost.
	SkipNoRoom
	// SkipBelowImprovementThreshold: a balancing move improves balance too
	// little for the group's cost (see Input.ImprovementThreshold).
	SkipBelowImprovementThreshold
	// SkipMaxMoves: the move would be next in the plan but Input.MaxMoves
	// balancing moves were already planned.
	SkipMaxMoves
)

var skipNames = [...]string{
	SkipExcluded:                  "excluded",
	SkipNotAllowedAnywhere:        "not_allowed_anywhere",
	SkipNoRoom:                    "no_room",
	SkipBelowImprovementThreshold: "below_improvement_threshold",
	SkipMaxMoves:                  "max_moves_reached",
}

// String returns the skip reason's snake_case name.
func (r SkipReason) String() string {
	if r > 0 && int(r) < len(skipNames) {
		return skipNames[r]
	}
	return fmt.Sprintf("SkipReason(%d)", int(r))
}

// MarshalText writes the skip reason's name.
func (r SkipReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a skip reason's name.
func (r *SkipReason) UnmarshalText(b []byte) error {
	for i, s := range skipNames {
		if i > 0 && s == string(b) {
			*r = SkipReason(i)
			return nil
		}
	}
	return fmt.Errorf("unknown skip reason %q", string(b))
}

// Node is one worker that can hold shard groups (a registered node of the cluster).
type Node struct {
	ID   int64  `json:"id"`
	Name string `json:"name"` // host:port, for people
	// Capacity is the node's relative weight: a node of capacity 2 should
	// hold twice the cost of a node of capacity 1. 0 means the node may not
	// hold shards. Callers set 1 when they know nothing better.
	Capacity float64 `json:"capacity"`
	// MaxCost, when above 0, is a hard ceiling on the summed cost of the
	// groups the plan puts on this node (in cost units: bytes plus base cost
	// for ByDiskSize, groups for ByShardCount). No move ever makes a node
	// go over it. 0 means no ceiling.
	MaxCost float64 `json:"max_cost,omitempty"`
	// ShouldHaveShards mirrors the node catalog's shouldhaveshards; a node with
	// false is drained.
	ShouldHaveShards bool `json:"should_have_shards"`
	// Drain asks for every group to be moved off this node.
	Drain bool `json:"drain,omitempty"`
}

// Group is one shard group: the shards with the same index across a
// colocation group. It is the unit of movement and is never split.
type Group struct {
	ID           string   `json:"id"` // stable key, e.g. "c1:3"
	ColocationID int64    `json:"colocation_id"`
	Index        int      `json:"index"` // shard index within the colocation group
	ShardIDs     []int64  `json:"shard_ids"`
	Tables       []string `json:"tables"`
	Bytes        int64    `json:"bytes"` // all shards of the group together
	Node         int64    `json:"node"`  // the node that holds it now
	// Load is the group's measured activity in weighted rows per second
	// (shardmover measures written rows with weight 4 and read rows with
	// weight 1, see metadata.LoadWriteWeight); ByLoad balances it. 0 when
	// not measured.
	Load float64 `json:"load,omitempty"`
	// Excluded groups never move (Citus's excluded_shard_list). They still
	// count toward their node's utilization.
	Excluded bool `json:"excluded,omitempty"`
	// PinnedTo, when not empty, lists the only nodes the group may be on.
	PinnedTo []int64 `json:"pinned_to,omitempty"`
	// AvoidNodes lists nodes the group may not be on.
	AvoidNodes []int64 `json:"avoid_nodes,omitempty"`
	// Isolate asks for a node that holds this group and nothing else.
	Isolate bool `json:"isolate,omitempty"`
}

// Input is everything the planner knows. Plan treats every field
// literally; DefaultInput gives Citus's defaults for a strategy.
type Input struct {
	Nodes    []Node
	Groups   []Group
	Strategy Strategy
	// Threshold is how far, as a fraction of the average, a node's
	// utilization may be from the average for the cluster to count as
	// balanced. Citus: 0 for by_shard_count, 0.1 for by_disk_size.
	Threshold float64
	// ImprovementThreshold skips a balancing move that overshoots (the
	// target ends fuller than the source) when
	//   max(uS - uT', uS' - uT) / min(uT' - uT, uS - uS') < ImprovementThreshold
	// where u is utilization before and u' after the move, S the source and
	// T the target: the gain in balance is small for what the group costs.
	// A move that leaves the target no fuller than the source is never
	// skipped. 0 turns it off. Citus: 0 for by_shard_count, 0.5 for
	// by_disk_size.
	ImprovementThreshold float64
	// MaxMoves limits balancing moves: -1 means no limit, 0 means none.
	// Drain, isolation and rule moves are never limited.
	MaxMoves int
	// DrainOnly plans only drain, isolation and rule moves.
	DrainOnly bool
	// BaseCost is added to a group's bytes by ByDiskSize.
	BaseCost int64
	// LoadBase is added to a group's Load by ByLoad, so that idle groups
	// still cost something and spread by count. 0 means automatic:
	// DefaultLoadBaseShare of the mean Load of all groups, and at least
	// MinLoadBase (so with no load measured at all ByLoad balances group
	// counts, like ByShardCount). Result.LoadBase reports the base used.
	LoadBase float64
	// MaxPerNode is how many moves one node may take part in (as source or
	// target) within one wave. 0 means 1.
	MaxPerNode int

	// Allowed, when set, must also return true for a group to be placed on
	// a node (like Citus's shard_allowed_on_node_function). It must be pure.
	Allowed func(g Group, n Node) bool
	// Cost, when set, replaces the strategy's cost of a group. It must be
	// pure and return a finite value >= 0.
	Cost func(g Group) float64
	// Capacity, when set, replaces Node.Capacity. It must be pure and
	// return a finite value >= 0.
	Capacity func(n Node) float64
}

// DefaultInput returns an Input with Citus's defaults for the strategy:
// unlimited moves, one move per node per wave, the strategy's threshold and
// improvement threshold, and the 100 MiB base cost for ByDiskSize. ByLoad
// takes by_disk_size's thresholds (0.1 and 0.5): measured load is as
// uneven and as noisy as sizes, and the threshold keeps small differences
// from causing moves; its base is automatic (LoadBase 0).
func DefaultInput(s Strategy) Input {
	in := Input{Strategy: s, MaxMoves: -1, MaxPerNode: 1}
	switch s {
	case ByDiskSize:
		in.Threshold = 0.1
		in.ImprovementThreshold = 0.5
		in.BaseCost = DefaultBaseCost
	case ByLoad:
		in.Threshold = 0.1
		in.ImprovementThreshold = 0.5
	}
	return in
}

// Move is one shard group going from one node to another.
type Move struct {
	Order        int      `json:"order"` // 1-based position in the plan
	Wave         int      `json:"wave"`  // 1-based; see Result
	GroupID      string   `json:"group_id"`
	ColocationID int64    `json:"colocation_id"`
	ShardIDs     []int64  `json:"shard_ids"`
	Tables       []string `json:"tables"`
	Bytes        int64    `json:"bytes"`
	Cost         float64  `json:"cost"`
	From         int64    `json:"from"`
	FromName     string   `json:"from_name"`
	To           int64    `json:"to"`
	ToName       string   `json:"to_name"`
	Reason       Reason   `json:"reason"`
	// Utilizations of the source and target just before and just after
	// this move, when the moves run in Order.
	FromBefore float64 `json:"from_before"`
	FromAfter  float64 `json:"from_after"`
	ToBefore   float64 `json:"to_before"`
	ToAfter    float64 `json:"to_after"`
}

// Skipped is a move the planner considered and did not make.
type Skipped struct {
	GroupID  string     `json:"group_id"`
	Bytes    int64      `json:"bytes"`
	From     int64      `json:"from"`
	FromName string     `json:"from_name"`
	To       int64      `json:"to,omitempty"` // 0 when there was no target
	ToName   string     `json:"to_name,omitempty"`
	Why      SkipReason `json:"why"`
	Detail   string     `json:"detail"`
}

// NodeUtil is one node's fill at a point of the plan.
type NodeUtil struct {
	Node     int64   `json:"node"`
	Name     string  `json:"name"`
	Capacity float64 `json:"capacity"`
	// Eligible is false for a node that may not hold shards or that is
	// reserved for an isolated group; such nodes are not balanced.
	Eligible bool  `json:"eligible"`
	Groups   int   `json:"groups"`
	Shards   int   `json:"shards"` // shards of those groups
	Bytes    int64 `json:"bytes"`
	// Load is the summed Group.Load of the node's groups (without the
	// ByLoad base); 0 when no load was measured.
	Load float64 `json:"load"`
	Cost float64 `json:"cost"`
	// Utilization is Cost/Capacity. A node of capacity 0 reports its Cost,
	// as if its capacity were 1, so the value stays finite.
	Utilization float64 `json:"utilization"`
}

// Result is a plan: moves in order, what was skipped, and the fill of every
// node before and after.
//
// Waves: moves run wave by wave; within a wave a node takes part in at
// most MaxPerNode moves, and moves that touch the same node keep their
// order (a move never lands in an earlier wave than an earlier move that
// shares a node with it), so every node goes through the states the plan
// describes.
type Result struct {
	Strategy             Strategy `json:"strategy"`
	Threshold            float64  `json:"threshold"`
	ImprovementThreshold float64  `json:"improvement_threshold"`
	MaxMoves             int      `json:"max_moves"`
	// LoadBase is the base ByLoad added to every group's load (see
	// Input.LoadBase); 0 for other strategies.
	LoadBase float64 `json:"load_base,omitempty"`
	// Average utilization of the eligible nodes, and the band
	// [Lower, Upper] = (1 ± Threshold) × Average that counts as balanced.
	Average float64 `json:"average"`
	Lower   float64 `json:"lower"`
	Upper   float64 `json:"upper"`
	Moves   []Move  `json:"moves"`
	// Skipped, in the order the planner met them: isolation, forced
	// moves, then balancing (improvement threshold, then the moves past
	// MaxMoves, in the order a full plan would make them).
	Skipped    []Skipped  `json:"skipped"`
	Before     []NodeUtil `json:"before"` // by node id
	After      []NodeUtil `json:"after"`  // by node id
	MovedBytes int64      `json:"moved_bytes"`
	Waves      int        `json:"waves"`
	// Balanced: after the plan every eligible node is within [Lower, Upper].
	Balanced bool `json:"balanced"`
	// Converged: no balancing move that obeys the rules would improve
	// balance further. False when MaxMoves or DrainOnly stopped the plan
	// early.
	Converged bool `json:"converged"`
	// BytesBalanced: with by_disk_size, after the plan every eligible
	// node's bytes are within (1 ± Threshold) × the average bytes per unit
	// of capacity. Always true for other strategies and cost functions,
	// which do not balance bytes.
	BytesBalanced bool `json:"bytes_balanced"`
	// BytesLimit, when BytesBalanced is false, names the node that stays
	// outside the band and why; it names a group only when that group
	// provably keeps the node out (too large for any node, may not move,
	// or groups too coarse for any combination to fit the node's band),
	// and otherwise says which guarantees (cost band, spread, placement
	// rules, MaxMoves) the steps that would help break.
	BytesLimit *Limit `json:"bytes_limit,omitempty"`
	// Spread is, for every colocation group, how many of its shard groups
	// each node holds before and after the plan: a table whose shards sit
	// on fewer nodes gets less parallelism for its queries.
	Spread []Spread `json:"spread"`
}

// Spread is one colocation group's shard groups per node, in the order of
// Result.Before (node id).
type Spread struct {
	ColocationID int64    `json:"colocation_id"`
	Tables       []string `json:"tables"`
	Before       []int    `json:"before"`
	After        []int    `json:"after"`
}

// Limit names what keeps a plan from a goal: a group (empty when none is
// to blame), the node left outside the band, and a sentence.
type Limit struct {
	GroupID  string `json:"group_id,omitempty"`
	Bytes    int64  `json:"bytes"`
	Node     int64  `json:"node"`
	NodeName string `json:"node_name"`
	Detail   string `json:"detail"`
}
