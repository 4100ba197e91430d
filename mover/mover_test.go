package mover_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// cluster is a compat sandbox with github data on two workers and an empty
// third worker.
type cluster struct {
	sb  *sandbox.Cluster
	cat *metadata.Catalog
	r   *workload.Router
}

func newCluster(t *testing.T, shards int, users, events int64) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCompat(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, shards))
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 1, Users: users, Events: events})
	require.NoError(t, err)
	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	_, err = cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	return &cluster{sb: sb, cat: cat, r: r}
}

func (c *cluster) newNode(t testing.TB) metadata.Node {
	t.Helper()
	nodes, err := c.cat.Nodes(context.Background())
	require.NoError(t, err)
	return nodes[len(nodes)-1]
}

// background runs the routed workload until stop is called.
type background struct{ b *workload.Background }

func startWorkload(c *cluster, clients int, users int64, run uint8) *background {
	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration, opts.RunID = clients, users, time.Hour, run
	opts.Pause = workload.TestPause
	return &background{workload.Start(context.Background(), c.r, opts)}
}

func (b *background) stop(t *testing.T) workload.RunResult {
	t.Helper()
	res, err := b.b.Stop()
	require.NoError(t, err)
	return res
}

// verify checks the ledger, the one-placement invariant and that no
// replication artifact or prepared transaction is left.
func verify(t *testing.T, c *cluster, res workload.RunResult) {
	t.Helper()
	verifyAllowing(t, c, res)
}

