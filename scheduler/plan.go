package scheduler

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/planner"
)

// PlanOptions are the operator's planning choices, as the CLI takes them.
type PlanOptions struct {
	// Strategy is by_disk_size, by_shard_count or by_load; empty means
	// the cluster's own (on Citus its default rebalance strategy, applied
	// by ApplyClusterStrategy; else by_disk_size).
	Strategy string
	// LoadWindow is how long by_load watches the nodes' statistics
	// (LiveStatus); it must be positive with by_load.
	LoadWindow time.Duration
	// Threshold and ImprovementThreshold are nil for the strategy's default.
	Threshold            *float64
	ImprovementThreshold *float64
	// BaseCost is by_disk_size's cost added to every group's bytes, like
	// Citus's citus.rebalancer_by_disk_size_base_cost; nil for 100 MiB.
	BaseCost *int64
	// MaxMoves limits balancing moves (Citus's default is 1000000).
	MaxMoves int
	// MaxPerNode is how many moves one node takes part in per wave.
	MaxPerNode int
	DrainOnly  bool
	// Drain lists nodes (host:port) to empty.
	Drain []string
	// Capacity sets relative capacities by host:port.
	Capacity map[string]float64
	// Exclude lists shard ids whose groups must not move.
	Exclude []int64
	// AddNodes simulates nodes not yet added: "host:port" or "host:port=capacity".
	AddNodes []string
	// AllowUnmeasured plans the live cluster without the nodes that could
	// not be measured (unmeasured.go): their shard groups stay where they
	// are and no move goes to or from them. Without it such a node makes
	// planning refuse (ErrUnmeasured).
	AllowUnmeasured bool

	// Placement rules (flags and the --rules file, merged; see rules.go).
	// Pin: a shard group (COLOCATION:INDEX or a shard id) only on the rule's
	// nodes. Avoid: never on them. Isolate: the group gets a node of its
	// own (Nodes unused). Allow: a distributed table's groups only on the
	// rule's nodes.
	Pin, Avoid, Isolate, Allow []PlacementRule
}

// DefaultPlanOptions: Citus's defaults. The strategy is the cluster's own:
// on Citus its default rebalance strategy (ApplyClusterStrategy), else, as
// Citus's default since 12.0, by_disk_size (bytes of the group plus a 100
// MiB base cost, threshold 0.1): equal shard counts can still leave one
// node with most of the data.
func DefaultPlanOptions() PlanOptions {
	return PlanOptions{MaxMoves: 1000000, MaxPerNode: 1, LoadWindow: metadata.DefaultLoadWindow}
}

// BuildInput turns a cluster status (live or from a snapshot file) and the
// operator's options into planner input. Errors match metadata.ErrInvalid
// and say which flag is wrong and how.
func BuildInput(st metadata.Status, o PlanOptions) (planner.Input, error) {
	return BuildLiveInput(st, nil, o)
}

