package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
)

// TestCitusDaemonRebalancesAfterNodeAdd: on a real Citus cluster the
// daemon's leader notices a worker added with citus_add_node by polling
// the node catalog and rebalances onto it under the Citus workload, with
// Citus's default strategy; the ledger passes, every worker holds shard
// groups, and Citus's own planner agrees nothing is left to move.
func TestCitusDaemonRebalancesAfterNodeAdd(t *testing.T) {
	ctx := context.Background()
	sb, cat := sandboxtest.NewCitus(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, 8))
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 5, Users: 300, Events: 3000})
	require.NoError(t, err)

	cfg := daemonConfig(t)
	d, stop := startDaemon(t, cfg, cat)
	defer stop()
	eventually(t, "leadership", 30*time.Second, d.IsLeader)
	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration = 4, 300, time.Hour
	opts.Pause = workload.TestPause
	bg := workload.Start(ctx, r, opts)

	_, err = sb.AddNode(ctx) // citus_add_node
	require.NoError(t, err)
	eventually(t, "a rebalance job to finish", 3*time.Minute, func() bool {
		jobs, err := cat.Jobs(ctx, 10)
		return err == nil && len(jobs) > 0 && jobs[0].Kind == "rebalance" && jobs[0].State == "done"
	})
	res, err := bg.Stop()
	require.NoError(t, err)
	require.NoError(t, r.Refresh(ctx))
	v, err := workload.Check(ctx, r, res.Ledger)
	require.NoError(t, err)
	assert.True(t, v.OK(), "ledger: %v", v.Violations)

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	per := map[int32]int{}
	for _, g := range cl.Groups {
		per[g.GroupID]++
	}
	assert.Len(t, per, 3, "every worker holds groups: %v", per)
	var left int
	require.NoError(t, cat.Pool().QueryRow(ctx, "SELECT count(*) FROM get_rebalance_table_shards_plan()").Scan(&left))
	assert.Zero(t, left, "Citus's planner, with the same default strategy, has nothing left to move")
}
