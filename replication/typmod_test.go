package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logStatements makes the target record, for every INSERT, UPDATE and
// DELETE statement run on each table, how many rows it changed: AFTER ...
// FOR EACH STATEMENT triggers with transition tables, enabled ALWAYS so
// that they fire in the apply session (session_replication_role =
// replica). The log table exists only on the target and is rolled back
// with a failed apply transaction, so it holds exactly the statements the
// applier committed. Call it after the copy.
func (e *env) logStatements(tables ...pgx.Identifier) {
	e.t.Helper()
	e.exec(e.tgt, `CREATE TABLE IF NOT EXISTS public.applied_stmts (tbl text NOT NULL, op text NOT NULL, n bigint NOT NULL);
		CREATE OR REPLACE FUNCTION public.applied_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO public.applied_stmts SELECT format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP, count(*) FROM tt;
			RETURN NULL;
		END $$`)
	for _, t := range tables {
		name := t.Sanitize()
		for _, ev := range []struct{ op, ref string }{{"INSERT", "NEW"}, {"UPDATE", "NEW"}, {"DELETE", "OLD"}} {
			trg := "applied_" + ev.op
			e.exec(e.tgt, `CREATE TRIGGER `+trg+` AFTER `+ev.op+` ON `+name+` REFERENCING `+ev.ref+
				` TABLE AS tt FOR EACH STATEMENT EXECUTE FUNCTION public.applied_stmt()`)
			e.exec(e.tgt, `ALTER TABLE `+name+` ENABLE ALWAYS TRIGGER `+trg)
		}
	}
}

// multiRow returns how many statements the target committed on table for
// op (INSERT, UPDATE, DELETE) that changed more than one row, and how many
// rows they changed in all.
func (e *env) multiRow(table pgx.Identifier, op string) (stmts, rows int64) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(e.t, e.tgt.QueryRow(ctx, `SELECT count(*), coalesce(sum(n), 0) FROM public.applied_stmts
		WHERE n > 1 AND op = $1 AND tbl = format('%I.%I', $2::text, $3::text)`, op, table[0], table[1]).Scan(&stmts, &rows))
	return stmts, rows
}

// assertMultiRow asserts that op on table went through at least one
// multi-row statement on the target.
func (e *env) assertMultiRow(table pgx.Identifier, ops ...string) {
	e.t.Helper()
	for _, op := range ops {
		n, rows := e.multiRow(table, op)
		assert.Positive(e.t, n, "no multi-row %s on %s was committed on the target", op, table.Sanitize())
		e.t.Logf("%s on %s: %d multi-row statements, %d rows", op, table.Sanitize(), n, rows)
	}
}

// TestGroupedApplyKeepsTypmods: values of typmod'd columns (char(n), its
// arrays, bit(n)) and keys of char(n) and numeric(p,s) go through the
// multi-row statements of the applier unchanged. The multi-row path once
// cast them with format_type(oid, NULL), i.e. ::character (char(1)):
// char(10) values were silently cut to one character, bit(8) values
// failed and fell back to one statement per change, and char(n) keys
// collided or matched no row.
func TestGroupedApplyKeepsTypmods(t *testing.T) {
	e := newEnv(t)
	e.both(`
		CREATE TABLE chars (id int PRIMARY KEY, c char(10), ca char(5)[], v varchar(6), d "char");
		CREATE TABLE bits (id int PRIMARY KEY, b bit(8), ba bit(3)[], vb varbit(8));
		CREATE TABLE ck (k char(10) PRIMARY KEY, v int NOT NULL);
		CREATE TABLE nk (k numeric(10, 2) PRIMARY KEY, v int NOT NULL)`)
	e.exec(e.src, `INSERT INTO ck SELECT 'k' || g, g FROM generate_series(1, 100) g;
		INSERT INTO nk SELECT g / 8.0, g FROM generate_series(1, 100) g`)
	tables := []pgx.Identifier{{"public", "chars"}, {"public", "bits"}, {"public", "ck"}, {"public", "nk"}}
	start := e.setup("shardmover_typmod", tables, nil)
	e.logStatements(tables...)
	r := e.run(e.streamConfig("shardmover_typmod", start))

	// Each phase is caught up before the next: a failed multi-row
	// statement sends every transaction of its target transaction to the
	// one-statement-per-change replay, which would hide the others.
	phase := func(sqls ...string) {
		t.Helper()
		for _, sql := range sqls {
			e.exec(e.src, sql)
		}
		e.catchUp(r)
	}
	phase(`INSERT INTO chars SELECT g, 'c' || g || 'x', ARRAY['ab', 'abcde', NULL, 'a' || g % 10], left('v' || g || 'xyz', 6), 'q'
		 FROM generate_series(1, 200) g`,
		`UPDATE chars SET c = 'u' || id || 'long', ca = ARRAY['xyz12'] WHERE id <= 100`)
	e.assertSame("chars", "id")
	var short int
	e.scalar(e.tgt, `SELECT count(*) FROM chars WHERE length(c) < 3`, &short)
	assert.Zero(t, short, "char(10) values cut short on the target")
	e.assertMultiRow(pgx.Identifier{"public", "chars"}, "INSERT", "UPDATE")

	phase(`INSERT INTO bits SELECT g, (g % 256)::bit(8), ARRAY[(g % 8)::bit(3), B'101'], (g % 64)::bit(6)::varbit
		 FROM generate_series(1, 200) g`,
		`UPDATE bits SET b = ~b, vb = vb || B'1' WHERE id <= 100`)
	e.assertSame("bits", "id")
	e.assertMultiRow(pgx.Identifier{"public", "bits"}, "INSERT", "UPDATE")

	// Row batches located by a char(10) and by a numeric(10,2) key.
	phase(`INSERT INTO ck SELECT 'k' || g, g FROM generate_series(101, 200) g`,
		`UPDATE ck SET v = -v WHERE v BETWEEN 10 AND 60`,
		`DELETE FROM ck WHERE v BETWEEN 70 AND 90`)
	e.assertSame("ck", "k")
	e.assertMultiRow(pgx.Identifier{"public", "ck"}, "INSERT", "UPDATE", "DELETE")
	phase(`INSERT INTO nk SELECT g / 8.0, g FROM generate_series(101, 200) g`,
		`UPDATE nk SET v = -v WHERE v BETWEEN 10 AND 60`,
		`DELETE FROM nk WHERE v BETWEEN 70 AND 90`)
	e.assertSame("nk", "k")
	e.assertMultiRow(pgx.Identifier{"public", "nk"}, "INSERT", "UPDATE", "DELETE")
	require.NoError(t, r.stop())
}
