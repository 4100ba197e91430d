package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/verify"
)

// scenario is the acceptance scenario of online moves: github data on two
// workers, a routed workload of 8 clients, and shard groups moved one
// after another to a third node.
type scenario struct {
	Users, Events int64
	Shards        int
	Moves         int
	Clients       int
	// Verify compares each group on source and target at one replication
	// position before its cutover (mover.Config.Verify).
	Verify bool
}

type scenarioResult struct {
	cat      *metadata.Catalog
	router   *workload.Router
	run      workload.RunResult
	moves    []metadata.Move
	history  map[int64][]metadata.MoveLog
	pauses   []time.Duration
	target   metadata.Node
	loadOpts workload.LoadOptions
}

func runScenario(t testing.TB, sc scenario) *scenarioResult {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCompat(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, sc.Shards))
	r, err := workload.NewRouter(ctx, cat, int32(sc.Clients))
	require.NoError(t, err)
	t.Cleanup(r.Close)
	res := &scenarioResult{cat: cat, router: r, history: map[int64][]metadata.MoveLog{},
		loadOpts: workload.LoadOptions{Seed: 11, Users: sc.Users, Events: sc.Events}}
	_, err = workload.Load(ctx, r, res.loadOpts)
	require.NoError(t, err)
	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	res.target, err = cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)

	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration = sc.Clients, sc.Users, time.Hour
	bg := workload.Start(ctx, r, opts)
	time.Sleep(500 * time.Millisecond)

	cfg := mover.DefaultConfig()
	cfg.Verify = sc.Verify
	cfg.OnCutover = func(_ int64, d time.Duration) { res.pauses = append(res.pauses, d) }
	eng := mover.New(cfg, cat)
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	for i := 0; i < sc.Moves && i < len(cl.Groups); i++ {
		specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: cl.Groups[i].ShardIDs[0], Target: res.target}})
		require.NoError(t, err)
		require.NoError(t, eng.Preflight(ctx, specs[0]))
		_, moves, err := eng.Schedule(ctx, "move", specs)
		require.NoError(t, err)
		require.NoError(t, eng.Run(ctx, moves[0].ID), "move %d", i)
		m, err := cat.Move(ctx, moves[0].ID)
		require.NoError(t, err)
		res.moves = append(res.moves, m)
		res.history[m.ID], err = cat.MoveHistory(ctx, m.ID)
		require.NoError(t, err)
	}
	time.Sleep(500 * time.Millisecond)
	res.run, err = bg.Stop()
	require.NoError(t, err)
	rep, err := eng.Sweep(ctx, mover.SweepOptions{KeepOldFor: 0})
	require.NoError(t, err)
	_ = rep
	return res
}

