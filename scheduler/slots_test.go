package scheduler_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// A shardmover slot held back on a worker shows in the daemon's /metrics
// (shardmover_slot_retained_wal_bytes) and /status with a positive retained
// size, and leaves both once it is dropped.
func TestDaemonReportsRetainedWAL(t *testing.T) {
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

	cfg := daemonConfig(t)
	cfg.SweepEvery = time.Hour // the sweep would drop the orphan slot
	d, stop := startDaemon(t, cfg, cat)
	defer stop()

	key := "shardmover_slot_retained_wal_bytes{move_id=9999}{node=" + w.Addr() + "}{slot=shardmover_9999}"
	eventually(t, "/metrics to show the slot's retained WAL", 30*time.Second, func() bool {
		return scrape(t, d)[key] > 1_000_000
	})

	type statusBody struct {
		Slots *struct {
			ReadAt time.Time             `json:"read_at"`
			Slots  []metadata.StatusSlot `json:"slots"`
		} `json:"replication_slots"`
	}
	status := func() statusBody {
		resp, err := http.Get("http://" + d.Addr() + "/status")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var body statusBody
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body
	}
	body := status()
	require.NotNil(t, body.Slots)
	require.Len(t, body.Slots.Slots, 1)
	s := body.Slots.Slots[0]
	assert.Equal(t, "shardmover_9999", s.Name)
	assert.Equal(t, int64(9999), s.MoveID)
	assert.Equal(t, w.Addr(), s.Addr)
	assert.Greater(t, s.RetainedWALBytes, int64(1_000_000))

	_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot('shardmover_9999')")
	require.NoError(t, err)
	eventually(t, "the dropped slot to leave /metrics", 30*time.Second, func() bool {
		for k := range scrape(t, d) {
			if strings.HasPrefix(k, "shardmover_slot_retained_wal_bytes") {
				return false
			}
		}
		return true
	})
	assert.Empty(t, status().Slots.Slots)
}
