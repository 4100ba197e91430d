package scheduler_test

// BenchmarkCitusRebalance: shardmover's rebalance, with its default limits
// (one move at a time), with Limits.Overlap (--overlap) and with
// Limits.GroupsPerStream 8 (--groups-per-stream 8), against Citus's
// own (citus_rebalance_start with shard_transfer_mode 'force_logical', then
// citus_rebalance_wait), side by side in one run, on the same layout:
// github_users + github_events, 32 colocated shards, loaded through Citus
// with seed 1 onto two workers, a third worker added with citus_add_node,
// then a by_shard_count rebalance (both sides) while 8 ledger clients write
// through Citus (half through the coordinator, half through the workers).
// Each sub-benchmark builds its own fresh cluster with identical data.
//
// Run it (one iteration each; SHARDMOVER_BENCH_CITUS_MB is about the
// data's size in MB, 150 by default, and data_MB reports what was loaded;
// SHARDMOVER_BENCH_CITUS_STRATEGY is by_shard_count, the default, or
// by_disk_size; SHARDMOVER_BENCH_LOG and SHARDMOVER_BENCH_CPUPROFILE, see
// benchLogEnv):
//
//	SHARDMOVER_BENCH_CITUS_MB=150 go test ./scheduler/ -run '^$' -bench BenchmarkCitusRebalance -benchtime=1x -timeout 60m
//
// Metrics: wall_s (seconds from the start of the rebalance until it
// returned balanced; ns/op is the same span), moved_MB and moved_groups
// (shards that changed node, sized by citus_shards before the rebalance),
// data_MB (all github shards), max_write_ms and p99_write_ms (acknowledged
// writes started during the rebalance), writes/s_during and writes/s_before
// (the 5 s before it, after 5 s of warm-up), before_drift (the second half
// of those 5 s over the first: near 1 when the rate before was steady),
// throughput_fraction (writes/s_during over
// writes/s_before; the target is at least 0.8), moved_MB/s (moved_MB over
// wall_s), errors (writes the workload saw fail),
// max_cutover_ms (shardmover only: its longest cutover write pause, as it
// measures it), server_cpu_ms/write_before and _during (the CPU time of
// every PostgreSQL process of the cluster, internal/cpumeter, per
// acknowledged write in each window), rebalance_server_cpu_s (the servers'
// CPU during the rebalance beyond what its writes cost at the rate
// before: what the rebalance cost them), server_cores_during (their CPU
// over wall_s; the machine has 2 cores), bench_process_cpu_s (this
// process during the rebalance: the mover and the workload's clients),
// and citus_plan_moves (Citus's plan by the same strategy afterwards; 0 =
// Citus agrees the cluster is balanced). The workload's
// ledger is checked after each run (not timed). The two planners may pick
// different groups (the data is skewed: a few users write most events), so
// compare moved_MB too, not only wall_s.

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/cpumeter"
	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// benchCitusMBEnv sizes BenchmarkCitusRebalance's data (MB of events).
const benchCitusMBEnv = "SHARDMOVER_BENCH_CITUS_MB"

// benchStrategyEnv names the rebalance strategy of both sides.
const benchStrategyEnv = "SHARDMOVER_BENCH_CITUS_STRATEGY"

// benchEventBytes is about what one generated github_events row takes on
// disk (heap, TOAST, primary key and event_type index), to turn MB into
// a row count (15 MB of events measured 20.9 MB at 1400).
const benchEventBytes = 1900

// Instruments of BenchmarkCitusRebalance, off unless set:
// SHARDMOVER_BENCH_LOG names a file that receives the mover's debug log
// (with each phase's "... timings" line); SHARDMOVER_BENCH_CPUPROFILE
// names a file prefix: each side's rebalance, and nothing else of the
// benchmark, is CPU-profiled into <prefix>.<side> (this process: the
// mover, and the workload's clients), for `go tool pprof`.
const (
	benchLogEnv     = "SHARDMOVER_BENCH_LOG"
	benchProfileEnv = "SHARDMOVER_BENCH_CPUPROFILE"
)

