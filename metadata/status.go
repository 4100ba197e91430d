package metadata

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// StatusSchemaVersion is the version of the Status JSON document.
const StatusSchemaVersion = 1

// Status is the documented JSON form of a cluster snapshot, printed by
// `shardmover status -o json` and read by `shardmover plan --snapshot`.
// Fields are only ever added; see docs/status-schema.md.
type Status struct {
	SchemaVersion int           `json:"schema_version"`
	Flavor        Flavor        `json:"flavor"`
	Coordinator   string        `json:"coordinator"`
	Nodes         []StatusNode  `json:"nodes"`
	Tables        []StatusTable `json:"tables"`
	ShardGroups   []StatusGroup `json:"shard_groups"`
	// Slots are the shardmover_* replication slots found on the active
	// nodes, with the WAL each retains. Only a live status reads them; a
	// document built from a snapshot alone has none.
	Slots    []StatusSlot `json:"replication_slots"`
	Warnings []string     `json:"warnings,omitempty"`
}

// StatusNode is one node with what it holds.
type StatusNode struct {
	ID               int32  `json:"id"`
	GroupID          int32  `json:"group_id"`
	Addr             string `json:"addr"`
	Role             string `json:"role"` // "coordinator" or "worker"
	IsActive         bool   `json:"is_active"`
	ShouldHaveShards bool   `json:"should_have_shards"`
	// Capacity is the node's relative capacity as the planner uses it: on
	// compat 1 (the catalogs store none), on Citus what the default
	// rebalance strategy's node_capacity_function gives (see
	// Catalog.ClusterStatus). 0 means no shards on the node.
	Capacity    float64 `json:"capacity"`
	ShardGroups int     `json:"shard_groups"`
	Shards      int     `json:"shards"`
	Bytes       int64   `json:"bytes"`
}

// StatusTable is one distributed table.
type StatusTable struct {
	Name         string `json:"name"`
	Column       string `json:"column"`
	ColumnType   string `json:"column_type"`
	ShardCount   int    `json:"shard_count"`
	ColocationID int32  `json:"colocation_id"`
}

// StatusGroup is one shard group and where it lives.
type StatusGroup struct {
	ID           string   `json:"id"` // "<colocation_id>:<index>"
	ColocationID int32    `json:"colocation_id"`
	Index        int      `json:"index"`
	ShardIDs     []int64  `json:"shard_ids"`
	Tables       []string `json:"tables"`
	NodeID       int32    `json:"node_id"`
	Bytes        int64    `json:"bytes"`
	SizeKnown    bool     `json:"size_known"`
	// Load is the group's measured load in weighted rows per second
	// (MeasureLoad), present only when it was measured: by `plan`,
	// `rebalance`, `drain` and the daemon with --strategy by_load, never
	// by `status`. A snapshot file may carry it for what-if planning.
	Load float64 `json:"load,omitempty"`
	// OldCopyNodes are the nodes that still hold an old copy of the group,
	// fenced by a finished move and kept for the grace period
	// (KeptOldCopies). The group cannot move back to one of them until
	// `shardmover cleanup` drops the copy, so the planner avoids them.
	OldCopyNodes []int32 `json:"old_copy_nodes,omitempty"`
}

// StatusSlot is one shardmover_* replication slot on a node and the WAL it
// keeps there. A slot keeps every WAL segment from its restart_lsn on, so a
// slot whose move stalled or ended without dropping it fills the node's
// disk; the mover's guard fails a move past --max-retained-wal, and
// `shardmover cleanup` drops slots no unfinished move owns.
type StatusSlot struct {
	NodeID int32  `json:"node_id"`
	Addr   string `json:"addr"`
	Name   string `json:"name"`
	// MoveID is the move the name says owns the slot (shardmover_<id>); 0
	// when the name carries no move id.
	MoveID int64 `json:"move_id"`
	// Active is true while a walsender streams from the slot.
	Active bool `json:"active"`
	// RetainedWALBytes is pg_current_wal_lsn() - restart_lsn on the node;
	// RetainedKnown is false when the slot reserves no WAL (then it is 0).
	RetainedWALBytes int64 `json:"retained_wal_bytes"`
	RetainedKnown    bool  `json:"retained_known"`
	// WALStatus is pg_replication_slots.wal_status (reserved, extended,
	// unreserved, lost).
	WALStatus string `json:"wal_status,omitempty"`
}

