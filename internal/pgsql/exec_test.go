package pgsql_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/pgsql"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// TestExecOneRefusesASecondStatement: the text a hostile index name would
// make of a naive DDL is refused whole; the simple protocol would have run
// the DROP.
func TestExecOneRefusesASecondStatement(t *testing.T) {
	sb := sandboxtest.New(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, sb.Coordinator().DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)

	_, err = pgsql.ExecOne(ctx, conn, "CREATE TABLE victim (id int)")
	require.NoError(t, err)
	_, err = pgsql.ExecOne(ctx, conn, "CREATE TABLE t (id int); DROP TABLE victim")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "multiple commands")
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT to_regclass('victim') IS NOT NULL AND to_regclass('t') IS NULL").Scan(&exists))
	assert.True(t, exists, "nothing of the two-statement text may run")

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	tag, err := pgsql.ExecOne(ctx, tx.Conn(), "INSERT INTO victim VALUES (1)")
	require.NoError(t, err)
	assert.Equal(t, int64(1), tag.RowsAffected())
	require.NoError(t, tx.Rollback(ctx))
}

// TestExecEachRefusesASecondStatement: ExecEach runs its statements in
// order in one round trip, refuses a text with two statements whole, and
// runs nothing after the one that failed.
func TestExecEachRefusesASecondStatement(t *testing.T) {
	sb := sandboxtest.New(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, sb.Coordinator().DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)

	i, err := pgsql.ExecEach(ctx, conn, []string{"CREATE TABLE a (id int)", "CREATE TABLE b (id int)"})
	require.NoError(t, err)
	assert.Equal(t, -1, i)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	i, err = pgsql.ExecEach(ctx, tx.Conn(), []string{
		"ALTER TABLE a RENAME TO a2",
		"ALTER TABLE b RENAME TO b2; DROP TABLE a2",
		"CREATE TABLE c (id int)",
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "multiple commands")
	assert.Equal(t, 1, i, "the second statement failed")
	require.NoError(t, tx.Rollback(ctx))
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass('a') IS NOT NULL AND to_regclass('b') IS NOT NULL
		AND to_regclass('a2') IS NULL AND to_regclass('c') IS NULL`).Scan(&ok))
	assert.True(t, ok, "nothing of the failed batch may stay")
}
