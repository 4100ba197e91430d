package replication_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

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
// binary COPY (the baseline), then Copy with 1, 2 and 4 ctid ranges. MB/s
// is of the table's on-disk size. SHARDMOVER_BENCH_MB sets the size
// (default 32).
func BenchmarkCopy(b *testing.B) {
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
}

// BenchmarkApply applies the same backlog of mixed changes (per round 4
// inserts, 4 updates and 2 deletes) with Stream and with PostgreSQL's own
// CREATE SUBSCRIPTION, on the same nodes; the clock runs from the start of
// the applier until the backlog's last transaction is visible on the target.
// Two backlog shapes: each round one source transaction (txn10), and every
// change its own transaction (txn1, as an OLTP application writes).
// SHARDMOVER_BENCH_CHANGES sets the backlog size (default 30000).
func BenchmarkApply(b *testing.B) {
	e := newEnv(b)
	rounds := envInt("SHARDMOVER_BENCH_CHANGES", 30000) / 10
	e.both(`CREATE TABLE bench_apply (id bigint PRIMARY KEY, v bigint NOT NULL, t text NOT NULL)`)
	ctx := context.Background()
	require.NoError(b, replication.CreatePublication(ctx, e.src, "bench_apply", []pgx.Identifier{{"public", "bench_apply"}}))
	changes := 0
	for i := 0; i < rounds; i++ {
		changes += 4 // inserts 4i+1..4i+4
		if i >= 5 {
			changes += 4 // updates 4i-19..4i-16
		}
		if i >= 10 {
			changes += 2 // deletes 4i-39, 4i-38
		}
	}
	poll := e.connect(e.tgtDSN)
	// The launcher starts subscription workers at most every
	// wal_retrieve_retry_interval (5 s): keep that out of the measurement.
	e.exec(e.tgt, `ALTER SYSTEM SET wal_retrieve_retry_interval = '50ms'`)
	e.exec(e.tgt, `SELECT pg_reload_conf()`)

	shapes := []struct{ name, round string }{
		{"txn10", `
			INSERT INTO bench_apply SELECT g, 0, md5(g::text) FROM generate_series(4*i+1, 4*i+4) g;
			UPDATE bench_apply SET v = v + 1, t = md5(t) WHERE id BETWEEN 4*i-19 AND 4*i-16;
			DELETE FROM bench_apply WHERE id IN (4*i-39, 4*i-38);
			COMMIT;`},
		{"txn1", `
			FOR g IN 4*i+1..4*i+4 LOOP INSERT INTO bench_apply VALUES (g, 0, md5(g::text)); COMMIT; END LOOP;
			FOR g IN 4*i-19..4*i-16 LOOP UPDATE bench_apply SET v = v + 1, t = md5(t) WHERE id = g; COMMIT; END LOOP;
			FOR g IN 4*i-39..4*i-38 LOOP DELETE FROM bench_apply WHERE id = g; COMMIT; END LOOP;`},
	}
	for _, shape := range shapes {
		// backlog resets both sides, creates the slot and writes the backlog.
		backlog := func(b *testing.B) {
			e.exec(e.src, `TRUNCATE bench_apply`)
			e.exec(e.tgt, `TRUNCATE bench_apply`)
			snap, err := replication.CreateSlot(ctx, e.srcDSN, "bench_apply")
			require.NoError(b, err)
			require.NoError(b, snap.Release(ctx))
			e.exec(e.src, fmt.Sprintf(`DO $$ BEGIN
				FOR i IN 0..%d LOOP %s
				END LOOP;
				INSERT INTO bench_apply VALUES (-1, 0, 'last');
			END $$`, rounds-1, shape.round))
		}
		waitLast := func(b *testing.B) {
			for {
				var done bool
				require.NoError(b, poll.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM bench_apply WHERE id = -1)`).Scan(&done))
				if done {
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		verify := func(b *testing.B) {
			e.assertSame("bench_apply", "id")
			require.NoError(b, replication.DropSlot(ctx, e.src, "bench_apply"))
		}

		b.Run(shape.name+"/shardmover", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				backlog(b)
				require.NoError(b, replication.DropOrigin(ctx, e.tgt, "bench_apply"))
				b.StartTimer()
				r := e.run(e.streamConfig("bench_apply", 0))
				waitLast(b)
				b.StopTimer()
				require.NoError(b, r.stop())
				verify(b)
				b.StartTimer()
			}
			b.ReportMetric(float64(changes*b.N)/b.Elapsed().Seconds(), "changes/s")
		})
		b.Run(shape.name+"/create-subscription", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				backlog(b)
				b.StartTimer()
				e.exec(e.tgt, `CREATE SUBSCRIPTION bench_sub CONNECTION '`+e.srcDSN+`' PUBLICATION bench_apply
					WITH (copy_data = false, create_slot = false, slot_name = 'bench_apply', enabled = true)`)
				waitLast(b)
				b.StopTimer()
				e.exec(e.tgt, `ALTER SUBSCRIPTION bench_sub DISABLE`)
				e.exec(e.tgt, `ALTER SUBSCRIPTION bench_sub SET (slot_name = NONE)`)
				e.exec(e.tgt, `DROP SUBSCRIPTION bench_sub`)
				verify(b)
				b.StartTimer()
			}
			b.ReportMetric(float64(changes*b.N)/b.Elapsed().Seconds(), "changes/s")
		})
	}
}
