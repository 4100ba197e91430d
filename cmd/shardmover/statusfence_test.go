package main

import (
	"context"
	"encoding/json"
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

// TestStatusNamesAPreparedFence: a shard locked by a prepared fence (of
// move 999, whose mover holds its lease, as during a cutover) neither hangs
// `status` nor makes it blame the node: it answers within seconds and says
// which move's fence locks the node. Once nobody holds the move, `status`
// settles the fence first (move 999 decided nothing: it is rolled back)
// and measures the shard.
func TestStatusNamesAPreparedFence(t *testing.T) {
	sb, cat := sandboxtest.NewCompat(t, 1)
	ctx := context.Background()
	require.NoError(t, workload.Setup(ctx, cat, 4))
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	shard := cl.Shards[0].Ident()
	w := sb.Workers()[0]
	conn, err := pgx.Connect(ctx, w.DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	lease, ok, err := cat.TryLease(ctx, 999)
	require.NoError(t, err)
	require.True(t, ok)
	for _, sql := range []string{"BEGIN", "LOCK TABLE " + shard.Sanitize() + " IN ACCESS EXCLUSIVE MODE", "PREPARE TRANSACTION 'shardmover_999_1'"} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "ROLLBACK PREPARED 'shardmover_999_1'") })

	coord := sb.Coordinator().DSN()
	start := time.Now()
	out, msg, code := run(t, "status", "-o", "json", "--coordinator", coord)
	took := time.Since(start)
	require.Equal(t, 0, code, msg)
	assert.Less(t, took, 30*time.Second, "status must not wait for the fence")
	var st metadata.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	all := strings.Join(st.Warnings, "\n")
	t.Logf("status took %s; warnings:\n%s", took.Round(time.Millisecond), all)
	assert.Contains(t, all, "sizes on "+w.Addr()+" unknown: locked by a prepared fence of move 999")
	assert.NotContains(t, all, "no server answered")
	var held int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'shardmover_999_1'").Scan(&held))
	assert.Equal(t, 1, held, "a fence whose move is held is not settled by status")

	lease.Release(ctx)
	time.Sleep(time.Until(start.Add(4 * time.Second))) // older than mover.OrphanAge
	out, msg, code = run(t, "status", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	st = metadata.Status{}
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Empty(t, st.Warnings, "the orphaned fence is settled before the shards are measured")
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'shardmover_999_1'").Scan(&held))
	assert.Zero(t, held)
	for _, g := range st.ShardGroups {
		assert.True(t, g.SizeKnown, "group %s measured", g.ID)
	}
}
