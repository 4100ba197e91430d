package replication_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// matrixCol is a column of the type matrix: its name, type, and an
// expression of g (bigint) for its value.
type matrixCol struct{ name, typ, expr string }

// matrixCols holds a column of every built-in type family, typmods and
// their arrays included, a domain with a typmod and a CHECK, an enum, an
// enum array and a composite; names with '.', '"', spaces and unicode.
// Values include NaN, infinities, -0, empty strings, empty ranges, 2-D
// arrays and NULL elements.
var matrixCols = []matrixCol{
	{`c.h "r" é`, `char(10)`, `CASE g % 4 WHEN 0 THEN 'ü' || g % 100 WHEN 1 THEN '' WHEN 2 THEN 'x ' || g % 10 || ' ' ELSE 'c' || g % 100000 END`},
	{`var char`, `varchar(12)`, `'v' || g % 100000 || ' ñ'`},
	{`bt`, `bit(8)`, `(g % 256)::int::bit(8)`},
	{`vb`, `varbit(16)`, `substr((g % 65536)::int::bit(16)::text, 1, (g % 16 + 1)::int)::varbit`},
	{`num`, `numeric(12,4)`, `CASE WHEN g % 11 = 0 THEN 'NaN'::numeric ELSE (g % 100000) / 7.0 * (1 - 2 * (g % 2)) END`},
	{`nu`, `numeric`, `g::numeric / 3`},
	{`ts`, `timestamp(2)`, `CASE WHEN g % 13 = 0 THEN 'infinity'::timestamp ELSE timestamp '2024-02-29 12:34:56.789123' + g * interval '1.234567 second' END`},
	{`tstz`, `timestamptz(3)`, `CASE WHEN g % 13 = 1 THEN '-infinity'::timestamptz ELSE timestamptz '2024-02-29 12:34:56.789123+05:30' + g * interval '1.234567 second' END`},
	{`tm`, `time(1)`, `time '01:02:03.456789' + g * interval '1.111111 s'`},
	{`tmtz`, `timetz(2)`, `timetz '01:02:03.456789+05:30' + g * interval '1.111111 s'`},
	{`iv`, `interval(3)`, `g * interval '1 day 1.234567 s' * (1 - 2 * (g % 2))`},
	{`ivd`, `interval day to second(2)`, `g * interval '1 day 1.234567 s'`},
	{`ivym`, `interval year to month`, `g * interval '1 year 2 mons'`},
	{`ivm`, `interval minute`, `g * interval '1 minute'`},
	{`tx`, `text`, `E'te\\x t ' || g || E' \t\n''"\\ ünï,{}()'`},
	{`by`, `bytea`, `decode(md5(g::text), 'hex') || '\x00ff5c'::bytea`},
	{`bo`, `bool`, `g % 2 = 0`},
	{`i2`, `int2`, `((g % 32000) * (1 - 2 * (g % 2)))::int2`},
	{`i4`, `int4`, `(g * 7)::int4`},
	{`i8`, `int8`, `g * -1000000007`},
	{`f4`, `float4`, `CASE g % 5 WHEN 0 THEN 'NaN'::float4 WHEN 1 THEN 'Infinity' WHEN 2 THEN '-0' WHEN 3 THEN '-Infinity' ELSE (g / 3.0)::float4 END`},
	{`f8`, `float8`, `CASE g % 6 WHEN 0 THEN 'NaN'::float8 WHEN 1 THEN '-Infinity' WHEN 2 THEN '-0' WHEN 3 THEN '1e308' ELSE g / 7.0 END`},
	{`uu`, `uuid`, `md5(g::text)::uuid`},
	{`js`, `json`, `json_build_object('g', g, 's', E'x"\\y ü', 'a', json_build_array(1, 2.50, null))`},
	{`jb`, `jsonb`, `jsonb_build_object('g', g, 'n', 1.000, 'o', jsonb_build_object('k', ARRAY[g, -g]))`},
	{`ip`, `inet`, `CASE WHEN g % 2 = 0 THEN ('10.' || g % 256 || '.' || (g / 256) % 256 || '.1/' || 8 + g % 25)::inet ELSE ('2001:db8::' || to_hex((g % 65536)::int) || '/64')::inet END`},
	{`cd`, `cidr`, `('10.' || g % 256 || '.0.0/16')::cidr`},
	{`mac`, `macaddr`, `('08:00:2b:01:02:' || lpad(to_hex((g % 256)::int), 2, '0'))::macaddr`},
	{`pt`, `point`, `point(g / 3.0, -g)`},
	{`tsv`, `tsvector`, `to_tsvector('simple', 'word' || g % 10 || ' other ' || g % 3) || 'a:1A b:2,3B'::tsvector`},
	{`r4`, `int4range`, `CASE WHEN g % 9 = 0 THEN 'empty'::int4range ELSE int4range((g % 100)::int, (g % 100 + g % 7 + 1)::int, '(]') END`},
	{`rts`, `tstzrange`, `tstzrange(timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour', NULL)`},
	{`rn`, `numrange`, `numrange(g / 3.0, g / 2.0 + 1)`},
	{`mo`, `money`, `((g % 100000) / 100.0)::numeric::money`},
	{`dt`, `date`, `CASE g % 10 WHEN 0 THEN 'infinity'::date WHEN 1 THEN '-infinity'::date ELSE date '2000-01-01' + (g % 20000)::int END`},
	{`c5a`, `char(5)[]`, `CASE WHEN g % 3 = 0 THEN ARRAY[['a', 'bc'], ['', NULL]]::char(5)[] ELSE ARRAY['a' || g % 10, '', NULL, 'abcde']::char(5)[] END`},
	{`n62a`, `numeric(6,2)[]`, `ARRAY[g % 1000 / 3.0, NULL, -1.005, 'NaN']::numeric(6,2)[]`},
	{`v4a`, `varchar(4)[]`, `ARRAY['abcd', 'x' || g % 100, '"{,}']::varchar(4)[]`},
	{`b3a`, `bit(3)[]`, `ARRAY[(g % 8)::int::bit(3), B'111']`},
	{`ts0a`, `timestamp(0)[]`, `ARRAY[timestamp '2024-01-01 00:00:00.6' + g * interval '1.5 s', 'infinity']::timestamp(0)[]`},
	{`ivda`, `interval day to second(1)[]`, `ARRAY[g * interval '1 day 1.55 s']`},
	{`ünï dom`, `{S}."short.name"`, `'d' || g % 1000000`},
	{`dom6`, `{S}."dc 6"`, `'dc' || g % 100`},
	{`en`, `{S}."mo od"`, `(ARRAY['sad', 'ok', 'happy'])[1 + g % 3]::{S}."mo od"`},
	{`ena`, `{S}."mo od"[]`, `ARRAY['ok', 'happy', NULL]::{S}."mo od"[]`},
	{`comp`, `{S}."pa ir"`, `ROW('a' || g % 10, g % 1000 / 7.0)::{S}."pa ir"`},
	{`big`, `text`, `CASE WHEN g % 4 = 0 THEN repeat(md5(g::text), 100) ELSE 'small' END`},
}

