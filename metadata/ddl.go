package metadata

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/internal/pgsql"
)

// TableDDL is what it takes to create a copy of a table under another name,
// read from the catalogs of one server by ReadTableDDL. Every part is either
// a catalog value (names, flags, sequence options) or the complete output
// of a pg_get_*def/format_type function for one object; index definitions
// are cut from pg_get_indexdef only at an exact prefix computed from the
// quoted names (see IndexDef). Nothing is ever found by searching the text.
//
// Copied: columns (type with typmod, collation, NOT NULL, defaults, stored
// generated expressions, identity with its sequence options), PRIMARY KEY,
// UNIQUE (deferrable or not), CHECK (NO INHERIT and NOT VALID kept), EXCLUDE,
// valid indexes that no constraint owns (unique, partial, expression,
// INCLUDE, opclasses, DESC/NULLS, collations), and REPLICA IDENTITY.
//
// Owner and Grants are read so that a move's target belongs to the same
// role and grants the same privileges (PrivilegeStatements); Diff ignores
// them, as they are set again rather than compared.
//
// Also read (objects.go): the access method and storage parameters, the
// comment, row-level security and its policies, triggers, foreign keys and
// extended statistics; a table with rules is refused.
//
// Not copied: tablespaces, column comments, invalid indexes (a failed
// CREATE INDEX CONCURRENTLY), and column defaults that read a sequence
// (nextval: the sequence lives on the coordinator only). Only ordinary
// tables are read; anything else is refused.
type TableDDL struct {
	Columns     []ColumnDef
	Constraints []ConstraintDef
	Indexes     []IndexDef
	Replica     ReplicaIdentity
	// Owner is the owning role's name.
	Owner string
	// Grants are the table's privileges as they are in effect (an unset
	// ACL reads as its default: the owner's own privileges) and every
	// column privilege, in a fixed order.
	Grants []Grant

	// The table's other objects (objects.go).
	AccessMethod string   // pg_am.amname
	Options      []string // storage parameters, name=value; the toast table's as toast.name=value
	// RowSecurity and ForceRowSecurity are relrowsecurity and
	// relforcerowsecurity.
	RowSecurity, ForceRowSecurity bool
	Comment                       string
	Policies                      []PolicyDef
	Triggers                      []TriggerDef
	ForeignKeys                   []ForeignKeyDef
	Statistics                    []StatisticDef
}

// ColumnDef is one column, in attnum order (dropped columns left out).
type ColumnDef struct {
	Name string
	// Type is format_type(atttypid, atttypmod): "character varying(20)".
	Type string
	// Collation is the column's collation as a quoted, qualified name when it
	// is not its type's own collation; "" otherwise.
	Collation string
	NotNull   bool
	// Default is pg_get_expr of the column default; "" when there is none,
	// for generated and identity columns, and for defaults that read a
	// sequence (left out, see TableDDL).
	Default string
	// Generated is the expression of a GENERATED ALWAYS AS (...) STORED column.
	Generated string
	// Identity is set for identity columns.
	Identity *Identity
}

// Identity is an identity column's kind and its sequence.
type Identity struct {
	// Always is GENERATED ALWAYS (attidentity 'a'); false is BY DEFAULT ('d').
	Always bool
	// Sequence options, as in pg_sequence.
	Start, Increment, Min, Max, Cache int64
	Cycle                             bool
	// LastValue and IsCalled are the sequence's position when it was read.
	LastValue int64
	IsCalled  bool
}

// ConstraintDef is one PRIMARY KEY, UNIQUE, CHECK or EXCLUDE constraint.
type ConstraintDef struct {
	Name string
	Type string // pg_constraint.contype: "p", "u", "c" or "x"
	// Def is pg_get_constraintdef: "PRIMARY KEY (a, b)", "CHECK ((a > 0)) NOT VALID".
	Def   string
	Valid bool // convalidated; only CHECK constraints can be NOT VALID here
}

