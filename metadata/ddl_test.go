package metadata_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/pgsql"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// ddlNodes starts two nodes and returns a connection to each.
func ddlNodes(t *testing.T, ctx context.Context) (src, dst *pgx.Conn) {
	t.Helper()
	sb := sandboxtest.New(t, 1)
	var err error
	src, err = pgx.Connect(ctx, sb.Coordinator().DSN())
	require.NoError(t, err)
	t.Cleanup(func() { src.Close(context.Background()) })
	dst, err = pgx.Connect(ctx, sb.Workers()[0].DSN())
	require.NoError(t, err)
	t.Cleanup(func() { dst.Close(context.Background()) })
	return src, dst
}

func ddlExec(t *testing.T, ctx context.Context, conn *pgx.Conn, sql ...string) {
	t.Helper()
	for _, s := range sql {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}
}

// moveCopy copies table from src to dst the way a move does: CREATE TABLE
// for a move target, the rows, then indexes, NOT VALID constraints and the
// replica identity, then the cutover's finishing statements from the
// source's definition read again.
func moveCopy(t *testing.T, ctx context.Context, src, dst *pgx.Conn, table pgx.Identifier) {
	t.Helper()
	ddl, err := metadata.ReadTableDDL(ctx, src, table)
	require.NoError(t, err)
	require.NoError(t, metadata.RunDDL(ctx, dst, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{table[0]}.Sanitize(),
		ddl.CreateStatement(table, "", metadata.MoveTarget)))
	var cols []string
	for _, c := range ddl.Columns {
		if c.Generated == "" {
			cols = append(cols, pgx.Identifier{c.Name}.Sanitize())
		}
	}
	var buf bytes.Buffer
	list := strings.Join(cols, ", ")
	_, err = src.PgConn().CopyTo(ctx, &buf, "COPY "+table.Sanitize()+" ("+list+") TO STDOUT (FORMAT binary)")
	require.NoError(t, err)
	_, err = dst.PgConn().CopyFrom(ctx, &buf, "COPY "+table.Sanitize()+" ("+list+") FROM STDIN (FORMAT binary)")
	require.NoError(t, err)
	require.NoError(t, metadata.RunDDL(ctx, dst, ddl.IndexStatements(table, "")...))
	final, err := metadata.ReadTableDDL(ctx, src, table)
	require.NoError(t, err)
	for _, s := range final.FinishStatements(table) {
		_, err := pgsql.ExecOne(ctx, dst, s)
		require.NoError(t, err, s)
	}
}

func diffOf(t *testing.T, ctx context.Context, src, dst *pgx.Conn, table pgx.Identifier) string {
	t.Helper()
	a, err := metadata.ReadTableDDL(ctx, src, table)
	require.NoError(t, err)
	b, err := metadata.ReadTableDDL(ctx, dst, table)
	require.NoError(t, err)
	return a.Diff(b)
}

func tableExists(t *testing.T, ctx context.Context, conn *pgx.Conn, schema, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2)`, schema, name).Scan(&ok))
	return ok
}

// indexColumns returns index name -> its key columns (or expressions) on
// the target, read from pg_index, not from text.
func indexColumns(t *testing.T, ctx context.Context, conn *pgx.Conn, table pgx.Identifier) map[string]string {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT ic.relname::text, string_agg(coalesce(a.attname::text, '<expr>'), ',' ORDER BY k.ord)
		FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
		JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
		LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE n.nspname = $1 AND c.relname = $2
		GROUP BY ic.relname`, table[0], table[1])
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var name, cols string
		require.NoError(t, rows.Scan(&name, &cols))
		out[name] = cols
	}
	require.NoError(t, rows.Err())
	return out
}

var hostileIndexNames = []string{
	`x USING btree (user_id); DROP TABLE victim; --`,
	`y" USING btree (user_id); DROP TABLE victim; --`,
	`z ON public.victim USING btree (id); DROP TABLE victim; --`,
	`w' USING btree (user_id) WHERE (1 = 1); DROP TABLE victim; --`,
	`"USING" USING hash (user_id)`,
}

