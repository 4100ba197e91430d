package scheduler_test

// BenchmarkCitusPgbench: shardmover's rebalance at its defaults (as
// `shardmover rebalance` runs it: the default plan options, which on
// Citus take the cluster's default rebalance strategy, by_disk_size in
// Citus 13; mover.DefaultLimits, one move at a time; one recheck; Go on
// half the CPUs, internal/procs) against Citus's own
// (citus_rebalance_start(shard_transfer_mode := 'force_logical'), the
// same default strategy, then citus_rebalance_wait), on a layout where
// both move the same bytes: pgbench's (internal/pgbench.InitCitus),
// pgbench_accounts and pgbench_history colocated in 16 shard groups of
// equal size on two workers, a third worker added with citus_add_node.
// The load is pgbench itself, unthrottled, never retrying, in prepared
// mode (-M prepared: cached prepared statements, what drivers such as pgx
// and JDBC send), 2 clients through each of the four nodes (the
// coordinator and every worker, the added one too), running
// internal/pgbench.Script (each transaction an UPDATE of one account and
// the INSERT of its history row, in one shard group). Each sub-benchmark
// builds its own fresh cluster with identical data.
//
// Each iteration: the layout at scale SHARDMOVER_BENCH_PGBENCH_SCALE (10
// by default: 1,000,000 accounts, 150 MB in all, about 9.4 MB per shard
// group with its indexes), VACUUM ANALYZE, the third worker, pgbench
// started; 5 s of warm-up, 5 s measured before, the rebalance (timed), 2 s
// more, then pgbench stopped (SIGALRM, internal/pgbench) and its logs
// read. About 105 s for both
// sides at scale 10 on two cores. Run it (one iteration each;
// SHARDMOVER_BENCH_LOG as for BenchmarkCitusRebalance, and
// SHARDMOVER_BENCH_CPUPROFILE too, into <prefix>.pgbench-<side>):
//
//	SHARDMOVER_REQUIRE_CITUS=1 go test -run '^$' -bench '^BenchmarkCitusPgbench$' -benchtime=1x -timeout 60m ./scheduler
//
// Metrics: wall_s (seconds from the start of the rebalance until it
// returned; ns/op is the same span), moved_MB and moved_groups (shards of
// the two distributed tables that changed node, sized by citus_shards
// before the rebalance; a group is one shard of each), data_MB (both
// tables, before), moved_MB/s (moved_MB over wall_s), tps_before (the
// transactions pgbench committed per second in the 5 s before), tps_during
// (those that ended during the rebalance), tps_fraction (during over
// before), max_txn_ms and p99_txn_ms (the slowest and the 99th percentile
// of the transactions that ended during the rebalance, as pgbench's
// per-transaction logs give them), errors (transactions pgbench counted
// as failed and clients it aborted: any is an error an application saw,
// and fails the benchmark), max_cutover_ms (shardmover only: its longest
// cutover write pause, as it measures it), server_cpu_ms/txn_before and
// _during (the CPU of every PostgreSQL process of the cluster,
// internal/cpumeter, per committed transaction in each window),
// rebalance_server_cpu_s (the servers' CPU during the rebalance beyond
// what its transactions cost at the rate before), server_cores_during
// (their CPU over wall_s; the machine has 2 cores), and citus_plan_moves
// (Citus's plan by its default strategy afterwards; 0 = Citus agrees the
// cluster is balanced). After each run (not timed) pgbench_history must
// hold one row per transaction pgbench counted, and every balance must be
// the sum of its history's deltas.

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/cpumeter"
	"github.com/shardmover/shardmover/internal/pgbench"
	"github.com/shardmover/shardmover/internal/procs"
	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// benchPgbenchScaleEnv is BenchmarkCitusPgbench's pgbench scale.
const benchPgbenchScaleEnv = "SHARDMOVER_BENCH_PGBENCH_SCALE"

