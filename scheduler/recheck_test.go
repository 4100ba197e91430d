package scheduler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/shardmover/shardmover/internal/pgsql"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// TestRebalanceRechecksMeasuredBytes: a moved group is smaller on its new
// node than on its old one (the copy carries none of the old one's dead
// rows and free space), so the bytes a rebalance balanced are not the
// bytes the nodes end with. With Recheck the runner measures again after
// the job and moves once more, never back onto a node that keeps a group's
// old copy for the grace period (that move would be refused), and the
// nodes end within the byte band.
func TestRebalanceRechecksMeasuredBytes(t *testing.T) {
	sb, cat := sandboxtest.NewCompat(t, 2)
	ctx := context.Background()
	require.NoError(t, workload.Setup(ctx, cat, 12))
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	defer r.Close()
	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 5, Users: 2000, Events: 30000})
	require.NoError(t, err)
	// Half the rows of every events shard rewritten and vacuumed: about
	// half as much again on disk as live, the free space left where the old
	// versions were.
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	for _, s := range cl.Shards {
		if s.Table != workload.EventsTable {
			continue
		}
		p, ok := cl.PlacementOf(s.ID)
		require.True(t, ok)
		n, ok := cl.NodeByGroup(p.GroupID)
		require.True(t, ok)
		var dsn string
		for _, sn := range sb.Nodes {
			if sn.Port == int(n.Port) {
				dsn = sn.DSN()
			}
		}
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		for _, q := range []string{"UPDATE " + s.Ident().Sanitize() + " SET payload = payload || '{}' WHERE event_id % 2 = 0", "VACUUM " + s.Ident().Sanitize()} {
			_, err = pgsql.ExecOne(ctx, conn, q)
			require.NoError(t, err, q)
		}
		require.NoError(t, conn.Close(ctx))
	}
	w3, err := sb.AddNode(ctx)
	require.NoError(t, err)
	_, err = cat.AddNode(ctx, w3.Host, w3.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)

	cfg := mover.DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	runner := scheduler.NewRunner(cat, cfg, nil)
	o := scheduler.DefaultPlanOptions()
	zero := int64(0)
	o.BaseCost = &zero // balance bytes alone
	lim := mover.Limits{Concurrency: 2, PerNode: 2}
	out, err := runner.Run(ctx, scheduler.JobRequest{Kind: "rebalance", Plan: o, Limits: lim, Recheck: 2})
	require.NoError(t, err)
	require.NotNil(t, out.Job)
	require.NotEmpty(t, out.Rechecks, "measured again, the new node was below the band")
	moved := map[string]int64{} // group -> the node it left
	for _, j := range append([]scheduler.JobOutcome{out}, out.Rechecks...) {
		assert.Zero(t, j.Result.Failed+j.Result.Unfinished, "job %d", j.Job.ID)
		planned := map[string]int64{}
		for _, a := range j.Plan.After {
			planned[a.Name] = a.Bytes
		}
		t.Logf("job %d: %d moves, planned bytes after %v", j.Job.ID, len(j.Plan.Moves), planned)
		for _, m := range j.Plan.Moves {
			if from, ok := moved[m.GroupID]; ok {
				assert.NotEqual(t, from, m.To, "group %s planned back onto the node keeping its old copy", m.GroupID)
			}
			moved[m.GroupID] = m.From
		}
	}
	bytes := nodeBytes(t, cat)
	var sum float64
	for _, b := range bytes {
		sum += float64(b)
	}
	avg := sum / float64(len(bytes))
	for addr, b := range bytes {
		assert.InDelta(t, avg, float64(b), 0.1*avg, "%s holds %d bytes, average %.0f: outside the band (all: %v)", addr, b, avg, bytes)
	}
	t.Logf("first job: %d moves; rechecks: %d; bytes per node after: %v", len(out.Plan.Moves), len(out.Rechecks), bytes)
}

// nodeBytes measures the bytes of the shard groups on every worker.
func nodeBytes(t *testing.T, cat *metadata.Catalog) map[string]int64 {
	t.Helper()
	cl, err := cat.Snapshot(context.Background(), metadata.SnapshotOptions{})
	require.NoError(t, err)
	out := map[string]int64{}
	for _, n := range cl.Status("").Nodes {
		if n.Role == "worker" {
			out[n.Addr] = n.Bytes
		}
	}
	require.NotEmpty(t, out, fmt.Sprint(cl.Warnings))
	return out
}