// BuildLiveInput is BuildInput for the live cluster, given the nodes its
// snapshot could not measure (metadata.Catalog.MeasuredSnapshot): it
// refuses them (ErrUnmeasured) unless o.AllowUnmeasured, and then plans
// them as inactive nodes: their groups stay where they are and no move
// goes to or from them (unmeasured.go).
func BuildLiveInput(st metadata.Status, unmeasured []metadata.Unmeasured, o PlanOptions) (planner.Input, error) {
	name := o.Strategy
	if name == "" {
		name = "by_disk_size"
	}
	strategy, err := planner.ParseStrategy(name)
	if err != nil {
		return planner.Input{}, optionf("Strategy", "%q does not exist; use one of %s", o.Strategy, planner.StrategyNames)
	}
	if strategy == planner.ByLoad && o.LoadWindow <= 0 {
		return planner.Input{}, optionf("LoadWindow", "must be a positive duration such as 30s, got %s", o.LoadWindow)
	}
	in := planner.DefaultInput(strategy)
	if o.Threshold != nil {
		if math.IsNaN(*o.Threshold) || *o.Threshold < 0 || *o.Threshold >= 1 {
			return in, optionf("Threshold", "must be a number from 0 up to (not including) 1, got %v", *o.Threshold)
		}
		in.Threshold = *o.Threshold
	}
	if o.ImprovementThreshold != nil {
		if math.IsNaN(*o.ImprovementThreshold) || *o.ImprovementThreshold < 0 || math.IsInf(*o.ImprovementThreshold, 0) {
			return in, optionf("ImprovementThreshold", "must be a number of 0 or more, got %v", *o.ImprovementThreshold)
		}
		in.ImprovementThreshold = *o.ImprovementThreshold
	}
	if o.BaseCost != nil {
		if *o.BaseCost < 0 {
			return in, optionf("BaseCost", "must be 0 or more bytes, got %d", *o.BaseCost)
		}
		in.BaseCost = *o.BaseCost
	}
	if o.MaxMoves < 0 {
		return in, optionf("MaxMoves", "must be 0 or more, got %d", o.MaxMoves)
	}
	in.MaxMoves = o.MaxMoves
	if o.MaxPerNode < 1 {
		return in, optionf("MaxPerNode", "must be at least 1, got %d", o.MaxPerNode)
	}
	in.MaxPerNode = o.MaxPerNode
	in.DrainOnly = o.DrainOnly
	if err := CheckRules(o); err != nil {
		return in, err
	}
	if err := checkUnmeasured(unmeasured, o); err != nil {
		return in, err
	}
	unreached := unmeasuredIDs(unmeasured)

	byAddr := map[string]*planner.Node{}
	var maxID int64
	// Nodes no move may involve: inactive ones, and those that could not
	// be measured (with AllowUnmeasured).
	inactive := map[int64]bool{}
	for _, n := range st.Nodes {
		maxID = max(maxID, int64(n.ID))
		if n.Role == "coordinator" && n.ShardGroups == 0 {
			continue
		}
		// Capacity is taken as written: 0 means the node may hold no shards
		// (status-schema.md), like shouldhaveshards = false. The live status
		// and `status -o json` write the real capacity (1 on compat; on
		// Citus the default strategy's capacity function).
		capacity := n.Capacity
		if math.IsNaN(capacity) || math.IsInf(capacity, 0) || capacity < 0 {
			return in, invalidf("%s has capacity %v; a capacity is a number of 0 or more (0: no shards on the node)", n, n.Capacity)
		}
		if st.Flavor == metadata.Citus && o.Strategy != "" {
			// A named strategy ignores Citus's strategy catalog, capacity
			// function included: Citus's built-in strategies weigh every
			// node 1 (citus_node_capacity_1).
			capacity = 1
		}
		if !n.IsActive || unreached[int64(n.ID)] {
			inactive[int64(n.ID)] = true
		}
		in.Nodes = append(in.Nodes, planner.Node{ID: int64(n.ID), Name: n.Addr, Capacity: capacity, ShouldHaveShards: n.ShouldHaveShards && !inactive[int64(n.ID)]})
	}
	for _, spec := range o.AddNodes {
		addr, capText, hasCap := strings.Cut(spec, "=")
		if _, _, err := metadata.ParseAddr(addr); err != nil {
			return in, optionf("AddNodes", "%q is not host:port[=capacity]", spec)
		}
		capacity := 1.0
		if hasCap {
			capacity, err = strconv.ParseFloat(capText, 64)
			if err != nil || capacity < 0 || math.IsNaN(capacity) || math.IsInf(capacity, 0) {
				return in, optionf("AddNodes", "%q has no valid capacity (a number of 0 or more)", spec)
			}
		}
		for _, n := range in.Nodes {
			if n.Name == addr {
				return in, optionf("AddNodes", "%s is already in the cluster", addr)
			}
		}
		maxID++
		in.Nodes = append(in.Nodes, planner.Node{ID: maxID, Name: addr, Capacity: capacity, ShouldHaveShards: true})
	}
	for i := range in.Nodes {
		byAddr[in.Nodes[i].Name] = &in.Nodes[i]
	}
	for _, addr := range o.Drain {
		n, ok := byAddr[addr]
		if !ok {
			return in, optionf("Drain", "%s: no such node in the cluster; `shardmover status` lists the nodes", addr)
		}
		n.Drain = true
	}
	addrs := make([]string, 0, len(o.Capacity))
	for a := range o.Capacity {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, addr := range addrs {
		c := o.Capacity[addr]
		n, ok := byAddr[addr]
		if !ok {
			return in, optionf("Capacity", "%s: no such node in the cluster; `shardmover status` lists the nodes", addr)
		}
		if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			return in, optionf("Capacity", "%s=%v: a capacity is a number of 0 or more", addr, c)
		}
		n.Capacity = c
	}
	usable := false
	for _, n := range in.Nodes {
		if n.Capacity > 0 && n.ShouldHaveShards && !n.Drain {
			usable = true
		}
	}
	if !usable && len(st.ShardGroups) > 0 && len(unmeasured) > 0 {
		return in, nothingMeasured(unmeasured)
	}
	if !usable && len(st.ShardGroups) > 0 {
		return in, invalidf("no node may hold shards (every node has capacity 0, is drained or has shouldhaveshards = false); nothing could be placed")
	}

	excluded := map[string]bool{}
	for _, id := range o.Exclude {
		found := false
		for _, g := range st.ShardGroups {
			for _, s := range g.ShardIDs {
				if s == id {
					excluded[g.ID], found = true, true
				}
			}
		}
		if !found {
			return in, optionf("Exclude", "%d: no such shard in the cluster", id)
		}
	}
	for _, g := range st.ShardGroups {
		in.Groups = append(in.Groups, planner.Group{
			ID: g.ID, ColocationID: int64(g.ColocationID), Index: g.Index, ShardIDs: g.ShardIDs, Tables: g.Tables,
			Bytes: g.Bytes, Node: int64(g.NodeID), Load: g.Load,
			// A group on an inactive or unmeasured node cannot be copied from.
			Excluded: excluded[g.ID] || inactive[int64(g.NodeID)],
		})
	}
	if len(inactive) > 0 {
		in.Allowed = func(_ planner.Group, n planner.Node) bool { return !inactive[n.ID] }
	}
	// The rules' references are checked against the cluster; an empty
	// status (the check made before connecting) has nothing to refer to,
	// so there only their syntax is checked (above).
	if len(st.Nodes) > 0 || len(st.ShardGroups) > 0 {
		if err := applyRules(st, o, &in, byAddr); err != nil {
			return in, err
		}
	}
	avoidOldCopies(st, &in)
	return in, nil
}