// IndexDef is one valid index that no constraint owns.
type IndexDef struct {
	Name   string // index name on the source table
	Unique bool
	// Body is what pg_get_indexdef prints after the exact prefix
	// `CREATE [UNIQUE ]INDEX <quote_ident(name)> ON <quote_ident(schema)>.<quote_ident(table)> USING `:
	// the access method, the key columns and everything after them
	// ("btree (lower(a) DESC) INCLUDE (b) WHERE (c > 0)").
	Body string
}

// ReplicaIdentity is pg_class.relreplident and, for 'i', the index.
type ReplicaIdentity struct {
	Kind  byte   // 'd' default, 'f' full, 'i' index, 'n' nothing
	Index string // the index's name when Kind is 'i'
}

// String is the clause after REPLICA IDENTITY, without the index name.
func (r ReplicaIdentity) String() string {
	switch r.Kind {
	case 'f':
		return "FULL"
	case 'n':
		return "NOTHING"
	case 'i':
		return "USING INDEX " + strconv.Quote(r.Index)
	}
	return "DEFAULT"
}

// Purpose says what a copy of a table is for.
type Purpose int

const (
	// NewShard is a shard table made by `table create`: identity columns
	// keep their kind.
	NewShard Purpose = iota
	// MoveTarget is the target of a move: the copy and the applier write
	// explicit values, so identity columns are GENERATED BY DEFAULT until
	// the cutover runs FinishStatements.
	MoveTarget
)

// maxIdentifierLen is PostgreSQL's NAMEDATALEN - 1 in bytes.
const maxIdentifierLen = 63

// tableSQL resolves the table by schema and name ($1, $2) without parsing.
const tableSQL = `SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relname = $2`

// ReadTableDDL reads the definition of the table schema.name (table[0],
// table[1]; no dotted text is parsed) from the server conn points to. It
// is ReadTablesDDL for one table.
func ReadTableDDL(ctx context.Context, conn interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, table pgx.Identifier) (TableDDL, error) {
	ds, err := ReadTablesDDL(ctx, conn, []pgx.Identifier{table})
	if err != nil {
		return TableDDL{}, err
	}
	return ds[0], nil
}

// splitTables gives the schemas, names and quoted names of tables, each
// of which must be schema-qualified.
func splitTables(tables []pgx.Identifier) (schemas, names, displays []string, err error) {
	schemas = make([]string, len(tables))
	names = make([]string, len(tables))
	displays = make([]string, len(tables))
	for i, t := range tables {
		if len(t) != 2 {
			return nil, nil, nil, fmt.Errorf("ReadTableDDL needs schema and name, got %d parts", len(t))
		}
		schemas[i], names[i], displays[i] = t[0], t[1], t.Sanitize()
	}
	return schemas, names, displays, nil
}

// tablesSQL resolves the tables by schema ($1) and name ($2), two arrays
// of the same length, without parsing: one row (i, oid) per table that
// exists, i its 1-based position in the arrays.
const tablesSQL = `SELECT u.i::int AS i, c.oid FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(s, r, i)
	JOIN pg_catalog.pg_namespace n ON n.nspname = u.s
	JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = u.r`

// tablesGrantsSQL is grantsSQL for every table of tablesSQL, each row led
// by the table's position.
const tablesGrantsSQL = `WITH t AS (` + tablesSQL + `)
	SELECT t.i, '' AS col, coalesce(r.rolname::text, '') AS grantee, x.privilege_type::text, x.is_grantable
	FROM t JOIN pg_catalog.pg_class c ON c.oid = t.oid
	CROSS JOIN LATERAL pg_catalog.aclexplode(coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner))) x
	LEFT JOIN pg_catalog.pg_roles r ON r.oid = x.grantee
	UNION ALL
	SELECT t.i, a.attname::text, coalesce(r.rolname::text, ''), x.privilege_type::text, x.is_grantable
	FROM t JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
	CROSS JOIN LATERAL pg_catalog.aclexplode(a.attacl) x
	LEFT JOIN pg_catalog.pg_roles r ON r.oid = x.grantee
	ORDER BY 1, 2, 3, 4`