// TestAcceptanceEightMovesUnderWorkload is issue 5's acceptance test.
func TestAcceptanceEightMovesUnderWorkload(t *testing.T) {
	sc := scenario{Users: 3000, Events: 25000, Shards: 16, Moves: 8, Clients: 8, Verify: true}
	res := runScenario(t, sc)
	ctx := context.Background()

	// Every move compared its group on both nodes at one replication
	// position before its cutover, and found it equal; after the moves
	// (and the sweep of old shards) the catalogs check out.
	for _, m := range res.moves {
		verified := false
		for _, h := range res.history[m.ID] {
			verified = verified || (h.To == "cutover" && strings.Contains(h.Message, "verified equal"))
		}
		assert.True(t, verified, "move %d verified before its cutover: %v", m.ID, res.history[m.ID])
	}
	rep, err := verify.Run(ctx, res.cat, verify.Options{All: true})
	require.NoError(t, err)
	assert.True(t, rep.OK, "verify --all after the moves: %+v", rep)

	// The ledger: nothing lost, nothing twice, every update at its value.
	v, err := workload.Check(ctx, res.router, res.run.Ledger)
	require.NoError(t, err)
	assert.True(t, v.OK(), "ledger violations: %v", v.Violations)
	assert.Positive(t, res.run.Ledger.Inserts)
	assert.Positive(t, res.run.Ledger.Updates)
	assert.Positive(t, res.run.Ledger.Deletes)
	// Only the errors the routing contract allows (42P01 is retried inside
	// the router; a stop mid-statement is "context").
	for code := range res.run.Errors {
		assert.Equal(t, "context", code, "unexpected workload errors: %v", res.run.Errors)
	}
	assert.Positive(t, res.run.Retries, "clients must have been redirected by cutovers")

	cl, err := res.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	for i := 0; i < sc.Moves; i++ {
		assert.Equal(t, res.target.GroupID, cl.Groups[i].GroupID, "group %s moved", cl.Groups[i].Key())
	}

	// Per shard: row count and an order-independent checksum equal what
	// the generator and the ledger predict.
	want := predicted(t, cl, res)
	perShard := map[int64]int{}
	for _, p := range cl.Placements {
		perShard[p.ShardID]++
	}
	for _, s := range cl.Shards {
		require.Equal(t, 1, perShard[s.ID], "shard %d has exactly one placement", s.ID)
		p, _ := cl.PlacementOf(s.ID)
		n, _ := cl.NodeByGroup(p.GroupID)
		conn, err := res.cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		var got sums
		q := "SELECT count(*), coalesce(sum((user_id * 1000003 + event_id) % 1000000007 + coalesce((payload->>'rev')::bigint, 0)), 0)::bigint FROM "
		if s.Table == workload.UsersTable {
			q = "SELECT count(*), coalesce(sum(user_id), 0)::bigint FROM "
		}
		require.NoError(t, conn.QueryRow(ctx, q+s.Ident().Sanitize()).Scan(&got.count, &got.sum))
		conn.Close(ctx)
		assert.Equal(t, want[s.ID], got, "shard %d (%s) on %s", s.ID, s.Table, n.Addr())
	}

	// No replication artifact or prepared transaction is left.
	for _, n := range cl.Nodes {
		conn, err := res.cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		assert.Zero(t, leftovers(t, ctx, conn), "leftovers on %s", n.Addr())
		conn.Close(ctx)
	}
	for _, d := range res.pauses {
		t.Logf("cutover write pause: %s", d.Round(time.Millisecond))
	}
}