// TestReadTableDDLHostileIndexNames: index names that hold SQL, quotes and
// " USING " are copied as names. Each index lands on column a (not on
// user_id, where a cut at the first " USING " put it), victim survives on
// the target, and source and copy compare equal.
func TestReadTableDDLHostileIndexNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, dst := ddlNodes(t, ctx)
	for _, c := range []*pgx.Conn{src, dst} {
		ddlExec(t, ctx, c, `CREATE TABLE public.victim (id int)`)
	}
	tables := []pgx.Identifier{
		{"public", "events"},
		{`s USING btree (x); DROP TABLE public.victim; --`, `t" USING btree (user_id); DROP TABLE public.victim; --`},
	}
	for _, table := range tables {
		ddlExec(t, ctx, src, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{table[0]}.Sanitize(),
			"CREATE TABLE "+table.Sanitize()+" (user_id int PRIMARY KEY, a int)")
		for _, ix := range hostileIndexNames {
			ddlExec(t, ctx, src, "CREATE INDEX "+pgx.Identifier{ix}.Sanitize()+" ON "+table.Sanitize()+" (a)")
		}
		moveCopy(t, ctx, src, dst, table)
		assert.True(t, tableExists(t, ctx, dst, "public", "victim"), "victim must survive on the target")
		got := indexColumns(t, ctx, dst, table)
		for _, ix := range hostileIndexNames {
			assert.Equal(t, "a", got[ix], "index %q on the target must be on column a", ix)
		}
		assert.Equal(t, "", diffOf(t, ctx, src, dst, table))
	}
	assert.True(t, tableExists(t, ctx, src, "public", "victim"))
}

// violation is a statement that both tables must refuse with the same
// SQLSTATE.
type violation struct {
	what, sql, code string
}

