package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// TestOrphanedFenceSettledByDaemon is issue 31's fifth case: a mover dies
// between PREPARE and its decision, leaving the source's shards locked by
// its fence (on compat even reads wait). With a daemon running, even a
// standby one, a plain read of the shard answers within 10 s: the daemon
// settles the orphaned fence (rolled back: no decision committed) without
// waiting for its minute's sweep or for the move to be resumed. The move
// then resumes and finishes.
func TestOrphanedFenceSettledByDaemon(t *testing.T) {
	_, cat, _ := loaded(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Another process leads: the daemon stays a standby, and so never
	// resumes the move's job itself.
	leader, ok, err := cat.TryLeaderLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	defer leader.Release(context.Background())
	d, stop := startDaemon(t, daemonConfig(t), cat)
	defer stop()
	require.False(t, d.IsLeader())

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	g := cl.Groups[0]
	var source, target metadata.Node
	for _, n := range cl.Nodes {
		switch {
		case n.GroupID == g.GroupID:
			source = n
		case !n.IsCoordinator():
			target = n
		}
	}
	require.NotZero(t, source.ID)
	require.NotZero(t, target.ID)

	cfg := mover.DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	cfg.CutoverStep = func(_ int64, step string) error {
		if step == "prepared" {
			return errors.New("die with the fence prepared, before the decision")
		}
		return nil
	}
	eng := mover.New(cfg, cat)
	specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: g.ShardIDs[0], Target: target}})
	require.NoError(t, err)
	require.NoError(t, eng.Preflight(ctx, specs[0]))
	_, moves, err := eng.Schedule(ctx, "move", specs)
	require.NoError(t, err)
	require.ErrorIs(t, eng.Run(ctx, moves[0].ID), mover.ErrKilled)

	conn, err := cat.ConnectNode(ctx, source.Host, source.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var prepared int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'").Scan(&prepared))
	require.Equal(t, 1, prepared, "the dead mover left its fence prepared")

	shard := cl.Shards[0]
	for _, s := range cl.Shards {
		if s.ID == g.ShardIDs[0] {
			shard = s
		}
	}
	_, err = conn.Exec(ctx, "SET statement_timeout = '10s'")
	require.NoError(t, err)
	start := time.Now()
	var rows int64
	err = conn.QueryRow(ctx, "SELECT count(*) FROM "+shard.Ident().Sanitize()).Scan(&rows)
	took := time.Since(start)
	require.NoError(t, err, "a read of the shard must answer within 10 s once a daemon runs (it waited %s)", took.Round(time.Millisecond))
	t.Logf("a read of the fenced shard answered after %s", took.Round(time.Millisecond))
	assert.Positive(t, rows)
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'").Scan(&prepared))
	assert.Zero(t, prepared, "the orphaned fence is settled")

	done := mover.New(mover.Config{Logger: zaptest.NewLogger(t)}, cat)
	require.NoError(t, done.Run(ctx, moves[0].ID), "the move resumes and finishes")
	m, err := cat.Move(ctx, moves[0].ID)
	require.NoError(t, err)
	assert.Equal(t, metadata.PhaseDone, m.Phase)
}