// ReadTablesDDL reads the definitions of tables (each schema.name:
// table[0], table[1]; no dotted text is parsed) from the server conn
// points to, in the order given. It sends its queries as one batch for
// every table together (one round trip once pgx has prepared them,
// whatever the number of tables) and one more for the positions of
// identity sequences, if any. Expressions and type names are printed with
// an empty search_path, so everything outside pg_catalog is
// schema-qualified; the session's search_path is restored in the same
// batch. The queries run with plan_cache_mode = force_generic_plan (also
// restored in the batch): planning these catalog joins costs several
// times their execution, and a generic plan is made once per session
// instead of once per call. Inside a transaction, every part comes from
// that transaction's snapshot. When some table cannot be read, the error
// is the one ReadTableDDL gives for the first such table in the order
// given.
func ReadTablesDDL(ctx context.Context, conn interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, tables []pgx.Identifier) ([]TableDDL, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	schemas, names, displays, err := splitTables(tables)
	if err != nil {
		return nil, err
	}
	display := strings.Join(displays, ", ")
	out := make([]TableDDL, len(tables))
	for i := range out {
		// As pgx.CollectRows left them for one table: empty, not nil.
		out[i].Constraints, out[i].Grants = []ConstraintDef{}, []Grant{}
	}
	// found: the table exists; bad: the first problem with it, in the
	// order ReadTableDDL met them for one table.
	found := make([]bool, len(tables))
	bad := make([]error, len(tables))
	fail := func(i int, err error) {
		if bad[i] == nil {
			bad[i] = err
		}
	}
	// at turns a row's 1-based position into an index, refusing one the
	// query cannot have sent.
	at := func(pos int32) (int, error) {
		if pos < 1 || int(pos) > len(tables) {
			return 0, fmt.Errorf("catalog query returned table position %d of %d", pos, len(tables))
		}
		return int(pos) - 1, nil
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_catalog.set_config('shardmover.saved_search_path', pg_catalog.current_setting('search_path'), false),
		pg_catalog.set_config('search_path', '', false),
		pg_catalog.set_config('shardmover.saved_plan_cache_mode', pg_catalog.current_setting('plan_cache_mode'), false),
		pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', false)`)
	b.Queue(`WITH t AS (`+tablesSQL+`)
		SELECT t.i, c.relkind::text, c.relreplident::text,
			coalesce((SELECT ic.relname::text FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
				WHERE i.indrelid = c.oid AND i.indisreplident), ''),
			pg_catalog.pg_get_userbyid(c.relowner)::text
		FROM t JOIN pg_catalog.pg_class c ON c.oid = t.oid
		ORDER BY t.i`, schemas, names)
	b.Queue(`WITH t AS (`+tablesSQL+`)
		SELECT t.i, a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod),
			CASE WHEN a.attcollation <> 0 AND a.attcollation <> ty.typcollation
				THEN pg_catalog.quote_ident(cn.nspname) || '.' || pg_catalog.quote_ident(co.collname) ELSE '' END,
			a.attnotnull, a.attidentity::text, a.attgenerated::text,
			coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), ''),
			d.oid IS NOT NULL AND a.attgenerated = '' AND (pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%'
				OR pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE 'pg_catalog.nextval(%'
				OR EXISTS (SELECT 1 FROM pg_catalog.pg_depend dp JOIN pg_catalog.pg_class sc ON sc.oid = dp.refobjid
					WHERE dp.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND dp.objid = d.oid
					  AND dp.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND sc.relkind = 'S')),
			coalesce(seq.nspname, ''), coalesce(seq.relname, ''),
			coalesce(seq.seqstart, 0), coalesce(seq.seqincrement, 0), coalesce(seq.seqmin, 0),
			coalesce(seq.seqmax, 0), coalesce(seq.seqcache, 0), coalesce(seq.seqcycle, false)
		FROM t JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid
		JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid
		LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
		LEFT JOIN pg_catalog.pg_namespace cn ON cn.oid = co.collnamespace
		LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		LEFT JOIN LATERAL (SELECT sn.nspname::text, s.relname::text, q.seqstart, q.seqincrement, q.seqmin, q.seqmax, q.seqcache, q.seqcycle
			FROM pg_catalog.pg_depend dp
			JOIN pg_catalog.pg_class s ON s.oid = dp.objid AND s.relkind = 'S'
			JOIN pg_catalog.pg_namespace sn ON sn.oid = s.relnamespace
			JOIN pg_catalog.pg_sequence q ON q.seqrelid = s.oid
			WHERE dp.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND dp.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
			  AND dp.refobjid = a.attrelid AND dp.refobjsubid = a.attnum AND dp.deptype = 'i'
			LIMIT 1) seq ON a.attidentity <> ''
		WHERE a.attnum > 0 AND NOT a.attisdropped
		ORDER BY t.i, a.attnum`, schemas, names)
	b.Queue(`WITH t AS (`+tablesSQL+`)
		SELECT t.i, k.conname::text, k.contype::text, pg_catalog.pg_get_constraintdef(k.oid), k.convalidated
		FROM t JOIN pg_catalog.pg_constraint k ON k.conrelid = t.oid
		WHERE k.contype IN ('p', 'u', 'c', 'x')
		ORDER BY t.i, k.contype = 'p' DESC, k.conname`, schemas, names)
	b.Queue(`WITH t AS (`+tablesSQL+`)
		SELECT t.i, ic.relname::text, i.indisunique, pg_catalog.pg_get_indexdef(i.indexrelid),
			'CREATE ' || CASE WHEN i.indisunique THEN 'UNIQUE ' ELSE '' END || 'INDEX ' || pg_catalog.quote_ident(ic.relname)
				|| ' ON ' || pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname) || ' USING '
		FROM t JOIN pg_catalog.pg_index i ON i.indrelid = t.oid
		JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
		JOIN pg_catalog.pg_class c ON c.oid = i.indrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE i.indisvalid AND i.indislive
		  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
			WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x'))
		ORDER BY t.i, ic.relname`, schemas, names)
	b.Queue(tablesGrantsSQL, schemas, names)
	for _, q := range objectsSQLs {
		b.Queue(q, schemas, names)
	}
	b.Queue(`SELECT pg_catalog.set_config('search_path', pg_catalog.current_setting('shardmover.saved_search_path'), false),
		pg_catalog.set_config('plan_cache_mode', pg_catalog.current_setting('shardmover.saved_plan_cache_mode'), false)`)

	type seqRef struct {
		table  int
		col    int
		schema string
		name   string
	}
	var seqs []seqRef
	err = func() error {
		res := conn.SendBatch(ctx, b)
		defer res.Close()
		if _, err := res.Exec(); err != nil {
			return err
		}
		rows, err := res.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var pos int32
			var kind, replident, replIndex, owner string
			if err := rows.Scan(&pos, &kind, &replident, &replIndex, &owner); err != nil {
				rows.Close()
				return err
			}
			i, err := at(pos)
			if err != nil {
				rows.Close()
				return err
			}
			found[i] = true
			if kind != "r" {
				fail(i, invalidf("%s is not an ordinary table (relkind %q); only ordinary tables are copied", displays[i], kind))
				continue
			}
			out[i].Owner = owner
			out[i].Replica = ReplicaIdentity{Kind: replident[0], Index: replIndex}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range tables {
			if !found[i] {
				fail(i, invalidf("table %s does not exist", displays[i]))
			}
		}

		rows, err = res.Query()
		if err != nil {
			return fmt.Errorf("read columns: %w", err)
		}
		for rows.Next() {
			var pos int32
			var c ColumnDef
			var identity, generated, def, seqSchema, seqName string
			var fromSeq bool
			var id Identity
			if err := rows.Scan(&pos, &c.Name, &c.Type, &c.Collation, &c.NotNull, &identity, &generated, &def, &fromSeq,
				&seqSchema, &seqName, &id.Start, &id.Increment, &id.Min, &id.Max, &id.Cache, &id.Cycle); err != nil {
				rows.Close()
				return fmt.Errorf("read columns: %w", err)
			}
			i, err := at(pos)
			if err != nil {
				rows.Close()
				return fmt.Errorf("read columns: %w", err)
			}
			d := &out[i]
			switch {
			case generated == "s":
				c.Generated = def
			case generated != "":
				fail(i, invalidf("column %q of %s is generated in a way this version cannot copy (%q)", c.Name, displays[i], generated))
				continue
			case identity != "":
				if seqName == "" {
					fail(i, fmt.Errorf("identity column %q of %s has no sequence", c.Name, displays[i]))
					continue
				}
				id.Always = identity == "a"
				c.Identity = &id
				seqs = append(seqs, seqRef{i, len(d.Columns), seqSchema, seqName})
			case !fromSeq:
				c.Default = def
			}
			d.Columns = append(d.Columns, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read columns: %w", err)
		}

		rows, err = res.Query()
		if err != nil {
			return fmt.Errorf("read constraints: %w", err)
		}
		for rows.Next() {
			var pos int32
			var k ConstraintDef
			if err := rows.Scan(&pos, &k.Name, &k.Type, &k.Def, &k.Valid); err != nil {
				rows.Close()
				return fmt.Errorf("read constraints: %w", err)
			}
			i, err := at(pos)
			if err != nil {
				rows.Close()
				return fmt.Errorf("read constraints: %w", err)
			}
			out[i].Constraints = append(out[i].Constraints, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read constraints: %w", err)
		}

		rows, err = res.Query()
		if err != nil {
			return fmt.Errorf("read indexes: %w", err)
		}
		for rows.Next() {
			var pos int32
			var ix IndexDef
			var def, prefix string
			if err := rows.Scan(&pos, &ix.Name, &ix.Unique, &def, &prefix); err != nil {
				rows.Close()
				return fmt.Errorf("read indexes: %w", err)
			}
			i, err := at(pos)
			if err != nil {
				rows.Close()
				return fmt.Errorf("read indexes: %w", err)
			}
			body, ok := strings.CutPrefix(def, prefix)
			if !ok || body == "" {
				fail(i, fmt.Errorf("index %q of %s: its definition does not start with %q; refusing to copy it", ix.Name, displays[i], prefix))
				continue
			}
			ix.Body = body
			out[i].Indexes = append(out[i].Indexes, ix)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read indexes: %w", err)
		}

		rows, err = res.Query()
		if err != nil {
			return fmt.Errorf("read privileges: %w", err)
		}
		for rows.Next() {
			var pos int32
			var g Grant
			if err := rows.Scan(&pos, &g.Column, &g.Grantee, &g.Privilege, &g.Grantable); err != nil {
				rows.Close()
				return fmt.Errorf("read privileges: %w", err)
			}
			i, err := at(pos)
			if err != nil {
				rows.Close()
				return fmt.Errorf("read privileges: %w", err)
			}
			out[i].Grants = append(out[i].Grants, g)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read privileges: %w", err)
		}
		if err := readObjects(res, out, at, fail, displays); err != nil {
			return err
		}
		if _, err := res.Exec(); err != nil {
			return err
		}
		return res.Close()
	}()
	if err != nil {
		return nil, fmt.Errorf("read the definition of %s: %w", display, err)
	}
	for i, err := range bad {
		switch {
		case err == nil:
		case errors.Is(err, ErrInvalid):
			return nil, err
		default:
			return nil, fmt.Errorf("read the definition of %s: %w", displays[i], err)
		}
	}
	if len(seqs) > 0 {
		b := &pgx.Batch{}
		for _, s := range seqs {
			b.Queue("SELECT last_value, is_called FROM " + pgx.Identifier{s.schema, s.name}.Sanitize())
		}
		res := conn.SendBatch(ctx, b)
		for _, s := range seqs {
			id := out[s.table].Columns[s.col].Identity
			if err := res.QueryRow().Scan(&id.LastValue, &id.IsCalled); err != nil {
				res.Close()
				return nil, fmt.Errorf("read the identity sequence of %s.%q: %w", displays[s.table], out[s.table].Columns[s.col].Name, err)
			}
		}
		if err := res.Close(); err != nil {
			return nil, fmt.Errorf("read the identity sequences of %s: %w", display, err)
		}
	}
	return out, nil
}

// CreateStatement renders CREATE TABLE IF NOT EXISTS for target with the
// columns and every valid constraint. Constraint names get the suffix
// (names are unique per schema, and a node holds many shards; see
// suffixed); an empty suffix keeps them. For MoveTarget, identity columns
// are BY DEFAULT (FinishStatements sets the source's kind at the cutover).
// NOT VALID constraints come with IndexStatements, after the data.
func (d TableDDL) CreateStatement(target pgx.Identifier, suffix string, p Purpose) string {
	parts := make([]string, 0, len(d.Columns)+len(d.Constraints))
	for _, c := range d.Columns {
		parts = append(parts, c.render(p))
	}
	for _, c := range d.Constraints {
		if !c.Valid {
			continue
		}
		parts = append(parts, "CONSTRAINT "+quoteIdent(suffixed(c.Name, suffix))+" "+c.Def)
	}
	return "CREATE TABLE IF NOT EXISTS " + target.Sanitize() + " (\n\t" + strings.Join(parts, ",\n\t") + "\n)" + d.tableOptions()
}

func (c ColumnDef) render(p Purpose) string {
	s := quoteIdent(c.Name) + " " + c.Type
	if c.Collation != "" {
		s += " COLLATE " + c.Collation
	}
	switch {
	case c.Generated != "":
		s += " GENERATED ALWAYS AS (" + c.Generated + ") STORED"
	case c.Identity != nil:
		kind := "BY DEFAULT"
		if c.Identity.Always && p != MoveTarget {
			kind = "ALWAYS"
		}
		s += " GENERATED " + kind + " AS IDENTITY (" + c.Identity.options() + ")"
	case c.Default != "":
		s += " DEFAULT " + c.Default
	}
	if c.NotNull {
		s += " NOT NULL"
	}
	return s
}

func (id Identity) options() string {
	cycle := "NO CYCLE"
	if id.Cycle {
		cycle = "CYCLE"
	}
	return fmt.Sprintf("START WITH %d INCREMENT BY %d MINVALUE %d MAXVALUE %d CACHE %d %s",
		id.Start, id.Increment, id.Min, id.Max, id.Cache, cycle)
}

// IndexStatements renders what comes after the data: the indexes (named
// <index>_<suffix> as Citus names shard indexes; an empty suffix keeps the
// names), NOT VALID constraints, and the replica identity. Every statement
// can run again after it succeeded (IF NOT EXISTS; a NOT VALID constraint
// is dropped and added in one ALTER TABLE).
func (d TableDDL) IndexStatements(target pgx.Identifier, suffix string) []string {
	out := make([]string, 0, len(d.Indexes)+2)
	for _, ix := range d.Indexes {
		u := ""
		if ix.Unique {
			u = "UNIQUE "
		}
		out = append(out, "CREATE "+u+"INDEX IF NOT EXISTS "+quoteIdent(suffixed(ix.Name, suffix))+" ON "+target.Sanitize()+" USING "+ix.Body)
	}
	for _, c := range d.Constraints {
		if c.Valid {
			continue
		}
		name := quoteIdent(suffixed(c.Name, suffix))
		out = append(out, "ALTER TABLE "+target.Sanitize()+" DROP CONSTRAINT IF EXISTS "+name+", ADD CONSTRAINT "+name+" "+c.Def)
	}
	switch d.Replica.Kind {
	case 'f':
		out = append(out, "ALTER TABLE "+target.Sanitize()+" REPLICA IDENTITY FULL")
	case 'n':
		out = append(out, "ALTER TABLE "+target.Sanitize()+" REPLICA IDENTITY NOTHING")
	case 'i':
		out = append(out, "ALTER TABLE "+target.Sanitize()+" REPLICA IDENTITY USING INDEX "+quoteIdent(suffixed(d.Replica.Index, suffix)))
	}
	return out
}

// FinishStatements are what a move's cutover runs on the target (under its
// lock, after the last change is applied) to finish the identity columns:
// each gets the source's kind (SET GENERATED ALWAYS / BY DEFAULT) and its
// sequence the source sequence's position (setval with is_called). d must
// be the source's definition read under the same lock, so the positions
// are final. A table without identity columns needs none.
func (d TableDDL) FinishStatements(target pgx.Identifier) []string {
	var out []string
	for _, c := range d.Columns {
		if c.Identity == nil {
			continue
		}
		kind := "BY DEFAULT"
		if c.Identity.Always {
			kind = "ALWAYS"
		}
		out = append(out,
			"ALTER TABLE "+target.Sanitize()+" ALTER COLUMN "+quoteIdent(c.Name)+" SET GENERATED "+kind,
			fmt.Sprintf("SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence(%s, %s), %d, %t)",
				quoteLiteral(target.Sanitize()), quoteLiteral(c.Name), c.Identity.LastValue, c.Identity.IsCalled))
	}
	return out
}

// Diff compares d, the source's definition, with other, the target's, and
// returns "" when they accept the same rows, else one sentence naming the
// first difference ("column \"x\" is on the source only"). It compares
// columns (name, order, type with typmod, collation, NOT NULL, default,
// generated expression, identity and its sequence options), constraints
// (name, kind, definition, validity), indexes (name, definition) and the
// replica identity. It ignores what legitimately differs on a move target
// before its cutover: the identity kind (BY DEFAULT until FinishStatements,
// which sets the source's kind read under the cutover's lock) and sequence
// positions.
func (d TableDDL) Diff(other TableDDL) string {
	theirs := map[string]int{}
	for i, c := range other.Columns {
		theirs[c.Name] = i
	}
	for _, c := range d.Columns {
		i, ok := theirs[c.Name]
		if !ok {
			return fmt.Sprintf("column %q is on the source only", c.Name)
		}
		if s := c.diff(other.Columns[i]); s != "" {
			return s
		}
	}
	mine := map[string]bool{}
	for _, c := range d.Columns {
		mine[c.Name] = true
	}
	for _, c := range other.Columns {
		if !mine[c.Name] {
			return fmt.Sprintf("column %q is on the target only", c.Name)
		}
	}
	for i, c := range d.Columns {
		if other.Columns[i].Name != c.Name {
			return fmt.Sprintf("column %q is at position %d on the source and %q is there on the target", c.Name, i+1, other.Columns[i].Name)
		}
	}

	cons := map[string]ConstraintDef{}
	for _, c := range other.Constraints {
		cons[c.Name] = c
	}
	for _, c := range d.Constraints {
		o, ok := cons[c.Name]
		switch {
		case !ok:
			return fmt.Sprintf("constraint %q is on the source only", c.Name)
		case o.Type != c.Type || o.Def != c.Def:
			return fmt.Sprintf("constraint %q is %s on the source and %s on the target", c.Name, c.Def, o.Def)
		case o.Valid != c.Valid:
			return fmt.Sprintf("constraint %q is %s on the source and %s on the target", c.Name, validity(c.Valid), validity(o.Valid))
		}
		delete(cons, c.Name)
	}
	for _, c := range other.Constraints {
		if _, ok := cons[c.Name]; ok {
			return fmt.Sprintf("constraint %q is on the target only", c.Name)
		}
	}

	idx := map[string]IndexDef{}
	for _, ix := range other.Indexes {
		idx[ix.Name] = ix
	}
	for _, ix := range d.Indexes {
		o, ok := idx[ix.Name]
		switch {
		case !ok:
			return fmt.Sprintf("index %q is on the source only", ix.Name)
		case o.Unique != ix.Unique || o.Body != ix.Body:
			return fmt.Sprintf("index %q is %s on the source and %s on the target", ix.Name, ix.describe(), o.describe())
		}
		delete(idx, ix.Name)
	}
	for _, ix := range other.Indexes {
		if _, ok := idx[ix.Name]; ok {
			return fmt.Sprintf("index %q is on the target only", ix.Name)
		}
	}

	if d.Replica != other.Replica {
		return fmt.Sprintf("replica identity is %s on the source and %s on the target", d.Replica, other.Replica)
	}
	return d.diffObjects(other)
}

func (c ColumnDef) diff(o ColumnDef) string {
	q := strconv.Quote(c.Name)
	orNone := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	switch {
	case c.Type != o.Type:
		return fmt.Sprintf("column %s has type %s on the source and %s on the target", q, c.Type, o.Type)
	case c.Collation != o.Collation:
		return fmt.Sprintf("column %s has collation %s on the source and %s on the target", q,
			orNone(c.Collation, "of its type"), orNone(o.Collation, "of its type"))
	case c.NotNull != o.NotNull:
		return fmt.Sprintf("column %s is %s on the source and %s on the target", q, nullability(c.NotNull), nullability(o.NotNull))
	case c.Generated != o.Generated:
		return fmt.Sprintf("column %s is generated as %s on the source and %s on the target", q,
			orNone(c.Generated, "nothing"), orNone(o.Generated, "nothing"))
	case c.Default != o.Default:
		return fmt.Sprintf("column %s has default %s on the source and %s on the target", q,
			orNone(c.Default, "none"), orNone(o.Default, "none"))
	case (c.Identity == nil) != (o.Identity == nil):
		side := "source"
		if c.Identity == nil {
			side = "target"
		}
		return fmt.Sprintf("column %s is an identity column on the %s only", q, side)
	case c.Identity != nil && c.Identity.options() != o.Identity.options():
		return fmt.Sprintf("identity column %s has sequence options %s on the source and %s on the target", q,
			c.Identity.options(), o.Identity.options())
	}
	return ""
}

func validity(v bool) string {
	if v {
		return "valid"
	}
	return "NOT VALID"
}

func nullability(notNull bool) string {
	if notNull {
		return "NOT NULL"
	}
	return "nullable"
}

func (ix IndexDef) describe() string {
	if ix.Unique {
		return "UNIQUE USING " + ix.Body
	}
	return "USING " + ix.Body
}

// RunDDL runs each statement in a transaction of its own with
// SET LOCAL statement_timeout = 0, so that a node's statement_timeout can
// not kill an index build on a large shard, and through pgsql.ExecOne, so
// that a statement built from catalog names can never start another one.
// It stops at the first error.
func RunDDL(ctx context.Context, conn *pgx.Conn, stmts ...string) error {
	for _, s := range stmts {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := pgsql.ExecOne(ctx, tx.Conn(), "SET LOCAL statement_timeout = 0"); err != nil {
				return err
			}
			_, err := pgsql.ExecOne(ctx, tx.Conn(), s)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// suffixed is name_suffix, or name itself when suffix is empty (a moved
// shard keeps its names). When name_suffix is longer than PostgreSQL's 63
// bytes, it is <prefix>_<hash>_<suffix>: the longest prefix of name that
// fits without splitting a UTF-8 character, and 8 hex digits of the
// SHA-256 of the whole name, so two long names that share a prefix still
// get different names.
func suffixed(name, suffix string) string {
	if suffix == "" {
		return name
	}
	s := name + "_" + suffix
	if len(s) <= maxIdentifierLen {
		return s
	}
	sum := sha256.Sum256([]byte(name))
	tail := "_" + hex.EncodeToString(sum[:4]) + "_" + suffix
	keep := maxIdentifierLen - len(tail)
	if keep < 0 {
		keep = 0
	}
	if keep > len(name) {
		keep = len(name)
	}
	for keep > 0 && keep < len(name) && !utf8.RuneStart(name[keep]) {
		keep--
	}
	return name[:keep] + tail
}

// quoteIdent always quotes, as pgx.Identifier does.
func quoteIdent(name string) string { return pgx.Identifier{name}.Sanitize() }

// quoteLiteral is PostgreSQL's quote_literal: safe whatever
// standard_conforming_strings is.
func quoteLiteral(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		return "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}
