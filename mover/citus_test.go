package mover_test

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// newCitusCluster is newCluster on a real Citus cluster: github tables
// distributed by Citus on two workers, a reference table, a distributed
// schema (schema-based sharding) with rows, and a third worker added with
// citus_add_node that holds nothing yet (not even the reference table).
func newCitusCluster(t testing.TB, shards int, users, events int64) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCitus(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, shards))
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 1, Users: users, Events: events})
	require.NoError(t, err)
	for _, stmt := range []string{
		`CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL)`,
		`SELECT create_reference_table('countries')`,
		`INSERT INTO countries VALUES ('de', 'Germany'), ('fr', 'France'), ('jp', 'Japan')`,
		`SET citus.enable_schema_based_sharding = on`,
		`CREATE SCHEMA "tenant one"`,
		`CREATE TABLE "tenant one".items (id bigint PRIMARY KEY, label char(12) NOT NULL, price numeric(10,2))`,
		`RESET citus.enable_schema_based_sharding`,
		`INSERT INTO "tenant one".items SELECT g, 'item ' || g, g * 1.25 FROM generate_series(1, 3000) g`,
	} {
		_, err := cat.Pool().Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	_, err = sb.AddNode(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Refresh(ctx))
	return &cluster{sb: sb, cat: cat, r: r}
}

