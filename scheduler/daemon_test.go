package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/shardmover/shardmover/internal/faultproxy"
	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/planner"
	"github.com/shardmover/shardmover/scheduler"
)

func loaded(t *testing.T, shards int) (*sandbox.Cluster, *metadata.Catalog, *workload.Router) {
	t.Helper()
	ctx := context.Background()
	sb, cat := sandboxtest.NewCompat(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, shards))
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 5, Users: 500, Events: 4000})
	require.NoError(t, err)
	return sb, cat, r
}

func daemonConfig(t *testing.T) scheduler.DaemonConfig {
	cfg := scheduler.DefaultDaemonConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Settle = 2 * time.Second
	cfg.Poll = 200 * time.Millisecond
	cfg.Limits = mover.Limits{Concurrency: 2, PerNode: 2}
	cfg.Mover = mover.DefaultConfig()
	cfg.Mover.Logger = zaptest.NewLogger(t)
	return cfg
}

func startDaemon(t *testing.T, cfg scheduler.DaemonConfig, cat *metadata.Catalog) (*scheduler.Daemon, func()) {
	t.Helper()
	d, err := scheduler.NewDaemon(cfg, cat)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Start(ctx) }()
	stop := func() { cancel(); require.NoError(t, <-done) }
	return d, stop
}

func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func scrape(t *testing.T, d *scheduler.Daemon) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.Addr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "/metrics must parse as Prometheus text")
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				key += fmt.Sprintf("{%s=%s}", l.GetName(), l.GetValue())
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

// TestDaemonRebalancesAfterNodeAdd: a node added while the daemon runs
// starts a rebalance after the settle period; the cluster ends balanced and
// the workload's ledger is intact; metrics move.
func TestDaemonRebalancesAfterNodeAdd(t *testing.T) { daemonRebalancesAfterNodeAdd(t, 8, 1) }

// TestDaemonStreamsAfterNodeAdd is TestDaemonRebalancesAfterNodeAdd with
// --groups-per-stream 4 and 12 groups (two moves from each worker): the
// daemon's job moves each worker's groups in one stream.
func TestDaemonStreamsAfterNodeAdd(t *testing.T) { daemonRebalancesAfterNodeAdd(t, 12, 4) }

