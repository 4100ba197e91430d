package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/shardmover/shardmover/replication"
)

// TestCarryOverNeverOverwritesNewerRows: the source and the target both
// take writes after the stream stopped (the decision); CarryOver carries
// the source's only where the target's row is still as at the decision,
// and otherwise stops, naming every such row and changing nothing:
//
//   - k 1: updated on the source only (a row the copy wrote): carried;
//   - k 2: updated on both: conflict;
//   - k 3: deleted on the target, updated on the source: conflict;
//   - k 4: updated on both to the same value: nothing to carry;
//   - k 6: updated on the source during catch-up (the applier wrote it)
//     and after: a conflict, as the applier's rows cannot be told from
//     the target's own;
//   - k 10: inserted on both, differently: conflict;
//   - k 11: inserted, updated and deleted on the source: nothing left;
//   - k 12: inserted on the source only: carried;
//   - f (REPLICA IDENTITY FULL): a row updated on the source only is
//     carried; one updated on both is a conflict (found once the keyed
//     rows are settled).
//
// Each conflict is settled the way an operator would (both sides made to
// agree, or the target's row given back its value of the decision), and
// the last carry-over applies the rest.
func TestCarryOverNeverOverwritesNewerRows(t *testing.T) {
	e := newEnv(t)
	e.both("CREATE TABLE k (id int PRIMARY KEY, v text, n int)")
	e.both("CREATE TABLE f (a int, b text)")
	e.both("ALTER TABLE f REPLICA IDENTITY FULL")
	e.exec(e.src, "INSERT INTO k SELECT g, 'v' || g, g FROM generate_series(1, 6) g")
	e.exec(e.src, "INSERT INTO f VALUES (1, 'x'), (2, 'y')")
	tables := []pgx.Identifier{{"public", "k"}, {"public", "f"}}
	start := e.setup("carry", tables, nil)
	r := e.run(e.streamConfig("carry", start))
	e.exec(e.src, "UPDATE k SET v = 'caught up' WHERE id = 6")
	e.catchUp(r)
	require.NoError(t, r.stop())
	e.assertSame("k", "id")

	// After the decision: the target serves...
	e.exec(e.tgt, "UPDATE k SET v = 'fresh' WHERE id = 2")
	e.exec(e.tgt, "DELETE FROM k WHERE id = 3")
	e.exec(e.tgt, "UPDATE k SET v = 'same' WHERE id = 4")
	e.exec(e.tgt, "INSERT INTO k VALUES (10, 'fresh', 10)")
	e.exec(e.tgt, "UPDATE f SET b = 'fresh' WHERE a = 2")
	// ...and stale clients write to the source.
	for _, sql := range []string{
		"UPDATE k SET v = 'stale' WHERE id = 1",
		"UPDATE k SET v = 'stale' WHERE id = 2",
		"UPDATE k SET v = 'stale' WHERE id = 3",
		"UPDATE k SET v = 'same' WHERE id = 4",
		"UPDATE k SET v = 'stale' WHERE id = 6",
		"INSERT INTO k VALUES (10, 'stale', 10)",
		"INSERT INTO k VALUES (11, 'gone', 11)", "UPDATE k SET n = 0 WHERE id = 11", "DELETE FROM k WHERE id = 11",
		"INSERT INTO k VALUES (12, 'new', 12)",
		"UPDATE f SET b = 'stale' WHERE a = 1",
		"UPDATE f SET b = 'stale' WHERE a = 2",
	} {
		e.exec(e.src, sql)
	}
	before := e.digest(e.tgt, "k", "id") + " " + e.digest(e.tgt, "f", "a")

	var conflict *replication.ConflictError
	_, err := e.carry()
	require.ErrorAs(t, err, &conflict)
	require.ErrorIs(t, err, replication.ErrConflict)
	require.ErrorIs(t, err, replication.ErrPermanent)
	t.Logf("first carry-over: %v", err)
	var keys []string
	for _, c := range conflict.Conflicts {
		keys = append(keys, c.Key)
	}
	assert.ElementsMatch(t, []string{"(id)=(2)", "(id)=(3)", "(id)=(6)", "(id)=(10)"}, keys)
	assert.Equal(t, before, e.digest(e.tgt, "k", "id")+" "+e.digest(e.tgt, "f", "a"), "a stopped carry-over changes nothing")

	// Settled: 2, 6 and 10 take the source's value on the target; the
	// source gives up its change of 3 (the row stays deleted).
	e.exec(e.tgt, "UPDATE k SET v = 'stale' WHERE id IN (2, 6, 10)")
	e.exec(e.src, "DELETE FROM k WHERE id = 3")
	_, err = e.carry()
	require.ErrorAs(t, err, &conflict)
	t.Logf("second carry-over: %v", err)
	require.Len(t, conflict.Conflicts, 1)
	assert.Equal(t, `"public"."f"`, conflict.Conflicts[0].Table)
	assert.Equal(t, "(a, b)=(2, y)", conflict.Conflicts[0].Key)
	var v string
	e.scalar(e.tgt, "SELECT v FROM k WHERE id = 1", &v)
	assert.Equal(t, "v1", v, "a stopped carry-over changes nothing")

	// Settled: the target's f row is given back its value of the decision.
	e.exec(e.tgt, "UPDATE f SET b = 'y' WHERE a = 2")
	res, err := e.carry()
	require.NoError(t, err)
	assert.Positive(t, res.Applied)
	assert.Positive(t, res.Skipped)
	e.assertSame("k", "id")
	e.assertSame("f", "a")
	e.scalar(e.tgt, "SELECT v FROM k WHERE id = 12", &v)
	assert.Equal(t, "new", v)

	// Applied exactly once: the origin's progress covers it.
	res, err = e.carry()
	require.NoError(t, err)
	assert.Zero(t, res.Transactions)
}

// carry flushes the source's WAL and carries everything up to its insert
// position over to the target.
func (e *env) carry() (replication.CarryResult, error) {
	e.t.Helper()
	lsn := e.walLSN()
	e.exec(e.src, "SELECT set_config('synchronous_commit', 'on', true), pg_logical_emit_message(true, 'test', 'flush')")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return replication.CarryOver(ctx, replication.CarryOptions{
		SourceDSN: e.srcDSN, TargetDSN: e.tgtDSN, Slot: "carry", Publication: "carry", Origin: "carry", UpTo: lsn,
		Tables: map[string]pgx.Identifier{`"public"."k"`: {"public", "k"}, `"public"."f"`: {"public", "f"}},
		Logger: zaptest.NewLogger(e.t),
	})
}

// TestCarryOverRefusesATruncate: a TRUNCATE the source took after the
// decision would discard every row the target took since.
func TestCarryOverRefusesATruncate(t *testing.T) {
	e := newEnv(t)
	e.both("CREATE TABLE k (id int PRIMARY KEY, v text, n int)")
	e.exec(e.src, "INSERT INTO k VALUES (1, 'a', 1)")
	start := e.setup("carry", []pgx.Identifier{{"public", "k"}}, nil)
	r := e.run(e.streamConfig("carry", start))
	e.catchUp(r)
	require.NoError(t, r.stop())
	e.exec(e.tgt, "INSERT INTO k VALUES (2, 'fresh', 2)")
	e.exec(e.src, "TRUNCATE k")
	_, err := e.carry()
	var conflict *replication.ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.Contains(t, err.Error(), "truncated")
	var n int
	e.scalar(e.tgt, "SELECT count(*) FROM k", &n)
	assert.Equal(t, 2, n)
}