const matrixSchema = `we.ird "s" ü`

var (
	mSchema = pgx.Identifier{matrixSchema}.Sanitize()
	mMain   = pgx.Identifier{matrixSchema, `ta.ble "x" ñ`}
	mKeyed  = pgx.Identifier{matrixSchema, `keyed by char`}
	mFull   = pgx.Identifier{matrixSchema, `full ident`}
	mGen    = pgx.Identifier{"public", "gen"}
	mIdA    = pgx.Identifier{"public", "ident_always"}
	mIdD    = pgx.Identifier{"public", "ident_default"}
)

func (c matrixCol) quoted() string  { return pgx.Identifier{c.name}.Sanitize() }
func (c matrixCol) typeSQL() string { return strings.ReplaceAll(c.typ, "{S}", mSchema) }
func (c matrixCol) exprSQL() string { return strings.ReplaceAll(c.expr, "{S}", mSchema) }

// matrixDDL creates the schema on one server; identity is the target's
// kind of identity for ident_default.
func matrixDDL(identity string) string {
	var cols []string
	for _, c := range matrixCols {
		cols = append(cols, c.quoted()+" "+c.typeSQL())
	}
	return fmt.Sprintf(`
CREATE SCHEMA %[1]s;
CREATE TYPE %[1]s."mo od" AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN %[1]s."short.name" AS varchar(8) CHECK (VALUE <> 'bad');
CREATE DOMAIN %[1]s."dc 6" AS char(6);
CREATE TYPE %[1]s."pa ir" AS (a char(3), b numeric(5, 2));
CREATE TABLE %[2]s (id bigint PRIMARY KEY, %[3]s);
ALTER TABLE %[2]s ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE %[4]s (k char(6), n numeric(8, 2), v varchar(5), iv interval minute to second(1), "a""rr" char(3)[],
	PRIMARY KEY (k, n));
CREATE TABLE %[5]s (a char(4), b numeric(6, 2), c varchar(5), j json, p point, ts timestamp(1), f float8, t text, ca char(2)[]);
ALTER TABLE %[5]s REPLICA IDENTITY FULL;
CREATE TABLE %[6]s (id int PRIMARY KEY, a int, b text, g int GENERATED ALWAYS AS (a * 2) STORED,
	gs text GENERATED ALWAYS AS (upper(b) || '!') STORED, c char(4));
CREATE TABLE %[7]s (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text, n int GENERATED BY DEFAULT AS IDENTITY);
CREATE TABLE %[8]s (id bigint GENERATED %[9]s AS IDENTITY PRIMARY KEY, v char(4));`,
		mSchema, mMain.Sanitize(), strings.Join(cols, ", "), mKeyed.Sanitize(), mFull.Sanitize(),
		mGen.Sanitize(), mIdA.Sanitize(), mIdD.Sanitize(), identity)
}