// citusGroup finds the shard group of table's i-th shard (by shard id).
func citusGroup(t *testing.T, c *cluster, table string, i int) metadata.ShardGroup {
	t.Helper()
	cl, err := c.cat.Snapshot(context.Background(), metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	tb, err := cl.Table(table)
	require.NoError(t, err)
	var ids []int64
	for _, s := range cl.Shards {
		if s.Table == tb.Name && s.Schema == tb.Schema {
			ids = append(ids, s.ID)
		}
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	require.Greater(t, len(ids), i)
	for _, g := range cl.Groups {
		for _, id := range g.ShardIDs {
			if id == ids[i] {
				return g
			}
		}
	}
	t.Fatalf("shard %d of %s is in no group", ids[i], table)
	return metadata.ShardGroup{}
}

// placementsOn reads the placements (shard -> group) as node n's Citus
// metadata has them.
func placementsOn(t *testing.T, c *cluster, n metadata.Node) map[int64]int32 {
	t.Helper()
	ctx := context.Background()
	conn, err := c.cat.ConnectNode(ctx, n.Host, n.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	out, err := metadata.NodePlacements(ctx, conn)
	require.NoError(t, err)
	return out
}

// verifyCitus is verify plus what Citus must agree on: every metadata
// node has the coordinator's placements; after Citus's own cleanup runs,
// no old shard (under its name or fenced) is left on any node and
// pg_dist_cleanup is empty.
func verifyCitus(t *testing.T, c *cluster, res workload.RunResult, moved map[int64]int32) {
	t.Helper()
	ctx := context.Background()
	verify(t, c, res)
	cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	coord, ok := cl.NodeByGroup(0)
	require.True(t, ok)
	want := placementsOn(t, c, coord)
	for id, g := range moved {
		assert.NotEqual(t, g, want[id], "shard %d must have left group %d", id, g)
	}
	for _, n := range metadata.MetadataNodes(cl.Nodes) {
		assert.Equal(t, want, placementsOn(t, c, n), "pg_dist_placement on %s must equal the coordinator's", n.Addr())
	}
	// Citus's cleanup skips a shard it cannot lock within 1 s (autovacuum
	// may hold it); it must get every one within a few rounds.
	var pending []string
	for try := 0; try < 10; try++ {
		require.NoError(t, c.cat.CleanupCitusOrphans(ctx))
		pending, err = c.cat.CitusCleanupPending(ctx)
		require.NoError(t, err)
		if len(pending) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	assert.Empty(t, pending, "Citus's cleanup must have dropped every old shard")
	for _, n := range cl.Nodes {
		conn, err := c.cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		rows, err := conn.Query(ctx, `SELECT c.relname::text FROM pg_class c WHERE c.relkind = 'r' AND c.relname LIKE '%\_moved\_%'`)
		require.NoError(t, err)
		fenced, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		assert.Empty(t, fenced, "old shards left on %s", n.Addr())
		for id, g := range moved {
			if n.GroupID != g {
				continue
			}
			var s metadata.Shard
			for _, x := range cl.Shards {
				if x.ID == id {
					s = x
				}
			}
			var exists bool
			require.NoError(t, conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.Ident().Sanitize()).Scan(&exists))
			assert.False(t, exists, "shard %d left on its old node %s", id, n.Addr())
		}
		conn.Close(ctx)
	}
}

// TestCitusMoveUnderWorkload moves shard groups of a real Citus 13 cluster
// onto a worker added with citus_add_node while the ledger workload writes
// through Citus, half through the coordinator and half through the
// workers: one plain move, a distributed schema's group, and one move
// killed at each cutover step (after the metadata locks, after the
// prepares on every node, after the decision), each recovered by a new
// mover. Citus keeps routing every write; the ledger passes; every node's
// placements agree; the reference table reached the new node first; and
// after Citus's own cleanup nothing old or ours is left.
func TestCitusMoveUnderWorkload(t *testing.T) {
	ctx := context.Background()
	c := newCitusCluster(t, 8, 300, 4000)
	target := c.newNode(t)
	moved := map[int64]int32{}

	var tenantRows, tenantSum string
	tenantQuery := `SELECT count(*)::text, sum(price)::text || '/' || string_agg(label, '' ORDER BY id) FROM "tenant one".items`
	require.NoError(t, c.cat.Pool().QueryRow(ctx, tenantQuery).Scan(&tenantRows, &tenantSum))

	kills := []string{"", "locked", "caught_up", "prepared", "decided"}
	for i, kill := range kills {
		name := "plain"
		if kill != "" {
			name = "killed at " + kill
		}
		t.Run(name, func(t *testing.T) {
			citusKillCase(t, kill)
			bg := startWorkload(c, 4, 300, uint8(i))
			time.Sleep(200 * time.Millisecond)
			g := citusGroup(t, c, workload.EventsTable, i)
			cfg := testConfig(t)
			killed := false
			cfg.CutoverStep = func(_ int64, step string) error {
				if !killed && step == kill {
					killed = true
					return errors.New("kill")
				}
				return nil
			}
			m := scheduleMove(t, mover.New(cfg, c.cat), g.ShardIDs[0], target)
			err := mover.New(cfg, c.cat).Run(ctx, m.ID)
			if kill != "" {
				require.ErrorIs(t, err, mover.ErrKilled)
				eng := mover.New(testConfig(t), c.cat)
				require.NoError(t, eng.Recover(ctx))
				require.NoError(t, eng.Run(ctx, m.ID))
			} else {
				require.NoError(t, err)
			}
			assertDone(t, c, m.ID)
			for _, id := range g.ShardIDs {
				moved[id] = g.GroupID
			}
			time.Sleep(200 * time.Millisecond)
			verifyCitus(t, c, bg.stop(t), moved)
		})
	}

	t.Run("distributed schema", func(t *testing.T) {
		cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
		require.NoError(t, err)
		tb, err := cl.Table(`"tenant one".items`)
		if err != nil {
			tb, err = cl.Table("tenant one.items")
		}
		require.NoError(t, err)
		var g metadata.ShardGroup
		for _, x := range cl.Groups {
			if x.ColocationID == tb.ColocationID {
				g = x
			}
		}
		require.NotEmpty(t, g.ShardIDs)
		bg := startWorkload(c, 4, 300, uint8(len(kills)))
		m := scheduleMove(t, mover.New(testConfig(t), c.cat), g.ShardIDs[0], target)
		require.NoError(t, mover.New(testConfig(t), c.cat).Run(ctx, m.ID))
		assertDone(t, c, m.ID)
		moved[g.ShardIDs[0]] = g.GroupID
		verifyCitus(t, c, bg.stop(t), moved)
		var rows, sum string
		require.NoError(t, c.cat.Pool().QueryRow(ctx, tenantQuery).Scan(&rows, &sum))
		assert.Equal(t, tenantRows, rows)
		assert.Equal(t, tenantSum, sum, "char(12) and numeric(10,2) values unchanged through the move")
	})

	// The reference table reached the new node before anything moved there.
	conn, err := c.cat.ConnectNode(ctx, target.Host, target.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var refTables int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'countries\_%' AND relkind = 'r'`).Scan(&refTables))
	assert.Equal(t, 1, refTables, "the reference table's shard must be on the new worker")
}

// TestCitusRefusals: on Citus, what cannot be moved is refused with one
// sentence and nothing recorded: a reference table's shard, a move while
// Citus runs a rebalance of its own, a target without the extension.
func TestCitusRefusals(t *testing.T) {
	ctx := context.Background()
	c := newCitusCluster(t, 4, 50, 200)
	target := c.newNode(t)
	eng := mover.New(testConfig(t), c.cat)

	var refShard int64
	require.NoError(t, c.cat.Pool().QueryRow(ctx, `SELECT shardid FROM citus_shards WHERE table_name = 'countries'::regclass LIMIT 1`).Scan(&refShard))
	_, err := eng.Resolve(ctx, []mover.Request{{ShardID: refShard, Target: target}})
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "reference table countries")
	assert.NotContains(t, err.Error(), "\n")

	// Citus holding one of its move locks: a session that holds the
	// advisory lock Citus's own rebalancer takes on a colocation group.
	g := citusGroup(t, c, workload.EventsTable, 0)
	specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: g.ShardIDs[0], Target: target}})
	require.NoError(t, err)
	// Citus's lock classes cannot be taken from SQL, so a real Citus
	// rebalance job runs (the new worker is empty: it has work to do).
	_, err = c.cat.Pool().Exec(ctx, `SELECT citus_rebalance_start(shard_transfer_mode := 'block_writes')`)
	require.NoError(t, err)
	err = eng.Preflight(ctx, specs[0])
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "Citus background job")
	assert.NotContains(t, err.Error(), "\n")
	_, err = c.cat.Pool().Exec(ctx, `SELECT citus_rebalance_wait()`)
	require.NoError(t, err)
	// Once Citus is done (it may have moved the group meanwhile), the move
	// may go again.
	specs, err = eng.Resolve(ctx, []mover.Request{{ShardID: g.ShardIDs[0], Target: target}})
	if err == nil {
		require.NoError(t, eng.Preflight(ctx, specs[0]), "once Citus is done the move may go")
	} else {
		require.Contains(t, err.Error(), "already on", "Citus moved the group onto the target itself")
	}
	jobs, err := c.cat.Jobs(ctx, 10)
	require.NoError(t, err)
	assert.Empty(t, jobs, "a refused move records nothing")

	// A target without the extension (dropped there behind Citus's back).
	g = citusGroup(t, c, workload.EventsTable, 1)
	if g.GroupID == target.GroupID {
		g = citusGroup(t, c, workload.EventsTable, 2)
	}
	specs, err = eng.Resolve(ctx, []mover.Request{{ShardID: g.ShardIDs[0], Target: target}})
	require.NoError(t, err)
	tc, err := c.cat.ConnectNode(ctx, target.Host, target.Port)
	require.NoError(t, err)
	_, err = tc.Exec(ctx, "DROP EXTENSION citus CASCADE")
	tc.Close(ctx)
	require.NoError(t, err)
	err = eng.Preflight(ctx, specs[0])
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "does not have the citus extension")
	jobs, err = c.cat.Jobs(ctx, 10)
	require.NoError(t, err)
	assert.Empty(t, jobs, "a refused move records nothing")
}
