package scheduler_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// citusLoaded is a Citus sandbox with two workers holding the github
// tables (shards shards, colocated) loaded through Citus, and a workload
// router on it (clients half through the coordinator, half through the
// workers).
func citusLoaded(t testing.TB, shards int, load workload.LoadOptions) (*sandbox.Cluster, *metadata.Catalog, *workload.Router) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCitus(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, shards))
	r, err := workload.NewRouter(ctx, cat, 16)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	_, err = workload.Load(ctx, r, load)
	require.NoError(t, err)
	return sb, cat, r
}

// citusRunner is a scheduler.Runner with the CLI's mover defaults.
func citusRunner(t testing.TB, cat *metadata.Catalog, log *zap.Logger) *scheduler.Runner {
	cfg := mover.DefaultConfig()
	cfg.Logger = log
	return scheduler.NewRunner(cat, cfg, nil)
}

// citusWorkload starts the ledger workload through Citus.
func citusWorkload(r *workload.Router, clients int, users int64, run uint8) *workload.Background {
	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration, opts.RunID = clients, users, time.Hour, run
	opts.Pause = workload.TestPause
	return workload.Start(context.Background(), r, opts)
}

// checkLedger proves every acknowledged write of a run is where Citus's
// metadata says, and that the workload saw no error besides its own stop.
func checkLedger(t *testing.T, r *workload.Router, res workload.RunResult) {
	t.Helper()
	v, err := workload.Check(context.Background(), r, res.Ledger)
	require.NoError(t, err)
	assert.True(t, v.OK(), "ledger violations: %v", v.Violations)
	assert.Positive(t, v.Acknowledged)
	for code := range res.Errors {
		assert.Equal(t, "context", code, "the workload saw errors while Citus routed its writes: %v; first ones: %v", res.Errors, res.Details)
	}
}

// nodeConn connects to a node as the tests do, with Citus's shard hiding
// off so pg_class shows shard tables on workers with metadata.
func nodeConn(t *testing.T, cat *metadata.Catalog, n metadata.Node) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := cat.ConnectNode(ctx, n.Host, n.Port)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET citus.override_table_visibility = off")
	require.NoError(t, err)
	return conn
}

// placementsAt reads the placements (shard -> group) as node n's Citus
// metadata has them.
func placementsAt(t *testing.T, cat *metadata.Catalog, n metadata.Node) map[int64]int32 {
	t.Helper()
	ctx := context.Background()
	conn := nodeConn(t, cat, n)
	defer conn.Close(ctx)
	out, err := metadata.NodePlacements(ctx, conn)
	require.NoError(t, err)
	return out
}

// citusLayout is citus_shards on the coordinator: github shards per node
// (host:port) and the bytes Citus measures for each shard.
type citusLayout struct {
	node  map[int64]string
	bytes map[int64]int64
}

func readCitusLayout(t testing.TB, cat *metadata.Catalog) citusLayout {
	t.Helper()
	rows, err := cat.Pool().Query(context.Background(), `SELECT shardid, nodename || ':' || nodeport, shard_size FROM citus_shards
		WHERE table_name IN ('github_users'::regclass, 'github_events'::regclass)`)
	require.NoError(t, err)
	l := citusLayout{node: map[int64]string{}, bytes: map[int64]int64{}}
	var id, size int64
	var node string
	_, err = pgx.ForEachRow(rows, []any{&id, &node, &size}, func() error { l.node[id], l.bytes[id] = node, size; return nil })
	require.NoError(t, err)
	return l
}

// perNode counts shards per node.
func (l citusLayout) perNode() map[string]int {
	out := map[string]int{}
	for _, n := range l.node {
		out[n]++
	}
	return out
}

// movedBytes is how many bytes (as measured in before) changed node.
func movedBytes(before, after citusLayout) (shards int, bytes int64) {
	for id, n := range before.node {
		if after.node[id] != n {
			shards++
			bytes += before.bytes[id]
		}
	}
	return shards, bytes
}

// shardTableName matches the name of a github shard table.
var shardTableName = regexp.MustCompile(`^github_(users|events)_([0-9]+)$`)

