package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// A shardmover slot held back on a worker (nobody consumes it while WAL is
// written) shows in `status`, with a positive retained size, in JSON and in
// the human table.
func TestStatusShowsRetainedWAL(t *testing.T) {
	sb, cat := sandboxtest.NewCompat(t, 1)
	ctx := context.Background()
	w := sb.Workers()[0]
	conn, err := pgx.Connect(ctx, w.DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT pg_create_logical_replication_slot('shardmover_9999', 'pgoutput')")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE wal_filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 20000) g")
	require.NoError(t, err)
	node, err := cat.NodeByAddr(ctx, w.Addr())
	require.NoError(t, err)

	coord := sb.Coordinator().DSN()
	out, msg, code := run(t, "status", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	var st metadata.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st.Slots, 1, "one shardmover slot in the cluster: %s", out)
	s := st.Slots[0]
	assert.Equal(t, "shardmover_9999", s.Name)
	assert.Equal(t, int64(9999), s.MoveID)
	assert.Equal(t, node.ID, s.NodeID)
	assert.Equal(t, w.Addr(), s.Addr)
	assert.False(t, s.Active)
	assert.True(t, s.RetainedKnown)
	assert.Greater(t, s.RetainedWALBytes, int64(1_000_000), "20000 rows of 200 bytes were written after the slot")
	assert.Empty(t, st.Warnings)

	out, msg, code = run(t, "status", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "RETAINED WAL")
	assert.Contains(t, out, "shardmover_9999")
	assert.Contains(t, out, "replication slots: 1, retaining ")

	_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot('shardmover_9999')")
	require.NoError(t, err)
	out, msg, code = run(t, "status", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	st = metadata.Status{}
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.NotNil(t, st.Slots, "replication_slots is always present")
	assert.Empty(t, st.Slots)
	out, _, _ = run(t, "status", "--coordinator", coord)
	assert.Contains(t, out, "replication slots: no shardmover slot retains WAL on any node")
}