// benchLogger is the mover's logger: none, or debug into the file named
// by SHARDMOVER_BENCH_LOG.
func benchLogger(b *testing.B) *zap.Logger {
	path := os.Getenv(benchLogEnv)
	if path == "" {
		return zap.NewNop()
	}
	zc := zap.NewDevelopmentConfig()
	zc.OutputPaths = []string{path}
	zc.ErrorOutputPaths = []string{path}
	log, err := zc.Build()
	require.NoError(b, err, "%s", benchLogEnv)
	b.Cleanup(func() { _ = log.Sync() })
	return log
}

// profileRebalance starts a CPU profile of one side's rebalance when
// SHARDMOVER_BENCH_CPUPROFILE is set, and returns what stops it.
func profileRebalance(b *testing.B, side string) (stop func()) {
	prefix := os.Getenv(benchProfileEnv)
	if prefix == "" {
		return func() {}
	}
	f, err := os.Create(prefix + "." + side)
	require.NoError(b, err, "%s", benchProfileEnv)
	require.NoError(b, pprof.StartCPUProfile(f), "start the CPU profile (is -cpuprofile set too?)")
	return func() {
		pprof.StopCPUProfile()
		require.NoError(b, f.Close())
	}
}

// benchWarmUp is how long the workload runs before the rate it is
// compared with is measured (over benchBefore).
const (
	benchWarmUp = 5 * time.Second
	benchBefore = 5 * time.Second
)

