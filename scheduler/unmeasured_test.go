package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/scheduler"
)

// TestDaemonSkipsRoundWhileNodeUnmeasured: with a worker stopped, each
// cron round of the daemon logs that it is skipped, naming the worker,
// and records no job (before, the round planned with the worker's groups
// read as empty). With AllowUnmeasured the round rebalances the others
// and no move involves the stopped worker.
func TestDaemonSkipsRoundWhileNodeUnmeasured(t *testing.T) {
	sb, cat, _ := loaded(t, 8)
	ctx := context.Background()
	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	_, err = cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	stopped := sb.Workers()[0]
	require.NoError(t, sb.StopNode(ctx, stopped, "fast"))
	down, err := cat.NodeByAddr(ctx, stopped.Addr())
	require.NoError(t, err)

	core, logs := observer.New(zap.InfoLevel)
	cfg := daemonConfig(t)
	cfg.Mover.Logger = zap.New(core)
	cfg.Schedules = []string{"*/1 * * * * *"}
	cfg.Timezone = "UTC"
	d, stop := startDaemon(t, cfg, cat)
	const skipped = "rebalance round skipped: a node could not be measured, and planning without it would guess"
	eventually(t, "two skipped rounds", time.Minute, func() bool { return logs.FilterMessage(skipped).Len() >= 2 })
	assert.Positive(t, scrape(t, d)["shardmover_triggers_total{source=cron}"])
	stop()
	for _, e := range logs.FilterMessage(skipped).All() {
		assert.Equal(t, "cron", e.ContextMap()["source"])
		msg, _ := e.ContextMap()["error"].(string)
		assert.Contains(t, msg, "node "+stopped.Addr()+" could not be measured (connection refused)")
	}
	assert.Zero(t, logs.FilterMessage("rebalance failed").Len(), "a skipped round is not a failed rebalance")
	jobs, err := cat.Jobs(ctx, 10)
	require.NoError(t, err)
	assert.Empty(t, jobs, "a skipped round records no job")

	core, logs = observer.New(zap.InfoLevel)
	cfg.Mover.Logger = zap.New(core)
	cfg.Plan.AllowUnmeasured = true
	_, stop = startDaemon(t, cfg, cat)
	defer stop()
	eventually(t, "a rebalance job to finish", 3*time.Minute, func() bool {
		jobs, err := cat.Jobs(ctx, 10)
		return err == nil && len(jobs) > 0 && jobs[0].State == "done"
	})
	moves, err := cat.Moves(ctx, metadata.MoveFilter{})
	require.NoError(t, err)
	require.NotEmpty(t, moves)
	for _, m := range moves {
		assert.NotEqual(t, down.GroupID, m.SourceGroup, "move %d", m.ID)
		assert.NotEqual(t, down.GroupID, m.TargetGroup, "move %d", m.ID)
	}
	assert.Positive(t, logs.FilterMessage("planning without a node that could not be measured: its shard groups stay where they are and no move involves it").Len())
}

// TestDaemonRefusesNotACluster: Start refuses at once a coordinator that
// is not a cluster's (metadata.ErrNotCluster), creating nothing there;
// before, the daemon became leader, created the journal, and logged every
// poll that it could not read the node catalog.
func TestDaemonRefusesNotACluster(t *testing.T) {
	c := sandboxtest.New(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: c.Coordinator().DSN()})
	require.NoError(t, err)
	defer cat.Close()
	d, err := scheduler.NewDaemon(daemonConfig(t), cat)
	require.NoError(t, err)
	err = d.Start(ctx)
	require.ErrorIs(t, err, metadata.ErrNotCluster)
	require.ErrorIs(t, err, metadata.ErrInvalid)
	require.NoError(t, ctx.Err(), "refused at once, not when the test's deadline passed")
	var n int
	require.NoError(t, cat.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'shardmover%'`).Scan(&n))
	assert.Zero(t, n, "the refused daemon created nothing")
}
