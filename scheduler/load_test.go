package scheduler_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// hotRows is how many rows of a hot shard table every statement of the
// hot writer updates (found by the primary key index); padRows is how many
// rows every shard table holds, so that what the updates add to the hot
// tables (dead row versions) stays well inside by_disk_size's byte band.
const (
	hotRows = 20
	padRows = 50000
)

// loadLayout distributes table hot (6 shards, a colocation of its own)
// over the cluster's workers, puts padRows rows in every shard table so
// that bytes are even (and analyzes it, so the writer's updates use the
// index), and returns the snapshot and the two groups that
// share the first worker holding two.
func loadLayout(t *testing.T, sb *sandbox.Cluster, cat *metadata.Catalog, distribute func(ctx context.Context) error) (*metadata.Cluster, [2]metadata.ShardGroup) {
	t.Helper()
	ctx := context.Background()
	_, err := cat.Pool().Exec(ctx, `CREATE TABLE hot (id bigint PRIMARY KEY, v bigint NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	require.NoError(t, distribute(ctx))
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	var hot []metadata.ShardGroup
	byNode := map[int32][]metadata.ShardGroup{}
	for _, g := range cl.Groups {
		byNode[g.NodeID] = append(byNode[g.NodeID], g)
		if len(byNode[g.NodeID]) == 2 && hot == nil {
			hot = byNode[g.NodeID]
		}
		withShardTable(t, sb, cl, g, func(conn *pgx.Conn, table string) {
			_, err := conn.Exec(ctx, `INSERT INTO `+table+` (id) SELECT generate_series(1, $1)`, padRows)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, `ANALYZE `+table)
			require.NoError(t, err)
		})
	}
	require.Len(t, hot, 2, "some worker holds two of the six groups")
	return cl, [2]metadata.ShardGroup{hot[0], hot[1]}
}

// withShardTable calls fn with a connection to the node holding g and the
// quoted name of g's shard table of hot.
func withShardTable(t *testing.T, sb *sandbox.Cluster, cl *metadata.Cluster, g metadata.ShardGroup, fn func(conn *pgx.Conn, table string)) {
	t.Helper()
	ctx := context.Background()
	node, ok := cl.NodeByGroup(g.GroupID)
	require.True(t, ok)
	var dsn string
	for _, n := range sb.Nodes {
		if n.Addr() == node.Addr() {
			dsn = n.DSN()
		}
	}
	require.NotEmpty(t, dsn, "no sandbox node at %s", node.Addr())
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	if cl.Flavor == metadata.Citus {
		// Citus shows shard tables, and lets them be written, only to
		// sessions that ask.
		cfg.RuntimeParams["citus.show_shards_for_app_name_prefixes"] = "*"
		cfg.RuntimeParams["citus.enable_manual_changes_to_shards"] = "on"
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, s := range cl.Shards {
		if s.ID == g.ShardIDs[0] {
			fn(conn, s.Ident().Sanitize())
			return
		}
	}
	t.Fatalf("shard %d of group %s not in the snapshot", g.ShardIDs[0], g.Key())
}

// hotWriter updates the first hotRows rows of the hot groups' shard
// tables, one statement after another on each, until stop is called; statements
// counts them.
func hotWriter(t *testing.T, sb *sandbox.Cluster, cl *metadata.Cluster, hot [2]metadata.ShardGroup) (statements *atomic.Int64, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	statements = new(atomic.Int64)
	var wg sync.WaitGroup
	for _, g := range hot {
		wg.Add(1)
		go func() {
			defer wg.Done()
			withShardTable(t, sb, cl, g, func(conn *pgx.Conn, table string) {
				for ctx.Err() == nil {
					if _, err := conn.Exec(ctx, `UPDATE `+table+` SET v = v + 1 WHERE id <= `+strconv.Itoa(hotRows)); err != nil {
						if ctx.Err() == nil {
							t.Errorf("hot writer on %s: %v", table, err)
						}
						return
					}
					statements.Add(1)
				}
			})
		}()
	}
	return statements, func() { cancel(); wg.Wait() }
}

// checkByLoad plans with by_disk_size (bytes even: nothing to move), then
// measures the load while the hot writer runs and plans with by_load,
// which moves the two hot groups apart.
func checkByLoad(t *testing.T, sb *sandbox.Cluster, cat *metadata.Catalog, cl *metadata.Cluster, hot [2]metadata.ShardGroup) {
	ctx := context.Background()
	// by_disk_size first, before the writer: its updates leave dead row
	// versions behind in the hot groups' tables, and on a fast machine the
	// seconds of writing below grew them enough that by_disk_size rightly
	// planned moves (the bytes were no longer even).
	r := scheduler.NewRunner(cat, mover.DefaultConfig(), nil)
	o := scheduler.DefaultPlanOptions()
	o.Strategy = "by_disk_size"
	res, err := r.Plan(ctx, o)
	require.NoError(t, err)
	assert.Empty(t, res.Moves, "by_disk_size: bytes are even, nothing to move")

	statements, stop := hotWriter(t, sb, cl, hot)
	defer stop()
	time.Sleep(time.Second) // the writer's first statistics are flushed

	// The measured load against what the writer did: each statement
	// writes hotRows rows (weight 4) and fetches them by an index scan
	// (weight 1).
	n0, t0 := statements.Load(), time.Now()
	loads, warns, err := cat.MeasureLoad(ctx, cl, 4*time.Second)
	n1, t1 := statements.Load(), time.Now()
	require.NoError(t, err)
	assert.Empty(t, warns)
	want := float64(n1-n0) * hotRows * (metadata.LoadWriteWeight + 1) / t1.Sub(t0).Seconds()
	got := loads[hot[0].Key()] + loads[hot[1].Key()]
	t.Logf("hot groups %s and %s: measured %.0f rows/s, the writer did %.0f", hot[0].Key(), hot[1].Key(), got, want)
	assert.InEpsilon(t, want, got, 0.4, "measured load against the writer's rate")
	for _, g := range cl.Groups {
		if g.Key() != hot[0].Key() && g.Key() != hot[1].Key() {
			assert.Less(t, loads[g.Key()], 0.01*got, "idle group %s", g.Key())
		}
	}

	o.Strategy, o.LoadWindow = "by_load", 3*time.Second
	res, err = r.Plan(ctx, o)
	require.NoError(t, err)
	stop()
	require.NotEmpty(t, res.Moves, "by_load: the two hot groups share a node")
	end := map[string]int64{}
	for _, g := range cl.Groups {
		end[g.Key()] = int64(g.NodeID)
	}
	for _, m := range res.Moves {
		end[m.GroupID] = m.To
	}
	assert.NotEqual(t, end[hot[0].Key()], end[hot[1].Key()], "by_load moves the hot groups apart")
	var hottest, total float64
	for _, b := range res.Before {
		total += b.Load
		hottest = max(hottest, b.Load)
	}
	assert.Greater(t, hottest, 0.95*total, "before the plan one node carries the load")
	for _, a := range res.After {
		assert.Less(t, a.Load, 0.75*total, "after the plan no node carries both hot groups: %s", a.Name)
	}
}

// TestByLoadPlansHotGroupsApart: on a compat cluster of three workers with
// even bytes, heavy writes to two groups of one worker during the load
// window make by_load (and only by_load) plan them apart.
func TestByLoadPlansHotGroupsApart(t *testing.T) {
	sb, cat := sandboxtest.NewCompat(t, 3)
	cl, hot := loadLayout(t, sb, cat, func(ctx context.Context) error {
		_, err := cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "hot", Column: "id", ShardCount: 6, ColocateWith: "none"})
		return err
	})
	checkByLoad(t, sb, cat, cl, hot)
}

// TestCitusByLoad: on Citus, which has no by_load strategy, by_load works
// from the workers' statistics of the shard tables (table_shardid) just as
// on compat; and `status -o json` writes each node's capacity from the
// default rebalance strategy's node_capacity_function.
func TestCitusByLoad(t *testing.T) {
	sb, cat := sandboxtest.NewCitus(t, 3)
	cl, hot := loadLayout(t, sb, cat, func(ctx context.Context) error {
		_, err := cat.Pool().Exec(ctx, `SELECT create_distributed_table('hot', 'id', shard_count := 6, colocate_with := 'none')`)
		return err
	})
	checkByLoad(t, sb, cat, cl, hot)

	ctx := context.Background()
	st := cat.ClusterStatus(ctx, cl)
	for _, n := range st.Nodes {
		assert.Equal(t, 1.0, n.Capacity, "%s: by_disk_size's capacity function is citus_node_capacity_1", n)
	}
	workers := sb.Workers()
	big, err := cat.NodeByAddr(ctx, workers[2].Addr())
	require.NoError(t, err)
	for _, stmt := range []string{
		`CREATE FUNCTION load_test_capacity(nodeid int) RETURNS real LANGUAGE sql AS $$ SELECT CASE WHEN nodeid = ` + strconv.Itoa(int(big.ID)) + ` THEN 3 ELSE 1 END::real $$`,
		`SELECT citus_add_rebalance_strategy('load_test', 'citus_shard_cost_by_disk_size', 'load_test_capacity', 'citus_shard_allowed_on_node_true', 0.1, 0.01, 0.5)`,
		`SELECT citus_set_default_rebalance_strategy('load_test')`,
	} {
		_, err := cat.Pool().Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	st = cat.ClusterStatus(ctx, cl)
	assert.Empty(t, st.Warnings)
	for _, n := range st.Nodes {
		want := 1.0
		if n.ID == big.ID {
			want = 3
		}
		assert.Equal(t, want, n.Capacity, "%s", n)
	}
	// A named strategy ignores Citus's strategy catalog, its capacity
	// function included (Citus's built-in strategies weigh every node 1).
	o := scheduler.DefaultPlanOptions()
	o.Strategy = "by_shard_count"
	in, err := scheduler.BuildInput(st, o)
	require.NoError(t, err)
	for _, n := range in.Nodes {
		assert.Equal(t, 1.0, n.Capacity, n.Name)
	}
	in, err = scheduler.BuildInput(st, scheduler.DefaultPlanOptions())
	require.NoError(t, err)
	for _, n := range in.Nodes {
		if n.ID == int64(big.ID) {
			assert.Equal(t, 3.0, n.Capacity)
		}
	}
}
