package mover_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/mover"
)

// TestUnrelatedPreparedTransactionNamed is issue 31's fifth case, its
// second half: a prepared transaction on the source that nobody ends, on a
// table no move touches, holds the creation of every new replication slot
// there. The move's setup must not wait for it without a word: it names
// the transaction (gid, database, owner, age) and says how to end it, and
// the move fails after its retries, the source serving as before.
func TestUnrelatedPreparedTransactionNamed(t *testing.T) {
	c := newCluster(t, 4, 100, 1000)
	target := c.newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	shard, sourceGroup := groupShard(t, c, 0)
	src := nodeOfGroup(t, c, sourceGroup)
	conn, err := c.cat.ConnectNode(ctx, src.Host, src.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, sql := range []string{"CREATE TABLE bookkeeping (n int)", "BEGIN", "INSERT INTO bookkeeping VALUES (1)", "PREPARE TRANSACTION 'dba_forgot_this'"} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "ROLLBACK PREPARED 'dba_forgot_this'") })

	cfg := testConfig(t)
	cfg.RetryFor = 5 * time.Second
	eng := mover.New(cfg, c.cat)
	m := scheduleMove(t, eng, shard, target)
	start := time.Now()
	err = eng.Run(ctx, m.ID)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the move must not wait for the prepared transaction with no bound")
	t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
	assert.Contains(t, err.Error(), "'dba_forgot_this'", "the error names the prepared transaction")
	assert.Contains(t, err.Error(), "ROLLBACK PREPARED", "and says how to end it")
	assert.Contains(t, err.Error(), `database "postgres"`)
	got, err := c.cat.Move(ctx, m.ID)
	require.NoError(t, err)
	assert.Equal(t, "failed", string(got.Phase), "the move fails; the source serves as before")
	var slots int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%'").Scan(&slots))
	assert.Zero(t, slots)
}
