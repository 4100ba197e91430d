package mover_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// TestWALGuardStopsStalledMove stalls a move's applier (a test transaction
// holds ACCESS EXCLUSIVE locks on the group's tables on the target from
// the end of indexing on) while the workload writes: the slot's retained
// WAL grows past a small limit, the move fails with the guard's sentence,
// its slot is gone from the source, and the group stays on its source.
func TestWALGuardStopsStalledMove(t *testing.T) {
	c := newCluster(t, 4, 100, 1000)
	target := c.newNode(t)
	shard, source := groupShard(t, c, 0)
	ctx := context.Background()

	cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	var tables []pgx.Identifier
	for _, g := range cl.Groups {
		if g.GroupID != source || g.ShardIDs[0] != shard {
			continue
		}
		for _, id := range g.ShardIDs {
			for _, s := range cl.Shards {
				if s.ID == id {
					tables = append(tables, s.Ident())
				}
			}
		}
	}
	require.NotEmpty(t, tables)
	var srcNode metadata.Node
	for _, n := range cl.Nodes {
		if n.GroupID == source {
			srcNode = n
		}
	}

	var mu sync.Mutex
	var lockTx pgx.Tx
	var lockConn *pgx.Conn
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		if lockTx != nil {
			_ = lockTx.Rollback(ctx)
			lockConn.Close(ctx)
			lockTx, lockConn = nil, nil
		}
	}
	t.Cleanup(release)

	cfg := testConfig(t)
	cfg.MaxRetainedWAL = 4 << 20
	// Keep the move in catching_up: the stalled applier never gets within
	// a byte of the source.
	cfg.CutoverMaxLagBytes = 1
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p != mover.Indexing {
			return nil
		}
		conn, err := c.cat.ConnectNode(ctx, target.Host, target.Port)
		if err != nil {
			return err
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		for _, tb := range tables {
			if _, err := tx.Exec(ctx, "LOCK TABLE "+tb.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				return err
			}
		}
		mu.Lock()
		lockTx, lockConn = tx, conn
		mu.Unlock()
		return nil
	}
	eng := mover.New(cfg, c.cat)
	m := scheduleMove(t, eng, shard, target)
	bg := startWorkload(c, 4, 100, 0)

	runErr := make(chan error, 1)
	go func() { runErr <- eng.Run(ctx, m.ID) }()

	// Once the move has failed and its slot is gone, the test lets go of
	// the target's tables, so that the failed move can drop them.
	srcConn, err := c.cat.ConnectNode(ctx, srcNode.Host, srcNode.Port)
	require.NoError(t, err)
	defer srcConn.Close(ctx)
	deadline := time.Now().Add(3 * time.Minute)
	var got metadata.Move
	for {
		require.True(t, time.Now().Before(deadline), "the guard did not stop the move")
		got, err = c.cat.Move(ctx, m.ID)
		require.NoError(t, err)
		var slots int
		require.NoError(t, srcConn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", m.Name()).Scan(&slots))
		if got.Phase == "failed" && slots == 0 {
			break
		}
		require.NotEqual(t, "done", string(got.Phase))
		time.Sleep(200 * time.Millisecond)
	}
	mu.Lock()
	locked := lockTx != nil
	mu.Unlock()
	assert.True(t, locked, "the applier was stalled by the test's locks")
	release()

	select {
	case err = <-runErr:
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return after the move failed")
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "of WAL on "+srcNode.Addr()+", more than the limit 4.0 MiB")
	assert.Contains(t, err.Error(), "it was stopped and its slot dropped so the source's disk is safe")
	got, err = c.cat.Move(ctx, m.ID)
	require.NoError(t, err)
	assert.Equal(t, "failed", string(got.Phase))
	assert.Contains(t, got.Error, "retained")
	assert.Contains(t, got.Error, "more than the limit 4.0 MiB")
	t.Logf("move error: %s", got.Error)

	_, group := groupShard(t, c, 0)
	assert.Equal(t, source, group, "a move stopped by the guard leaves the group on its source")

	res := bg.stop(t)
	verify(t, c, res)
}