const (
	// benchPgbenchShards is the layout's shard groups.
	benchPgbenchShards = 16
	// benchPgbenchClients is pgbench's clients per entry node.
	benchPgbenchClients = 2
	// benchPgbenchMode is pgbench's query mode.
	benchPgbenchMode = "prepared"
	// benchPgbenchAfter is how long pgbench runs after the rebalance.
	benchPgbenchAfter = 2 * time.Second
)

func BenchmarkCitusPgbench(b *testing.B) {
	scale := 10
	if v := os.Getenv(benchPgbenchScaleEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s must be a positive pgbench scale, got %q", benchPgbenchScaleEnv, v)
		}
		scale = n
	}
	sides := []struct {
		name      string
		rebalance func(b *testing.B, env *pgbenchCluster)
	}{
		{"shardmover", func(b *testing.B, env *pgbenchCluster) {
			// The binary's GOMAXPROCS (cmd/shardmover applies it at start).
			defer runtime.GOMAXPROCS(procs.Apply())
			out, err := env.runner.Run(context.Background(), scheduler.JobRequest{Kind: "rebalance",
				Plan: scheduler.DefaultPlanOptions(), Limits: mover.DefaultLimits(), Recheck: scheduler.DefaultRecheck})
			require.NoError(b, err)
			require.NotNil(b, out.Job, "shardmover found nothing to move")
			moves := len(out.Plan.Moves)
			require.Equal(b, moves, out.Result.Done, "every planned move done")
			for _, r := range out.Rechecks {
				require.Equal(b, len(r.Plan.Moves), r.Result.Done, "every move of the recheck's job done")
				moves += len(r.Plan.Moves)
			}
			b.ReportMetric(float64(env.clock.maxPause())/float64(time.Millisecond), "max_cutover_ms")
			b.Logf("shardmover: %d moves (%d rechecks with moves); time in each phase, summed: %s", moves, len(out.Rechecks), env.clock)
		}},
		{"citus", func(b *testing.B, env *pgbenchCluster) {
			ctx := context.Background()
			var job int64
			require.NoError(b, env.cat.Pool().QueryRow(ctx, `SELECT citus_rebalance_start(shard_transfer_mode := 'force_logical')`).Scan(&job))
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
				env := newPgbenchCluster(b, scale)
				before := readPgbenchLayout(b, env.cat)
				var dataBytes int64
				for _, n := range before.bytes {
					dataBytes += n
				}
				load := env.startLoad(b)
				// As BenchmarkCitusRebalance: a fresh cluster's rate climbs
				// for a few seconds, so 5 s of warm-up, then 5 s measured.
				time.Sleep(benchWarmUp)
				warm := time.Now()
				cpuWarm := env.cpu.Sample()
				time.Sleep(benchBefore)
				serversBefore, _ := env.cpu.Since(cpuWarm)
				cpuStart := env.cpu.Sample()

				stopProfile := profileRebalance(b, "pgbench-"+side.name)
				start := time.Now()
				b.StartTimer()
				side.rebalance(b, env)
				b.StopTimer()
				end := time.Now()
				serversDuring, _ := env.cpu.Since(cpuStart)
				stopProfile()
				time.Sleep(benchPgbenchAfter)
				txns, errs := stopLoad(b, load)

				after := readPgbenchLayout(b, env.cat)
				moved, movedBytes := movedBytes(before, after)
				var planMoves int
				require.NoError(b, env.cat.Pool().QueryRow(context.Background(),
					`SELECT count(*) FROM get_rebalance_table_shards_plan()`).Scan(&planMoves))

				wall := end.Sub(start)
				during := pgbench.Ended(txns, start, end)
				st := pgbench.Stats(during)
				nBefore := len(pgbench.Ended(txns, warm, start))
				tpsBefore, tpsDuring := pgbench.TPS(txns, warm, start), pgbench.TPS(txns, start, end)
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				b.ReportMetric(wall.Seconds(), "wall_s")
				b.ReportMetric(float64(movedBytes)/(1<<20), "moved_MB")
				b.ReportMetric(float64(moved)/2, "moved_groups")
				b.ReportMetric(float64(dataBytes)/(1<<20), "data_MB")
				b.ReportMetric(float64(movedBytes)/(1<<20)/wall.Seconds(), "moved_MB/s")
				b.ReportMetric(tpsBefore, "tps_before")
				b.ReportMetric(tpsDuring, "tps_during")
				if tpsBefore > 0 {
					b.ReportMetric(tpsDuring/tpsBefore, "tps_fraction")
				}
				b.ReportMetric(ms(st.Slowest.Latency), "max_txn_ms")
				b.ReportMetric(ms(st.P99), "p99_txn_ms")
				if nBefore > 0 && st.N > 0 {
					perTxn := serversBefore.Seconds() / float64(nBefore)
					b.ReportMetric(1000*perTxn, "server_cpu_ms/txn_before")
					b.ReportMetric(1000*serversDuring.Seconds()/float64(st.N), "server_cpu_ms/txn_during")
					b.ReportMetric(serversDuring.Seconds()-perTxn*float64(st.N), "rebalance_server_cpu_s")
					b.ReportMetric(serversDuring.Seconds()/wall.Seconds(), "server_cores_during")
				}
				b.ReportMetric(float64(errs), "errors")
				b.ReportMetric(float64(planMoves), "citus_plan_moves")
				all := pgbench.Stats(txns)
				b.Logf("%s: %d of %d shards moved (%.1f of %.1f MB) in %s; pgbench %d transactions, tps %.0f before, %.0f during; during it p99 %s, slowest %s (through %s, ended %s after the start); slowest of the whole run %s (through %s, ended %s after the start); layout after: %s",
					side.name, moved, len(before.node), float64(movedBytes)/(1<<20), float64(dataBytes)/(1<<20), wall.Round(time.Millisecond),
					len(txns), tpsBefore, tpsDuring, st.P99, st.Slowest.Latency, st.Slowest.Node, st.Slowest.End.Sub(start).Round(time.Millisecond),
					all.Slowest.Latency, all.Slowest.Node, all.Slowest.End.Sub(start).Round(time.Millisecond), describeLayout(after))
				if errs > 0 {
					b.Errorf("%s: pgbench saw %d errors (failed transactions and aborted clients): each is a transaction an application saw fail", side.name, errs)
				}

				var processed int64
				for _, p := range load {
					processed += p.processed
				}
				bal, err := pgbench.CheckBalances(context.Background(), env.cat.Pool())
				require.NoError(b, err)
				if bal.History != processed || bal.Wrong != 0 {
					b.Errorf("%s: pgbench_history holds %d rows for %d transactions pgbench counted; %d accounts whose balance is not the sum of their history's deltas: %s",
						side.name, bal.History, processed, bal.Wrong, bal.Examples)
				}
			}
		})
	}
}