// avoidOldCopies keeps each group off the nodes that still hold an old
// copy of it (metadata.StatusGroup.OldCopyNodes): a move there is refused
// until `shardmover cleanup` drops the copy. Only balancing is steered
// this way: a group on a node that must be emptied, or pinned only to
// such nodes, must move all the same, and its move's refusal says to run
// cleanup first.
func avoidOldCopies(st metadata.Status, in *planner.Input) {
	drained := map[int64]bool{}
	for _, n := range in.Nodes {
		if n.Drain || !n.ShouldHaveShards || n.Capacity == 0 {
			drained[n.ID] = true
		}
	}
	for i, sg := range st.ShardGroups {
		g := &in.Groups[i]
		if drained[g.Node] {
			continue
		}
		var add []int64
		for _, id := range sg.OldCopyNodes {
			if n := int64(id); n != g.Node && !containsID(g.AvoidNodes, n) {
				add = append(add, n)
			}
		}
		if len(add) == 0 {
			continue
		}
		avoid := append(slices.Clone(g.AvoidNodes), add...)
		if len(g.PinnedTo) > 0 && len(without(g.PinnedTo, avoid)) == 0 {
			continue
		}
		g.AvoidNodes = avoid
	}
}

// LiveStatus is the status of the live cluster that planning reads: cl
// with every node's real capacity (metadata.Catalog.ClusterStatus) and,
// with --strategy by_load, every shard group's load measured over
// o.LoadWindow (metadata.Catalog.MeasureLoad: the nodes' statistics read at
// the start and the end of the window), its warnings added to the status.
// It waits for the window. The nodes in unmeasured (those cl's snapshot
// could not measure) are not read: their groups count no load, and stay
// where they are (BuildLiveInput).
func LiveStatus(ctx context.Context, cat *metadata.Catalog, cl *metadata.Cluster, unmeasured []metadata.Unmeasured, o PlanOptions) (metadata.Status, error) {
	st := cat.ClusterStatus(ctx, cl)
	if s, err := planner.ParseStrategy(o.Strategy); err != nil || s != planner.ByLoad {
		return st, nil
	}
	read := cl
	if len(unmeasured) > 0 {
		skip := map[int32]bool{}
		st.Warnings = slices.Clone(st.Warnings)
		for _, u := range unmeasured {
			skip[u.Node.GroupID] = true
			st.Warnings = append(st.Warnings, fmt.Sprintf("%s could not be measured; its shard groups count no load", u.Node.Addr()))
		}
		part := *cl
		part.Groups = nil
		for _, g := range cl.Groups {
			if !skip[g.GroupID] {
				part.Groups = append(part.Groups, g)
			}
		}
		read = &part
	}
	loads, warns, err := cat.MeasureLoad(ctx, read, o.LoadWindow)
	if err != nil {
		return st, err
	}
	for i := range st.ShardGroups {
		st.ShardGroups[i].Load = loads[st.ShardGroups[i].ID]
	}
	st.Warnings = append(append([]string{}, st.Warnings...), warns...)
	return st, nil
}

// ParseCapacity reads "host:port=2" into the map.
func ParseCapacity(specs []string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, s := range specs {
		addr, v, ok := strings.Cut(s, "=")
		if !ok {
			return nil, optionf("Capacity", "%q must be host:port=number, e.g. 10.0.0.5:5432=2", s)
		}
		c, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, optionf("Capacity", "%q: %q is not a number", s, v)
		}
		out[addr] = c
	}
	return out, nil
}

// invalidf is a refused request: metadata's one invalid-input error type.
func invalidf(format string, args ...any) error { return metadata.Invalidf(format, args...) }
