package replication_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/cpumeter"
	"github.com/shardmover/shardmover/internal/procs"
	"github.com/shardmover/shardmover/replication"
)

const psqlBin = "/usr/lib/postgresql/15/bin/psql"

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkCopy copies one table between two nodes: a psql | psql pipe of
// binary COPY (the baseline), then Copy with 1, 2 and 4 ctid ranges, then
// the adaptive copy the mover runs against one stream, side by side. MB/s
// is of the table's on-disk size. SHARDMOVER_BENCH_MB sets the size
// (default 32).
func BenchmarkCopy(b *testing.B) {
	defer runtime.GOMAXPROCS(procs.Apply()) // as the shardmover binary runs
	e := newEnv(b)
	mb := envInt("SHARDMOVER_BENCH_MB", 32)
	e.both(`CREATE TABLE bench_copy (id bigint PRIMARY KEY, n numeric, t text, j jsonb, ts timestamptz)`)
	// About 170 bytes a row on disk.
	e.exec(e.src, `INSERT INTO bench_copy SELECT g, g / 7.0, md5(g::text) || md5((g+1)::text),
		jsonb_build_object('g', g, 'tags', jsonb_build_array('a', 'b')), now() + g * interval '1 s'
		FROM generate_series(1, $1::bigint) g`, mb*1024*1024/170)
	e.exec(e.src, `VACUUM ANALYZE bench_copy`)
	var size int64
	e.scalar(e.src, `SELECT pg_table_size('bench_copy')`, &size)
	ctx := context.Background()
	snap, err := replication.CreateSlot(ctx, e.srcDSN, "bench_copy")
	require.NoError(b, err)
	defer snap.Release(ctx)
	defer replication.DropSlot(ctx, e.src, "bench_copy")
	truncate := func(b *testing.B) {
		b.StopTimer()
		e.exec(e.tgt, `TRUNCATE bench_copy`)
		b.StartTimer()
	}
	check := func(b *testing.B) {
		b.StopTimer()
		var n int64
		e.scalar(e.tgt, `SELECT count(*) FROM bench_copy`, &n)
		require.EqualValues(b, mb*1024*1024/170, n)
		b.StartTimer()
	}

	b.Run("psql-pipe", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			truncate(b)
			cmd := exec.Command("bash", "-c", `set -o pipefail; "$PSQL" "$SRC" -X -q -c 'COPY bench_copy TO STDOUT (FORMAT binary)' | "$PSQL" "$TGT" -X -q -c 'COPY bench_copy FROM STDIN (FORMAT binary)'`)
			cmd.Env = append(os.Environ(), "PSQL="+psqlBin, "SRC="+e.srcDSN, "TGT="+e.tgtDSN)
			out, err := cmd.CombinedOutput()
			require.NoError(b, err, string(out))
			check(b)
		}
	})
	for _, ranges := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("shardmover-%dranges", ranges), func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				truncate(b)
				res, err := replication.Copy(ctx, replication.CopyOptions{
					SourceDSN: e.srcDSN, TargetDSN: e.tgtDSN, Snapshot: snap.Name,
					Tables: []pgx.Identifier{{"public", "bench_copy"}}, Workers: ranges,
					RangesPerTable: ranges, MinRangeBytes: 1 << 20,
				})
				require.NoError(b, err)
				require.Equal(b, ranges, res.Tables[0].Ranges)
				check(b)
			}
		})
	}
	// As the mover copies (one stream, another while each pays, up to 4
	// over 4 ranges) against one stream over the whole table, A B B A in
	// each iteration so that neither always runs first: adaptive_MB/s and
	// one_stream_MB/s over the summed windows of each, x_one_stream their
	// ratio, streams the widest the adaptive copy went.
	b.Run("shardmover-adaptive", func(b *testing.B) {
		var took [2]time.Duration // adaptive, one stream
		widest := 0
		for i := 0; i < b.N; i++ {
			a := i % 2
			for _, k := range [4]int{a, 1 - a, 1 - a, a} {
				truncate(b)
				opts := replication.CopyOptions{
					SourceDSN: e.srcDSN, TargetDSN: e.tgtDSN, Snapshot: snap.Name,
					Tables: []pgx.Identifier{{"public", "bench_copy"}}, Workers: 1, RangesPerTable: 1,
				}
				if k == 0 {
					opts.Workers, opts.Adaptive, opts.RangesPerTable, opts.MinRangeBytes = 4, true, 4, 1<<20
				}
				start := time.Now()
				res, err := replication.Copy(ctx, opts)
				took[k] += time.Since(start)
				require.NoError(b, err)
				if k == 0 {
					require.Equal(b, 4, res.Tables[0].Ranges)
					widest = max(widest, res.Streams)
				}
				check(b)
			}
		}
		mb := float64(2*b.N) * float64(size) / 1e6
		b.ReportMetric(mb/took[0].Seconds(), "adaptive_MB/s")
		b.ReportMetric(mb/took[1].Seconds(), "one_stream_MB/s")
		b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "x_one_stream")
		b.ReportMetric(float64(widest), "streams")
	})
}

