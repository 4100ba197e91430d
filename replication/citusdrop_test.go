package replication_test

import (
	"context"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/replication"
)

// TestDropHeldSlotOnCitus: Citus adds its own pg_terminate_backend(bigint,
// bigint) beside PostgreSQL's (integer, bigint), so a call whose argument
// types are left to the server is ambiguous there (SQLSTATE 42725). DropSlot
// on a Citus worker whose slot a walsender holds must terminate it and drop
// the slot.
func TestDropHeldSlotOnCitus(t *testing.T) {
	ctx := context.Background()
	sb, _ := sandboxtest.NewCitus(t, 1)
	w := sb.Workers()[0]
	conn, err := pgx.Connect(ctx, w.DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var lsn string
	require.NoError(t, conn.QueryRow(ctx, "SELECT lsn::text FROM pg_create_logical_replication_slot('shardmover_held', 'test_decoding')").Scan(&lsn))
	start, err := pglogrepl.ParseLSN(lsn)
	require.NoError(t, err)
	// A walsender streaming from the slot holds it.
	rconn, err := pgconn.Connect(ctx, w.DSN()+" replication=database")
	require.NoError(t, err)
	defer rconn.Close(context.Background())
	require.NoError(t, pglogrepl.StartReplication(ctx, rconn, "shardmover_held", start, pglogrepl.StartReplicationOptions{}))
	var active bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'shardmover_held'").Scan(&active))
	require.True(t, active, "the snapshot's walsender holds the slot")
	require.NoError(t, replication.DropSlot(ctx, conn, "shardmover_held"))
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'shardmover_held'").Scan(&n))
	require.Zero(t, n, "the slot is gone")
}
