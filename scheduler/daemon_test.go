package scheduler_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

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
func TestDaemonRebalancesAfterNodeAdd(t *testing.T) {
	sb, cat, r := loaded(t, 8)
	ctx := context.Background()
	cfg := daemonConfig(t)
	cfg.KeepOldFor, cfg.SweepEvery = 0, 300*time.Millisecond
	d, stop := startDaemon(t, cfg, cat)
	eventually(t, "leadership", 30*time.Second, d.IsLeader)
	before := scrape(t, d)
	assert.Equal(t, 1.0, before["shardmover_leader"])

	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration = 4, 500, time.Hour
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
		{func(c *scheduler.DaemonConfig) { c.Limits.Concurrency = 0 }, "--concurrency must be at least 1"},
		{func(c *scheduler.DaemonConfig) { c.Limits.PerNode = 0 }, "--per-node must be at least 1"},
		{func(c *scheduler.DaemonConfig) { c.Listen = busy.Addr() }, "cannot be used"},
	} {
		cfg := daemonConfig(t)
		tc.mod(&cfg)
		_, err := scheduler.NewDaemon(cfg, cat)
		require.ErrorIs(t, err, metadata.ErrInvalid)
		assert.Contains(t, err.Error(), tc.want)
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