// verifyAllowing is verify for a test that cut the workload's own
// connections too: the error classes named are expected (their writes are
// in doubt, which the ledger allows for).
func verifyAllowing(t *testing.T, c *cluster, res workload.RunResult, allowed ...string) {
	t.Helper()
	ctx := context.Background()
	v, err := workload.Check(ctx, c.r, res.Ledger)
	require.NoError(t, err)
	noteVerdict(t, c, v, res)
	if !assert.True(t, v.OK(), "ledger violations: %v", v.Violations) {
		debugFind(t, c, res, v.BadKeys)
	}
	assert.Positive(t, v.Acknowledged)
	for code := range res.Errors {
		assert.Contains(t, append([]string{"context"}, allowed...), code, "the workload saw an error the routing contract does not allow: %v; first ones: %v", res.Errors, res.Details)
	}

	cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	perShard := map[int64]int{}
	for _, p := range cl.Placements {
		perShard[p.ShardID]++
	}
	for _, s := range cl.Shards {
		require.Equal(t, 1, perShard[s.ID], "shard %d must have exactly one placement", s.ID)
		p, _ := cl.PlacementOf(s.ID)
		n, _ := cl.NodeByGroup(p.GroupID)
		conn, err := c.cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		var exists bool
		require.NoError(t, conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.Ident().Sanitize()).Scan(&exists))
		conn.Close(ctx)
		assert.True(t, exists, "shard %d's table must exist on %s, where metadata places it", s.ID, n.Addr())
	}
	for _, n := range cl.Nodes {
		conn, err := c.cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		var slots, pubs, prepared, origins int
		require.NoError(t, conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%'),
			(SELECT count(*) FROM pg_publication WHERE pubname LIKE 'shardmover%'),
			(SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'),
			(SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'shardmover%')`).Scan(&slots, &pubs, &prepared, &origins))
		conn.Close(ctx)
		assert.Zero(t, slots+pubs+prepared+origins, "leftovers on %s: slots %d, publications %d, prepared %d, origins %d", n.Addr(), slots, pubs, prepared, origins)
	}
}

func groupShard(t *testing.T, c *cluster, i int) (int64, int32) {
	t.Helper()
	cl, err := c.cat.Snapshot(context.Background(), metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	return cl.Groups[i].ShardIDs[0], cl.Groups[i].GroupID
}

func scheduleMove(t *testing.T, eng *mover.Engine, shard int64, to metadata.Node) metadata.Move {
	t.Helper()
	ctx := context.Background()
	specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: shard, Target: to}})
	require.NoError(t, err)
	require.NoError(t, eng.Preflight(ctx, specs[0]))
	_, moves, err := eng.Schedule(ctx, "move", specs)
	require.NoError(t, err)
	return moves[0]
}

func testConfig(t *testing.T) mover.Config {
	cfg := mover.DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	cfg.CutoverBackoff = 100 * time.Millisecond
	return cfg
}

// TestMovesUnderWorkload moves shard groups one after another to the new
// node while 8 clients write, then checks the ledger and the invariants.
func TestMovesUnderWorkload(t *testing.T) {
	c := newCluster(t, 8, 400, 6000)
	target := c.newNode(t)
	eng := mover.New(testConfig(t), c.cat)
	bg := startWorkload(c, 8, 400, 0)
	time.Sleep(300 * time.Millisecond)
	var pauses []time.Duration
	var mu sync.Mutex
	for i := 0; i < 3; i++ {
		shard, _ := groupShard(t, c, i)
		cfg := testConfig(t)
		cfg.OnCutover = func(_ int64, d time.Duration) { mu.Lock(); pauses = append(pauses, d); mu.Unlock() }
		eng = mover.New(cfg, c.cat)
		m := scheduleMove(t, eng, shard, target)
		require.NoError(t, eng.Run(context.Background(), m.ID))
		done, err := c.cat.Move(context.Background(), m.ID)
		require.NoError(t, err)
		assert.Equal(t, "done", string(done.Phase))
		assert.True(t, done.CutoverCommitted)
	}
	time.Sleep(300 * time.Millisecond)
	res := bg.stop(t)
	verify(t, c, res)
	assert.Len(t, pauses, 3)
	st, err := c.cat.Snapshot(context.Background(), metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		assert.Equal(t, target.GroupID, st.Groups[i].GroupID, "group %d moved", i)
	}
}

// TestKilledAtEveryPhase kills the mover after each phase and at each step
// of the cutover, under a workload; a new engine recovers and finishes the
// move, and nothing is lost.
func TestKilledAtEveryPhase(t *testing.T) {
	c := newCluster(t, 16, 300, 3000)
	target := c.newNode(t)
	killPoints := []string{"scheduled", "preflight", "setup", "copying", "indexing", "catching_up",
		"cutover:locked", "cutover:caught_up", "cutover:prepared", "cutover:decided", "cutover"}
	for i, point := range killPoints {
		t.Run(point, func(t *testing.T) {
			killCase(t, point)
			bg := startWorkload(c, 4, 300, uint8(i))
			shard, _ := groupShard(t, c, i)
			killed := false
			cfg := testConfig(t)
			cfg.AfterPhase = func(_ int64, p mover.Phase) error {
				if !killed && p.String() == point {
					killed = true
					return errors.New("kill")
				}
				return nil
			}
			cfg.CutoverStep = func(_ int64, step string) error {
				if !killed && "cutover:"+step == point {
					killed = true
					return errors.New("kill")
				}
				return nil
			}
			m := scheduleMove(t, mover.New(cfg, c.cat), shard, target)
			err := mover.New(cfg, c.cat).Run(context.Background(), m.ID)
			require.ErrorIs(t, err, mover.ErrKilled)

			// A new mover process: recovery, then resume.
			eng := mover.New(testConfig(t), c.cat)
			require.NoError(t, eng.Recover(context.Background()))
			require.NoError(t, eng.Run(context.Background(), m.ID))
			done, err := c.cat.Move(context.Background(), m.ID)
			require.NoError(t, err)
			assert.Equal(t, "done", string(done.Phase))
			verify(t, c, bg.stop(t))
		})
	}
}

// TestCancelLeavesSourceServing cancels a move during catch-up.
func TestCancelAndFailLeaveSourceServing(t *testing.T) {
	c := newCluster(t, 4, 100, 1000)
	target := c.newNode(t)
	bg := startWorkload(c, 2, 100, 0)
	shard, source := groupShard(t, c, 0)
	cfg := testConfig(t)
	var eng *mover.Engine
	cfg.AfterPhase = func(id int64, p mover.Phase) error {
		if p == mover.Indexing {
			_, err := c.cat.RequestCancel(context.Background(), id)
			return err
		}
		return nil
	}
	eng = mover.New(cfg, c.cat)
	m := scheduleMove(t, eng, shard, target)
	err := eng.Run(context.Background(), m.ID)
	require.Error(t, err)
	got, err := c.cat.Move(context.Background(), m.ID)
	require.NoError(t, err)
	assert.Equal(t, "cancelled", string(got.Phase))
	_, group := groupShard(t, c, 0)
	assert.Equal(t, source, group, "a cancelled move leaves the group on its source")

	// Target table left behind by a failed move is dropped: the group can
	// be moved again.
	m2 := scheduleMove(t, mover.New(testConfig(t), c.cat), shard, target)
	require.NoError(t, mover.New(testConfig(t), c.cat).Run(context.Background(), m2.ID))
	res := bg.stop(t)
	verify(t, c, res)
}

func TestPreflightRefusals(t *testing.T) {
	c := newCluster(t, 4, 50, 200)
	ctx := context.Background()
	target := c.newNode(t)
	eng := mover.New(testConfig(t), c.cat)
	shard, sourceGroup := groupShard(t, c, 0)
	nodes, err := c.cat.Nodes(ctx)
	require.NoError(t, err)
	var source metadata.Node
	for _, n := range nodes {
		if n.GroupID == sourceGroup {
			source = n
		}
	}

	_, err = eng.Resolve(ctx, []mover.Request{{ShardID: 999999, Target: target}})
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "shard 999999 does not exist")
	_, err = eng.Resolve(ctx, []mover.Request{{ShardID: shard, Target: source}})
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "already on")
	_, err = eng.Resolve(ctx, []mover.Request{{ShardID: shard, Target: metadata.Node{ID: 4242}}})
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "not registered")

	// A table without primary key or replica identity.
	specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: shard, Target: target}})
	require.NoError(t, err)
	conn, err := c.cat.ConnectNode(ctx, source.Host, source.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	ident, err := metadata.ParseQualifiedName(specs[0].ShardTables[0])
	require.NoError(t, err)
	tbl := ident.Sanitize()
	var pk string
	require.NoError(t, conn.QueryRow(ctx, "SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'", tbl).Scan(&pk))
	_, err = conn.Exec(ctx, "ALTER TABLE "+tbl+" DROP CONSTRAINT "+pgx.Identifier{pk}.Sanitize())
	require.NoError(t, err)
	err = eng.Preflight(ctx, specs[0])
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), ident[1])
	_, err = conn.Exec(ctx, "ALTER TABLE "+tbl+" ADD PRIMARY KEY (user_id, event_id)")
	require.NoError(t, err)
	require.NoError(t, eng.Preflight(ctx, specs[0]))

	// No room on the target: its free space, measured with df on the
	// server, is less than the group's size times the headroom factor.
	tight := testConfig(t)
	tight.DiskFactor = 1e12
	err = mover.New(tight, c.cat).Preflight(ctx, specs[0])
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "free for its data directory")
	assert.Contains(t, err.Error(), "choose another target")

	// Room others still need: a move of another group into the same
	// target, copying, with more bytes left than the disk has free.
	other, _ := groupShard(t, c, 1)
	otherSpecs, err := eng.Resolve(ctx, []mover.Request{{ShardID: other, Target: target}})
	require.NoError(t, err)
	_, otherMoves, err := eng.Schedule(ctx, "move", otherSpecs)
	require.NoError(t, err)
	om := otherMoves[0]
	for _, step := range [][2]string{{"scheduled", "preflight"}, {"preflight", "setup"}, {"setup", "copying"}} {
		require.NoError(t, c.cat.SetPhase(ctx, om.ID, step[0], step[1], "test", ""))
	}
	require.NoError(t, c.cat.SetProgress(ctx, om.ID, 0, 1<<60, "", ""))
	err = eng.Preflight(ctx, specs[0])
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "moves already copying there need")
	require.NoError(t, c.cat.SetPhase(ctx, om.ID, "copying", "cancelled", "test", ""))
	require.NoError(t, eng.Preflight(ctx, specs[0]))

	// Server settings the move needs, each refused with a sentence.
	restart := func(n metadata.Node, sql string) {
		t.Helper()
		conn, err := c.cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
		conn.Close(ctx)
		for _, sn := range c.sb.Nodes {
			if sn.Port == n.Port {
				require.NoError(t, c.sb.StopNode(ctx, sn, "fast"))
			}
		}
		_, err = sandbox.Up(ctx, sandbox.Config{Dir: c.sb.Dir, Workers: 1})
		require.NoError(t, err)
	}
	for _, tc := range []struct{ set, want string }{
		{"ALTER SYSTEM SET wal_level = replica", "wal_level = replica"},
		{"ALTER SYSTEM SET max_prepared_transactions = 0", "max_prepared_transactions = 0"},
	} {
		restart(source, tc.set)
		err = eng.Preflight(ctx, specs[0])
		assert.ErrorIs(t, err, metadata.ErrInvalid)
		assert.Contains(t, err.Error(), tc.want)
		restart(source, "ALTER SYSTEM RESET ALL")
	}
	conn, err = c.cat.ConnectNode(ctx, source.Host, source.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// One slot left: enough for a move, not for one that verifies (its
	// temporary slot needs a second).
	_, err = conn.Exec(ctx, "SELECT pg_create_physical_replication_slot('filler_' || i) FROM generate_series(1, current_setting('max_replication_slots')::int - 1) i")
	require.NoError(t, err)
	require.NoError(t, eng.Preflight(ctx, specs[0]))
	vcfg := testConfig(t)
	vcfg.Verify = true
	err = mover.New(vcfg, c.cat).Preflight(ctx, specs[0])
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "replication slots free and the move needs 2 (one more for --verify's temporary slot)")
	_, err = conn.Exec(ctx, "SELECT pg_create_physical_replication_slot('filler_last')")
	require.NoError(t, err)
	err = eng.Preflight(ctx, specs[0])
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "has 0 of")
	assert.Contains(t, err.Error(), "replication slots free and the move needs 1;")
	_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'filler_%'")
	require.NoError(t, err)
	require.NoError(t, eng.Preflight(ctx, specs[0]))

	// A group another move holds.
	_, _, err = eng.Schedule(ctx, "move", specs)
	require.NoError(t, err)
	_, _, err = eng.Schedule(ctx, "move", specs)
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "already being moved")
}

// debugFind looks for the ledger's keys in every github_events table of
// every node, old fenced copies included, to say where a write went.
func debugFind(t *testing.T, c *cluster, res workload.RunResult, keys []workload.Key) {
	ctx := context.Background()
	nodes, _ := c.cat.Nodes(ctx)
	rows := res.Ledger.Rows()
	for _, n := range nodes {
		conn, err := c.cat.ConnectNode(ctx, n.Host, n.Port)
		if err != nil {
			continue
		}
		tabs, _ := conn.Query(ctx, "SELECT relname FROM pg_class WHERE relname LIKE 'github_events%' AND relkind = 'r'")
		names, _ := pgx.CollectRows(tabs, pgx.RowTo[string])
		for _, name := range names {
			for _, k := range keys {
				st := rows[k]
				var rev int64
				err := conn.QueryRow(ctx, "SELECT coalesce((payload->>'rev')::bigint, -1) FROM "+pgx.Identifier{name}.Sanitize()+" WHERE user_id = $1 AND event_id = $2", k.UserID, k.EventID).Scan(&rev)
				if err == nil {
					t.Logf("key %v (ledger %+v) found in %s on %s with rev %d", k, st, name, n.Addr(), rev)
				}
			}
		}
		conn.Close(ctx)
	}
}

// TestRunJobInterruptedAndResumed stops a job of several moves mid-way (as
// Ctrl-C does): moves stop where they are, the job is paused, and running it
// again finishes every move with the ledger intact.
func TestRunJobInterruptedAndResumed(t *testing.T) {
	c := newCluster(t, 8, 300, 2000)
	target := c.newNode(t)
	bg := startWorkload(c, 4, 300, 0)
	ctx := context.Background()
	cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	var reqs []mover.Request
	for i := 0; i < 4; i++ {
		reqs = append(reqs, mover.Request{ShardID: cl.Groups[i].ShardIDs[0], Target: target})
	}
	eng := mover.New(testConfig(t), c.cat)
	specs, err := eng.Resolve(ctx, reqs)
	require.NoError(t, err)
	job, _, err := eng.Schedule(ctx, "rebalance", specs)
	require.NoError(t, err)

	jctx, cancel := context.WithCancel(ctx)
	cfg := testConfig(t)
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p == mover.Indexing {
			cancel() // Ctrl-C while the second wave is copying
		}
		return nil
	}
	res, err := mover.New(cfg, c.cat).RunJob(jctx, job.ID, mover.Limits{Concurrency: 2, PerNode: 4})
	require.ErrorIs(t, err, context.Canceled)
	assert.Positive(t, res.Unfinished, "an interrupted job leaves moves to resume")
	j, err := c.cat.Job(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, "paused", string(j.State))

	res, err = mover.New(testConfig(t), c.cat).RunJob(ctx, job.ID, mover.Limits{Concurrency: 2, PerNode: 4})
	require.NoError(t, err)
	assert.Equal(t, mover.JobResult{Done: 4}, res)
	j, err = c.cat.Job(ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, "done", string(j.State))
	verify(t, c, bg.stop(t))
}

// TestSchemaChangeDuringMoveFailsCleanly: DDL is not replicated. A schema
// change made on the source's shard while the move catches up must fail
// the move with a sentence saying so, leave the group serving on its
// source with no write lost, and leave nothing behind; moving the group
// again then works. There are two ways to notice it, and each case forces
// one: a column added and then written reaches the stream as a row the
// target cannot take, so the stream fails; an index added reaches no row,
// so only the cutover's comparison of the definitions under its locks
// finds it.
func TestSchemaChangeDuringMoveFailsCleanly(t *testing.T) {
	c := newCluster(t, 4, 100, 1000)
	target := c.newNode(t)
	bg := startWorkload(c, 2, 100, 0)
	nodes, err := c.cat.Nodes(context.Background())
	require.NoError(t, err)
	cases := []struct {
		name string
		// ddl returns the statements to run on the source's copy of a
		// shard table.
		ddl func(tbl pgx.Identifier) []string
		// writes: the statements must have written rows of the group.
		writes bool
		want   []string
	}{
		{"column added and written", func(tbl pgx.Identifier) []string {
			return []string{"ALTER TABLE " + tbl.Sanitize() + " ADD COLUMN extra int DEFAULT 7", "UPDATE " + tbl.Sanitize() + " SET extra = 8"}
		}, true, []string{"extra", "schema change made during the move is not replicated"}},
		{"index added", func(tbl pgx.Identifier) []string {
			ix := pgx.Identifier{tbl[len(tbl)-1] + "_extra"}.Sanitize()
			return []string{"CREATE INDEX " + ix + " ON " + tbl.Sanitize() + " ((1))"}
		}, false, []string{"_extra\" is on the source only", "schema changes are not replicated"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shard, source := groupShard(t, c, i)
			var src metadata.Node
			for _, n := range nodes {
				if n.GroupID == source {
					src = n
				}
			}
			cfg := testConfig(t)
			cfg.RetryFor = 10 * time.Second
			var m metadata.Move
			cfg.AfterPhase = func(id int64, p mover.Phase) error {
				if p != mover.Indexing {
					return nil
				}
				conn, err := c.cat.ConnectNode(context.Background(), src.Host, src.Port)
				if err != nil {
					return err
				}
				defer conn.Close(context.Background())
				written := int64(0)
				for _, name := range m.ShardTables {
					ident, err := metadata.ParseQualifiedName(name)
					if err != nil {
						return err
					}
					for _, stmt := range tc.ddl(ident) {
						tag, err := conn.Exec(context.Background(), stmt)
						if err != nil {
							return err
						}
						written += tag.RowsAffected()
					}
				}
				if tc.writes && written == 0 {
					return errors.New("no row of the group was written after the column was added")
				}
				return nil
			}
			eng := mover.New(cfg, c.cat)
			m = scheduleMove(t, eng, shard, target)
			err = eng.Run(context.Background(), m.ID)
			require.Error(t, err)
			t.Logf("move failed as it should: %v", err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			got, err := c.cat.Move(context.Background(), m.ID)
			require.NoError(t, err)
			assert.Equal(t, "failed", string(got.Phase))
			_, group := groupShard(t, c, i)
			assert.Equal(t, source, group, "a failed move leaves the group on its source")

			conn, err := c.cat.ConnectNode(context.Background(), src.Host, src.Port)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			var slots, pubs int
			require.NoError(t, conn.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%'),
				(SELECT count(*) FROM pg_publication WHERE pubname LIKE 'shardmover%')`).Scan(&slots, &pubs))
			assert.Zero(t, slots, "no slot left on the source")
			assert.Zero(t, pubs, "no publication left on the source")

			// The same DDL on the target's side is not needed: a new move
			// copies the table as it is now.
			m2 := scheduleMove(t, mover.New(testConfig(t), c.cat), shard, target)
			require.NoError(t, mover.New(testConfig(t), c.cat).Run(context.Background(), m2.ID))
			_, group = groupShard(t, c, i)
			assert.Equal(t, target.GroupID, group, "the group moved the second time")
		})
	}
	verify(t, c, bg.stop(t))
}