// TestCitusRebalanceAfterAddNode: on a real Citus 13 cluster (github tables,
// 16 shards, two workers), one shard group is moved to the other worker
// with scheduler.Runner.Move; then a third worker is added with
// citus_add_node and scheduler.Runner.Run rebalances by_shard_count while
// the ledger workload writes through Citus (clients through the
// coordinator and through the workers). Both runs' ledgers pass;
// citus_shards shows shards on the new worker; every metadata node's
// pg_dist_placement equals the coordinator's; after Citus's own cleanup
// (citus_cleanup_orphaned_resources) pg_dist_cleanup is empty, every shard
// table is on the node its placement names and nowhere else, and no
// shardmover slot, publication, origin or prepared transaction is left;
// and Citus's own planner (get_rebalance_table_shards_plan, by_shard_count)
// finds nothing to move.
func TestCitusRebalanceAfterAddNode(t *testing.T) {
	ctx := context.Background()
	const users = 400
	sb, cat, r := citusLoaded(t, 16, workload.LoadOptions{Seed: 5, Users: users, Events: 6000, ChunkRows: 2000})
	runner := citusRunner(t, cat, zaptest.NewLogger(t))

	// One group moved from one worker to the other, under the workload.
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	var workers []metadata.Node
	for _, n := range cl.Nodes {
		if !n.IsCoordinator() {
			workers = append(workers, n)
		}
	}
	require.Len(t, workers, 2)
	var group metadata.ShardGroup
	for _, g := range cl.Groups {
		if g.GroupID == workers[0].GroupID {
			group = g
			break
		}
	}
	require.NotEmpty(t, group.ShardIDs, "a group on %s", workers[0].Addr())
	bg := citusWorkload(r, 4, users, 0)
	time.Sleep(300 * time.Millisecond)
	mv, err := runner.Move(ctx, scheduler.MoveRequest{ShardIDs: []int64{group.ShardIDs[0]}, Target: workers[1], Limits: mover.DefaultLimits()})
	require.NoError(t, err)
	require.NotNil(t, mv.Job)
	assert.Equal(t, 1, mv.Result.Done)
	time.Sleep(300 * time.Millisecond)
	run0, err := bg.Stop()
	require.NoError(t, err)
	checkLedger(t, r, run0)
	before := readCitusLayout(t, cat)
	for _, id := range group.ShardIDs {
		assert.Equal(t, workers[1].Addr(), before.node[id], "shard %d of the moved group, per citus_shards", id)
	}
	t.Logf("after the move: %v shards per node", before.perNode())

	// A third worker, added with citus_add_node.
	added, err := sb.AddNode(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Refresh(ctx))
	newNode, err := cat.NodeByAddr(ctx, added.Addr())
	require.NoError(t, err)

	// The rebalance, under the workload (now entering through the new
	// worker too).
	bg = citusWorkload(r, 6, users, 1)
	time.Sleep(300 * time.Millisecond)
	plan := scheduler.DefaultPlanOptions()
	plan.Strategy = "by_shard_count"
	out, err := runner.Run(ctx, scheduler.JobRequest{Kind: "rebalance", Plan: plan, Limits: mover.DefaultLimits()})
	require.NoError(t, err)
	require.NotNil(t, out.Job)
	require.NotEmpty(t, out.Plan.Moves)
	assert.Equal(t, len(out.Plan.Moves), out.Result.Done, "every planned move done")
	for _, m := range out.Plan.Moves {
		assert.Equal(t, newNode.Addr(), m.ToName, "by_shard_count from 9/7/0 moves only onto the new worker")
	}
	time.Sleep(300 * time.Millisecond)
	run1, err := bg.Stop()
	require.NoError(t, err)
	checkLedger(t, r, run1)
	checkLedger(t, r, run0) // the first run's rows too, wherever they are now
	t.Logf("rebalance: %d moves; workload %d writes, errors %v, via %v", len(out.Plan.Moves), run1.Ops(), run1.Errors, run1.Via)
	for _, addr := range []string{sb.Coordinator().Addr(), workers[0].Addr(), workers[1].Addr(), newNode.Addr()} {
		assert.Positive(t, run1.Via[addr], "writes entered Citus through %s", addr)
	}

	// citus_shards, on the coordinator, shows the new layout.
	after := readCitusLayout(t, cat)
	counts := after.perNode()
	t.Logf("after the rebalance: %v shards per node", counts)
	assert.Equal(t, 2*len(out.Plan.Moves), counts[newNode.Addr()], "the new worker holds both tables' shards of every moved group")
	for _, m := range out.Plan.Moves {
		for _, id := range m.ShardIDs {
			assert.Equal(t, newNode.Addr(), after.node[id], "shard %d per citus_shards", id)
		}
	}

	// pg_dist_placement is the same on the coordinator and every worker.
	cl, err = cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	coord, ok := cl.NodeByGroup(0)
	require.True(t, ok)
	want := placementsAt(t, cat, coord)
	meta := metadata.MetadataNodes(cl.Nodes)
	assert.Len(t, meta, 3, "every worker has Citus metadata")
	for _, n := range meta {
		assert.Equal(t, want, placementsAt(t, cat, n), "pg_dist_placement on %s must equal the coordinator's", n.Addr())
	}

	// After Citus's own cleanup, nothing old and nothing of ours is left.
	pending, err := cat.CitusCleanupPending(ctx)
	require.NoError(t, err)
	t.Logf("pg_dist_cleanup before citus_cleanup_orphaned_resources(): %d records", len(pending))
	require.NoError(t, cat.CleanupCitusOrphans(ctx))
	pending, err = cat.CitusCleanupPending(ctx)
	require.NoError(t, err)
	assert.Empty(t, pending, "pg_dist_cleanup after citus_cleanup_orphaned_resources()")
	nodeOf := map[int64]int32{}
	for _, p := range cl.Placements {
		nodeOf[p.ShardID] = p.GroupID
	}
	for _, n := range cl.Nodes {
		conn := nodeConn(t, cat, n)
		rows, err := conn.Query(ctx, `SELECT relname::text FROM pg_class WHERE relkind IN ('r', 'p') AND relnamespace = 'public'::regnamespace`)
		require.NoError(t, err)
		rels, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		rows, err = conn.Query(ctx, `SELECT relname::text FROM pg_class WHERE relname LIKE '%\_moved\_%'`)
		require.NoError(t, err)
		fenced, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		assert.Empty(t, fenced, "fenced old shards on %s", n.Addr())
		here := map[int64]bool{}
		for _, rel := range rels {
			if m := shardTableName.FindStringSubmatch(rel); m != nil {
				var id int64
				_, _ = fmt.Sscan(m[2], &id)
				here[id] = true
				g, known := nodeOf[id]
				assert.True(t, known, "%s on %s is the table of no shard in the metadata", rel, n.Addr())
				assert.Equal(t, g, n.GroupID, "%s is on %s but its placement names group %d", rel, n.Addr(), g)
			}
		}
		for id, g := range nodeOf {
			if g == n.GroupID {
				assert.True(t, here[id], "shard %d missing on %s, where its placement is", id, n.Addr())
			}
		}
		var slots, pubs, prepared, origins int
		require.NoError(t, conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%'),
			(SELECT count(*) FROM pg_publication WHERE pubname LIKE 'shardmover%'),
			(SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'),
			(SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'shardmover%')`).Scan(&slots, &pubs, &prepared, &origins))
		assert.Zero(t, slots+pubs+prepared+origins, "leftovers on %s: slots %d, publications %d, prepared %d, origins %d", n.Addr(), slots, pubs, prepared, origins)
		var others []string
		rows, err = conn.Query(ctx, `SELECT gid FROM pg_prepared_xacts`)
		require.NoError(t, err)
		others, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		if len(others) > 0 {
			t.Logf("prepared transactions on %s (not ours): %v", n.Addr(), others)
		}
		conn.Close(ctx)
	}

	// Citus agrees the cluster is balanced by the same strategy.
	rows, err := cat.Pool().Query(ctx, `SELECT table_name::text, shardid, sourcename || ':' || sourceport, targetname || ':' || targetport
		FROM get_rebalance_table_shards_plan(rebalance_strategy := 'by_shard_count')`)
	require.NoError(t, err)
	var citusPlan []string
	var table, from, to string
	var shard int64
	_, err = pgx.ForEachRow(rows, []any{&table, &shard, &from, &to}, func() error {
		citusPlan = append(citusPlan, fmt.Sprintf("%s shard %d %s -> %s", table, shard, from, to))
		return nil
	})
	require.NoError(t, err)
	if !assert.Empty(t, citusPlan, "Citus's by_shard_count plan after shardmover's by_shard_count rebalance") {
		t.Logf("layout (citus_shards): %s", describeLayout(after))
	}
}

// describeLayout lists each node's shards, sorted.
func describeLayout(l citusLayout) string {
	by := map[string][]int64{}
	for id, n := range l.node {
		by[n] = append(by[n], id)
	}
	var nodes []string
	for n := range by {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var b strings.Builder
	for _, n := range nodes {
		ids := by[n]
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		fmt.Fprintf(&b, "%s: %d shards %v; ", n, len(ids), ids)
	}
	return b.String()
}