// Status renders the snapshot in its documented JSON form.
func (c *Cluster) Status(coordinator string) Status {
	st := Status{SchemaVersion: StatusSchemaVersion, Flavor: c.Flavor, Coordinator: coordinator,
		Nodes: []StatusNode{}, Tables: []StatusTable{}, ShardGroups: []StatusGroup{}, Slots: []StatusSlot{}, Warnings: c.Warnings}
	idx := map[int32]int{}
	for _, n := range c.Nodes {
		role := "worker"
		if n.IsCoordinator() {
			role = "coordinator"
		}
		idx[n.ID] = len(st.Nodes)
		st.Nodes = append(st.Nodes, StatusNode{ID: n.ID, GroupID: n.GroupID, Addr: n.Addr(), Role: role,
			IsActive: n.IsActive, ShouldHaveShards: n.ShouldHaveShards, Capacity: 1})
	}
	for _, t := range c.Tables {
		st.Tables = append(st.Tables, StatusTable{Name: t.DisplayName(), Column: t.Column, ColumnType: t.ColumnType,
			ShardCount: t.ShardCount, ColocationID: t.ColocationID})
	}
	for _, g := range c.Groups {
		st.ShardGroups = append(st.ShardGroups, StatusGroup{ID: g.Key(), ColocationID: g.ColocationID, Index: g.Index,
			ShardIDs: g.ShardIDs, Tables: g.Tables, NodeID: g.NodeID, Bytes: g.Bytes, SizeKnown: g.SizeKnown})
		if i, ok := idx[g.NodeID]; ok {
			st.Nodes[i].ShardGroups++
			st.Nodes[i].Shards += len(g.ShardIDs)
			st.Nodes[i].Bytes += g.Bytes
		}
	}
	return st
}

// ClusterStatus is cl.Status with every node's real capacity: on compat
// 1 for every node (the catalogs hold no capacity; a node that must not
// hold shards says so in should_have_shards, which the planner reads
// too); on Citus the capacity the cluster's default rebalance strategy's
// node_capacity_function gives the node (1 for citus_node_capacity_1,
// without a call; a negative value reads as 0), which is what `plan` with
// no --strategy uses. When the strategy cannot be read or its function
// fails, every node keeps 1 and a warning says why.
func (c *Catalog) ClusterStatus(ctx context.Context, cl *Cluster) Status {
	st := cl.Status(c.CoordinatorAddr())
	if err := c.markOldCopies(ctx, cl, &st); err != nil {
		st.Warnings = append(slices.Clone(st.Warnings), fmt.Sprintf("old copies kept by finished moves unknown (%v); a plan may send a group back to a node that still holds one, which the move then refuses", err))
	}
	if c.flavor != Citus || len(st.Nodes) == 0 {
		return st
	}
	s, err := c.CitusDefaultStrategy(ctx)
	if err != nil || s == nil {
		st.Warnings = append(slices.Clone(st.Warnings), fmt.Sprintf("node capacities unknown (Citus's default rebalance strategy cannot be read: %v); each is written as 1", err))
		return st
	}
	if slices.Equal(s.Capacity, CitusCapacityOne) {
		return st
	}
	ids := make([]int32, len(st.Nodes))
	for i, n := range st.Nodes {
		ids[i] = n.ID
	}
	caps, err := c.CitusNodeCapacities(ctx, s, ids)
	if err != nil {
		st.Warnings = append(slices.Clone(st.Warnings), fmt.Sprintf("node capacities unknown (%v); each is written as 1", err))
		return st
	}
	for i := range st.Nodes {
		v, ok := caps[st.Nodes[i].ID]
		switch {
		case !ok:
		case math.IsNaN(v) || math.IsInf(v, 0):
			st.Warnings = append(slices.Clone(st.Warnings), fmt.Sprintf("%s: the capacity function gave %v; written as 1", st.Nodes[i], v))
		default:
			st.Nodes[i].Capacity = max(v, 0)
		}
	}
	return st
}

