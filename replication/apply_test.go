package replication_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shardmover/shardmover/replication"
)

// TestRegroupedChangesFallBackToSourceOrder: the applier regroups changes
// to distinct rows into multi-row statements. A unique value that moves
// from a deleted row to a new one makes the regrouped order fail on the
// target; the stream must replay those transactions in source order and
// carry on, regrouping again afterwards (the table's inserts; its updates
// and deletes stay in source order, see TestSwapsKeepProgressAfterReplay).
func TestRegroupedChangesFallBackToSourceOrder(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE acct (id int PRIMARY KEY, email text UNIQUE NOT NULL, n int NOT NULL DEFAULT 0)`)
	e.exec(e.src, `INSERT INTO acct VALUES (1, 'x')`)
	start := e.setup("shardmover_regroup", []pgx.Identifier{{"public", "acct"}}, nil)

	core, logs := observer.New(zap.InfoLevel)
	cfg := e.streamConfig("shardmover_regroup", start)
	cfg.Logger = zap.New(core)
	// In one source transaction the three changes are one segment: the
	// inserts of 2 and 3 share a row batch that goes out before the delete
	// of 1, so 3 would take 'x' while 1 still holds it.
	e.exec(e.src, `BEGIN; INSERT INTO acct VALUES (2, 'y'); DELETE FROM acct WHERE id = 1; INSERT INTO acct VALUES (3, 'x'); COMMIT`)
	r := e.run(cfg)
	e.catchUp(r)
	e.assertSame("acct", "id")
	assert.Equal(t, 1, logs.FilterMessageSnippet("applying these transactions in source order").Len(),
		"the regrouped unit must have failed once and been replayed in order")

	// Later transactions are regrouped again and still correct.
	e.exec(e.src, `BEGIN; INSERT INTO acct SELECT g, 'e' || g FROM generate_series(10, 200) g; UPDATE acct SET n = n + 1 WHERE id BETWEEN 10 AND 100; DELETE FROM acct WHERE id BETWEEN 150 AND 160; COMMIT`)
	e.catchUp(r)
	e.assertSame("acct", "id")
	assert.Equal(t, 1, logs.FilterMessageSnippet("applying these transactions in source order").Len())
	require.NoError(t, r.stop())
}

// TestDivergedRowBatchNamesTheRows: a multi-row UPDATE that finds fewer
// rows on the target than it holds stops the stream with ErrDiverged, after
// the in-order replay finds the same, naming the row.
func TestDivergedRowBatchNamesTheRows(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE dv (id int PRIMARY KEY, v int NOT NULL)`)
	e.exec(e.src, `INSERT INTO dv SELECT g, 0 FROM generate_series(1, 50) g`)
	start := e.setup("shardmover_diverge", []pgx.Identifier{{"public", "dv"}}, nil)
	e.exec(e.tgt, `DELETE FROM dv WHERE id = 17`) // behind the stream's back
	e.exec(e.src, `UPDATE dv SET v = v + 1 WHERE id BETWEEN 10 AND 30`)
	r := e.run(e.streamConfig("shardmover_diverge", start))
	select {
	case err := <-r.done:
		r.done <- err
		require.Error(t, err)
		assert.True(t, errors.Is(err, replication.ErrDiverged), "%v", err)
		assert.Contains(t, err.Error(), "(id)=(17)")
	case <-time.After(60 * time.Second):
		t.Fatal("the stream did not stop on a diverged target")
	}
	var v int
	e.scalar(e.tgt, `SELECT v FROM dv WHERE id = 10`, &v)
	assert.Equal(t, 0, v, "nothing of the failed transaction is applied")
}

// TestCoalescedChangesMatchSource: within one target transaction the
// applier folds several changes of a row into one (insert+update, update+
// update, insert+delete, update+delete) and keeps delete+insert in order.
// Every combination, in one source transaction and spread over several
// small ones, must leave the target equal to the source, TOASTed values
// included.
func TestCoalescedChangesMatchSource(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE co (id int PRIMARY KEY, v int NOT NULL, s text, big text);
		ALTER TABLE co ALTER COLUMN big SET STORAGE EXTERNAL`)
	e.exec(e.src, `INSERT INTO co SELECT g, 0, 'old', repeat(md5(g::text), 100) FROM generate_series(1000, 1100) g`)
	start := e.setup("shardmover_coalesce", []pgx.Identifier{{"public", "co"}}, nil)
	r := e.run(e.streamConfig("shardmover_coalesce", start))
	for _, sql := range []string{
		// One transaction holding every combination.
		`BEGIN;
		 INSERT INTO co SELECT g, g, 'new', repeat(md5(g::text), 100) FROM generate_series(1, 100) g;
		 UPDATE co SET v = v + 1 WHERE id BETWEEN 1 AND 50;            -- insert + update (big unchanged: 'u')
		 UPDATE co SET v = v + 1 WHERE id BETWEEN 1 AND 25;            -- + update, same columns
		 UPDATE co SET s = 'other' WHERE id BETWEEN 20 AND 30;         -- + update, other columns
		 DELETE FROM co WHERE id BETWEEN 40 AND 60;                     -- insert (+ update) + delete
		 INSERT INTO co VALUES (45, -45, 'again', 'x');                 -- delete + insert
		 UPDATE co SET v = v * 2 WHERE id BETWEEN 1000 AND 1050;       -- existing rows: update + ...
		 UPDATE co SET v = v * 2 WHERE id BETWEEN 1000 AND 1020;       -- ... + update
		 DELETE FROM co WHERE id BETWEEN 1010 AND 1030;                 -- ... + delete
		 UPDATE co SET big = 'changed ' || id WHERE id BETWEEN 1040 AND 1045;
		 COMMIT`,
	} {
		e.exec(e.src, sql)
	}
	// The same kinds of sequences as many small transactions, which the
	// applier groups into one target transaction.
	for i := 0; i < 30; i++ {
		e.exec(e.src, `INSERT INTO co VALUES ($1, 0, 'n', 'b')`, 2000+i)
		e.exec(e.src, `UPDATE co SET v = v + 1 WHERE id = $1`, 2000+i)
		e.exec(e.src, `UPDATE co SET v = v + 1, s = 's' WHERE id = $1`, 1060+i)
		if i%3 == 0 {
			e.exec(e.src, `DELETE FROM co WHERE id = $1`, 2000+i)
			e.exec(e.src, `DELETE FROM co WHERE id = $1`, 1060+i)
		}
	}
	e.catchUp(r)
	e.assertSame("co", "id")
	var n int
	e.scalar(e.tgt, `SELECT count(*) FROM co WHERE length(big) = 3200`, &n)
	assert.Greater(t, n, 100, "TOASTed values survive coalesced updates")
	require.NoError(t, r.stop())
}
