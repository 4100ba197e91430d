package mover_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// TestCutoverFlushesAnIdleSource: on a source whose last commit was
// asynchronous and whose WAL writer sleeps long (wal_writer_delay 10 s),
// the WAL insert position the cutover records stays ahead of what the
// walsender may send until something flushes it. The cutover must flush it
// itself; waiting for the WAL writer timed every attempt out (the review
// saw 15 s and more of rolled-back attempts). So the first attempt
// commits: no cutover is rolled back.
func TestCutoverFlushesAnIdleSource(t *testing.T) {
	sb := sandboxtest.NewWithSettings(t, 2, map[string]string{
		"wal_writer_delay": "10000ms",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: sb.Coordinator().DSN()})
	require.NoError(t, err)
	t.Cleanup(cat.Close)
	require.NoError(t, sb.Register(ctx, cat))
	require.NoError(t, workload.Setup(ctx, cat, 4))
	r, err := workload.NewRouter(ctx, cat, 4)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 1, Users: 100, Events: 500})
	require.NoError(t, err)
	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	target, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	c := &cluster{sb: sb, cat: cat, r: r}

	shard, source := groupShard(t, c, 0)
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	src, ok := cl.NodeByGroup(source)
	require.True(t, ok)
	var shardTable string
	for _, s := range cl.Shards {
		if s.ID == shard {
			shardTable = s.Ident().Sanitize()
		}
	}
	require.NotEmpty(t, shardTable)
	t.Logf("source %s target %s", src.Addr(), target.Addr())

	cfg := testConfig(t)
	cfg.CutoverMaxLag = time.Hour // the gate must not wait for the WAL writer either
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p != mover.CatchingUp {
			return nil
		}
		// One asynchronous commit just before the cutover: acknowledged,
		// inserted, not flushed.
		conn, err := cat.ConnectNode(context.Background(), src.Host, src.Port)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "SET synchronous_commit = off"); err != nil {
			return err
		}
		_, err = conn.Exec(context.Background(), "DELETE FROM "+shardTable+" WHERE ctid = (SELECT min(ctid) FROM "+shardTable+")")
		return err
	}
	eng := mover.New(cfg, cat)
	m := scheduleMove(t, eng, shard, target)
	require.NoError(t, eng.Run(ctx, m.ID))
	hist, err := cat.MoveHistory(ctx, m.ID)
	require.NoError(t, err)
	rolledBack := 0
	for _, h := range hist {
		if h.From == "cutover" && h.To == "catching_up" {
			rolledBack++
			t.Logf("rolled back: %s", h.Message)
		}
	}
	assert.Zero(t, rolledBack, "the cutover waited for the WAL writer instead of flushing")
}