// leftovers counts what shardmover leaves on the node conn reaches when a
// move did not clean up: slots, publications, prepared transactions,
// origins and old (fenced) shards.
func leftovers(t *testing.T, ctx context.Context, conn *pgx.Conn) int {
	t.Helper()
	var left int
	require.NoError(t, conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%') +
		(SELECT count(*) FROM pg_publication WHERE pubname LIKE 'shardmover%') +
		(SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%') +
		(SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'shardmover%') +
		(SELECT count(*) FROM pg_class WHERE relname LIKE '%\_moved\_%')`).Scan(&left))
	return left
}

type sums struct{ count, sum int64 }

// predicted computes each shard's count and checksum from the generator
// (loaded rows, rev 0) and the ledger (the workload's rows still present).
func predicted(t testing.TB, cl *metadata.Cluster, res *scenarioResult) map[int64]sums {
	events, err := cl.Table(workload.EventsTable)
	require.NoError(t, err)
	users, err := cl.Table(workload.UsersTable)
	require.NoError(t, err)
	out := map[int64]sums{}
	add := func(t metadata.Table, userID, eventID, rev int64) {
		sh, err := cl.ShardFor(t, userID)
		if err != nil {
			panic(err)
		}
		s := out[sh.ID]
		s.count++
		if t.Name == workload.UsersTable {
			s.sum += userID
		} else {
			s.sum += (userID*1000003+eventID)%1000000007 + rev
		}
		out[sh.ID] = s
	}
	g := workload.NewGenerator(res.loadOpts.Seed, res.loadOpts.Users)
	for id := int64(1); id <= res.loadOpts.Users; id++ {
		add(users, id, 0, 0)
	}
	for id := int64(1); id <= res.loadOpts.Events; id++ {
		e := g.Event(id)
		add(events, e.UserID, e.EventID, 0)
	}
	for k, st := range res.run.Ledger.Rows() {
		if st.InDoubt {
			// The checker has proved the row is in one of its two possible
			// states; read which, so the checksum covers everything else.
			present, rev := actual(t, res.router, k)
			if present {
				add(events, k.UserID, k.EventID, rev)
			}
			continue
		}
		if st.Present {
			add(events, k.UserID, k.EventID, st.Rev)
		}
	}
	for _, s := range cl.Shards {
		if _, ok := out[s.ID]; !ok {
			out[s.ID] = sums{}
		}
	}
	return out
}

// BenchmarkMoveUnderWorkload reports, as benchmark output, the copy rate,
// the time in each phase, and the workload's write latency around each
// cutover, once with 8 routed clients (clients=8) and once with 32
// (clients=32) on the same layout: each sub-benchmark builds its own
// cluster, loads the same data and moves 4 groups while its clients write.
// cutover_p50/p99/max_ms are the writes acknowledged from 2 s before to 1 s
// after each cutover; max_write_pause_ms is the longest write pause the
// mover measured in its cutovers. Scale with SHARDMOVER_BENCH_EVENTS.
func BenchmarkMoveUnderWorkload(b *testing.B) {
	events := int64(60000)
	if v := benchEnv("SHARDMOVER_BENCH_EVENTS"); v > 0 {
		events = v
	}
	for _, clients := range []int{8, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				res := runScenario(b, scenario{Users: 5000, Events: events, Shards: 16, Moves: 4, Clients: clients})
				phase := map[string]time.Duration{}
				var copied int64
				var copyTime time.Duration
				var around []workload.Latency
				for _, m := range res.moves {
					h := res.history[m.ID]
					for j := 1; j < len(h); j++ {
						phase[h[j-1].To] += h[j].At.Sub(h[j-1].At)
						if h[j-1].To == "copying" {
							copyTime += h[j].At.Sub(h[j-1].At)
						}
						if h[j].To == "cleanup" {
							at := h[j].At
							for _, l := range res.run.Latencies {
								if l.At.After(at.Add(-2*time.Second)) && l.At.Before(at.Add(time.Second)) {
									around = append(around, l)
								}
							}
						}
					}
					copied += m.BytesCopied
				}
				if copyTime > 0 {
					b.ReportMetric(float64(copied)/copyTime.Seconds()/1e6, "copy_MB/s")
				}
				names := make([]string, 0, len(phase))
				for p := range phase {
					names = append(names, p)
				}
				sort.Strings(names)
				for _, p := range names {
					b.ReportMetric(phase[p].Seconds()/float64(len(res.moves)), p+"_s/move")
				}
				b.ReportMetric(ms(workload.Percentile(around, 50, time.Time{}, time.Time{})), "cutover_p50_ms")
				b.ReportMetric(ms(workload.Percentile(around, 99, time.Time{}, time.Time{})), "cutover_p99_ms")
				b.ReportMetric(ms(workload.Percentile(around, 100, time.Time{}, time.Time{})), "cutover_max_ms")
				b.ReportMetric(ms(workload.Percentile(res.run.Latencies, 99, time.Time{}, time.Time{})), "overall_p99_ms")
				var maxPause time.Duration
				for _, d := range res.pauses {
					maxPause = max(maxPause, d)
				}
				b.ReportMetric(ms(maxPause), "max_write_pause_ms")
			}
		})
	}
}

func actual(t testing.TB, r *workload.Router, k workload.Key) (bool, int64) {
	var rev int64
	found := false
	require.NoError(t, r.Do(context.Background(), workload.EventsTable, k.UserID, func(ctx context.Context, tg workload.Target) error {
		rows, err := tg.Pool.Query(ctx, "SELECT coalesce((payload->>'rev')::bigint, 0) FROM "+tg.Shard.Ident().Sanitize()+
			" WHERE user_id = $1 AND event_id = $2", k.UserID, k.EventID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			found = true
			if err := rows.Scan(&rev); err != nil {
				return err
			}
		}
		return rows.Err()
	}))
	return found, rev
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func benchEnv(name string) int64 {
	var v int64
	_, _ = fmt.Sscan(os.Getenv(name), &v)
	return v
}
