package replication_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/cpumeter"
)

// BenchmarkInsertForm asks what the target's backend would save if the
// applier wrote insert-only row batches with COPY instead of its INSERT
// over unnest()ed text arrays: the insert shape of BenchmarkApply, where
// nothing folds and the backend is a third of the window's CPU. The same
// rows (github_events-like, jsonb, a secondary index; SHARDMOVER_BENCH_CHANGES,
// default 100000) go into an empty table in one transaction, as row
// batches of 1000: once as the applier's statement (text arrays sent in
// binary, each value cast from text), once as COPY ... FROM STDIN in text
// format, A B B A in each iteration on one backend. unnest_backend_ms and
// copy_backend_ms are that backend's CPU per pass (cpumeter, /proc),
// x_backend_cpu their ratio (above 1: COPY used less); the wall times
// likewise. Nothing in the applier uses COPY: this measures the next step
// before taking it.
func BenchmarkInsertForm(b *testing.B) {
	e := newEnv(b)
	n := envInt("SHARDMOVER_BENCH_CHANGES", 100000)
	const batch = 1000
	e.exec(e.tgt, `CREATE TABLE bench_form (id bigint PRIMARY KEY, user_id bigint NOT NULL, event_type text NOT NULL,
		payload jsonb NOT NULL, created_at timestamptz NOT NULL)`)
	e.exec(e.tgt, `CREATE INDEX ON bench_form (event_type)`)
	e.exec(e.tgt, `ALTER TABLE bench_form SET (autovacuum_enabled = off)`)
	// The values as pgoutput sends them: each column's output function.
	types := []string{"PushEvent", "WatchEvent", "IssuesEvent", "CreateEvent"}
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := make([][5]string, n)
	for g := 1; g <= n; g++ {
		rows[g-1] = [5]string{
			strconv.Itoa(g), strconv.Itoa(g % 2000), types[g%4],
			fmt.Sprintf(`{"ref": "refs/heads/main", "rev": %d, "repo": "%x", "size": %d}`, g, g*2654435761, g%7),
			base.Add(time.Duration(g) * time.Second).Format("2006-01-02 15:04:05+00"),
		}
	}
	insert := `INSERT INTO bench_form (id, user_id, event_type, payload, created_at) SELECT u.p1::"pg_catalog"."int8",
		u.p2::"pg_catalog"."int8", u.p3::"pg_catalog"."text", u.p4::"pg_catalog"."jsonb", u.p5::"pg_catalog"."timestamptz"
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(p1, p2, p3, p4, p5)`
	ctx := context.Background()
	var pid int
	e.scalar(e.tgt, `SELECT pg_backend_pid()`, &pid)
	passes := [2]struct {
		name string
		run  func(b *testing.B)
	}{
		{"unnest", func(b *testing.B) {
			cols := make([][]string, 5)
			for lo := 0; lo < n; lo += batch {
				for c := range cols {
					cols[c] = cols[c][:0]
				}
				for _, r := range rows[lo:min(lo+batch, n)] {
					for c := range cols {
						cols[c] = append(cols[c], r[c])
					}
				}
				_, err := e.tgt.Exec(ctx, insert, cols[0], cols[1], cols[2], cols[3], cols[4])
				require.NoError(b, err)
			}
		}},
		{"copy", func(b *testing.B) {
			var sb strings.Builder
			for lo := 0; lo < n; lo += batch {
				sb.Reset()
				for _, r := range rows[lo:min(lo+batch, n)] {
					for c, v := range r {
						if c > 0 {
							sb.WriteByte('\t')
						}
						copyTextEscape(&sb, v)
					}
					sb.WriteByte('\n')
				}
				_, err := e.tgt.PgConn().CopyFrom(ctx, strings.NewReader(sb.String()),
					`COPY bench_form (id, user_id, event_type, payload, created_at) FROM STDIN`)
				require.NoError(b, err)
			}
		}},
	}
	var cpu, wall [2]time.Duration
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		a := i % 2
		for _, k := range [4]int{a, 1 - a, 1 - a, a} {
			e.exec(e.tgt, `TRUNCATE bench_form`)
			e.exec(e.tgt, `CHECKPOINT`)
			e.exec(e.tgt, `BEGIN`)
			c0, ok := cpumeter.ProcessCPU(pid)
			require.True(b, ok)
			b.StartTimer()
			start := time.Now()
			passes[k].run(b)
			e.exec(e.tgt, `COMMIT`)
			wall[k] += time.Since(start)
			b.StopTimer()
			c1, _ := cpumeter.ProcessCPU(pid)
			cpu[k] += c1 - c0
			var got int
			e.scalar(e.tgt, `SELECT count(*) FROM bench_form`, &got)
			require.Equal(b, n, got, passes[k].name)
		}
	}
	per := float64(2 * b.N)
	b.ReportMetric(float64(cpu[0].Milliseconds())/per, "unnest_backend_ms")
	b.ReportMetric(float64(cpu[1].Milliseconds())/per, "copy_backend_ms")
	b.ReportMetric(cpu[0].Seconds()/cpu[1].Seconds(), "x_backend_cpu")
	b.ReportMetric(float64(wall[0].Milliseconds())/per, "unnest_wall_ms")
	b.ReportMetric(float64(wall[1].Milliseconds())/per, "copy_wall_ms")
}

// copyTextEscape writes v as a value of COPY's text format.
func copyTextEscape(sb *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			sb.WriteString(`\\`)
		case '\t':
			sb.WriteString(`\t`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		default:
			sb.WriteByte(c)
		}
	}
}