func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// TestReadTableDDLCopiesEveryFeature: a table with every feature that
// changes what it accepts, under hostile names, copied to another node by
// the move's path (rows included, NOT VALID constraint after them). The
// copy compares equal, identity columns end with the source's kind and
// position, and every violating statement is refused by both with the same
// SQLSTATE.
func TestReadTableDDLCopiesEveryFeature(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, dst := ddlNodes(t, ctx)
	for _, c := range []*pgx.Conn{src, dst} {
		ddlExec(t, ctx, c, `CREATE TABLE public.victim (id int)`, `CREATE EXTENSION btree_gist`)
	}
	schema := `we.ird "s" ü; --`
	tbl := pgx.Identifier{schema, `t; x -- 'q' . DROP TABLE public.victim`}
	full := pgx.Identifier{schema, `full "id"`}
	byIndex := pgx.Identifier{schema, `by.index`}
	nothing := pgx.Identifier{schema, `nothing`}
	ddlExec(t, ctx, src, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE `+tbl.Sanitize()+` (
			"user id" int NOT NULL,
			"a.b" text COLLATE "C" DEFAULT 'x''y',
			r int4range,
			grp int,
			"g""en" int GENERATED ALWAYS AS ("user id" * 2) STORED,
			id bigint GENERATED ALWAYS AS IDENTITY (START WITH 10 INCREMENT BY 5),
			bd int GENERATED BY DEFAULT AS IDENTITY (MAXVALUE 1000 CYCLE),
			v varchar(5),
			n numeric(6,2),
			per int,
			CONSTRAINT "pk; DROP TABLE public.victim; --" PRIMARY KEY ("user id"),
			CONSTRAINT "u"" USING btree (n)" UNIQUE (v) DEFERRABLE INITIALLY DEFERRED,
			CONSTRAINT "pos n" CHECK (n > 0) NO INHERIT,
			CONSTRAINT "no overlap" EXCLUDE USING gist (grp WITH =, r WITH &&))`,
		`CREATE UNIQUE INDEX "ü partial USING btree (per)" ON `+tbl.Sanitize()+` (per) WHERE per > 100`,
		`CREATE INDEX "expr" ON `+tbl.Sanitize()+` (lower("a.b") DESC NULLS LAST, "a.b" COLLATE "POSIX" text_pattern_ops) INCLUDE (grp)`,
		`CREATE INDEX "hash ix" ON `+tbl.Sanitize()+` USING hash (v)`,
		`INSERT INTO `+tbl.Sanitize()+` ("user id", "a.b", r, grp, v, n, per) VALUES
			(1, 'A', '[1,5)', 1, 'a', 1, 13), (2, 'B', '[1,5)', 2, 'b', 2, 101), (3, 'C', '[6,9)', 1, 'c', 3, 3)`,
		// Row 1 violates it: it must be copied, and the constraint stay NOT VALID.
		`ALTER TABLE `+tbl.Sanitize()+` ADD CONSTRAINT "not 13" CHECK (per <> 13) NOT VALID`,
		`CREATE TABLE `+full.Sanitize()+` (a int, b text)`,
		`ALTER TABLE `+full.Sanitize()+` REPLICA IDENTITY FULL`,
		`CREATE TABLE `+byIndex.Sanitize()+` (a int NOT NULL, b int NOT NULL, c int)`,
		`CREATE UNIQUE INDEX "ri ""x""" ON `+byIndex.Sanitize()+` (b, a)`,
		`ALTER TABLE `+byIndex.Sanitize()+` REPLICA IDENTITY USING INDEX "ri ""x"""`,
		`CREATE TABLE `+nothing.Sanitize()+` (a int PRIMARY KEY)`,
		`ALTER TABLE `+nothing.Sanitize()+` REPLICA IDENTITY NOTHING`,
	)

	// Before the cutover's finishing statements, identity columns of a
	// move target are BY DEFAULT: the copy writes explicit values.
	ddl, err := metadata.ReadTableDDL(ctx, src, tbl)
	require.NoError(t, err)
	create := ddl.CreateStatement(tbl, "", metadata.MoveTarget)
	assert.NotContains(t, create, "GENERATED ALWAYS AS IDENTITY")
	assert.Contains(t, ddl.CreateStatement(tbl, "", metadata.NewShard), "GENERATED ALWAYS AS IDENTITY")
	assert.Contains(t, create, `GENERATED ALWAYS AS (("user id" * 2)) STORED`)

	for _, table := range []pgx.Identifier{tbl, full, byIndex, nothing} {
		moveCopy(t, ctx, src, dst, table)
		assert.Equal(t, "", diffOf(t, ctx, src, dst, table), "copy of %s", table.Sanitize())
	}
	assert.True(t, tableExists(t, ctx, dst, "public", "victim"))

	var kinds, idents string
	require.NoError(t, dst.QueryRow(ctx, `SELECT string_agg(attname || '=' || attidentity::text, ',' ORDER BY attnum) FILTER (WHERE attidentity <> ''),
		(SELECT string_agg(relreplident::text, '' ORDER BY relname) FROM pg_class WHERE relnamespace = $1::text::regnamespace AND relkind = 'r')
		FROM pg_attribute WHERE attrelid = $2::text::regclass`, pgx.Identifier{schema}.Sanitize(), tbl.Sanitize()).Scan(&kinds, &idents))
	assert.Equal(t, "id=a,bd=d", kinds, "identity kinds as on the source")
	assert.Equal(t, "ifnd", idents, "replica identities of by.index, full, nothing, t (by relname)")

	// The sequences continue where the source's are.
	var srcNext, dstNext [2]int64
	ins := `INSERT INTO ` + tbl.Sanitize() + ` ("user id", v, n, per) VALUES (4, 'd', 4, 4) RETURNING id, bd`
	require.NoError(t, src.QueryRow(ctx, ins).Scan(&srcNext[0], &srcNext[1]))
	require.NoError(t, dst.QueryRow(ctx, ins).Scan(&dstNext[0], &dstNext[1]))
	assert.Equal(t, [2]int64{25, 4}, srcNext)
	assert.Equal(t, srcNext, dstNext, "identity sequences continue from the source's position")

	q := tbl.Sanitize()
	for _, v := range []violation{
		{"primary key", `INSERT INTO ` + q + ` ("user id", per) VALUES (1, 0)`, "23505"},
		{"not null", `INSERT INTO ` + q + ` ("user id", per) VALUES (NULL, 0)`, "23502"},
		{"check", `INSERT INTO ` + q + ` ("user id", n) VALUES (10, -1)`, "23514"},
		{"not valid check on new rows", `INSERT INTO ` + q + ` ("user id", per) VALUES (11, 13)`, "23514"},
		{"exclude", `INSERT INTO ` + q + ` ("user id", grp, r) VALUES (12, 1, '[4,7)')`, "23P01"},
		{"deferrable unique", `INSERT INTO ` + q + ` ("user id", v) VALUES (13, 'a')`, "23505"},
		{"partial unique index", `INSERT INTO ` + q + ` ("user id", per) VALUES (14, 101)`, "23505"},
		{"generated column", `INSERT INTO ` + q + ` ("user id", "g""en") VALUES (15, 30)`, "428C9"},
		{"identity always", `INSERT INTO ` + q + ` ("user id", id) VALUES (16, 1)`, "428C9"},
		{"typmod", `INSERT INTO ` + q + ` ("user id", v) VALUES (17, 'toolong')`, "22001"},
		{"numeric typmod", `INSERT INTO ` + q + ` ("user id", n) VALUES (18, 123456)`, "22003"},
		{"replica identity nothing", `DELETE FROM ` + nothing.Sanitize(), "55000"},
	} {
		if v.what == "replica identity nothing" {
			// A table with REPLICA IDENTITY NOTHING in a publication refuses deletes.
			for _, c := range []*pgx.Conn{src, dst} {
				ddlExec(t, ctx, c, `CREATE PUBLICATION p FOR TABLE `+nothing.Sanitize(), `INSERT INTO `+nothing.Sanitize()+` VALUES (1)`)
			}
		}
		_, serr := src.Exec(ctx, v.sql)
		_, derr := dst.Exec(ctx, v.sql)
		assert.Equal(t, v.code, sqlstate(serr), "%s on the source: %v", v.what, serr)
		assert.Equal(t, v.code, sqlstate(derr), "%s on the copy: %v", v.what, derr)
	}
	// Rows that both accept, to show the refusals above were for cause.
	for _, s := range []string{
		`INSERT INTO ` + q + ` ("user id", grp, r, v, per) VALUES (20, 2, '[7,9)', 'e', 102)`,
		`INSERT INTO ` + q + ` ("user id", id) OVERRIDING SYSTEM VALUE VALUES (21, 1)`,
	} {
		_, serr := src.Exec(ctx, s)
		_, derr := dst.Exec(ctx, s)
		assert.NoError(t, serr, s)
		assert.NoError(t, derr, s)
	}
}

// TestTableDDLDiff: Diff names an added column, a changed typmod, an added
// index, an added constraint, a changed replica identity, a changed
// default, a changed identity option and a dropped NOT NULL; after each
// change is undone the definitions are equal again.
func TestTableDDLDiff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, dst := ddlNodes(t, ctx)
	tbl := pgx.Identifier{"public", `odd "name"`}
	q := tbl.Sanitize()
	ddlExec(t, ctx, src, `CREATE TABLE `+q+` (k int PRIMARY KEY, v varchar(5) NOT NULL DEFAULT 'a',
		id int GENERATED BY DEFAULT AS IDENTITY)`)
	moveCopy(t, ctx, src, dst, tbl)
	require.Equal(t, "", diffOf(t, ctx, src, dst, tbl))

	for _, c := range []struct {
		change, undo, want string
	}{
		{`ALTER TABLE ` + q + ` ADD COLUMN "x y" int`, `ALTER TABLE ` + q + ` DROP COLUMN "x y"`, `column "x y" is on the source only`},
		{`ALTER TABLE ` + q + ` ALTER COLUMN v TYPE varchar(6)`, `ALTER TABLE ` + q + ` ALTER COLUMN v TYPE varchar(5)`,
			`column "v" has type character varying(6) on the source and character varying(5) on the target`},
		{`CREATE INDEX "new ix" ON ` + q + ` (v)`, `DROP INDEX "new ix"`, `index "new ix" is on the source only`},
		{`ALTER TABLE ` + q + ` ADD CONSTRAINT "k>0" CHECK (k > 0)`, `ALTER TABLE ` + q + ` DROP CONSTRAINT "k>0"`, `constraint "k>0" is on the source only`},
		{`ALTER TABLE ` + q + ` REPLICA IDENTITY FULL`, `ALTER TABLE ` + q + ` REPLICA IDENTITY DEFAULT`, `replica identity is FULL on the source and DEFAULT on the target`},
		{`ALTER TABLE ` + q + ` ALTER COLUMN v SET DEFAULT 'b'`, `ALTER TABLE ` + q + ` ALTER COLUMN v SET DEFAULT 'a'`, `column "v" has default 'b'`},
		{`ALTER TABLE ` + q + ` ALTER COLUMN v DROP NOT NULL`, `ALTER TABLE ` + q + ` ALTER COLUMN v SET NOT NULL`, `column "v" is nullable on the source and NOT NULL on the target`},
		{`ALTER TABLE ` + q + ` ALTER COLUMN id SET INCREMENT BY 2`, `ALTER TABLE ` + q + ` ALTER COLUMN id SET INCREMENT BY 1`, `identity column "id" has sequence options`},
		{`ALTER TABLE ` + q + ` ALTER COLUMN id DROP IDENTITY`, `ALTER TABLE ` + q + ` ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY`, `column "id" is an identity column on the target only`},
	} {
		ddlExec(t, ctx, src, c.change)
		assert.Contains(t, diffOf(t, ctx, src, dst, tbl), c.want, c.change)
		ddlExec(t, ctx, src, c.undo)
		assert.Equal(t, "", diffOf(t, ctx, src, dst, tbl), c.undo)
	}
	// A column added on the target is named too.
	ddlExec(t, ctx, dst, `ALTER TABLE `+q+` ADD COLUMN extra int`)
	assert.Equal(t, `column "extra" is on the target only`, diffOf(t, ctx, src, dst, tbl))
}

// TestRunDDLIgnoresStatementTimeout: a session with statement_timeout =
// 100ms runs a longer DDL statement through RunDDL, and keeps its timeout
// for everything else.
func TestRunDDLIgnoresStatementTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb := sandboxtest.New(t, 1)
	cfg, err := pgx.ParseConfig(sb.Coordinator().DSN())
	require.NoError(t, err)
	cfg.RuntimeParams["statement_timeout"] = "100"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	ddlExec(t, ctx, conn, `CREATE TABLE big AS SELECT g AS a FROM generate_series(1, 10) g`,
		`CREATE FUNCTION slow(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 FROM pg_sleep(0.03)'`)
	_, err = pgsql.ExecOne(ctx, conn, `CREATE INDEX slow_ix ON big ((slow(a)))`)
	require.Equal(t, "57014", sqlstate(err), "without RunDDL the index build is cancelled: %v", err)
	require.NoError(t, metadata.RunDDL(ctx, conn, `CREATE INDEX slow_ix ON big ((slow(a)))`))
	var timeout string
	require.NoError(t, conn.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout))
	assert.Equal(t, "100ms", timeout, "the session keeps its timeout")
	// RunDDL refuses a second statement in one text.
	err = metadata.RunDDL(ctx, conn, `CREATE TABLE x (a int); DROP TABLE big`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "multiple commands")
}

// TestCreateDistributedTableHostileNames: `table create` of a table with
// hostile index and constraint names, one of them long and multibyte, in a
// hostile schema: every shard gets each index on the right column under a
// unique, valid name, and victim survives on the worker.
func TestCreateDistributedTableHostileNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, cat := sandboxtest.NewCompat(t, 1)
	w, err := pgx.Connect(ctx, c.Workers()[0].DSN())
	require.NoError(t, err)
	defer w.Close(ctx)
	ddlExec(t, ctx, w, `CREATE TABLE public.victim (id int)`)
	schema, rel := `s "q" ü; --`, `t' USING btree (k); DROP TABLE public.victim; --`
	long1 := strings.Repeat("ü", 30) + "a" // 61 bytes
	long2 := strings.Repeat("ü", 30) + "b"
	tbl := pgx.Identifier{schema, rel}
	exec(t, ctx, c.Coordinator().DSN(),
		"CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize(),
		"CREATE TABLE "+tbl.Sanitize()+` (k int, v int, w int GENERATED ALWAYS AS IDENTITY,
			CONSTRAINT "pk USING btree (v); DROP TABLE public.victim; --" PRIMARY KEY (k))`,
		"CREATE INDEX "+pgx.Identifier{hostileIndexNames[0]}.Sanitize()+" ON "+tbl.Sanitize()+" (v)",
		"CREATE INDEX "+pgx.Identifier{long1}.Sanitize()+" ON "+tbl.Sanitize()+" (v)",
		"CREATE INDEX "+pgx.Identifier{long2}.Sanitize()+" ON "+tbl.Sanitize()+" (w)",
		"ALTER TABLE "+tbl.Sanitize()+" REPLICA IDENTITY FULL",
	)
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: schema + "." + rel, Column: "k", ShardCount: 2})
	require.NoError(t, err)
	assert.True(t, tableExists(t, ctx, w, "public", "victim"), "victim must survive on the worker")

	rows, err := w.Query(ctx, `SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1`, schema)
	require.NoError(t, err)
	shards, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, shards, 2)
	for _, s := range shards {
		id := strings.TrimPrefix(s, rel+"_")
		got := indexColumns(t, ctx, w, pgx.Identifier{schema, s})
		require.Len(t, got, 4, "shard %s: %v", s, got)
		var longCols []string
		for name, cols := range got {
			assert.True(t, len(name) <= 63, name)
			assert.True(t, strings.HasSuffix(name, "_"+id), name)
			switch {
			case strings.HasPrefix(name, "pk USING"):
				assert.Equal(t, "k", cols)
			case strings.HasPrefix(name, "x USING"):
				assert.Equal(t, hostileIndexNames[0]+"_"+id, name)
				assert.Equal(t, "v", cols)
			default:
				assert.True(t, strings.HasPrefix(name, strings.Repeat("ü", 20)), name)
				longCols = append(longCols, cols)
			}
		}
		assert.ElementsMatch(t, []string{"v", "w"}, longCols, "both long names survive, each on its column")
		var ident, kind string
		require.NoError(t, w.QueryRow(ctx, `SELECT c.relreplident::text, a.attidentity::text FROM pg_class c
			JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'w'
			WHERE c.oid = $1::text::regclass`, pgx.Identifier{schema, s}.Sanitize()).Scan(&ident, &kind))
		assert.Equal(t, "f", ident, "replica identity FULL on shard %s", s)
		assert.Equal(t, "a", kind, "a new shard keeps GENERATED ALWAYS")
	}
}
