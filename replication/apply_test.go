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
// carry on, regrouping again afterwards.
func TestRegroupedChangesFallBackToSourceOrder(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE acct (id int PRIMARY KEY, email text UNIQUE NOT NULL, n int NOT NULL DEFAULT 0)`)
	e.exec(e.src, `INSERT INTO acct VALUES (1, 'x')`)
	start := e.setup("shardmover_regroup", []pgx.Identifier{{"public", "acct"}}, nil)

	core, logs := observer.New(zap.InfoLevel)
	cfg := e.streamConfig("shardmover_regroup", start)
	cfg.Logger = zap.New(core)
	// In one source transaction the three changes are one segment: the
	// inserts of 2 and 3 share a run that goes out before the delete of 1,
	// so 3 would take 'x' while 1 still holds it.
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

// TestDivergedRunNamesTheRows: a multi-row UPDATE that finds fewer rows on
// the target than it holds stops the stream with ErrDiverged, after the
// in-order replay finds the same, naming the row.
func TestDivergedRunNamesTheRows(t *testing.T) {
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
