package metadata

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/shardmover/shardmover/internal/ctxtime"
)

// LoadWriteWeight is what one written row (inserted, updated or deleted)
// weighs in a shard group's load against one read row (fetched by an
// index scan or read by a sequential scan), which weighs 1. A written row
// costs more than a read one: WAL, the heap, every index, the dead tuple
// vacuum reclaims later, and, while the group moves, the catch-up that
// replays it on the target.
const LoadWriteWeight = 4

// DefaultLoadWindow is how long MeasureLoad watches the nodes by default:
// long enough that the statistics' own delay (a busy backend reports its
// counts at most once a second) is a small part of it, short enough to
// wait for before a plan.
const DefaultLoadWindow = 30 * time.Second

// ShardActivity is one shard table's cumulative counters in
// pg_stat_user_tables on the node holding it.
type ShardActivity struct {
	Writes int64 // n_tup_ins + n_tup_upd + n_tup_del
	Reads  int64 // seq_tup_read + idx_tup_fetch
	Found  bool  // the table exists and has statistics
}

// activitySQL reads the counters of the shard tables named in $2 (their ids
// in $1) in one query; a table that does not exist reads as not found.
const activitySQL = `SELECT u.id,
		coalesce(s.n_tup_ins + s.n_tup_upd + s.n_tup_del, 0)::bigint,
		(coalesce(s.seq_tup_read, 0) + coalesce(s.idx_tup_fetch, 0))::bigint,
		s.relid IS NOT NULL
	FROM unnest($1::bigint[], $2::text[]) AS u(id, name)
	LEFT JOIN pg_catalog.pg_stat_user_tables s ON s.relid = pg_catalog.to_regclass(u.name)`

// MeasureLoad measures every shard group's load: the statistics of each
// of its shard tables in pg_stat_user_tables on the node holding it,
// read at the start and at the end of window, as (LoadWriteWeight ×
// written rows + read rows) per second, summed over the group's tables.
// Each node is read with one query per sample, all nodes at the same time
// (on Citus in sessions that see shard tables, see NodeSettings). The map
// is keyed by ShardGroup.Key. A node that is not active is not read: its
// groups get no load and a warning says so. A node that cannot be read is
// an error (a plan from part of the load would move the wrong groups). A
// table whose counters went down (statistics reset, the table replaced by
// a move) or that disappeared during the window counts no load, with a
// warning.
func (c *Catalog) MeasureLoad(ctx context.Context, cl *Cluster, window time.Duration) (map[string]float64, []string, error) {
	if window <= 0 {
		return nil, nil, invalidf("the load window must be a positive duration such as 30s, got %s", window)
	}
	type target struct {
		node   Node
		ids    []int64
		names  []string
		groups []int
	}
	shardByID := make(map[int64]Shard, len(cl.Shards))
	for _, s := range cl.Shards {
		shardByID[s.ID] = s
	}
	byGroup := map[int32]*target{}
	var order []int32
	var warnings []string
	for i, g := range cl.Groups {
		t, ok := byGroup[g.GroupID]
		if !ok {
			t = &target{}
			byGroup[g.GroupID] = t
			order = append(order, g.GroupID)
		}
		t.groups = append(t.groups, i)
		for _, id := range g.ShardIDs {
			t.ids = append(t.ids, id)
			t.names = append(t.names, shardByID[id].Ident().Sanitize())
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	var targets []*target
	for _, gid := range order {
		node, ok := cl.NodeByGroup(gid)
		if !ok {
			warnings = append(warnings, fmt.Sprintf("placements name node group %d, which has no node; its shard groups count no load", gid))
			continue
		}
		if !node.IsActive {
			warnings = append(warnings, fmt.Sprintf("%s is not active; its shard groups count no load", node.Addr()))
			continue
		}
		byGroup[gid].node = node
		targets = append(targets, byGroup[gid])
	}

	type result struct {
		rates map[int64]float64
		warns []string
		err   error
	}
	results := make([]result, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rates, warns, err := c.nodeLoad(ctx, t.node, t.ids, t.names, window)
			results[i] = result{rates, warns, err}
		}()
	}
	wg.Wait()
	loads := make(map[string]float64, len(cl.Groups))
	for i, t := range targets {
		r := results[i]
		if r.err != nil {
			return nil, nil, fmt.Errorf("measure the load on %s: %w", t.node.Addr(), r.err)
		}
		warnings = append(warnings, r.warns...)
		for _, gi := range t.groups {
			g := cl.Groups[gi]
			var sum float64
			for _, id := range g.ShardIDs {
				sum += r.rates[id]
			}
			loads[g.Key()] = sum
		}
	}
	return loads, warnings, nil
}

// nodeLoad reads the counters of the shard tables on one node twice,
// window apart, on one connection, and returns each shard's load per
// second over the time between the two reads.
func (c *Catalog) nodeLoad(ctx context.Context, node Node, ids []int64, names []string, window time.Duration) (map[int64]float64, []string, error) {
	conn, err := c.ConnectNode(ctx, node.Host, node.Port)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	sample := func() (map[int64]ShardActivity, time.Time, error) {
		at := time.Now()
		rows, err := conn.Query(ctx, activitySQL, ids, names)
		if err != nil {
			return nil, at, err
		}
		defer rows.Close()
		out := make(map[int64]ShardActivity, len(ids))
		for rows.Next() {
			var id int64
			var a ShardActivity
			if err := rows.Scan(&id, &a.Writes, &a.Reads, &a.Found); err != nil {
				return nil, at, err
			}
			out[id] = a
		}
		return out, at, rows.Err()
	}
	first, t1, err := sample()
	if err != nil {
		return nil, nil, err
	}
	if err := ctxtime.Sleep(ctx, window); err != nil {
		return nil, nil, err
	}
	second, t2, err := sample()
	if err != nil {
		return nil, nil, err
	}
	secs := t2.Sub(t1).Seconds()
	rates := make(map[int64]float64, len(ids))
	var warns []string
	for i, id := range ids {
		a, b := first[id], second[id]
		if !a.Found || !b.Found {
			if a.Found || b.Found {
				warns = append(warns, fmt.Sprintf("shard table %s on %s appeared or disappeared during the load window; it counts no load", names[i], node.Addr()))
			}
			continue
		}
		w, r := b.Writes-a.Writes, b.Reads-a.Reads
		if w < 0 || r < 0 {
			warns = append(warns, fmt.Sprintf("the statistics of shard table %s on %s went back during the load window (reset or table replaced); it counts no load", names[i], node.Addr()))
			continue
		}
		rates[id] = float64(LoadWriteWeight*w+r) / secs
	}
	return rates, warns, nil
}
