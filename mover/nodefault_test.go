package mover_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// Node faults: real server processes stopped (fast or immediate) and
// started again, and server sessions of the mover terminated, while a
// routed workload with a ledger writes. Every case ends with verify: no
// acknowledged write lost or applied twice, one placement per shard,
// nothing left prepared, no replication artifact left behind.

// restartErrors are the error classes the workload may see while a node
// it writes to restarts: its connections cut (57P01 admin shutdown, 57P02
// crash shutdown, a reset socket) and refused while the server starts
// (57P03). Their writes are in doubt, which the ledger allows for.
var restartErrors = []string{"connection", "57P01", "57P02", "57P03"}

// nodeFaultTimeout bounds one eng.Run of a case, so that a hang fails the
// case instead of eating the whole test's time.
const nodeFaultTimeout = 2 * time.Minute

// startPaced is startWorkload with a short pause between a client's
// operations: while a node is down its clients fail at once, and without a
// pause they would spin on the two shared cores.
func startPaced(c *cluster, clients int, users int64, run uint8) *background {
	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration, opts.RunID = clients, users, time.Hour, run
	opts.Pause = workload.TestPause
	return &background{workload.Start(context.Background(), c.r, opts)}
}

// durableCommits turns synchronous_commit on for the given servers (the
// sandbox runs with it off). An immediate shutdown is a crash, and with
// synchronous_commit = off PostgreSQL loses the commits of the last moments
// before a crash although it acknowledged them: the ledger would count them
// against the mover, which can do nothing about it. Cases that crash a
// server that serves writes need it on. ALTER SYSTEM survives the restarts
// (postgresql.auto.conf is read after the sandbox's settings).
func durableCommits(t *testing.T, c *cluster, nodes ...sandbox.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		conn, err := connect(ctx, n)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "ALTER SYSTEM SET synchronous_commit = on")
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
		require.NoError(t, err)
		conn.Close(ctx)
	}
}

// sbNode returns the sandbox node (the server process) of node group g;
// group 0 is the coordinator.
func sbNode(t *testing.T, c *cluster, g int32) sandbox.Node {
	t.Helper()
	if g == 0 {
		return c.sb.Coordinator()
	}
	n := metaNode(t, c, g)
	for _, sn := range c.sb.Nodes {
		if sn.Port == n.Port {
			return sn
		}
	}
	t.Fatalf("no sandbox node for group %d (%s)", g, n.Addr())
	return sandbox.Node{}
}

// metaNode returns the registered node of group g.
func metaNode(t *testing.T, c *cluster, g int32) metadata.Node {
	t.Helper()
	nodes, err := c.cat.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes {
		if n.GroupID == g {
			return n
		}
	}
	t.Fatalf("node group %d is not registered", g)
	return metadata.Node{}
}

// stopNode stops one server with pg_ctl's mode ("fast" or "immediate").
func stopNode(c *cluster, n sandbox.Node, mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.sb.StopNode(ctx, n, mode)
}

// startAll starts every stopped server of the sandbox again, as
// TestPreflightRefusals does: Up on an existing directory starts its nodes
// as they are (and adds none when Workers is not more than exist).
func startAll(c *cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := sandbox.Up(ctx, sandbox.Config{Dir: c.sb.Dir, Workers: len(c.sb.Nodes) - 1})
	return err
}

// restartLater starts every stopped server after d, in the background; the
// returned channel gets Up's error.
func restartLater(c *cluster, d time.Duration) <-chan error {
	ch := make(chan error, 1)
	go func() {
		time.Sleep(d)
		ch <- startAll(c)
	}()
	return ch
}

// connect opens a direct connection to a server of the sandbox.
func connect(ctx context.Context, n sandbox.Node) (*pgx.Conn, error) {
	return pgx.Connect(ctx, n.DSN())
}

// queryInt runs a query returning one integer on a server of the sandbox.
func queryInt(t *testing.T, n sandbox.Node, sql string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := connect(ctx, n)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v int64
	require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&v))
	return v
}

// waitUp waits until every server of the sandbox answers a query and the
// catalog's pool works again.
func waitUp(t *testing.T, c *cluster) {
	t.Helper()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, n := range c.sb.Nodes {
			conn, err := connect(ctx, n)
			if err != nil {
				return false
			}
			err = conn.Ping(ctx)
			conn.Close(ctx)
			if err != nil {
				return false
			}
		}
		_, err := c.cat.Nodes(ctx)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "every node must answer again")
}

