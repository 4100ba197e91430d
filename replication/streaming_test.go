package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// streamingEnv is a source that streams any transaction over 64 kB while
// it runs (pgoutput protocol 2), with table big set up for replication.
func streamingEnv(t *testing.T, name string) (*env, *running) {
	e := newEnv(t)
	e.exec(e.src, `ALTER SYSTEM SET logical_decoding_work_mem = '64kB'`)
	e.exec(e.src, `SELECT pg_reload_conf()`)
	e.both(`CREATE TABLE big (id int PRIMARY KEY, v int NOT NULL, pad text NOT NULL)`)
	e.exec(e.src, `INSERT INTO big SELECT g, 0, 'copied' FROM generate_series(-100, -2) g`)
	start := e.setup(name, []pgx.Identifier{{"public", "big"}}, nil)
	return e, e.run(e.streamConfig(name, start))
}

// streamed waits until the source has streamed at least one transaction
// of the slot in progress.
func (e *env) streamed(t *testing.T, slot string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int64
		e.scalar(e.src, `SELECT coalesce(sum(stream_bytes), 0)::int8 FROM pg_stat_replication_slots WHERE slot_name = '`+slot+`'`, &n)
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the source never streamed an in-progress transaction")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestStreamedTransactions: large transactions arrive while they run
// (protocol 2). A committed one with a rolled-back savepoint, a released
// one and small transactions committing in between, and a large one rolled
// back entirely: the target equals the source.
func TestStreamedTransactions(t *testing.T) {
	e, r := streamingEnv(t, "shardmover_streamed")
	ctx := context.Background()
	big := e.connect(e.srcDSN)

	tx, err := big.Begin(ctx)
	require.NoError(t, err)
	for _, sql := range []string{
		`INSERT INTO big SELECT g, g, repeat(md5(g::text), 8) FROM generate_series(1, 5000) g`,
		`SAVEPOINT a`,
		`INSERT INTO big SELECT g, -g, 'rolled back' FROM generate_series(100001, 103000) g`,
		`ROLLBACK TO SAVEPOINT a`,
		`SAVEPOINT b`,
		`UPDATE big SET v = v + 1 WHERE id BETWEEN 1 AND 2000`,
		`RELEASE SAVEPOINT b`,
	} {
		_, err := tx.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	e.streamed(t, "shardmover_streamed")
	// Small transactions commit while the large one is open.
	e.exec(e.src, `INSERT INTO big VALUES (-1, 0, 'small')`)
	e.exec(e.src, `UPDATE big SET v = 42 WHERE id = -50`)
	_, err = tx.Exec(ctx, `DELETE FROM big WHERE id BETWEEN 4000 AND 4100`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	tx, err = big.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO big SELECT g, g, repeat('y', 300) FROM generate_series(200001, 205000) g`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	e.exec(e.src, `INSERT INTO big VALUES (0, 0, 'after the rollback')`)

	e.catchUp(r)
	e.assertSame("big", "id")
	var n int
	e.scalar(e.tgt, `SELECT count(*) FROM big WHERE id > 100000 OR pad = 'rolled back'`, &n)
	assert.Zero(t, n, "nothing of a rolled-back savepoint or transaction")
	require.NoError(t, r.stop())
}

// TestStreamedTransactionSurvivesRestart: the applier is stopped while a
// large transaction is being streamed; a new one resumes from the origin,
// is streamed the transaction again from its start, and applies it once.
func TestStreamedTransactionSurvivesRestart(t *testing.T) {
	e, r := streamingEnv(t, "shardmover_restart")
	ctx := context.Background()
	big := e.connect(e.srcDSN)
	tx, err := big.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO big SELECT g, g, repeat(md5(g::text), 8) FROM generate_series(1, 4000) g`)
	require.NoError(t, err)
	e.streamed(t, "shardmover_restart")
	require.NoError(t, r.stop())

	e.exec(e.src, `INSERT INTO big VALUES (-1, 0, 'between')`)
	r2 := e.run(e.streamConfig("shardmover_restart", 0))
	_, err = tx.Exec(ctx, `UPDATE big SET v = -v WHERE id BETWEEN 1 AND 1000`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	e.catchUp(r2)
	e.assertSame("big", "id")
	require.NoError(t, r2.stop())
}