// markOldCopies fills every group's OldCopyNodes from KeptOldCopies.
func (c *Catalog) markOldCopies(ctx context.Context, cl *Cluster, st *Status) error {
	kept, err := c.KeptOldCopies(ctx)
	if err != nil || len(kept) == 0 {
		return err
	}
	nodeOf := map[int32]int32{}
	for _, n := range cl.Nodes {
		nodeOf[n.GroupID] = n.ID
	}
	for i := range st.ShardGroups {
		for _, grp := range kept[st.ShardGroups[i].ID] {
			if id, ok := nodeOf[grp]; ok {
				st.ShardGroups[i].OldCopyNodes = append(st.ShardGroups[i].OldCopyNodes, id)
			}
		}
	}
	return nil
}

// ReadStatus parses and validates a Status document (a snapshot file).
func ReadStatus(r io.Reader) (Status, error) {
	var st Status
	data, err := io.ReadAll(r)
	if err != nil {
		return st, invalidf("the snapshot cannot be read: %v", err)
	}
	// Every field the planner reads must be there: a missing capacity
	// would read as 0 (no shards on the node), a missing node as node 0.
	var raw struct {
		Nodes       []map[string]json.RawMessage `json:"nodes"`
		ShardGroups []map[string]json.RawMessage `json:"shard_groups"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return st, invalidf("the snapshot is not valid JSON of `shardmover status -o json`: %v", err)
	}
	for i, n := range raw.Nodes {
		for _, k := range []string{"id", "addr", "role", "is_active", "should_have_shards", "capacity"} {
			if _, ok := n[k]; !ok {
				return st, invalidf("the snapshot's node %d (counting from 1) has no %q field; write snapshots with `shardmover status -o json` (capacity: 1 unless set, 0: no shards on the node)", i+1, k)
			}
		}
	}
	for i, g := range raw.ShardGroups {
		for _, k := range []string{"id", "colocation_id", "index", "shard_ids", "node_id", "bytes"} {
			if _, ok := g[k]; !ok {
				return st, invalidf("the snapshot's shard group %d (counting from 1) has no %q field; write snapshots with `shardmover status -o json`", i+1, k)
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return st, invalidf("the snapshot is not valid JSON of `shardmover status -o json`: %v", err)
	}
	if st.SchemaVersion < 1 || st.SchemaVersion > StatusSchemaVersion {
		return st, invalidf("the snapshot has schema_version %d; this shardmover reads version 1 to %d", st.SchemaVersion, StatusSchemaVersion)
	}
	ids := map[int32]bool{}
	for _, n := range st.Nodes {
		if ids[n.ID] {
			return st, invalidf("the snapshot lists node id %d twice", n.ID)
		}
		ids[n.ID] = true
		if n.Capacity < 0 {
			return st, invalidf("the snapshot gives node %s a negative capacity", n.Addr)
		}
	}
	seen := map[string]bool{}
	for _, g := range st.ShardGroups {
		if seen[g.ID] {
			return st, invalidf("the snapshot lists shard group %s twice", g.ID)
		}
		seen[g.ID] = true
		if !ids[g.NodeID] {
			return st, invalidf("shard group %s is on node %d, which the snapshot does not list", g.ID, g.NodeID)
		}
		if g.Load < 0 {
			return st, invalidf("the snapshot gives shard group %s a negative load; a load is 0 or more rows per second", g.ID)
		}
	}
	sort.SliceStable(st.ShardGroups, func(i, j int) bool {
		a, b := st.ShardGroups[i], st.ShardGroups[j]
		if a.ColocationID != b.ColocationID {
			return a.ColocationID < b.ColocationID
		}
		return a.Index < b.Index
	})
	return st, nil
}

// String names a status node for messages.
func (n StatusNode) String() string { return fmt.Sprintf("node %d (%s)", n.ID, n.Addr) }

// WithNodeTimeouts returns a view of the catalog (sharing its coordinator
// connections: close only the original) whose sessions on nodes run with
// lock_timeout = lock and statement_timeout = statement: a read-only
// command (status) measuring a node whose shards a prepared transaction
// holds locked gets an error within lock instead of waiting with no bound.
func (c *Catalog) WithNodeTimeouts(lock, statement time.Duration) *Catalog {
	cp := *c
	cp.nodeOver = maps.Clone(c.nodeOver)
	if cp.nodeOver == nil {
		cp.nodeOver = ConnSettings{}
	}
	base := c.coord.Merge(c.nodeOver)["options"]
	cp.nodeOver["options"] = strings.TrimSpace(fmt.Sprintf("%s -c lock_timeout=%d -c statement_timeout=%d", base, lock.Milliseconds(), statement.Milliseconds()))
	return &cp
}

// NodeFence is a shardmover fence (prepared transaction
// shardmover_<move>_<epoch>) found on a node.
type NodeFence struct {
	Node   Node
	GID    string
	MoveID int64
	Age    time.Duration
}

// NodeFences reads the shardmover fences prepared on each active primary
// node of nodes, each node's read bounded by timeout; a node that cannot
// be read is left out.
func (c *Catalog) NodeFences(ctx context.Context, nodes []Node, timeout time.Duration) []NodeFence {
	var out []NodeFence
	for _, n := range nodes {
		if !n.IsActive || (n.Role != "primary" && n.Role != "") {
			continue
		}
		nctx, cancel := context.WithTimeout(ctx, timeout)
		fs, err := c.nodeFences(nctx, n)
		cancel()
		if err != nil {
			c.log.Debug("could not read the prepared transactions of a node", zap.String("node", n.Addr()), zap.Error(err))
			continue
		}
		out = append(out, fs...)
	}
	return out
}

func (c *Catalog) nodeFences(ctx context.Context, n Node) ([]NodeFence, error) {
	conn, err := c.ConnectNode(ctx, n.Host, n.Port)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT gid, (extract(epoch FROM now() - prepared) * 1000)::bigint FROM pg_catalog.pg_prepared_xacts
		WHERE starts_with(gid, 'shardmover_') AND database = current_database() ORDER BY prepared`)
	if err != nil {
		return nil, err
	}
	var out []NodeFence
	var gid string
	var ms int64
	_, err = pgx.ForEachRow(rows, []any{&gid, &ms}, func() error {
		id, ok := fenceMove(gid)
		if ok {
			out = append(out, NodeFence{Node: n, GID: gid, MoveID: id, Age: time.Duration(ms) * time.Millisecond})
		}
		return nil
	})
	return out, err
}