// settleVerify brings every node back, lets the router's pools drop the
// connections a restart broke (a check that fails on a dead pooled
// connection is retried), and verifies.
func settleVerify(t *testing.T, c *cluster, res workload.RunResult, allowed ...string) {
	t.Helper()
	require.NoError(t, startAll(c))
	waitUp(t, c)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := workload.Check(ctx, c.r, res.Ledger)
		if pgCodeOf(err) != "" {
			return true // the server answered: verify reports it
		}
		if err != nil {
			t.Logf("ledger check, retrying: %v", err)
		}
		return err == nil
	}, 30*time.Second, 200*time.Millisecond)
	t.Logf("workload: %d acknowledged, errors %v", res.Ops(), res.Errors)
	verifyAllowing(t, c, res, allowed...)
}

// slotsOn counts shardmover slots on a server.
func slotsOn(t *testing.T, n sandbox.Node) int64 {
	t.Helper()
	return queryInt(t, n, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%'")
}

// rollbacks counts a move's cutover attempts rolled back to catching_up,
// and all its phase changes.
func rollbacks(t *testing.T, c *cluster, id int64) (rolledBack, changes int64) {
	t.Helper()
	coord := c.sb.Coordinator()
	rolledBack = queryInt(t, coord, "SELECT count(*) FROM shardmover.move_log WHERE move_id = $1 AND from_phase = 'cutover' AND to_phase = 'catching_up'", id)
	changes = queryInt(t, coord, "SELECT count(*) FROM shardmover.move_log WHERE move_id = $1", id)
	return rolledBack, changes
}

// assertNoLivelock checks that a finished move did not spin: a bounded
// number of cutover rollbacks and of phase changes.
func assertNoLivelock(t *testing.T, c *cluster, id int64) {
	t.Helper()
	rb, changes := rollbacks(t, c, id)
	t.Logf("move %d: %d cutover rollbacks, %d phase changes", id, rb, changes)
	assert.Less(t, rb, int64(20), "the cutover of move %d was rolled back %d times: a livelock", id, rb)
	assert.Less(t, changes, int64(60), "move %d changed phase %d times: a livelock", id, changes)
}

// assertDone checks that move id ended done.
func assertDone(t *testing.T, c *cluster, id int64) metadata.Move {
	t.Helper()
	m, err := c.cat.Move(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, "done", string(m.Phase), "move %d: %s", id, m.Error)
	return m
}

// catchingUpFault arms a fault for the first progress report of the
// catch-up loop of a move, once its stream is connected: the hook runs on
// the mover's own goroutine, so the fault lands while the move is in
// catching_up with its applier running, and the mover sees its effect
// when the hook returns. AfterPhase(Indexing) arms it, so that the progress
// report of the transition itself (before the stream starts) is skipped.
type catchingUpFault struct {
	armed atomic.Bool
	once  sync.Once
	fired atomic.Bool
	phase atomic.Value // the phase persisted when the fault fired
}

func (f *catchingUpFault) install(t *testing.T, c *cluster, cfg *mover.Config, source sandbox.Node, fault func(id int64)) {
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p == mover.Indexing {
			f.armed.Store(true)
		}
		return nil
	}
	cfg.OnProgress = func(p mover.Progress) {
		if p.Phase != mover.CatchingUp || !f.armed.Load() {
			return
		}
		f.once.Do(func() {
			// Wait (bounded) for the stream to hold the slot.
			slot := fmt.Sprintf("shardmover_%d", p.MoveID)
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				conn, err := connect(ctx, source)
				var active bool
				if err == nil {
					err = conn.QueryRow(ctx, "SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false)", slot).Scan(&active)
					conn.Close(ctx)
				}
				cancel()
				if err == nil && active {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if m, err := c.cat.Move(context.Background(), p.MoveID); err == nil {
				f.phase.Store(string(m.Phase))
			}
			fault(p.MoveID)
			f.fired.Store(true)
		})
	}
}

func (f *catchingUpFault) check(t *testing.T) {
	t.Helper()
	require.True(t, f.fired.Load(), "the fault never fired: the test did not test what it says")
	ph, _ := f.phase.Load().(string)
	t.Logf("the fault fired in phase %s", ph)
	assert.Equal(t, "catching_up", ph, "the fault must land during catching_up")
}

// copyingFault runs fault once, in the background, at the first copy
// progress report that is neither the start nor the end of the copy.
// The copy is throttled to rate bytes/s so that it lasts a few seconds.
func copyingFault(cfg *mover.Config, rate int64, fault func(id int64)) (fired *atomic.Bool) {
	fired = &atomic.Bool{}
	var once sync.Once
	cfg.BytesPerSecond = rate
	cfg.OnProgress = func(p mover.Progress) {
		if p.Phase == mover.Copying && p.BytesDone > 0 && p.BytesDone < p.BytesTotal {
			once.Do(func() {
				fired.Store(true)
				go fault(p.MoveID)
			})
		}
	}
	return fired
}

// TestNodeFaultWorkers stops and restarts workers, and terminates the
// mover's replication and lease sessions, each at the phase where it hurts,
// while a routed workload writes; one cluster, one shard group per case.
func TestNodeFaultWorkers(t *testing.T) {
	c := newCluster(t, 8, 300, 3000)
	target := c.newNode(t)
	targetSB := sbNode(t, c, target.GroupID)
	t.Cleanup(func() { _ = startAll(c) })
	durableCommits(t, c, c.sb.Workers()...)

	// 1. The target dies mid-copy (immediate shutdown: a crash) and comes
	// back 3 s later. The move resumes (setup again, copy again) or fails
	// cleanly; either way a retry finishes it, and no slot is left holding
	// WAL on the source.
	t.Run("target stopped while copying", func(t *testing.T) {
		nodeCase(t, "copying", "the move resumed, or a new move of the group finished; no slot left on the source")
		defer func() { require.NoError(t, startAll(c)) }()
		bg := startPaced(c, 3, 300, 1)
		shard, sourceGroup := groupShard(t, c, 0)
		source := sbNode(t, c, sourceGroup)
		cfg := testConfig(t)
		restarted := make(chan error, 1)
		stopped := make(chan error, 1)
		fired := copyingFault(&cfg, 1_000_000, func(int64) {
			stopped <- stopNode(c, targetSB, "immediate")
			time.Sleep(3 * time.Second)
			restarted <- startAll(c)
		})
		eng := mover.New(cfg, c.cat)
		m := scheduleMove(t, eng, shard, target)
		ctx, cancel := context.WithTimeout(context.Background(), nodeFaultTimeout)
		defer cancel()
		err := eng.Run(ctx, m.ID)
		require.True(t, fired.Load(), "the target was never stopped mid-copy (run: %v)", err)
		require.NoError(t, <-stopped)
		require.NoError(t, <-restarted)
		if err != nil {
			t.Logf("first run: %v", err)
			got, gerr := c.cat.Move(ctx, m.ID)
			require.NoError(t, gerr)
			if got.Phase == "failed" {
				m2 := scheduleMove(t, mover.New(testConfig(t), c.cat), shard, target)
				require.NoError(t, mover.New(testConfig(t), c.cat).Run(ctx, m2.ID), "a new move of the group must succeed")
				assertDone(t, c, m2.ID)
			} else {
				require.NoError(t, mover.New(testConfig(t), c.cat).Run(ctx, m.ID), "a second run must finish the move")
				assertDone(t, c, m.ID)
			}
		} else {
			assertDone(t, c, m.ID)
		}
		assert.Zero(t, slotsOn(t, source), "no shardmover slot may be left on the source")
		assertNoLivelock(t, c, m.ID)
		settleVerify(t, c, bg.stop(t), restartErrors...)
	})

	// 2. The source stops (fast shutdown) while the move catches up with
	// its applier streaming, and starts again 2 s later: the move resumes
	// from its origin and finishes.
	t.Run("source stopped while catching up", func(t *testing.T) {
		nodeCase(t, "catching_up", "the move resumed from its origin and finished")
		shard, sourceGroup := groupShard(t, c, 1)
		source := sbNode(t, c, sourceGroup)
		restartDuringCatchUp(t, c, target, []int64{shard}, source, source, 2)
	})

	// 5. The walsender of the move's slot is terminated on the source while
	// the move catches up: the stream restarts and the move finishes. The
	// workload is not touched, so it may see no error at all.
	t.Run("replication connection terminated while catching up", func(t *testing.T) {
		nodeCase(t, "catching_up", "the stream restarted and the move finished")
		shard, sourceGroup := groupShard(t, c, 2)
		source := sbNode(t, c, sourceGroup)
		terminateDuringCatchUp(t, c, target, shard, source, source, 5, "the walsender",
			`SELECT count(*) FILTER (WHERE pg_terminate_backend(active_pid, 5000))
				FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%' AND active_pid IS NOT NULL`, false)
		assert.Zero(t, slotsOn(t, source))
	})

	// 6. The session holding the move's lease (advisory lock class 0x534d,
	// key the move id) is terminated on the coordinator while the move
	// catches up: the mover notices, takes its lease again, and finishes
	// without spinning.
	t.Run("lease connection terminated while catching up", func(t *testing.T) {
		nodeCase(t, "catching_up", "the mover took its lease again and finished, without spinning")
		shard, sourceGroup := groupShard(t, c, 3)
		source := sbNode(t, c, sourceGroup)
		m := terminateDuringCatchUp(t, c, target, shard, source, c.sb.Coordinator(), 6, "the lease's session",
			`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_locks
				WHERE locktype = 'advisory' AND granted AND classid = 21325 AND objid = $1 AND objsubid = 2`, true)
		// The lease is released at the end: nobody holds the move's lock.
		assert.Zero(t, queryInt(t, c.sb.Coordinator(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND classid = 21325 AND objid = $1 AND objsubid = 2`, uint32(m.ID)))
	})

	// 7. A worker that is neither source nor target is down: Recover and
	// Sweep go on (the node is reported kept), and a move between two other
	// nodes succeeds.
	t.Run("bystander node down", func(t *testing.T) {
		nodeCase(t, "recover, sweep and a whole move", "Recover and Sweep skipped the node and said so; the move finished")
		defer func() { require.NoError(t, startAll(c)) }()
		bg := startPaced(c, 3, 300, 7)
		shard, sourceGroup := groupShard(t, c, 4)
		var bystander metadata.Node
		nodes, err := c.cat.Nodes(context.Background())
		require.NoError(t, err)
		for _, n := range nodes {
			if n.GroupID != sourceGroup && n.GroupID != target.GroupID {
				bystander = n
			}
		}
		require.NotZero(t, bystander.GroupID)
		require.NoError(t, stopNode(c, sbNode(t, c, bystander.GroupID), "fast"))

		ctx, cancel := context.WithTimeout(context.Background(), nodeFaultTimeout)
		defer cancel()
		eng := mover.New(testConfig(t), c.cat)
		start := time.Now()
		require.NoError(t, eng.Recover(ctx), "Recover must skip a node that is down")
		rep, err := eng.Sweep(ctx, mover.SweepOptions{KeepOldFor: time.Hour})
		require.NoError(t, err, "Sweep must skip a node that is down")
		t.Logf("recover and sweep took %s; kept %+v", time.Since(start).Round(time.Millisecond), rep.Kept)
		var keptNode bool
		for _, k := range rep.Kept {
			if k.Node == bystander.Addr() && k.Object == "node" {
				keptNode = true
			}
		}
		assert.True(t, keptNode, "Sweep must report the node it could not search: %+v", rep.Kept)

		m := scheduleMove(t, eng, shard, target)
		require.NoError(t, eng.Run(ctx, m.ID), "a move between two other nodes must not care about a third that is down")
		assertDone(t, c, m.ID)
		require.NoError(t, startAll(c))
		settleVerify(t, c, bg.stop(t), restartErrors...)
	})

	// 8. The source dies mid-copy and stays down: with a short RetryFor the
	// move fails (a failure, not a refusal), the group stays on its source,
	// and once the source is back Sweep drops the slot, the publication and
	// the target's tables.
	t.Run("source down until the move fails", func(t *testing.T) {
		nodeCase(t, "copying", "the move failed, the group stayed on its source, and once it was back Sweep dropped slot, publication and copy")
		defer func() { require.NoError(t, startAll(c)) }()
		bg := startPaced(c, 3, 300, 8)
		shard, sourceGroup := groupShard(t, c, 5)
		source := sbNode(t, c, sourceGroup)
		cfg := testConfig(t)
		cfg.RetryFor = 5 * time.Second
		stopped := make(chan error, 1)
		var phaseAtStop atomic.Value
		fired := copyingFault(&cfg, 300_000, func(id int64) {
			err := stopNode(c, source, "immediate")
			if m, merr := c.cat.Move(context.Background(), id); merr == nil {
				phaseAtStop.Store(string(m.Phase))
			}
			stopped <- err
		})
		eng := mover.New(cfg, c.cat)
		m := scheduleMove(t, eng, shard, target)
		ctx, cancel := context.WithTimeout(context.Background(), nodeFaultTimeout)
		defer cancel()
		start := time.Now()
		err := eng.Run(ctx, m.ID)
		require.True(t, fired.Load(), "the source was never stopped mid-copy (run: %v)", err)
		require.NoError(t, <-stopped)
		ph, _ := phaseAtStop.Load().(string)
		assert.Equal(t, "copying", ph, "the source must go down while the move copies")
		require.Error(t, err, "the move must fail while its source stays down")
		t.Logf("run failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
		assert.False(t, errors.Is(err, metadata.ErrInvalid), "a move that failed mid-way is not a refused request: %v", err)
		assert.False(t, errors.Is(err, metadata.ErrUnreachable), "a move that failed mid-way is a failure (exit 1), not unreachable: %v", err)
		got, err := c.cat.Move(ctx, m.ID)
		require.NoError(t, err)
		assert.Equal(t, "failed", string(got.Phase))
		t.Logf("recorded error: %s", got.Error)
		_, group := groupShard(t, c, 5)
		assert.Equal(t, sourceGroup, group, "a failed move leaves the group on its source")

		require.NoError(t, startAll(c))
		waitUp(t, c)
		rep, err := eng.Sweep(ctx, mover.SweepOptions{KeepOldFor: time.Hour})
		require.NoError(t, err)
		t.Logf("sweep dropped %+v, kept %+v", rep.Dropped, rep.Kept)
		assert.Zero(t, slotsOn(t, source), "no shardmover slot may be left on the source")
		assert.Zero(t, queryInt(t, source, "SELECT count(*) FROM pg_publication WHERE pubname LIKE 'shardmover%'"), "no publication may be left on the source")
		for _, name := range got.ShardTables {
			assert.Zero(t, queryInt(t, targetSB, "SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)", name),
				"the failed move's copy %s must be dropped from the target", name)
		}
		recs, err := c.cat.Cleanups(ctx, m.ID)
		require.NoError(t, err)
		assert.Empty(t, recs, "every cleanup record of the failed move must be gone")
		settleVerify(t, c, bg.stop(t), restartErrors...)
	})
}

// TestNodeFaultCoordinator restarts the coordinator under a running move:
// while it catches up, and right after the fence is prepared.
func TestNodeFaultCoordinator(t *testing.T) {
	c := newCluster(t, 8, 300, 3000)
	target := c.newNode(t)
	coord := c.sb.Coordinator()
	t.Cleanup(func() { _ = startAll(c) })

	// 3. The coordinator restarts (fast shutdown, back 2 s later) while the
	// move catches up: the mover notices its lost lease, takes it again and
	// finishes; no livelock, nothing prepared.
	t.Run("coordinator restarted while catching up", func(t *testing.T) {
		nodeCase(t, "catching_up", "the mover took its lease again and finished; nothing prepared")
		shard, sourceGroup := groupShard(t, c, 0)
		source := sbNode(t, c, sourceGroup)
		restartDuringCatchUp(t, c, target, []int64{shard}, source, coord, 3)
		assert.Zero(t, queryInt(t, source, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'"))
	})

	// 4. The coordinator crashes right after the fence is prepared and comes
	// back 2 s later: the decision fails, the mover retries the coordinator
	// with backoff and settles (the fence is rolled back), and the move
	// finishes. During the outage the source is fenced: a write waits.
	t.Run("coordinator crashed with the fence prepared", func(t *testing.T) {
		nodeCase(t, "cutover step prepared", "writes to the source waited on the fence; the fence was settled and the move finished")
		defer func() { require.NoError(t, startAll(c)) }()
		bg := startPaced(c, 3, 300, 4)
		shard, sourceGroup := groupShard(t, c, 1)
		source := sbNode(t, c, sourceGroup)
		cfg := testConfig(t)
		var once sync.Once
		var fired atomic.Bool
		var restarted <-chan error
		var fenceErr atomic.Value
		var m metadata.Move
		cfg.CutoverStep = func(_ int64, step string) error {
			if step != "prepared" {
				return nil
			}
			once.Do(func() {
				fired.Store(true)
				if err := stopNode(c, coord, "immediate"); err != nil {
					t.Errorf("stop the coordinator: %v", err)
				}
				restarted = restartLater(c, 2*time.Second)
				// The source is fenced: a write to the shard waits for the
				// prepared transaction's lock (and gives up at lock_timeout).
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				conn, err := connect(ctx, source)
				if err != nil {
					fenceErr.Store(err)
					return
				}
				defer conn.Close(ctx)
				tbl, err := metadata.ParseQualifiedName(m.ShardTables[0])
				if err != nil {
					fenceErr.Store(err)
					return
				}
				_, err = conn.Exec(ctx, "SET lock_timeout = '300ms'")
				if err == nil {
					_, err = conn.Exec(ctx, "DELETE FROM "+tbl.Sanitize()+" WHERE false")
				}
				if err == nil {
					err = errors.New("the write went through")
				}
				fenceErr.Store(err)
			})
			return nil
		}
		eng := mover.New(cfg, c.cat)
		m = scheduleMove(t, eng, shard, target)
		ctx, cancel := context.WithTimeout(context.Background(), nodeFaultTimeout)
		defer cancel()
		err := eng.Run(ctx, m.ID)
		require.True(t, fired.Load(), "the cutover never prepared its fence (run: %v)", err)
		require.NoError(t, <-restarted)
		waitUp(t, c)
		ferr, _ := fenceErr.Load().(error)
		t.Logf("a write to the fenced source during the outage: %v", ferr)
		assert.Equal(t, "55P03", pgCodeOf(ferr), "a write to the source must wait for the fence (lock_timeout), got %v", ferr)
		if err != nil {
			// A move may stop on a fault; a second run must finish it.
			t.Logf("first run: %v", err)
			eng2 := mover.New(testConfig(t), c.cat)
			require.NoError(t, eng2.Recover(ctx))
			require.NoError(t, eng2.Run(ctx, m.ID))
		}
		done := assertDone(t, c, m.ID)
		assertFlipped(t, c, done, target)
		assertNoLivelock(t, c, m.ID)
		assert.Zero(t, queryInt(t, source, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'"), "nothing may stay prepared on the source")
		settleVerify(t, c, bg.stop(t), restartErrors...)
	})
	// 4b. The coordinator crashes right after the decision committed (its
	// COMMIT was acknowledged), before COMMIT PREPARED on the source, and
	// comes back 2 s later. The decision is the point of no return: the
	// mover commits the fence on the strength of it, so the coordinator must
	// still have it after the crash, and the move must finish on the target
	// with nothing lost. The coordinator runs with the sandbox's settings
	// (synchronous_commit = off), as a coordinator may in production.
	t.Run("coordinator crashed right after the decision", func(t *testing.T) {
		nodeCase(t, "cutover step decided", "the decision survived the crash; the move finished on the target")
		defer func() { require.NoError(t, startAll(c)) }()
		bg := startPaced(c, 3, 300, 9)
		shard, sourceGroup := groupShard(t, c, 2)
		source := sbNode(t, c, sourceGroup)
		cfg := testConfig(t)
		var once sync.Once
		var fired atomic.Bool
		var restarted <-chan error
		cfg.CutoverStep = func(_ int64, step string) error {
			if step == "decided" {
				once.Do(func() {
					fired.Store(true)
					if err := stopNode(c, coord, "immediate"); err != nil {
						t.Errorf("stop the coordinator: %v", err)
					}
					restarted = restartLater(c, 2*time.Second)
				})
			}
			return nil
		}
		eng := mover.New(cfg, c.cat)
		m := scheduleMove(t, eng, shard, target)
		ctx, cancel := context.WithTimeout(context.Background(), nodeFaultTimeout)
		defer cancel()
		err := eng.Run(ctx, m.ID)
		require.True(t, fired.Load(), "the cutover never decided (run: %v)", err)
		require.NoError(t, <-restarted)
		waitUp(t, c)
		if err != nil {
			t.Logf("first run: %v", err)
			got, _ := c.cat.Move(ctx, m.ID)
			if got.Phase != "failed" {
				eng2 := mover.New(testConfig(t), c.cat)
				require.NoError(t, eng2.Recover(ctx))
				assert.NoError(t, eng2.Run(ctx, m.ID))
			}
		}
		done := assertDone(t, c, m.ID)
		assert.True(t, done.CutoverCommitted, "a decision the mover acted on (it committed the fence) must survive the coordinator's crash")
		assertFlipped(t, c, done, target)
		assert.Zero(t, queryInt(t, source, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'"), "nothing may stay prepared on the source")
		settleVerify(t, c, bg.stop(t), restartErrors...)
	})
}

func pgCodeOf(err error) string {
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) {
		return pgErr.SQLState()
	}
	return ""
}

// restartDuringCatchUp moves the group of shard to target under a paced
// workload, stops node down (fast shutdown) while the move catches up, and
// starts it again 2 s later: the move must resume (the mover takes its lease
// again after a coordinator restart) and finish, with no livelock, no slot
// left on the source, and the ledger intact.
//
// With several shards, their groups ride one stream (the first carrying
// the others), and every move of it must finish.
func restartDuringCatchUp(t *testing.T, c *cluster, target metadata.Node, shards []int64, source, down sandbox.Node, run uint8) {
	t.Helper()
	defer func() { require.NoError(t, startAll(c)) }()
	bg := startPaced(c, 3, 300, run)
	cfg := testConfig(t)
	var f catchingUpFault
	var restarted <-chan error
	f.install(t, c, &cfg, source, func(int64) {
		if err := stopNode(c, down, "fast"); err != nil {
			t.Errorf("stop %s: %v", down.Addr(), err)
		}
		restarted = restartLater(c, 2*time.Second)
	})
	eng := mover.New(cfg, c.cat)
	ids := scheduleStream(t, c, eng, shards, target)
	ctx, cancel := context.WithTimeout(context.Background(), nodeFaultTimeout)
	defer cancel()
	err := eng.Run(ctx, ids[0])
	f.check(t)
	require.NoError(t, <-restarted)
	waitUp(t, c)
	require.NoError(t, err, "the move must resume and finish once the node is back")
	for _, id := range ids {
		assertDone(t, c, id)
		assertNoLivelock(t, c, id)
	}
	assert.Zero(t, slotsOn(t, source), "no shardmover slot may be left on the source")
	settleVerify(t, c, bg.stop(t), restartErrors...)
}

// terminateDuringCatchUp moves the group of shard to target under a paced
// workload and, while the move catches up, runs terminate on node on (a
// count of the sessions it ended; given the move id as $1 when withID).
// Exactly one session must be ended, and the move must take what it lost
// again and finish, with no livelock and the ledger intact.
func terminateDuringCatchUp(t *testing.T, c *cluster, target metadata.Node, shard int64, source, on sandbox.Node, run uint8,
	what, terminate string, withID bool) metadata.Move {
	t.Helper()
	bg := startPaced(c, 3, 300, run)
	cfg := testConfig(t)
	var f catchingUpFault
	var terminated atomic.Int64
	f.install(t, c, &cfg, source, func(id int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := connect(ctx, on)
		if err != nil {
			t.Errorf("connect to %s: %v", on.Addr(), err)
			return
		}
		defer conn.Close(ctx)
		var args []any
		if withID {
			args = append(args, uint32(id))
		}
		var n int64
		if err := conn.QueryRow(ctx, terminate, args...).Scan(&n); err != nil {
			t.Errorf("terminate %s: %v", what, err)
		}
		terminated.Store(n)
	})
	eng := mover.New(cfg, c.cat)
	m := scheduleMove(t, eng, shard, target)
	ctx, cancel := context.WithTimeout(context.Background(), nodeFaultTimeout)
	defer cancel()
	err := eng.Run(ctx, m.ID)
	f.check(t)
	assert.Equal(t, int64(1), terminated.Load(), "exactly one session (%s) must have been terminated", what)
	require.NoError(t, err, "the move must recover from losing %s and finish", what)
	assertDone(t, c, m.ID)
	assertNoLivelock(t, c, m.ID)
	settleVerify(t, c, bg.stop(t))
	return m
}