func daemonRebalancesAfterNodeAdd(t *testing.T, shards, perStream int) {
	sb, cat, r := loaded(t, shards)
	ctx := context.Background()
	cfg := daemonConfig(t)
	cfg.Limits.GroupsPerStream = perStream
	cfg.KeepOldFor, cfg.SweepEvery = 0, 300*time.Millisecond
	d, stop := startDaemon(t, cfg, cat)
	eventually(t, "leadership", 30*time.Second, d.IsLeader)
	before := scrape(t, d)
	assert.Equal(t, 1.0, before["shardmover_leader"])

	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration = 4, 500, time.Hour
	opts.Pause = workload.TestPause
	bg := workload.Start(ctx, r, opts)

	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	node, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	eventually(t, "a rebalance job to finish", 3*time.Minute, func() bool {
		jobs, err := cat.Jobs(ctx, 10)
		return err == nil && len(jobs) > 0 && jobs[0].Kind == "rebalance" && jobs[0].State == "done"
	})
	res, err := bg.Stop()
	require.NoError(t, err)
	v, err := workload.Check(ctx, r, res.Ledger)
	require.NoError(t, err)
	assert.True(t, v.OK(), "ledger: %v", v.Violations)

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	per := map[int32]int{}
	for _, g := range cl.Groups {
		per[g.NodeID]++
	}
	assert.Len(t, per, 3, "every worker holds groups")
	assert.GreaterOrEqual(t, per[node.ID], 2, "the new node received its share")
	in, err := scheduler.BuildInput(cl.Status(""), scheduler.DefaultPlanOptions())
	require.NoError(t, err)
	plan, err := planner.Plan(in)
	require.NoError(t, err)
	assert.Empty(t, plan.Moves, "after the daemon's rebalance the planner has nothing left to do")
	if perStream > 1 {
		moves, err := cat.Moves(ctx, metadata.MoveFilter{})
		require.NoError(t, err)
		carried := 0
		for _, m := range moves {
			assert.Equal(t, "done", string(m.Phase), "move %d", m.ID)
			if m.CarriedBy != 0 {
				carried++
			}
		}
		assert.Positive(t, carried, "the daemon's job carried moves in streams: %+v", moves)
	}

	after := scrape(t, d)
	assert.Positive(t, after["shardmover_bytes_copied_total"])
	assert.Positive(t, after["shardmover_cutover_write_pause_seconds_count"])
	assert.Positive(t, after["shardmover_triggers_total{source=node_added}"])
	assert.Positive(t, after["shardmover_job_duration_seconds{kind=rebalance}_count"])

	// The leader drops the old shards once their grace period (0 here) is over.
	eventually(t, "old shards to be dropped", time.Minute, func() bool {
		left := 0
		for _, n := range cl.Nodes {
			conn, err := cat.ConnectNode(ctx, n.Host, n.Port)
			if err != nil {
				return false
			}
			var k int
			_ = conn.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE '%\_moved\_%' AND relkind = 'r'`).Scan(&k)
			conn.Close(ctx)
			left += k
		}
		return left == 0
	})

	resp, err := http.Get("http://" + d.Addr() + "/status")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `"leader":true`)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + d.Addr() + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode, path)
	}
	stop()
}

// TestCronDoesNothingWhenBalanced: a schedule fires and, the cluster being
// balanced, records no job.
func TestCronDoesNothingWhenBalanced(t *testing.T) {
	_, cat, _ := loaded(t, 4)
	cfg := daemonConfig(t)
	cfg.Schedules = []string{"*/1 * * * * *"}
	cfg.Timezone = "UTC"
	d, stop := startDaemon(t, cfg, cat)
	defer stop()
	eventually(t, "two cron runs", time.Minute, func() bool {
		return scrape(t, d)["shardmover_triggers_total{source=cron}"] >= 2
	})
	jobs, err := cat.Jobs(context.Background(), 10)
	require.NoError(t, err)
	assert.Empty(t, jobs, "a balanced cluster gets no job")
}

func TestDaemonBadInput(t *testing.T) {
	_, cat := sandboxtest.NewCompat(t, 1)
	busy, err := scheduler.NewDaemon(daemonConfig(t), cat)
	require.NoError(t, err)
	for _, tc := range []struct {
		mod  func(*scheduler.DaemonConfig)
		want string
	}{
		{func(c *scheduler.DaemonConfig) { c.Schedules = []string{"every day"} }, "is not a cron expression"},
		{func(c *scheduler.DaemonConfig) { c.Timezone = "Mars/Olympus" }, "is not a known time zone"},
		{func(c *scheduler.DaemonConfig) { c.Limits.Concurrency = 0 }, "Limits.Concurrency must be at least 1"},
		{func(c *scheduler.DaemonConfig) { c.Limits.PerNode = 0 }, "Limits.PerNode must be at least 1"},
		{func(c *scheduler.DaemonConfig) { c.Listen = busy.Addr() }, "cannot be used"},
	} {
		cfg := daemonConfig(t)
		tc.mod(&cfg)
		_, err := scheduler.NewDaemon(cfg, cat)
		require.ErrorIs(t, err, metadata.ErrInvalid)
		assert.Contains(t, err.Error(), tc.want)
		var oe *metadata.OptionError
		require.ErrorAs(t, err, &oe, "a refused value names its option")
		assert.NotContains(t, err.Error(), "--", "a library error speaks of options, not of CLI flags")
	}
}

// TestDrainAndShouldHaveShards: drain empties a node; a node with
// shouldhaveshards = false never receives a group in a later rebalance.
func TestDrainAndShouldHaveShards(t *testing.T) {
	sb, cat, _ := loaded(t, 8)
	ctx := context.Background()
	runner := scheduler.NewRunner(cat, func() mover.Config { c := mover.DefaultConfig(); c.Logger = zaptest.NewLogger(t); return c }(), nil)
	w1 := sb.Workers()[0].Addr()
	w2 := sb.Workers()[1].Addr()

	_, err := runner.Drain(ctx, "127.0.0.1:1", scheduler.DefaultPlanOptions(), mover.DefaultLimits())
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "not a registered node")

	out, err := runner.Drain(ctx, w1, scheduler.DefaultPlanOptions(), mover.Limits{Concurrency: 2, PerNode: 2})
	require.NoError(t, err)
	require.NotNil(t, out.Job)
	assert.Equal(t, 8/2, out.Result.Done)
	st, err := cat.Snapshot(ctx, metadata.SnapshotOptions{})
	require.NoError(t, err)
	for _, n := range st.Status("").Nodes {
		if n.Addr == w1 {
			assert.Zero(t, n.ShardGroups, "drained node is empty")
			assert.False(t, n.ShouldHaveShards)
		}
	}
	// The last node that may hold shards cannot be drained.
	_, err = runner.Drain(ctx, w2, scheduler.DefaultPlanOptions(), mover.DefaultLimits())
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "last node")

	// A rebalance never puts a group back on the drained node.
	o := scheduler.DefaultPlanOptions()
	res, err := runner.Run(ctx, scheduler.JobRequest{Kind: "rebalance", Plan: o, Limits: mover.DefaultLimits()})
	require.NoError(t, err)
	for _, m := range res.Plan.Moves {
		assert.NotEqual(t, w1, m.ToName)
	}
	_ = strings.TrimSpace
}

// TestSecondRebalanceRefused: while a rebalance job holds the cluster, a
// second is refused naming the first job.
func TestSecondRebalanceRefused(t *testing.T) {
	sb, cat, _ := loaded(t, 8)
	ctx := context.Background()
	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	_, err = cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	started := make(chan int64, 1)
	release := make(chan struct{})
	cfg := mover.DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	cfg.AfterPhase = func(id int64, p mover.Phase) error {
		if p == mover.Scheduled {
			select {
			case started <- id:
			default:
			}
			<-release
		}
		return nil
	}
	first := scheduler.NewRunner(cat, cfg, nil)
	done := make(chan error, 1)
	var jobID int64
	go func() {
		_, err := first.Run(ctx, scheduler.JobRequest{Kind: "rebalance", Plan: scheduler.DefaultPlanOptions(), Limits: mover.DefaultLimits(),
			OnJob: func(j metadata.Job) { jobID = j.ID }})
		done <- err
	}()
	<-started
	second := scheduler.NewRunner(cat, mover.DefaultConfig(), nil)
	_, err = second.Run(ctx, scheduler.JobRequest{Kind: "rebalance", Plan: scheduler.DefaultPlanOptions(), Limits: mover.DefaultLimits()})
	require.ErrorIs(t, err, scheduler.ErrBusy)
	assert.Contains(t, err.Error(), fmt.Sprintf("job %d", jobID))
	close(release)
	require.NoError(t, <-done)
}

// TestDaemonHearsNodeAddWithoutPolling: with a poll interval far longer
// than the test, the daemon still starts a rebalance right after the
// settle period, woken by the coordinator's notification.
func TestDaemonHearsNodeAddWithoutPolling(t *testing.T) {
	sb, cat, _ := loaded(t, 8)
	ctx := context.Background()
	cfg := daemonConfig(t)
	cfg.Poll = 10 * time.Minute
	cfg.Settle = time.Second
	d, stop := startDaemon(t, cfg, cat)
	defer stop()
	eventually(t, "leadership", 30*time.Second, d.IsLeader)
	time.Sleep(time.Second) // the watcher has read the catalog once

	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	_, err = cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	eventually(t, "a rebalance triggered by the node add", 30*time.Second, func() bool {
		return scrape(t, d)["shardmover_triggers_total{source=node_added}"] >= 1
	})
}

// leaderLockPID is the backend holding the daemon leader lock, from pg_locks.
func leaderLockPID(t *testing.T, cat *metadata.Catalog) (int32, bool) {
	t.Helper()
	var pid int32
	err := cat.Pool().QueryRow(context.Background(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid = $1 AND objid = 1 AND objsubid = 2`, uint32(metadata.LockLeader)).Scan(&pid)
	return pid, err == nil
}

func readyz(t *testing.T, d *scheduler.Daemon) (int, scheduler.Readiness) {
	t.Helper()
	var r scheduler.Readiness
	resp, err := http.Get("http://" + d.Addr() + "/readyz")
	if err != nil {
		return 0, r
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

// oneLeader waits until exactly one daemon leads, every other stands by,
// the leader's epoch is newer than after, the coordinator shows the
// leader's lock session holding the lock, and /metrics and /readyz of every
// daemon agree. It returns the leader.
func oneLeader(t *testing.T, cat *metadata.Catalog, after int64, ds ...*scheduler.Daemon) *scheduler.Daemon {
	t.Helper()
	var leader *scheduler.Daemon
	why := ""
	eventually(t, "exactly one leader holding the lock", time.Minute, func() bool {
		leader = nil
		for _, d := range ds {
			switch d.State() {
			case scheduler.Leading:
				if leader != nil {
					why = "two daemons lead"
					return false
				}
				leader = d
			case scheduler.Lost:
				why = "a daemon is still stepping down"
				return false
			}
		}
		if leader == nil || leader.Epoch() <= after {
			why = "no new leader yet"
			return false
		}
		rec, ok, err := cat.CurrentLeader(context.Background())
		pid, held := leaderLockPID(t, cat)
		if err != nil || !ok || !rec.Held || !held || pid != rec.PID || rec.Epoch != leader.Epoch() {
			why = fmt.Sprintf("journal %+v (err %v), lock held by %d (%v)", rec, err, pid, held)
			return false
		}
		sum := 0.0
		for _, d := range ds {
			m := scrape(t, d)
			sum += m["shardmover_leader"]
			code, r := readyz(t, d)
			want := "standby"
			if d == leader {
				want = "leader"
			}
			if code != 200 || r.State != want || m["shardmover_leader_epoch"] != float64(rec.Epoch) {
				why = fmt.Sprintf("/readyz %d %+v, epoch gauge %v, want %s epoch %d", code, r, m["shardmover_leader_epoch"], want, rec.Epoch)
				return false
			}
		}
		why = fmt.Sprintf("shardmover_leader summed to %v", sum)
		return sum == 1
	})
	t.Logf("leader: %s epoch %d (%s)", leader.Addr(), leader.Epoch(), why)
	return leader
}

// phasesMatch waits until /metrics of every daemon shows the journal's
// moves by phase.
func phasesMatch(t *testing.T, cat *metadata.Catalog, ds ...*scheduler.Daemon) {
	t.Helper()
	why := ""
	eventually(t, "/metrics to show the journal's moves by phase", 30*time.Second, func() bool {
		want, err := cat.MovesByPhase(context.Background())
		if err != nil {
			return false
		}
		for _, d := range ds {
			m := scrape(t, d)
			for _, p := range []string{"scheduled", "preflight", "copying", "catching_up", "cutover", "cleanup", "done", "failed", "cancelled"} {
				if m["shardmover_moves{phase="+p+"}"] != float64(want[p]) {
					why = fmt.Sprintf("%s shows %v %s moves, the journal %d", d.Addr(), m["shardmover_moves{phase="+p+"}"], p, want[p])
					return false
				}
			}
		}
		return true
	})
	_ = why
}

func restartCoordinator(t *testing.T, sb *sandbox.Cluster) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, sb.StopNode(ctx, sb.Coordinator(), "fast"))
	_, err := sandbox.Up(ctx, sandbox.Config{Dir: sb.Dir, Workers: len(sb.Workers())})
	require.NoError(t, err)
}

// TestLeadershipLostAndRegained: three daemons. Killing the leader's lock
// session (pg_terminate_backend of the pid pg_locks shows) makes it step
// down and report leader 0; within a bounded time exactly one daemon leads
// again, under a new epoch, holding the lock. Then the coordinator
// restarts: every /readyz says so (503) while it is down, and afterwards
// exactly one daemon leads again. No daemon ever gets stuck claiming to lead.
func TestLeadershipLostAndRegained(t *testing.T) {
	sb, cat := sandboxtest.NewCompat(t, 1)
	ctx := context.Background()
	var ds []*scheduler.Daemon
	for i := 0; i < 3; i++ {
		d, stop := startDaemon(t, daemonConfig(t), cat)
		defer stop()
		ds = append(ds, d)
	}
	leader := oneLeader(t, cat, 0, ds...)
	for round := 0; round < 2; round++ {
		epoch := leader.Epoch()
		changes := scrape(t, leader)["shardmover_leader_changes_total"]
		pid, ok := leaderLockPID(t, cat)
		require.True(t, ok)
		_, err := cat.Pool().Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		require.NoError(t, err)
		start := time.Now()
		old := leader
		leader = oneLeader(t, cat, epoch, ds...)
		t.Logf("round %d: lock session %d killed; epoch %d -> %d in %s", round, pid, epoch, leader.Epoch(), time.Since(start).Round(time.Millisecond))
		if old != leader {
			assert.Equal(t, changes+1, scrape(t, old)["shardmover_leader_changes_total"], "the old leader stepped down once")
		} else {
			assert.Equal(t, changes+2, scrape(t, old)["shardmover_leader_changes_total"], "the leader stepped down, then won again")
		}
	}

	epoch := leader.Epoch()
	require.NoError(t, sb.StopNode(ctx, sb.Coordinator(), "fast"))
	eventually(t, "/readyz to report the coordinator unreachable", 30*time.Second, func() bool {
		for _, d := range ds {
			if code, r := readyz(t, d); code != http.StatusServiceUnavailable || r.Reason == "" {
				return false
			}
		}
		return true
	})
	eventually(t, "every daemon to stop leading while the coordinator is down", 30*time.Second, func() bool {
		for _, d := range ds {
			if d.State() != scheduler.Standby || scrape(t, d)["shardmover_leader"] != 0 {
				return false
			}
		}
		return true
	})
	_, err := sandbox.Up(ctx, sandbox.Config{Dir: sb.Dir, Workers: 1})
	require.NoError(t, err)
	start := time.Now()
	leader = oneLeader(t, cat, epoch, ds...)
	t.Logf("coordinator restarted: epoch %d -> %d in %s", epoch, leader.Epoch(), time.Since(start).Round(time.Millisecond))
}

// TestJobResumedAfterCoordinatorRestart: two daemons; a node is added and
// its rebalance job starts. While its first move runs, the leader's lock
// session is killed: the leader steps down, exactly one daemon leads under
// a new epoch and resumes the job. While the resumed job has more to do,
// the coordinator restarts: every lock is gone, exactly one daemon leads
// again under a newer epoch, adopts the interrupted job and finishes it;
// the new node gets its groups. Then no daemon runs at all while another node is added: the
// next leader compares the nodes with those the last leader accounted for
// and rebalances onto it. /metrics of every daemon shows the moves by
// phase as the journal has them.
func TestJobResumedAfterCoordinatorRestart(t *testing.T) {
	sb, cat, _ := loaded(t, 8)
	ctx := context.Background()
	cfg := daemonConfig(t)
	cfg.Settle = time.Second
	cfg.Limits = mover.Limits{Concurrency: 1, PerNode: 1, BytesPerSecond: 128 << 10}
	start := func() (*scheduler.Daemon, func()) {
		d, stop := startDaemon(t, cfg, cat)
		var once sync.Once
		stopOnce := func() { once.Do(stop) }
		t.Cleanup(stopOnce)
		return d, stopOnce
	}
	a, stopA := start()
	b, stopB := start()
	leader := oneLeader(t, cat, 0, a, b)

	groupsOn := func(id int32) int {
		cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
		require.NoError(t, err)
		n := 0
		for _, g := range cl.Groups {
			if g.NodeID == id {
				n++
			}
		}
		return n
	}
	addNode := func() metadata.Node {
		n, err := sb.AddNode(ctx)
		require.NoError(t, err)
		node, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
		require.NoError(t, err)
		return node
	}
	jobDone := func(what string, after int64) metadata.Job {
		var job metadata.Job
		eventually(t, what, 3*time.Minute, func() bool {
			jobs, err := cat.Jobs(ctx, 10)
			if err != nil || len(jobs) == 0 || jobs[0].ID <= after {
				return false
			}
			active, err := cat.Moves(ctx, metadata.MoveFilter{ActiveOnly: true})
			job = jobs[0]
			return err == nil && len(active) == 0 && job.State == "done"
		})
		return job
	}

	n3 := addNode()
	progress := func() (done, active int) {
		moves, err := cat.Moves(ctx, metadata.MoveFilter{})
		if err != nil {
			return 0, 0
		}
		for _, m := range moves {
			if m.Phase == "done" {
				done++
			} else if !m.Terminal() && m.Phase != "scheduled" {
				active++
			}
		}
		return done, active
	}
	// The leader's lock session is killed while its first move runs.
	eventually(t, "the first move to run", 2*time.Minute, func() bool {
		done, active := progress()
		return done == 0 && active >= 1
	})
	epoch := leader.Epoch()
	pid, ok := leaderLockPID(t, cat)
	require.True(t, ok)
	_, err := cat.Pool().Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
	require.NoError(t, err)
	began := time.Now()
	leader = oneLeader(t, cat, epoch, a, b)
	t.Logf("lock session killed mid-job: epoch %d -> %d in %s", epoch, leader.Epoch(), time.Since(began).Round(time.Millisecond))

	// The coordinator restarts while the job, resumed, has more to do.
	eventually(t, "the resumed rebalance to be under way", 2*time.Minute, func() bool {
		done, active := progress()
		return done >= 1 && active >= 1
	})
	epoch = leader.Epoch()
	restartCoordinator(t, sb)
	began = time.Now()
	leader = oneLeader(t, cat, epoch, a, b)
	t.Logf("coordinator restarted mid-job: epoch %d -> %d in %s", epoch, leader.Epoch(), time.Since(began).Round(time.Millisecond))
	job := jobDone("the interrupted job to finish", 0)
	t.Logf("job %d finished %s after the restart", job.ID, time.Since(began).Round(time.Millisecond))
	var jobEpoch int64
	require.NoError(t, cat.Pool().QueryRow(ctx, "SELECT leader_epoch FROM shardmover.jobs WHERE id = $1", job.ID).Scan(&jobEpoch))
	assert.Greater(t, jobEpoch, epoch, "the new leader adopted the job")
	assert.GreaterOrEqual(t, groupsOn(n3.ID), 2, "the node added before the restart received its share")
	phasesMatch(t, cat, a, b)

	// No daemon runs while a node is added.
	stopA()
	stopB()
	n4 := addNode()
	time.Sleep(time.Second)
	c, _ := start()
	leader = oneLeader(t, cat, leader.Epoch(), c)
	jobDone("a rebalance onto the node added while no daemon ran", job.ID)
	assert.GreaterOrEqual(t, groupsOn(n4.ID), 1, "the node added while no daemon ran received groups")
	assert.Positive(t, scrape(t, c)["shardmover_triggers_total{source=node_added}"])
	phasesMatch(t, cat, c)
}

// TestLeaderCutOffFromCoordinator: the leader reaches the coordinator
// through a proxy that stops forwarding (no connection breaks). Its lock
// checks time out: it reports lost (/readyz 503), stops its loops and
// reports leader 0; the coordinator ends its silent lock session after the
// lease's time to live, and the other daemon leads, holding the lock. When
// the proxy forwards again the cut-off daemon stands by.
func TestLeaderCutOffFromCoordinator(t *testing.T) {
	sb, direct := sandboxtest.NewCompat(t, 1)
	ctx := context.Background()
	proxy, err := faultproxy.New(sb.Coordinator().Addr())
	require.NoError(t, err)
	defer proxy.Close()
	viaProxy, err := metadata.Open(ctx, metadata.Config{Coordinator: fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", proxy.Port())})
	require.NoError(t, err)
	defer viaProxy.Close()

	a, stopA := startDaemon(t, daemonConfig(t), viaProxy)
	defer stopA()
	eventually(t, "the daemon behind the proxy to lead", 30*time.Second, a.IsLeader)
	b, stopB := startDaemon(t, daemonConfig(t), direct)
	defer stopB()
	oneLeader(t, direct, 0, a, b)
	epoch := a.Epoch()

	proxy.Pause()
	cut := time.Now()
	sawLost := false
	eventually(t, "the cut-off leader to step down", time.Minute, func() bool {
		if a.State() == scheduler.Lost {
			sawLost = true
			code, r := readyz(t, a)
			assert.Equal(t, http.StatusServiceUnavailable, code, "%+v", r)
		}
		return a.State() == scheduler.Standby && scrape(t, a)["shardmover_leader"] == 0
	})
	t.Logf("cut-off leader stepped down after %s (saw lost: %v)", time.Since(cut).Round(time.Millisecond), sawLost)
	eventually(t, "the other daemon to lead, holding the lock", time.Minute, func() bool {
		rec, ok, err := direct.CurrentLeader(ctx)
		pid, held := leaderLockPID(t, direct)
		return b.IsLeader() && err == nil && ok && held && rec.Held && rec.PID == pid && rec.Epoch > epoch && !a.IsLeader()
	})
	t.Logf("the other daemon led %s after the cut", time.Since(cut).Round(time.Millisecond))
	code, _ := readyz(t, a)
	assert.Equal(t, http.StatusServiceUnavailable, code, "the cut-off daemon cannot reach the coordinator")

	proxy.Resume()
	leader := oneLeader(t, direct, epoch, a, b)
	assert.Equal(t, b, leader)
}