func BenchmarkCitusRebalance(b *testing.B) {
	mb := 150
	if v := os.Getenv(benchCitusMBEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s must be a positive number of MB, got %q", benchCitusMBEnv, v)
		}
		mb = n
	}
	strategy := "by_shard_count"
	if v := os.Getenv(benchStrategyEnv); v != "" {
		if v != "by_shard_count" && v != "by_disk_size" {
			b.Fatalf("%s must be by_shard_count or by_disk_size, got %q", benchStrategyEnv, v)
		}
		strategy = v
	}
	const users = 2000
	load := workload.LoadOptions{Seed: 1, Users: users, Events: int64(mb) << 20 / benchEventBytes, ChunkRows: 5000}

	ours := func(lim mover.Limits) func(b *testing.B, env *benchCluster) {
		return func(b *testing.B, env *benchCluster) {
			plan := scheduler.DefaultPlanOptions()
			plan.Strategy = strategy
			out, err := env.runner.Run(context.Background(), scheduler.JobRequest{Kind: "rebalance", Plan: plan, Limits: lim})
			require.NoError(b, err)
			require.NotNil(b, out.Job, "shardmover found nothing to move")
			require.Equal(b, len(out.Plan.Moves), out.Result.Done, "every planned move done")
			b.ReportMetric(float64(env.clock.maxPause())/float64(time.Millisecond), "max_cutover_ms")
			b.Logf("shardmover: time in each phase, summed over the %d moves: %s", len(out.Plan.Moves), env.clock)
		}
	}
	overlap := mover.DefaultLimits()
	overlap.Overlap = true
	streams := mover.DefaultLimits()
	streams.GroupsPerStream = 8
	sides := []struct {
		name      string
		rebalance func(b *testing.B, env *benchCluster)
	}{
		{"shardmover", ours(mover.DefaultLimits())},
		{"shardmover-overlap", ours(overlap)},
		{"shardmover-streams", ours(streams)},
		{"citus", func(b *testing.B, env *benchCluster) {
			ctx := context.Background()
			var job int64
			require.NoError(b, env.cat.Pool().QueryRow(ctx, `SELECT citus_rebalance_start(rebalance_strategy := $1, shard_transfer_mode := 'force_logical')`,
				strategy).Scan(&job))
			_, err := env.cat.Pool().Exec(ctx, `SELECT citus_rebalance_wait()`)
			require.NoError(b, err)
			var state string
			require.NoError(b, env.cat.Pool().QueryRow(ctx, `SELECT state::text FROM pg_dist_background_job WHERE job_id = $1`, job).Scan(&state))
			require.Equal(b, "finished", state, "Citus's rebalance job %d", job)
		}},
	}
	for _, side := range sides {
		b.Run(side.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				env := newBenchCluster(b, load)
				before := readCitusLayout(b, env.cat)
				var dataBytes int64
				for _, n := range before.bytes {
					dataBytes += n
				}
				bg := citusWorkload(env.r, 8, users, 0)
				// A fresh cluster's write rate climbs for a few seconds (Citus's
				// connections and caches, plans, the buffer cache): measured
				// from the workload's start, the rate before was half of what
				// it became (and differed twofold between the two sides'
				// clusters). So 5 s of warm-up, then 5 s measured.
				time.Sleep(benchWarmUp)
				warm := time.Now()
				cpuWarm := env.cpu.Sample()
				time.Sleep(benchBefore)
				serversBefore, _ := env.cpu.Since(cpuWarm)
				cpuStart := env.cpu.Sample()

				stopProfile := profileRebalance(b, side.name)
				start := time.Now()
				b.StartTimer()
				side.rebalance(b, env)
				b.StopTimer()
				end := time.Now()
				serversDuring, selfDuring := env.cpu.Since(cpuStart)
				stopProfile()
				res, err := bg.Stop()
				require.NoError(b, err)

				after := readCitusLayout(b, env.cat)
				moved, movedBytes := movedBytes(before, after)
				var planMoves int
				require.NoError(b, env.cat.Pool().QueryRow(context.Background(),
					`SELECT count(*) FROM get_rebalance_table_shards_plan(rebalance_strategy := $1)`, strategy).Scan(&planMoves))

				var during []time.Duration
				var beforeN, beforeLate int
				half := warm.Add(start.Sub(warm) / 2)
				for _, l := range res.Latencies {
					switch {
					case !l.At.Before(start) && l.At.Before(end):
						during = append(during, l.Dur)
					case l.At.After(warm) && l.At.Before(start):
						beforeN++
						if !l.At.Before(half) {
							beforeLate++
						}
					}
				}
				if early := beforeN - beforeLate; early > 0 {
					// Above 1: the rate was still climbing when the
					// rebalance began, and the fraction reads low.
					b.ReportMetric(float64(beforeLate)/float64(early), "before_drift")
				}
				sort.Slice(during, func(i, j int) bool { return during[i] > during[j] })
				var maxLat time.Duration
				if len(during) > 0 {
					maxLat = during[0]
				}
				var errs int64
				for _, n := range res.Errors {
					errs += n
				}
				wall := end.Sub(start)
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				b.ReportMetric(wall.Seconds(), "wall_s")
				b.ReportMetric(float64(movedBytes)/(1<<20), "moved_MB")
				b.ReportMetric(float64(moved)/2, "moved_groups")
				b.ReportMetric(float64(dataBytes)/(1<<20), "data_MB")
				b.ReportMetric(ms(maxLat), "max_write_ms")
				b.ReportMetric(ms(workload.Percentile(res.Latencies, 99, start, end)), "p99_write_ms")
				b.ReportMetric(float64(movedBytes)/(1<<20)/wall.Seconds(), "moved_MB/s")
				duringRate, beforeRate := float64(len(during))/wall.Seconds(), float64(beforeN)/start.Sub(warm).Seconds()
				b.ReportMetric(duringRate, "writes/s_during")
				b.ReportMetric(beforeRate, "writes/s_before")
				if beforeRate > 0 {
					b.ReportMetric(duringRate/beforeRate, "throughput_fraction")
				}
				if beforeN > 0 && len(during) > 0 {
					// The servers' CPU per write before, and what the
					// rebalance cost them beyond its writes at that rate.
					perWrite := serversBefore.Seconds() / float64(beforeN)
					b.ReportMetric(1000*perWrite, "server_cpu_ms/write_before")
					b.ReportMetric(1000*serversDuring.Seconds()/float64(len(during)), "server_cpu_ms/write_during")
					b.ReportMetric(serversDuring.Seconds()-perWrite*float64(len(during)), "rebalance_server_cpu_s")
					b.ReportMetric(serversDuring.Seconds()/wall.Seconds(), "server_cores_during")
					b.ReportMetric(selfDuring.Seconds(), "bench_process_cpu_s")
				}
				b.ReportMetric(float64(errs), "errors")
				b.ReportMetric(float64(planMoves), "citus_plan_moves")
				top := during[:min(5, len(during))]
				b.Logf("%s (%s): %d of %d shards moved (%.1f of %.1f MB) in %s; slowest writes during it %v; workload errors %v; layout after: %s",
					side.name, strategy, moved, len(before.node), float64(movedBytes)/(1<<20), float64(dataBytes)/(1<<20), wall.Round(time.Millisecond), top, res.Errors, describeLayout(after))

				v, err := workload.Check(context.Background(), env.r, res.Ledger)
				require.NoError(b, err)
				if !v.OK() {
					b.Errorf("%s: ledger violations: %v", side.name, v.Violations)
				}
			}
		})
	}
}