// matrixSQL holds the workload's statements.
type matrixSQL struct {
	insert, update, updateNull, updateSome string
}

func newMatrixSQL() matrixSQL {
	var names, exprs, sets []string
	for _, c := range matrixCols {
		names = append(names, c.quoted())
		exprs = append(exprs, c.exprSQL())
		sets = append(sets, c.quoted()+" = "+c.exprSQL())
	}
	var nulls, someSets []string
	for i, c := range matrixCols {
		nulls = append(nulls, c.quoted()+" = NULL")
		switch c.name {
		case `c.h "r" é`, "num", "c5a", "n62a", "ünï dom":
			someSets = append(someSets, sets[i])
		}
	}
	some := strings.Join(someSets, ", ")
	t := mMain.Sanitize()
	return matrixSQL{
		insert: "INSERT INTO " + t + " (id, " + strings.Join(names, ", ") + ") SELECT $1::bigint, " +
			strings.Join(exprs, ", ") + " FROM (SELECT $2::bigint AS g) s",
		update:     "UPDATE " + t + " SET " + strings.Join(sets, ", ") + " FROM (SELECT $2::bigint AS g) s WHERE id = $1",
		updateNull: "UPDATE " + t + " SET " + strings.Join(nulls, ", ") + " WHERE id = $1 AND $2::bigint IS NOT NULL",
		// big unchanged: sent as an unchanged TOASTed value when it is one.
		updateSome: "UPDATE " + t + " SET " + some + " FROM (SELECT $2::bigint AS g) s WHERE id = $1",
	}
}

// matrixWorker drives one source connection: small transactions on its
// own rows of every table.
type matrixWorker struct {
	w    int
	conn *pgx.Conn
	rnd  *rand.Rand
	sql  matrixSQL
	next int64
	main []int64   // live ids of the main table
	keys []float64 // live n of the keyed table (k = 'w<w>')
	gen  []int64
	idA  []int64
	idD  []int64
}

