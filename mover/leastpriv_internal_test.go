package mover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// TestDiskCheckAsMoverRole: as the role of docs/privileges.md the disk
// check is refused for lack of pg_execute_server_program (and the move goes
// on without it, as the e2e test shows); with that optional grant, and
// nothing else, it measures.
func TestDiskCheckAsMoverRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb := sandboxtest.New(t, 1)
	role, err := sb.CreateMoverRole(ctx, "shardmover_disk", "pw")
	require.NoError(t, err)
	w := sb.Workers()[0]
	conn, err := pgx.Connect(ctx, role.DSN(w))
	require.NoError(t, err)
	defer conn.Close(ctx)

	_, ok, err := freeDiskBytes(ctx, conn)
	require.False(t, ok)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "got %v", err)
	assert.Equal(t, "42501", pgErr.Code, "refused for lack of privilege: %v", err)

	adm, err := pgx.Connect(ctx, w.DSN())
	require.NoError(t, err)
	defer adm.Close(ctx)
	_, err = adm.Exec(ctx, "GRANT pg_execute_server_program TO shardmover_disk")
	require.NoError(t, err)
	free, ok, err := freeDiskBytes(ctx, conn)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Positive(t, free)
}
