package scheduler_test

// BenchmarkCitusRebalance: shardmover's rebalance against Citus's own
// (citus_rebalance_start with shard_transfer_mode 'force_logical', then
// citus_rebalance_wait), side by side in one run, on the same layout:
// github_users + github_events, 32 colocated shards, loaded through Citus
// with seed 1 onto two workers, a third worker added with citus_add_node,
// then a by_shard_count rebalance (both sides) while 8 ledger clients write
// through Citus (half through the coordinator, half through the workers).
// Each sub-benchmark builds its own fresh cluster with identical data.
//
// Run it (one iteration each; the size is the events' data in MB, 150 by
// default):
//
//	SHARDMOVER_BENCH_CITUS_MB=150 go test ./scheduler/ -run '^$' -bench BenchmarkCitusRebalance -benchtime=1x -timeout 60m
//
// Metrics: wall_s (seconds from the start of the rebalance until it
// returned balanced; ns/op is the same span), moved_MB and moved_groups
// (shards that changed node, sized by citus_shards before the rebalance),
// data_MB (all github shards), max_write_ms and p99_write_ms (acknowledged
// writes started during the rebalance), writes/s_during and writes/s_before
// (the 5 s before it), errors (writes the workload saw fail), and
// citus_plan_moves (Citus's by_shard_count plan afterwards; 0 = Citus
// agrees the cluster is balanced). The workload's ledger is checked after
// each run (not timed).

import (
	"context"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// benchCitusMBEnv sizes BenchmarkCitusRebalance's data (MB of events).
const benchCitusMBEnv = "SHARDMOVER_BENCH_CITUS_MB"

// benchStrategy is the rebalance strategy of both sides.
const benchStrategy = "by_shard_count"

// benchEventBytes is about what one generated github_events row takes on
// disk (heap, TOAST, primary key and event_type index), to turn MB into
// a row count (15 MB of events measured 20.9 MB at 1400).
const benchEventBytes = 1900

func BenchmarkCitusRebalance(b *testing.B) {
	mb := 150
	if v := os.Getenv(benchCitusMBEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s must be a positive number of MB, got %q", benchCitusMBEnv, v)
		}
		mb = n
	}
	const users = 2000
	load := workload.LoadOptions{Seed: 1, Users: users, Events: int64(mb) << 20 / benchEventBytes, ChunkRows: 5000}

	sides := []struct {
		name      string
		rebalance func(b *testing.B, env *benchCluster)
	}{
		{"shardmover", func(b *testing.B, env *benchCluster) {
			plan := scheduler.DefaultPlanOptions()
			plan.Strategy = benchStrategy
			out, err := env.runner.Run(context.Background(), scheduler.JobRequest{Kind: "rebalance", Plan: plan, Limits: mover.DefaultLimits()})
			require.NoError(b, err)
			require.NotNil(b, out.Job, "shardmover found nothing to move")
			require.Equal(b, len(out.Plan.Moves), out.Result.Done, "every planned move done")
		}},
		{"citus", func(b *testing.B, env *benchCluster) {
			ctx := context.Background()
			var job int64
			require.NoError(b, env.cat.Pool().QueryRow(ctx, `SELECT citus_rebalance_start(rebalance_strategy := $1, shard_transfer_mode := 'force_logical')`,
				benchStrategy).Scan(&job))
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
				warm := time.Now()
				time.Sleep(5 * time.Second)

				start := time.Now()
				b.StartTimer()
				side.rebalance(b, env)
				b.StopTimer()
				end := time.Now()
				res, err := bg.Stop()
				require.NoError(b, err)

				after := readCitusLayout(b, env.cat)
				moved, movedBytes := movedBytes(before, after)
				var planMoves int
				require.NoError(b, env.cat.Pool().QueryRow(context.Background(),
					`SELECT count(*) FROM get_rebalance_table_shards_plan(rebalance_strategy := $1)`, benchStrategy).Scan(&planMoves))

				var during []time.Duration
				var beforeN int
				for _, l := range res.Latencies {
					switch {
					case !l.At.Before(start) && l.At.Before(end):
						during = append(during, l.Dur)
					case l.At.After(warm) && l.At.Before(start):
						beforeN++
					}
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
				b.ReportMetric(float64(len(during))/wall.Seconds(), "writes/s_during")
				b.ReportMetric(float64(beforeN)/start.Sub(warm).Seconds(), "writes/s_before")
				b.ReportMetric(float64(errs), "errors")
				b.ReportMetric(float64(planMoves), "citus_plan_moves")
				top := during[:min(5, len(during))]
				b.Logf("%s: %d of %d shards moved (%.1f of %.1f MB) in %s; slowest writes during it %v; workload errors %v; layout after: %s",
					side.name, moved, len(before.node), float64(movedBytes)/(1<<20), float64(dataBytes)/(1<<20), wall.Round(time.Millisecond), top, res.Errors, describeLayout(after))

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
	return &benchCluster{cat: cat, r: r, runner: citusRunner(b, cat, zap.NewNop())}
}