// fenceMove reads the move id of a fence's gid: shardmover_<id>_<epoch>,
// or the older shardmover_<id>.
func fenceMove(gid string) (int64, bool) {
	rest, ok := strings.CutPrefix(gid, "shardmover_")
	if !ok {
		return 0, false
	}
	idText, _, _ := strings.Cut(rest, "_")
	id, err := strconv.ParseInt(idText, 10, 64)
	return id, err == nil && id > 0
}

// NoteFences says in st's warnings which node's shards a prepared fence
// holds locked: each node's size warning (its shards could not be read,
// the read having met the fence's lock) says so instead of the lock
// timeout, and each fence gets a sentence of its own.
func (st *Status) NoteFences(fences []NodeFence) {
	if len(fences) == 0 {
		return
	}
	byAddr := map[string][]NodeFence{}
	for _, f := range fences {
		byAddr[f.Node.Addr()] = append(byAddr[f.Node.Addr()], f)
	}
	st.Warnings = slices.Clone(st.Warnings)
	for i, w := range st.Warnings {
		for addr, fs := range byAddr {
			if strings.HasPrefix(w, "sizes on "+addr+" unknown:") {
				st.Warnings[i] = "sizes on " + addr + " unknown: locked by " + describeFences(fs)
			}
		}
	}
	for _, f := range fences {
		st.Warnings = append(st.Warnings, fmt.Sprintf("%s: the shards of move %d are locked by its prepared fence %s (prepared %s ago); reads and writes of them wait until it is settled, which its mover does, or else `shardmover cleanup` or any running daemon (a fence whose mover is gone is settled within seconds)",
			f.Node.Addr(), f.MoveID, f.GID, f.Age.Round(time.Second)))
	}
}

func describeFences(fs []NodeFence) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("a prepared fence of move %d (%s, prepared %s ago)", f.MoveID, f.GID, f.Age.Round(time.Second))
	}
	return strings.Join(parts, " and ")
}