func (m *matrixWorker) newID() int64 {
	m.next++
	return int64(m.w+1)*10_000_000 + m.next
}

func pick[T any](r *rand.Rand, s *[]T, remove bool) (T, bool) {
	var zero T
	if len(*s) == 0 {
		return zero, false
	}
	i := r.IntN(len(*s))
	v := (*s)[i]
	if remove {
		(*s)[i] = (*s)[len(*s)-1]
		*s = (*s)[:len(*s)-1]
	}
	return v, true
}

// step runs one random change (or a few in one transaction).
func (m *matrixWorker) step(ctx context.Context, q pgx.Tx) error {
	r := m.rnd
	g := r.Int64N(1_000_000)
	exec := func(sql string, args ...any) error {
		var err error
		if q != nil {
			_, err = q.Exec(ctx, sql, args...)
		} else {
			_, err = m.conn.Exec(ctx, sql, args...)
		}
		if err != nil {
			return fmt.Errorf("%w: %.200s", err, sql)
		}
		return nil
	}
	k := fmt.Sprintf("w%d", m.w)
	switch n := r.IntN(100); {
	case n < 22:
		id := m.newID()
		m.main = append(m.main, id)
		if g%7 == 0 {
			return exec(`INSERT INTO `+mMain.Sanitize()+` (id) VALUES ($1)`, id)
		}
		return exec(m.sql.insert, id, g)
	case n < 34:
		id, ok := pick(r, &m.main, false)
		if !ok {
			return nil
		}
		return exec(m.sql.update, id, g)
	case n < 42:
		id, ok := pick(r, &m.main, false)
		if !ok {
			return nil
		}
		return exec(m.sql.updateSome, id, g)
	case n < 44:
		id, ok := pick(r, &m.main, false)
		if !ok {
			return nil
		}
		return exec(m.sql.updateNull, id, g)
	case n < 48: // key update
		id, ok := pick(r, &m.main, true)
		if !ok {
			return nil
		}
		nid := m.newID()
		m.main = append(m.main, nid)
		return exec(`UPDATE `+mMain.Sanitize()+` SET id = $2 WHERE id = $1`, id, nid)
	case n < 55:
		id, ok := pick(r, &m.main, true)
		if !ok {
			return nil
		}
		return exec(`DELETE FROM `+mMain.Sanitize()+` WHERE id = $1`, id)
	case n < 62:
		m.next++
		nk := float64(m.next) / 4
		m.keys = append(m.keys, nk)
		return exec(`INSERT INTO `+mKeyed.Sanitize()+` VALUES ($1, $2, $3::text, $4::bigint * interval '1.17 s', ARRAY[$3::text, NULL, 'ü'])`,
			k, nk, fmt.Sprint(g%1000), g%100000)
	case n < 68:
		nk, ok := pick(r, &m.keys, false)
		if !ok {
			return nil
		}
		return exec(`UPDATE `+mKeyed.Sanitize()+` SET v = $3, iv = NULL WHERE k = $1 AND n = $2`, k, nk, fmt.Sprint(g%100))
	case n < 70: // key update
		nk, ok := pick(r, &m.keys, true)
		if !ok {
			return nil
		}
		m.next++
		nn := float64(m.next) / 4
		m.keys = append(m.keys, nn)
		return exec(`UPDATE `+mKeyed.Sanitize()+` SET n = $3 WHERE k = $1 AND n = $2`, k, nk, nn)
	case n < 73:
		nk, ok := pick(r, &m.keys, true)
		if !ok {
			return nil
		}
		return exec(`DELETE FROM `+mKeyed.Sanitize()+` WHERE k = $1 AND n = $2`, k, nk)
	case n < 78:
		// No -0 here: rows are found by IS NOT DISTINCT FROM, and -0 = 0,
		// so rows differing only in a zero's sign are indistinguishable.
		return exec(`INSERT INTO `+mFull.Sanitize()+` SELECT $1, g % 1000 / 3.0, 'c' || g % 100, json_build_object('g', g), point(g, 1),
			timestamp '2024-01-01' + g * interval '0.37 s', CASE WHEN g % 4 = 0 THEN 'NaN' ELSE g / 9.0 END, NULL, ARRAY['a', $1]::char(2)[]
			FROM (SELECT $2::bigint AS g) s`, k, g)
	case n < 81:
		return exec(`UPDATE `+mFull.Sanitize()+` SET b = -b, t = $2, j = '{"u": 1}', p = point(-1, -1)
			WHERE ctid = (SELECT ctid FROM `+mFull.Sanitize()+` WHERE a = $1 ORDER BY t NULLS FIRST, b LIMIT 1)`, k, fmt.Sprint(g))
	case n < 83:
		return exec(`DELETE FROM `+mFull.Sanitize()+` WHERE ctid = (SELECT ctid FROM `+mFull.Sanitize()+` WHERE a = $1 ORDER BY b DESC LIMIT 1)`, k)
	case n < 87:
		id := m.newID()
		m.gen = append(m.gen, id)
		return exec(`INSERT INTO `+mGen.Sanitize()+` (id, a, b, c) VALUES ($1, $2, $3::text, $3::text)`, id, g%1000, fmt.Sprintf("b%d", g%100))
	case n < 90:
		id, ok := pick(r, &m.gen, false)
		if !ok {
			return nil
		}
		return exec(`UPDATE `+mGen.Sanitize()+` SET a = a + 1, b = $2 WHERE id = $1`, id, fmt.Sprintf("u%d", g%100))
	case n < 91:
		id, ok := pick(r, &m.gen, true)
		if !ok {
			return nil
		}
		return exec(`DELETE FROM `+mGen.Sanitize()+` WHERE id = $1`, id)
	case n < 98:
		tb, ids := mIdA, &m.idA
		if n%2 == 0 {
			tb, ids = mIdD, &m.idD
		}
		if n < 95 {
			var id int64
			var err error
			if q != nil {
				err = q.QueryRow(ctx, `INSERT INTO `+tb.Sanitize()+` (v) VALUES ($1) RETURNING id`, fmt.Sprint(g%1000)).Scan(&id)
			} else {
				err = m.conn.QueryRow(ctx, `INSERT INTO `+tb.Sanitize()+` (v) VALUES ($1) RETURNING id`, fmt.Sprint(g%1000)).Scan(&id)
			}
			*ids = append(*ids, id)
			return err
		}
		id, ok := pick(r, ids, n == 97)
		if !ok {
			return nil
		}
		if n == 97 {
			return exec(`DELETE FROM `+tb.Sanitize()+` WHERE id = $1`, id)
		}
		return exec(`UPDATE `+tb.Sanitize()+` SET v = $2 WHERE id = $1`, id, fmt.Sprint(g%1000))
	}
	return nil
}