// applyRuns counts BenchmarkApply's shape runs in this process, so that
// the side that goes first alternates from run to run (-count).
var applyRuns int

// applyShape is one backlog shape of BenchmarkApply.
type applyShape struct {
	name, table string
	// changes is the number of row changes in the backlog (the marker row
	// that ends it is not counted).
	changes int
	// preload fills the table identically on both sides before the slot
	// is created ("" when it starts empty).
	preload string
	// backlog is the body of a DO block run on the source after the slot
	// is created; the marker row (id -1) is inserted after it.
	backlog string
}

// BenchmarkApply applies the same backlog with Stream and with PostgreSQL's
// own CREATE SUBSCRIPTION, on the same nodes, side by side in every
// iteration; the clock runs from the start of the applier until the
// backlog's marker row (its last transaction) is visible on the target.
//
// Shapes (n = SHARDMOVER_BENCH_CHANGES, default 100000: with 30000 a window
// lasted 0.2 to 0.5 s, and the start of either applier weighed in it):
//   - txn10: mixed changes, per round 4 inserts, 4 updates and 2 deletes in
//     one source transaction (folding and grouping help here);
//   - txn1: the same changes, each its own transaction (as an OLTP
//     application writes);
//   - insert: n inserts of new github_events-like rows (jsonb payload, a
//     secondary index), each its own transaction: nothing to fold, and
//     1-row transactions because that is how events arrive (one autocommit
//     insert per event) and the per-transaction cost is what an applier
//     must beat there;
//   - update-random: n single-row updates, each its own transaction, of
//     keys hashed from 1..n over a table of SHARDMOVER_BENCH_APPLY_ROWS
//     rows (default 200000) loaded identically on both sides before the
//     slot is created (about 7% of the keys repeat at the defaults, never
//     next to each other).
//
// Before each timed side both tables are truncated (and reloaded), VACUUM
// ANALYZEd, the slot is created, the backlog written, and a CHECKPOINT run
// on both nodes, so that neither side inherits the other's dirty buffers or
// a checkpoint falling into its window (SHARDMOVER_BENCH_APPLY_NOCHECKPOINT=1
// skips the VACUUM and the CHECKPOINT, to see what they change).
// Autovacuum is off on the bench tables, on both nodes. Each iteration
// applies the backlog four times, A B B A, so that each side is once first
// and once second of a pair (A alternates between iterations and runs):
// measured alone, the side that went first of a pair was faster in most
// pairs on a busy host, whichever it was.
//
// Metrics per shape: shardmover_changes/s and native_changes/s (changes
// over the summed timed windows of that side), x_native, their ratio,
// measured in the same run, and x_second_of_pair, the time of the second
// applies of the pairs over the first (both sides in each; 1 when order
// does not matter). On a shared host wall time moves with the other load,
// so the CPU time of the window is measured too (every process of both
// PostgreSQL instances, exited ones through their postmaster, plus this
// process, which on the native side only polls): shardmover_changes/cpu_s,
// native_changes/cpu_s and their ratio x_native_cpu. ns/op is the four
// timed windows. The log line of each iteration gives every window's CPU
// by process (the walsender, the backend that applied, both servers, this
// process).
//
// Both sides are fed by the same kind of walsender doing the same decoding:
// shardmover_walsender_busy and native_walsender_busy are the walsender's
// CPU time over its side's windows. Near 1, the walsender was busy all along
// and no applier could have been faster; x_native_walsender_bound, the
// native windows over the walsender's CPU time in shardmover's, is the
// most x_native could be. shardmover_walsender_waited and
// native_walsender_waited are its time runnable but without a CPU over its
// side's windows: what it lost to the other processes sharing the cores.
func BenchmarkApply(b *testing.B) {
	// The shardmover binary's threads for Go code (internal/procs); both
	// sides' windows run under it, the subscription's with only the poll
	// in this process.
	defer runtime.GOMAXPROCS(procs.Apply())
	// SHARDMOVER_BENCH_NO_QUIET_WAIT=1 leaves the source socket's
	// low-water mark at 1 while the Stream's reader waits (as before
	// quietWait), to compare the two in runs next to each other.
	if os.Getenv("SHARDMOVER_BENCH_NO_QUIET_WAIT") != "" {
		defer replication.SetQuietWaits(replication.SetQuietWaits(false))
	}
	e := newEnv(b)
	n := envInt("SHARDMOVER_BENCH_CHANGES", 100000)
	rows := envInt("SHARDMOVER_BENCH_APPLY_ROWS", 200000)
	checkpoint := os.Getenv("SHARDMOVER_BENCH_APPLY_NOCHECKPOINT") == ""
	rounds := n / 10
	e.both(`CREATE TABLE bench_apply (id bigint PRIMARY KEY, v bigint NOT NULL, t text NOT NULL)`)
	e.both(`CREATE TABLE bench_events (id bigint PRIMARY KEY, user_id bigint NOT NULL, event_type text NOT NULL,
		payload jsonb NOT NULL, created_at timestamptz NOT NULL)`)
	e.both(`CREATE INDEX ON bench_events (event_type)`)
	e.both(`CREATE TABLE bench_upd (id bigint PRIMARY KEY, v bigint NOT NULL, t text NOT NULL)`)
	// An autovacuum of a table the backlog just filled, or the apply is
	// filling, could fall into one window and not another, on either
	// node: prepare vacuums and analyzes before each window instead.
	for _, t := range []string{"bench_apply", "bench_events", "bench_upd"} {
		e.both(`ALTER TABLE ` + t + ` SET (autovacuum_enabled = off)`)
	}
	// The backlogs' statements find their rows by key, in PL/pgSQL loops
	// whose plans are made, and kept, while the table is small (truncated
	// and analyzed empty): sequential scans of a table that then grows
	// through the whole loop. That made writing the txn10 and txn1 backlogs
	// take minutes of the source's CPU (perf: heapgetpage under the DELETE's
	// and UPDATE's scans), past exec's minute at times; by key it takes
	// seconds. Only this session, which writes them, is set.
	e.exec(e.src, `SET enable_seqscan = off`)
	ctx := context.Background()
	require.NoError(b, replication.CreatePublication(ctx, e.src, "bench_apply", []pgx.Identifier{
		{"public", "bench_apply"}, {"public", "bench_events"}, {"public", "bench_upd"}}))
	mixed := 0
	for i := 0; i < rounds; i++ {
		mixed += 4 // inserts 4i+1..4i+4
		if i >= 5 {
			mixed += 4 // updates 4i-19..4i-16
		}
		if i >= 10 {
			mixed += 2 // deletes 4i-39, 4i-38
		}
	}
	poll := e.connect(e.tgtDSN)
	// The poll for the marker runs every 2 ms in the timed window: it must
	// cost next to nothing. The planner sees a table truncated and
	// analyzed empty as empty and scans it whole, a scan that grows with
	// every applied row (perf: the poll's backend took about 0.4 s of CPU
	// per side, on two cores, as much as the applier's own backend).
	e.exec(poll, `SET enable_seqscan = off`)
	meter := newCPUMeter(b, e.src, e.tgt)
	// The launcher starts subscription workers at most every
	// wal_retrieve_retry_interval (5 s): keep that out of the measurement.
	e.exec(e.tgt, `ALTER SYSTEM SET wal_retrieve_retry_interval = '50ms'`)
	e.exec(e.tgt, `SELECT pg_reload_conf()`)

	shapes := []applyShape{
		{name: "txn10", table: "bench_apply", changes: mixed, backlog: fmt.Sprintf(`
			FOR i IN 0..%d LOOP
				INSERT INTO bench_apply SELECT g, 0, md5(g::text) FROM generate_series(4*i+1, 4*i+4) g;
				UPDATE bench_apply SET v = v + 1, t = md5(t) WHERE id BETWEEN 4*i-19 AND 4*i-16;
				DELETE FROM bench_apply WHERE id IN (4*i-39, 4*i-38);
				COMMIT;
			END LOOP;`, rounds-1)},
		{name: "txn1", table: "bench_apply", changes: mixed, backlog: fmt.Sprintf(`
			FOR i IN 0..%d LOOP
				FOR g IN 4*i+1..4*i+4 LOOP INSERT INTO bench_apply VALUES (g, 0, md5(g::text)); COMMIT; END LOOP;
				FOR g IN 4*i-19..4*i-16 LOOP UPDATE bench_apply SET v = v + 1, t = md5(t) WHERE id = g; COMMIT; END LOOP;
				FOR g IN 4*i-39..4*i-38 LOOP DELETE FROM bench_apply WHERE id = g; COMMIT; END LOOP;
			END LOOP;`, rounds-1)},
		{name: "insert", table: "bench_events", changes: n, backlog: fmt.Sprintf(`
			FOR g IN 1..%d LOOP
				INSERT INTO bench_events VALUES (g, g %% 2000,
					(ARRAY['PushEvent','WatchEvent','IssuesEvent','CreateEvent'])[1 + g %% 4],
					jsonb_build_object('rev', g, 'repo', md5(g::text), 'ref', 'refs/heads/main', 'size', g %% 7),
					timestamptz '2024-01-01 00:00:00+00' + g * interval '1 s');
				COMMIT;
			END LOOP;`, n)},
		{name: "update-random", table: "bench_upd", changes: n,
			preload: fmt.Sprintf(`INSERT INTO bench_upd SELECT g, 0, md5(g::text) FROM generate_series(1, %d) g`, rows),
			backlog: fmt.Sprintf(`
			FOR g IN 1..%d LOOP
				UPDATE bench_upd SET v = v + 1, t = md5(t) WHERE id = 1 + abs(hashint8(g)::bigint) %% %d;
				COMMIT;
			END LOOP;`, n, rows)},
	}
	for _, shape := range shapes {
		marker := fmt.Sprintf(`INSERT INTO %s (id, v, t) VALUES (-1, 0, 'last')`, shape.table)
		if shape.table == "bench_events" {
			marker = `INSERT INTO bench_events VALUES (-1, 0, 'last', '{}', now())`
		}
		// prepare resets both sides, creates the slot and writes the backlog.
		prepare := func(b *testing.B) {
			for _, c := range []*pgx.Conn{e.src, e.tgt} {
				e.exec(c, `TRUNCATE `+shape.table)
				if shape.preload != "" {
					e.exec(c, shape.preload)
				}
				if checkpoint {
					e.exec(c, `VACUUM ANALYZE `+shape.table)
				}
			}
			snap, err := replication.CreateSlot(ctx, e.srcDSN, "bench_apply")
			require.NoError(b, err)
			require.NoError(b, snap.Release(ctx))
			e.exec(e.src, `DO $$ BEGIN `+shape.backlog+` `+marker+`; END $$`)
			if checkpoint {
				e.exec(e.src, `CHECKPOINT`)
				e.exec(e.tgt, `CHECKPOINT`)
			}
		}
		waitLast := func(b *testing.B) {
			q := `SELECT EXISTS (SELECT 1 FROM ` + shape.table + ` WHERE id = -1)`
			for {
				var done bool
				require.NoError(b, poll.QueryRow(ctx, q).Scan(&done))
				if done {
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		// walsenderTime is the CPU time of the walsender serving the
		// slot, and its time runnable but waiting for a CPU: it started
		// with the side's window, so its whole time is the window's (it
		// does the same decoding for either side).
		walsenderTime := func(b *testing.B) (cpu, wait time.Duration) {
			var pid int
			require.NoError(b, e.src.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_apply'`).Scan(&pid))
			cpu, ok := cpumeter.ProcessCPU(pid)
			require.True(b, ok, "read the walsender's CPU time")
			wait, ok = cpumeter.ProcessWait(pid)
			require.True(b, ok, "read the walsender's run-queue wait")
			return cpu, wait
		}
		// applierTime is the same for the target's backend that applied:
		// the subscription's worker, or the Stream's session (named by its
		// origin). Logged with the rest of the window's CPU.
		applierTime := func(b *testing.B) time.Duration {
			var pid int
			require.NoError(b, e.tgt.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
				WHERE backend_type = 'logical replication worker' OR (backend_type = 'client backend' AND application_name = 'bench_apply')`).Scan(&pid))
			d, ok := cpumeter.ProcessCPU(pid)
			require.True(b, ok, "read the applying backend's CPU time")
			return d
		}
		verify := func(b *testing.B) {
			e.assertSame(shape.table, "id")
			require.NoError(b, replication.DropSlot(ctx, e.src, "bench_apply"))
		}
		// The two sides: each applies the backlog prepare wrote, from the
		// timer's start until the marker is visible, then stops and cleans
		// up with the timer stopped.
		sides := [2]struct {
			name  string
			apply func(b *testing.B)
		}{
			{"shardmover", func(b *testing.B) {
				require.NoError(b, replication.DropOrigin(ctx, e.tgt, "bench_apply"))
				cpu0 := meter.Sample()
				b.StartTimer()
				start := time.Now()
				r := e.run(e.streamConfig("bench_apply", 0))
				waitLast(b)
				b.StopTimer()
				sideTime[0] += time.Since(start)
				servers, self := meter.Since(cpu0)
				sideCPU[0] += servers + self
				split[0] = newCPUSplit(b, walsenderTime, applierTime, servers, self)
				walsenderCPU[0] += split[0].walsender
				walsenderWait[0] += split[0].walsenderWait
				require.NoError(b, r.stop())
			}},
			{"create-subscription", func(b *testing.B) {
				cpu0 := meter.Sample()
				b.StartTimer()
				start := time.Now()
				e.exec(e.tgt, `CREATE SUBSCRIPTION bench_sub CONNECTION '`+e.srcDSN+`' PUBLICATION bench_apply
					WITH (copy_data = false, create_slot = false, slot_name = 'bench_apply', enabled = true)`)
				waitLast(b)
				b.StopTimer()
				sideTime[1] += time.Since(start)
				servers, self := meter.Since(cpu0)
				sideCPU[1] += servers + self
				split[1] = newCPUSplit(b, walsenderTime, applierTime, servers, self)
				walsenderCPU[1] += split[1].walsender
				walsenderWait[1] += split[1].walsenderWait
				e.exec(e.tgt, `ALTER SUBSCRIPTION bench_sub DISABLE`)
				e.exec(e.tgt, `ALTER SUBSCRIPTION bench_sub SET (slot_name = NONE)`)
				e.exec(e.tgt, `DROP SUBSCRIPTION bench_sub`)
			}},
		}

		b.Run(shape.name, func(b *testing.B) {
			sideTime, sideCPU, walsenderCPU, walsenderWait = [2]time.Duration{}, [2]time.Duration{}, [2]time.Duration{}, [2]time.Duration{}
			var pos [2]time.Duration // first and second of each pair
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				// A B B A: each side once first and once second of a pair,
				// A alternating from run to run.
				a := (applyRuns + i) % 2
				order := [4]int{a, 1 - a, 1 - a, a}
				var took [4]time.Duration
				var splits [4]cpuSplit
				for k, s := range order {
					before := sideTime[s]
					prepare(b)
					sides[s].apply(b)
					verify(b)
					took[k], splits[k] = sideTime[s]-before, split[s]
					pos[k%2] += took[k]
				}
				var line strings.Builder
				for k, s := range order {
					c := splits[k]
					fmt.Fprintf(&line, "%s %s (%.0f changes/s; CPU: walsender %s, applying backend %s, both servers %s, bench process %s; walsender waited for a CPU %s); ",
						sides[s].name, took[k].Round(time.Millisecond), float64(shape.changes)/took[k].Seconds(),
						c.walsender, c.applier, c.servers, c.self, c.walsenderWait.Round(time.Millisecond))
				}
				b.Logf("%s: %s", shape.name, line.String())
			}
			applyRuns++
			sm := float64(2*shape.changes*b.N) / sideTime[0].Seconds()
			native := float64(2*shape.changes*b.N) / sideTime[1].Seconds()
			b.ReportMetric(sm, "shardmover_changes/s")
			b.ReportMetric(native, "native_changes/s")
			b.ReportMetric(sm/native, "x_native")
			b.ReportMetric(pos[1].Seconds()/pos[0].Seconds(), "x_second_of_pair")
			smCPU := float64(2*shape.changes*b.N) / sideCPU[0].Seconds()
			nativeCPU := float64(2*shape.changes*b.N) / sideCPU[1].Seconds()
			b.ReportMetric(smCPU, "shardmover_changes/cpu_s")
			b.ReportMetric(nativeCPU, "native_changes/cpu_s")
			b.ReportMetric(smCPU/nativeCPU, "x_native_cpu")
			// The walsender's share of each side's window: near 1, it
			// was busy the whole time, and no applier could have gone
			// faster. A window is never shorter than its walsender's CPU
			// time (one process), so x_native cannot exceed the native
			// windows over the walsender's time in ours:
			// x_native_walsender_bound.
			b.ReportMetric(walsenderCPU[0].Seconds()/sideTime[0].Seconds(), "shardmover_walsender_busy")
			b.ReportMetric(walsenderCPU[1].Seconds()/sideTime[1].Seconds(), "native_walsender_busy")
			b.ReportMetric(sideTime[1].Seconds()/walsenderCPU[0].Seconds(), "x_native_walsender_bound")
			// The walsender's time runnable but without a CPU, over its
			// side's windows: the share of the window it lost to the
			// other processes on this machine's cores (chiefly, in ours,
			// the bench process and the applying backend; in the native
			// side's, its worker).
			b.ReportMetric(walsenderWait[0].Seconds()/sideTime[0].Seconds(), "shardmover_walsender_waited")
			b.ReportMetric(walsenderWait[1].Seconds()/sideTime[1].Seconds(), "native_walsender_waited")
		})
	}
}

// newCPUMeter measures the instances of conns' servers and this process
// (internal/cpumeter): on a shared host the wall time of an applier moves
// with whatever else runs, its CPU time much less.
func newCPUMeter(b *testing.B, conns ...*pgx.Conn) cpumeter.Meter {
	var pms []int
	for _, c := range conns {
		var pid int
		require.NoError(b, c.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid))
		pm, ok := cpumeter.PostmasterOf(pid)
		require.True(b, ok, "read /proc/%d/stat", pid)
		pms = append(pms, pm)
	}
	return cpumeter.New(pms...)
}

// sideTime adds up BenchmarkApply's timed windows of one shape run:
// [0] shardmover's Stream, [1] CREATE SUBSCRIPTION.
var sideTime [2]time.Duration

// split is the CPU of each side's latest window, by process.
var split [2]cpuSplit

type cpuSplit struct{ walsender, applier, servers, self, walsenderWait time.Duration }

// newCPUSplit reads the walsender's and the applying backend's times at the
// end of a window, next to the servers' and this process's CPU over it.
func newCPUSplit(b *testing.B, walsender func(*testing.B) (cpu, wait time.Duration), applier func(*testing.B) time.Duration, servers, self time.Duration) cpuSplit {
	cpu, wait := walsender(b)
	return cpuSplit{walsender: cpu, applier: applier(b), servers: servers, self: self, walsenderWait: wait}
}

// walsenderCPU adds up the CPU time of the walsender of each side's
// windows, walsenderWait its time runnable but waiting for a CPU.
var walsenderCPU, walsenderWait [2]time.Duration

// sideCPU adds up the CPU time of both nodes' PostgreSQL processes and of
// this process over the same windows.
var sideCPU [2]time.Duration