// benchCluster is a loaded Citus cluster with a third, empty worker.
type benchCluster struct {
	cat    *metadata.Catalog
	r      *workload.Router
	runner *scheduler.Runner
	clock  *phaseClock
	// cpu measures the cluster's PostgreSQL servers and this process.
	cpu cpumeter.Meter
}

func newBenchCluster(b *testing.B, load workload.LoadOptions) *benchCluster {
	b.Helper()
	ctx := context.Background()
	sb, cat, r := citusLoaded(b, 32, load)
	_, err := sb.AddNode(ctx)
	require.NoError(b, err)
	require.NoError(b, r.Refresh(ctx))
	// The journal shardmover installs on its first run, installed now so
	// that it is not timed.
	require.NoError(b, cat.InstallJournal(ctx))
	_, err = cat.Pool().Exec(ctx, "VACUUM ANALYZE github_users, github_events")
	require.NoError(b, err)
	env := &benchCluster{cat: cat, r: r, clock: &phaseClock{last: map[int64]time.Time{}, total: map[string]time.Duration{}}}
	env.cpu = clusterMeter(b, ctx, sb, cat)
	env.runner = benchRunner(b, cat, env.clock)
	return env
}

// clusterMeter measures the CPU of every PostgreSQL server of the sandbox
// (each node's postmaster and its children) and of this process.
func clusterMeter(b *testing.B, ctx context.Context, sb *sandbox.Cluster, cat *metadata.Catalog) cpumeter.Meter {
	b.Helper()
	var postmasters []int
	for _, n := range sb.Nodes {
		conn, err := cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(b, err)
		var pid int
		require.NoError(b, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		_ = conn.Close(ctx)
		pm, ok := cpumeter.PostmasterOf(pid)
		require.True(b, ok, "read /proc/%d/stat", pid)
		postmasters = append(postmasters, pm)
	}
	return cpumeter.New(postmasters...)
}

// benchRunner is shardmover's runner at its defaults, its phases and
// cutover pauses timed by clock, its log as benchLogger says.
func benchRunner(b *testing.B, cat *metadata.Catalog, clock *phaseClock) *scheduler.Runner {
	cfg := mover.DefaultConfig()
	cfg.Logger = benchLogger(b)
	cfg.AfterPhase = clock.after
	cfg.OnCutover = clock.cutover
	return scheduler.NewRunner(cat, cfg, nil)
}

// phaseClock adds up, over a job's moves, the time each spent in each phase
// (from its previous phase change; the first phase, scheduled, is waiting
// and not counted), and records each cutover's write pause.
type phaseClock struct {
	mu     sync.Mutex
	last   map[int64]time.Time
	total  map[string]time.Duration
	order  []string
	pauses []time.Duration
}

func (c *phaseClock) after(id int64, p mover.Phase) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if t, ok := c.last[id]; ok {
		name := p.String()
		if _, seen := c.total[name]; !seen {
			c.order = append(c.order, name)
		}
		c.total[name] += now.Sub(t)
	}
	c.last[id] = now
	return nil
}

func (c *phaseClock) cutover(_ int64, pause time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pauses = append(c.pauses, pause)
}

func (c *phaseClock) maxPause() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var m time.Duration
	for _, p := range c.pauses {
		m = max(m, p)
	}
	return m
}

func (c *phaseClock) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, name := range c.order {
		fmt.Fprintf(&b, "%s %s, ", name, c.total[name].Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "cutover pauses %v", c.pauses)
	return b.String()
}