// TestTypeMatrixThroughMultiRowApply copies and streams tables with a
// column of every built-in type family (typmods and arrays of them), a
// domain with a typmod, an enum, a composite, hostile identifiers, a
// REPLICA IDENTITY FULL table, stored generated columns and identity
// columns, while concurrent small transactions insert, update (keys
// included) and delete. The applier must have regrouped them into
// multi-row statements, and the target must equal the source row for row.
func TestTypeMatrixThroughMultiRowApply(t *testing.T) {
	e := newEnv(t)
	e.exec(e.src, matrixDDL("ALWAYS"))
	// The mover creates a move target's identity columns BY DEFAULT;
	// ident_always keeps ALWAYS on the target too.
	e.exec(e.tgt, matrixDDL("BY DEFAULT"))
	sql := newMatrixSQL()
	// Copied: rows 1..300 with every column set, and one with none.
	e.exec(e.src, strings.Replace(strings.Replace(sql.insert, "$1::bigint", "g", 1), "FROM (SELECT $2::bigint AS g) s", "FROM generate_series(1::bigint, 300) g", 1))
	e.exec(e.src, `INSERT INTO `+mMain.Sanitize()+` (id) VALUES (0)`)
	e.exec(e.src, `INSERT INTO `+mKeyed.Sanitize()+` SELECT 'seed', g / 4.0, g % 100, g * interval '1.17 s', ARRAY['x'] FROM generate_series(1, 100) g;
		INSERT INTO `+mFull.Sanitize()+` (a, b, t) SELECT 'seed', g, NULL FROM generate_series(1, 20) g, generate_series(1, 2);
		INSERT INTO `+mGen.Sanitize()+` (id, a, b, c) SELECT g, g, 'b' || g, 'c' FROM generate_series(1, 50) g;
		INSERT INTO `+mIdA.Sanitize()+` (v) SELECT 'seed' || g FROM generate_series(1, 20) g;
		INSERT INTO `+mIdD.Sanitize()+` (v) SELECT 'sd' || g FROM generate_series(1, 20) g`)
	tables := []pgx.Identifier{mMain, mKeyed, mFull, mGen, mIdA, mIdD}
	start, res := e.setupCopy("shardmover_matrix", tables, nil)
	assert.Equal(t, "text", res.Tables[0].Format, "enum array and composite: text COPY")
	assert.Equal(t, "binary", res.Tables[1].Format)
	for _, tb := range tables {
		e.assertSame(tb.Sanitize(), "x::text")
	}
	e.logStatements(tables...)
	// The apply session runs with enable_seqscan = off, which prices the
	// sequential scan a REPLICA IDENTITY FULL update or delete needs at
	// 1e10: above jit_above_cost, so each one is JIT-compiled, about a
	// second apiece here. Not what this test is about: JIT off on the
	// target (the apply session starts after this).
	e.exec(e.tgt, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET jit = off', current_database()); END $$`)
	core, logs := observer.New(zap.InfoLevel)
	cfg := e.streamConfig("shardmover_matrix", start)
	cfg.Logger = zap.New(core)
	r := e.run(cfg)

	const workers = 4
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	steps := make([]int, workers)
	for w := 0; w < workers; w++ {
		m := &matrixWorker{w: w, conn: e.connect(e.srcDSN), rnd: rand.New(rand.NewPCG(uint64(w), 42)), sql: sql}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var err error
				if m.rnd.IntN(10) == 0 {
					// A few changes in one source transaction.
					err = pgx.BeginFunc(context.Background(), m.conn, func(tx pgx.Tx) error {
						for i := 0; i < 2+m.rnd.IntN(4); i++ {
							if err := m.step(context.Background(), tx); err != nil {
								return err
							}
						}
						return nil
					})
				} else {
					err = m.step(context.Background(), nil)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", m.w, err)
					return
				}
				steps[m.w]++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("source transactions per worker: %v", steps)
	e.catchUp(r)
	require.NoError(t, r.stop())

	for _, tb := range []pgx.Identifier{mMain, mGen, mIdA, mIdD} {
		e.assertSame(tb.Sanitize(), "id")
	}
	e.assertSame(mKeyed.Sanitize(), "k, n")
	e.assertSame(mFull.Sanitize(), "x::text")
	// No regrouped unit failed (which would replay its transactions one
	// statement per change and hide a value the multi-row form mangles).
	for _, l := range logs.FilterMessageSnippet("in source order").All() {
		t.Errorf("fell back to source order: %v", l.ContextMap())
	}
	e.assertMultiRow(mMain, "INSERT", "UPDATE", "DELETE")
	e.assertMultiRow(mKeyed, "INSERT", "UPDATE", "DELETE")
	e.assertMultiRow(mFull, "INSERT")
	e.assertMultiRow(mGen, "INSERT", "UPDATE")
	e.assertMultiRow(mIdA, "INSERT")
	e.assertMultiRow(mIdD, "INSERT")
	var wrong int
	e.scalar(e.tgt, `SELECT count(*) FROM `+mGen.Sanitize()+` WHERE g IS DISTINCT FROM a * 2 OR gs IS DISTINCT FROM upper(b) || '!'`, &wrong)
	assert.Zero(t, wrong, "generated columns computed on the target")
}