// pgbenchCluster is a Citus cluster with the pgbench layout on two
// workers and a third, empty worker.
type pgbenchCluster struct {
	sb     *sandbox.Cluster
	cat    *metadata.Catalog
	bin    string // pgbench
	scale  int
	runner *scheduler.Runner
	clock  *phaseClock
	// cpu measures the cluster's PostgreSQL servers and this process.
	cpu cpumeter.Meter
}

func newPgbenchCluster(b *testing.B, scale int) *pgbenchCluster {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCitus(b, 2)
	env := &pgbenchCluster{sb: sb, cat: cat, bin: filepath.Join(sb.BinDir, "pgbench"), scale: scale,
		clock: &phaseClock{last: map[int64]time.Time{}, total: map[string]time.Duration{}}}
	_, err := os.Stat(env.bin)
	require.NoError(b, err, "pgbench ships with the PostgreSQL server packages and must be next to the sandbox's postgres in %s", sb.BinDir)
	require.NoError(b, pgbench.InitCitus(ctx, env.bin, sb.Coordinator().DSN(), scale, benchPgbenchShards))
	_, err = cat.Pool().Exec(ctx, "VACUUM ANALYZE pgbench_accounts, pgbench_history, pgbench_branches, pgbench_tellers")
	require.NoError(b, err)
	_, err = sb.AddNode(ctx)
	require.NoError(b, err)
	// The journal shardmover installs on its first run, installed now so
	// that it is not timed.
	require.NoError(b, cat.InstallJournal(ctx))
	env.cpu = clusterMeter(b, ctx, sb, cat)
	env.runner = benchRunner(b, cat, env.clock)
	return env
}

