package pgerr_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/pgerr"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// TestServerErrors classifies what a real server returns: a lock timeout,
// an undefined table and object, a terminated session, a refused dial.
func TestServerErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := sandboxtest.New(t, 1)
	dsn := c.Coordinator().DSN()
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	holder, waiter := connect(), connect()
	_, err := holder.Exec(ctx, "CREATE TABLE t (id int)")
	require.NoError(t, err)

	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	_, err = waiter.Exec(ctx, "SET lock_timeout = '100ms'")
	require.NoError(t, err)
	_, err = waiter.Exec(ctx, "SELECT * FROM t")
	require.Error(t, err)
	assert.True(t, pgerr.IsLockTimeout(err), "%v", err)
	assert.False(t, pgerr.IsPermanent(err), "a lock timeout is retried")
	assert.False(t, pgerr.IsConnection(err))
	require.NoError(t, tx.Rollback(ctx))

	_, err = waiter.Exec(ctx, "SELECT * FROM no_such_table")
	require.Error(t, err)
	assert.True(t, pgerr.IsUndefinedTable(err), "%v", err)
	assert.True(t, pgerr.IsPermanent(err))
	assert.False(t, pgerr.IsUnknownOutcome(err), "a server error means the statement failed")

	_, err = waiter.Exec(ctx, "ROLLBACK PREPARED 'no_such_gid'")
	require.Error(t, err)
	assert.True(t, pgerr.IsUndefinedObject(err), "%v", err)

	// A session terminated under it: a connection failure.
	_, err = holder.Exec(ctx, "SELECT pg_terminate_backend($1)", waiter.PgConn().PID())
	require.NoError(t, err)
	_, err = waiter.Exec(ctx, "SELECT 1")
	require.Error(t, err)
	assert.True(t, pgerr.IsConnection(err), "%v (SQLSTATE %q)", err, pgerr.Code(err))

	// Nothing listens on port 1.
	_, err = pgx.Connect(ctx, "host=127.0.0.1 port=1 user=postgres dbname=postgres connect_timeout=5")
	require.Error(t, err)
	assert.True(t, pgerr.IsConnection(err), "%v", err)
	assert.Equal(t, "", pgerr.Code(err))
}
