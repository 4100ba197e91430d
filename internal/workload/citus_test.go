package workload_test

import (
	"context"
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
)

// TestCitusWorkloadUnderCitusMove runs the ledger workload on a real Citus
// cluster, clients half through the coordinator and half through the
// workers, with Citus routing every statement; the ledger passes; the
// checker sees corruption made through Citus and a row written straight
// into the wrong shard; then Citus's own citus_move_shard_placement moves
// the shard group of the busiest user while the workload runs, and the
// ledger still passes, read through Citus and at the placements Citus's
// metadata names.
func TestCitusWorkloadUnderCitusMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, cat := sandboxtest.NewCitus(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, 8))
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, metadata.Citus, r.Flavor())

	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 3, Users: 200, Events: 2000, ChunkRows: 700})
	require.NoError(t, err)
	coord, err := pgx.Connect(ctx, c.Coordinator().DSN())
	require.NoError(t, err)
	defer coord.Close(ctx)
	var users, events, shards, colocations int64
	require.NoError(t, coord.QueryRow(ctx, `SELECT (SELECT count(*) FROM github_users), (SELECT count(*) FROM github_events),
		(SELECT count(*) FROM citus_shards WHERE table_name IN ('github_users'::regclass, 'github_events'::regclass)),
		(SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE logicalrelid IN ('github_users'::regclass, 'github_events'::regclass))`).
		Scan(&users, &events, &shards, &colocations))
	assert.Equal(t, []int64{200, 2000, 16, 1}, []int64{users, events, shards, colocations},
		"users, events, shards and colocation groups after Setup and Load through Citus")

	// Entry nodes: even clients the coordinator, odd ones the workers in turn.
	cl := r.Cluster()
	var workers []string
	for _, n := range cl.Nodes {
		if !n.IsCoordinator() {
			workers = append(workers, n.Addr())
		}
	}
	sort.Strings(workers)
	require.Len(t, workers, 2)
	entries := map[string]int{}
	for i := 0; i < 4; i++ {
		n, err := r.Entry(i)
		require.NoError(t, err)
		entries[n.Addr()]++
	}
	assert.Equal(t, map[string]int{c.Coordinator().Addr(): 2, workers[0]: 1, workers[1]: 1}, entries)

	opts := workload.DefaultRunOptions()
	opts.Duration = 3 * time.Second
	opts.Clients = 4
	opts.Users = 200
	res, err := workload.Run(ctx, r, opts)
	require.NoError(t, err)
	assert.Positive(t, res.Ledger.Inserts)
	assert.Positive(t, res.Ledger.Updates)
	assert.Positive(t, res.Ledger.Deletes)
	assert.Empty(t, res.Errors, "no errors without moves")
	for addr := range entries {
		assert.Positive(t, res.Via[addr], "writes sent through %s", addr)
	}
	t.Logf("run 0: %d writes, via %v", res.Ops(), res.Via)
	v, err := workload.Check(ctx, r, res.Ledger)
	require.NoError(t, err)
	require.True(t, v.OK(), "violations: %v", v.Violations)
	assert.Equal(t, res.Ledger.Acknowledged(), v.Acknowledged)

	// Corruption made through Citus: one wrong value, one lost row, one
	// resurrected row; and a row of the run written straight into a shard
	// whose hash range does not hold it: misplaced (and never acknowledged).
	var live []workload.Key
	var gone workload.Key
	for k, s := range res.Ledger.Rows() {
		if s.Present && !s.InDoubt {
			live = append(live, k)
		} else if !s.Present && !s.InDoubt {
			gone = k
		}
	}
	require.GreaterOrEqual(t, len(live), 2)
	require.NotZero(t, gone.EventID)
	corrupt := func(k workload.Key, tmpl string) {
		require.NoError(t, r.Do(ctx, workload.EventsTable, k.UserID, func(ctx context.Context, tg workload.Target) error {
			assert.Equal(t, pgx.Identifier{"public", workload.EventsTable}, tg.Rel, "Citus statements name the distributed table")
			_, err := tg.Pool.Exec(ctx, replaceTable(tmpl, tg.Rel.Sanitize()), k.UserID, k.EventID)
			return err
		}))
	}
	corrupt(live[0], "UPDATE {} SET payload = jsonb_set(payload, '{rev}', '999999') WHERE user_id = $1 AND event_id = $2")
	corrupt(live[1], "DELETE FROM {} WHERE user_id = $1 AND event_id = $2")
	corrupt(gone, "INSERT INTO {} (event_id, event_type, event_public, user_id, created_at, payload) VALUES ($2, 'PushEvent', true, $1, now(), '{}')")
	evt, err := cl.Table(workload.EventsTable)
	require.NoError(t, err)
	sh0, err := cl.ShardFor(evt, int64(1))
	require.NoError(t, err)
	stray := int64(2)
	for ; ; stray++ {
		if sh, _ := cl.ShardFor(evt, stray); sh.ID != sh0.ID {
			break
		}
	}
	p, _ := cl.PlacementOf(sh0.ID)
	n, _ := cl.NodeByGroup(p.GroupID)
	nc, err := cat.ConnectNode(ctx, n.Host, n.Port)
	require.NoError(t, err)
	_, err = nc.Exec(ctx, "INSERT INTO "+sh0.Ident().Sanitize()+" (event_id, event_type, event_public, user_id, created_at, payload) VALUES ($1, 'PushEvent', true, $2, now(), '{}')",
		workload.RunBase(0)+1<<39, stray)
	nc.Close(ctx)
	require.NoError(t, err)
	v, err = workload.Check(ctx, r, res.Ledger)
	require.NoError(t, err)
	assert.False(t, v.OK())
	assert.Equal(t, 1, v.WrongValue, v.Violations)
	assert.Equal(t, 1, v.Lost, v.Violations)
	assert.Equal(t, 2, v.Resurrected, v.Violations)
	assert.Equal(t, 1, v.Misplaced, v.Violations)

	// Citus moves the shard group of user 1 (the busiest: activity is
	// skewed) while the workload runs.
	var shardID int64
	var srcPort int
	require.NoError(t, coord.QueryRow(ctx, `SELECT shardid, nodeport FROM citus_shards
		WHERE shardid = get_shard_id_for_distribution_column('github_events', 1)`).Scan(&shardID, &srcPort))
	src, dst := cl.Nodes[0], cl.Nodes[0]
	for _, n := range cl.Nodes {
		switch {
		case n.IsCoordinator():
		case n.Port == srcPort:
			src = n
		default:
			dst = n
		}
	}
	require.False(t, src.IsCoordinator() || dst.IsCoordinator(), "source and target are the two workers")

	opts.RunID = 1
	opts.Duration = time.Minute
	opts.Clients = 6
	bg := workload.Start(ctx, r, opts)
	time.Sleep(time.Second)
	moveStart := time.Now()
	_, err = coord.Exec(ctx, `SELECT citus_move_shard_placement($1, $2, $3, $4, $5, 'force_logical')`,
		shardID, src.Host, src.Port, dst.Host, dst.Port)
	moveEnd := time.Now()
	time.Sleep(time.Second)
	res, stopErr := bg.Stop()
	require.NoError(t, err, "citus_move_shard_placement")
	require.NoError(t, stopErr)
	t.Logf("run 1: %d writes, via %v, errors %v; Citus moved shard %d from %s to %s in %s",
		res.Ops(), res.Via, res.Errors, shardID, src.Addr(), dst.Addr(), moveEnd.Sub(moveStart).Round(time.Millisecond))
	var during, after int
	for _, l := range res.Latencies {
		switch {
		case l.At.Before(moveStart):
		case l.At.Before(moveEnd):
			during++
		default:
			after++
		}
	}
	assert.Positive(t, during, "writes acknowledged while Citus moved")
	assert.Positive(t, after, "writes acknowledged after Citus moved")
	t.Logf("max write latency %s, p99 %s (during the move: %s)",
		workload.Percentile(res.Latencies, 100, time.Time{}, time.Time{}),
		workload.Percentile(res.Latencies, 99, time.Time{}, time.Time{}),
		workload.Percentile(res.Latencies, 100, moveStart, moveEnd))

	var port int
	require.NoError(t, coord.QueryRow(ctx, `SELECT nodeport FROM citus_shards WHERE shardid = $1`, shardID).Scan(&port))
	assert.Equal(t, dst.Port, port, "citus_shards names the target")
	v, err = workload.Check(ctx, r, res.Ledger)
	require.NoError(t, err)
	if !v.OK() {
		// Citus's own move, not ours: once in CI a DELETE through the
		// target worker waited out Citus's cutover and then found 0 rows,
		// though the row's INSERT had been acknowledged through the same
		// worker 13 ms before it began, and the row was on the new
		// placement afterwards. Citus takes its metadata lock in the
		// executor, after the statement's snapshot: the delete ran locally
		// on the new placement with a snapshot older than the apply of
		// the insert there (docs/design.md 3.1, "Writes entering on the
		// target", the hole shardmover's cutover closes by locking the
		// distributed tables on the target first). The ledger rightly
		// reports the row present after an acknowledged delete. What this
		// test checks is the harness: every violation must be such a row,
		// each one a DELETE the server itself reported as finding nothing
		// (the run's delete_missing_row errors); anything else fails.
		for _, viol := range v.Violations {
			require.True(t, strings.HasPrefix(viol, "acknowledged delete of"), "a violation after a Citus move other than a delete that found no row: %s", viol)
		}
		require.LessOrEqual(t, len(v.Violations), res.Errors["delete_missing_row"], "a row present after its acknowledged delete, which the server did not report as finding nothing: %v", v.Violations)
		t.Logf("Citus's own move let %d acknowledged DELETE(s) find no row, and the row stayed: %v", v.Resurrected, v.Violations)
	}
	assert.Equal(t, res.Ledger.Acknowledged(), v.Acknowledged)
	assert.Positive(t, v.Checked)
	next, err := workload.NextRunID(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, uint8(2), next, "the run after runs 0 and 1")
}