// pgbenchLoad is one pgbench process of the load, and what it counted.
type pgbenchLoad struct {
	node      sandbox.Node
	p         *pgbench.Proc
	processed int64
}

// startLoad starts pgbench through every node.
func (env *pgbenchCluster) startLoad(b *testing.B) []*pgbenchLoad {
	b.Helper()
	dir := b.TempDir()
	script, err := pgbench.WriteScript(dir)
	require.NoError(b, err)
	var load []*pgbenchLoad
	for _, n := range env.sb.Nodes {
		p, err := pgbench.Start(context.Background(), pgbench.Options{Bin: env.bin, DSN: n.DSN(), Name: n.Name,
			Mode: benchPgbenchMode, Clients: benchPgbenchClients, Scale: env.scale, Script: script, LogDir: dir})
		require.NoError(b, err)
		b.Cleanup(p.Kill)
		load = append(load, &pgbenchLoad{node: n, p: p})
	}
	return load
}

// stopLoad stops every pgbench process and returns their transactions
// and their errors (failed transactions and aborted clients); anything
// else wrong with a process fails the benchmark.
func stopLoad(b *testing.B, load []*pgbenchLoad) ([]pgbench.Txn, int64) {
	b.Helper()
	for _, l := range load {
		if err := l.p.Stop(time.Minute); err != nil {
			b.Error(err)
		}
	}
	var txns []pgbench.Txn
	var errs int64
	for _, l := range load {
		res := l.p.Wait()
		sum := pgbench.ParseSummary(res.Output)
		errs += max(sum.Failed, 0) + int64(sum.Aborted)
		if res.Err != nil || len(sum.Problems) > 0 || sum.Processed < 0 || sum.Failed < 0 {
			b.Errorf("pgbench through %s (%s) did not end as -T ends it (%v), or reported errors:\n%s", l.node.Name, l.node.Addr(), res.Err, res.Output)
		}
		logged, err := l.p.Transactions()
		require.NoError(b, err)
		if int64(len(logged)) != sum.Processed+max(sum.Failed, 0) {
			b.Errorf("pgbench through %s (%s) logged %d transactions and counted %d processed and %d failed", l.node.Name, l.node.Addr(), len(logged), sum.Processed, sum.Failed)
		}
		l.processed = max(sum.Processed, 0)
		txns = append(txns, logged...)
	}
	return txns, errs
}

// readPgbenchLayout is citus_shards for the two distributed pgbench
// tables.
func readPgbenchLayout(b *testing.B, cat *metadata.Catalog) citusLayout {
	b.Helper()
	rows, err := cat.Pool().Query(context.Background(), `SELECT shardid, nodename || ':' || nodeport, shard_size FROM citus_shards
		WHERE table_name IN ('pgbench_accounts'::regclass, 'pgbench_history'::regclass)`)
	require.NoError(b, err)
	l := citusLayout{node: map[int64]string{}, bytes: map[int64]int64{}}
	var id, size int64
	var node string
	_, err = pgx.ForEachRow(rows, []any{&id, &node, &size}, func() error { l.node[id], l.bytes[id] = node, size; return nil })
	require.NoError(b, err)
	require.Len(b, l.node, 2*benchPgbenchShards, "citus_shards of pgbench_accounts and pgbench_history")
	return l
}
