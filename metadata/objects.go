package metadata

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A table's objects beyond its columns, constraints and indexes: what a
// moved shard must have again on its target to be the same table (Citus
// recreates each of them on a shard it moves). They are read with the
// rest of the definition (ReadTablesDDL) and fall in three groups by when a
// move creates them:
//
//   - with the table (CreateStatement): the access method and the storage
//     parameters;
//   - right after it, before the data (ObjectStatements): extended
//     statistics, the table's comment, the row-level security policies and
//     the triggers, the triggers disabled: the copy and the applier must
//     fire none of them (a trigger would change what it replays), and a
//     policy does nothing while row-level security is off on the target;
//   - at the cutover, under its lock, from the source's definition read
//     there (CutoverStatements): each trigger's enabled state, row-level
//     security on (and forced) as on the source, and the foreign keys NOT
//     VALID (with them in place during catch-up, a cascade would delete
//     rows the applier then finds missing, and a child replayed before its
//     parent in a group would fail); then ValidateStatements after the
//     cutover, which do not block writes.
//
// Rules are refused: a rule would rewrite the applier's statements.

// ForeignKeyDef is one foreign key of the table, read from its catalog
// parts (never from text) so that the referenced table can be named anew.
type ForeignKeyDef struct {
	Name      string
	Columns   []string
	RefTable  pgx.Identifier // schema, name
	RefCols   []string
	Match     string // confmatchtype: f, p, s
	OnUpdate  string // confupdtype: a, r, c, n, d
	OnDelete  string // confdeltype
	DelSetCol []string
	// Deferrable and Deferred are condeferrable and condeferred.
	Deferrable, Deferred bool
	Valid                bool
}

// PolicyDef is one row-level security policy.
type PolicyDef struct {
	Name       string
	Permissive bool
	Cmd        string   // polcmd: r, a, w, d or *
	Roles      []string // quoted role names, or PUBLIC
	Using      string   // pg_get_expr of polqual, "" when none
	Check      string   // pg_get_expr of polwithcheck, "" when none
}

// TriggerDef is one trigger that is not internal (a foreign key's are).
type TriggerDef struct {
	Name string
	// Def is pg_get_triggerdef: CREATE TRIGGER ... ON <schema>.<table> ...,
	// naming the table it was read from.
	Def string
	// Enabled is tgenabled: O (origin and local), D (disabled), R (replica)
	// or A (always).
	Enabled string
}

// StatisticDef is one extended statistics object.
type StatisticDef struct {
	Name pgx.Identifier // schema, name
	// Def is pg_get_statisticsobjdef: CREATE STATISTICS ... FROM <table>.
	Def string
}

// optionNameRE is a storage parameter's name as PostgreSQL prints them.
var optionNameRE = regexp.MustCompile(`^(toast\.)?[a-z_][a-z0-9_]*$`)

// objectsSQLs are the queries ReadTablesDDL adds for the objects, each row
// led by the table's position.
var objectsSQLs = []string{
	// Access method, storage parameters (the toast table's prefixed),
	// row-level security, the table's comment, and the number of rules.
	`WITH t AS (` + tablesSQL + `)
	SELECT t.i, coalesce(am.amname::text, ''),
		ARRAY(SELECT o.option_name || '=' || o.option_value FROM pg_catalog.pg_options_to_table(c.reloptions) o
			UNION ALL SELECT 'toast.' || o.option_name || '=' || o.option_value FROM pg_catalog.pg_options_to_table(tc.reloptions) o),
		c.relrowsecurity, c.relforcerowsecurity, coalesce(pg_catalog.obj_description(c.oid, 'pg_class'), ''),
		(SELECT count(*)::int FROM pg_catalog.pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename <> '_RETURN')
	FROM t JOIN pg_catalog.pg_class c ON c.oid = t.oid
	LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
	LEFT JOIN pg_catalog.pg_class tc ON tc.oid = c.reltoastrelid
	ORDER BY t.i`,
	`WITH t AS (` + tablesSQL + `)
	SELECT t.i, p.polname::text, p.polpermissive, p.polcmd::text,
		ARRAY(SELECT CASE WHEN r.oid = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(ro.rolname) END
			FROM unnest(p.polroles) WITH ORDINALITY AS r(oid, n) LEFT JOIN pg_catalog.pg_roles ro ON ro.oid = r.oid ORDER BY r.n),
		coalesce(pg_catalog.pg_get_expr(p.polqual, p.polrelid), ''), coalesce(pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid), '')
	FROM t JOIN pg_catalog.pg_policy p ON p.polrelid = t.oid
	ORDER BY t.i, p.polname`,
	`WITH t AS (` + tablesSQL + `)
	SELECT t.i, tg.tgname::text, pg_catalog.pg_get_triggerdef(tg.oid), tg.tgenabled::text
	FROM t JOIN pg_catalog.pg_trigger tg ON tg.tgrelid = t.oid
	WHERE NOT tg.tgisinternal
	ORDER BY t.i, tg.tgname`,
	`WITH t AS (` + tablesSQL + `)
	SELECT t.i, k.conname::text,
		ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY AS x(n, o) JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = x.n ORDER BY x.o),
		rn.nspname::text, rc.relname::text,
		ARRAY(SELECT a.attname::text FROM unnest(k.confkey) WITH ORDINALITY AS x(n, o) JOIN pg_catalog.pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = x.n ORDER BY x.o),
		k.confmatchtype::text, k.confupdtype::text, k.confdeltype::text,
		ARRAY(SELECT a.attname::text FROM unnest(coalesce(k.confdelsetcols, '{}')) WITH ORDINALITY AS x(n, o) JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = x.n ORDER BY x.o),
		k.condeferrable, k.condeferred, k.convalidated
	FROM t JOIN pg_catalog.pg_constraint k ON k.conrelid = t.oid AND k.contype = 'f'
	JOIN pg_catalog.pg_class rc ON rc.oid = k.confrelid
	JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace
	ORDER BY t.i, k.conname`,
	`WITH t AS (` + tablesSQL + `)
	SELECT t.i, sn.nspname::text, s.stxname::text, pg_catalog.pg_get_statisticsobjdef(s.oid)
	FROM t JOIN pg_catalog.pg_statistic_ext s ON s.stxrelid = t.oid
	JOIN pg_catalog.pg_namespace sn ON sn.oid = s.stxnamespace
	ORDER BY t.i, sn.nspname, s.stxname`,
}

// readObjects reads the results of objectsSQLs, in order, into out.
func readObjects(res pgx.BatchResults, out []TableDDL, at func(int32) (int, error), fail func(int, error), displays []string) error {
	each := func(what string, scan func(rows pgx.Rows) (int32, func(d *TableDDL) error, error)) error {
		rows, err := res.Query()
		if err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		defer rows.Close()
		for rows.Next() {
			pos, apply, err := scan(rows)
			if err != nil {
				return fmt.Errorf("read %s: %w", what, err)
			}
			i, err := at(pos)
			if err != nil {
				return fmt.Errorf("read %s: %w", what, err)
			}
			if err := apply(&out[i]); err != nil {
				fail(i, err)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		return nil
	}
	err := each("storage parameters", func(rows pgx.Rows) (int32, func(*TableDDL) error, error) {
		var pos, rules int32
		var am, comment string
		var opts []string
		var rls, force bool
		err := rows.Scan(&pos, &am, &opts, &rls, &force, &comment, &rules)
		return pos, func(d *TableDDL) error {
			if rules > 0 {
				return invalidf("%s has rules; shardmover does not copy rules (a rule would rewrite what it replays): drop them, move, and create them again", displays[pos-1])
			}
			for _, o := range opts {
				name, _, _ := strings.Cut(o, "=")
				if !optionNameRE.MatchString(name) {
					return fmt.Errorf("storage parameter %q of %s has a name this version does not copy", name, displays[pos-1])
				}
			}
			d.AccessMethod, d.Options, d.RowSecurity, d.ForceRowSecurity, d.Comment = am, opts, rls, force, comment
			return nil
		}, err
	})
	if err != nil {
		return err
	}
	err = each("policies", func(rows pgx.Rows) (int32, func(*TableDDL) error, error) {
		var pos int32
		var p PolicyDef
		err := rows.Scan(&pos, &p.Name, &p.Permissive, &p.Cmd, &p.Roles, &p.Using, &p.Check)
		return pos, func(d *TableDDL) error { d.Policies = append(d.Policies, p); return nil }, err
	})
	if err != nil {
		return err
	}
	err = each("triggers", func(rows pgx.Rows) (int32, func(*TableDDL) error, error) {
		var pos int32
		var tg TriggerDef
		err := rows.Scan(&pos, &tg.Name, &tg.Def, &tg.Enabled)
		return pos, func(d *TableDDL) error { d.Triggers = append(d.Triggers, tg); return nil }, err
	})
	if err != nil {
		return err
	}
	err = each("foreign keys", func(rows pgx.Rows) (int32, func(*TableDDL) error, error) {
		var pos int32
		var fk ForeignKeyDef
		var schema, table string
		err := rows.Scan(&pos, &fk.Name, &fk.Columns, &schema, &table, &fk.RefCols, &fk.Match, &fk.OnUpdate, &fk.OnDelete,
			&fk.DelSetCol, &fk.Deferrable, &fk.Deferred, &fk.Valid)
		fk.RefTable = pgx.Identifier{schema, table}
		return pos, func(d *TableDDL) error { d.ForeignKeys = append(d.ForeignKeys, fk); return nil }, err
	})
	if err != nil {
		return err
	}
	return each("statistics", func(rows pgx.Rows) (int32, func(*TableDDL) error, error) {
		var pos int32
		var s StatisticDef
		var schema, name string
		err := rows.Scan(&pos, &schema, &name, &s.Def)
		s.Name = pgx.Identifier{schema, name}
		return pos, func(d *TableDDL) error { d.Statistics = append(d.Statistics, s); return nil }, err
	})
}

// tableOptions renders the access method and storage parameters for
// CREATE TABLE: " USING <am>" unless heap, " WITH (...)" when any.
func (d TableDDL) tableOptions() string {
	s := ""
	if d.AccessMethod != "" && d.AccessMethod != "heap" {
		s += " USING " + quoteIdent(d.AccessMethod)
	}
	if len(d.Options) > 0 {
		opts := make([]string, len(d.Options))
		for i, o := range d.Options {
			name, value, _ := strings.Cut(o, "=")
			opts[i] = name + " = " + quoteLiteral(value) // name: optionNameRE
		}
		s += " WITH (" + strings.Join(opts, ", ") + ")"
	}
	return s
}

// ObjectStatements renders what a move creates on its target right after
// the table, before the data: extended statistics, the comment, the
// policies, and the triggers, each disabled at once (see the top of this
// file). source is the table the definition was read from: trigger and
// statistics definitions name it, so the target must have the same name.
func (d TableDDL) ObjectStatements(source, target pgx.Identifier) ([]string, error) {
	if (len(d.Triggers) > 0 || len(d.Statistics) > 0) && !slices.Equal(source, target) {
		return nil, fmt.Errorf("the triggers and statistics of %s name it; they can be copied only to a table of the same name, not to %s", source.Sanitize(), target.Sanitize())
	}
	var out []string
	for _, s := range d.Statistics {
		out = append(out, s.Def)
	}
	if d.Comment != "" {
		out = append(out, "COMMENT ON TABLE "+target.Sanitize()+" IS "+quoteLiteral(d.Comment))
	}
	for _, p := range d.Policies {
		out = append(out, p.create(target))
	}
	for _, tg := range d.Triggers {
		out = append(out, tg.Def, "ALTER TABLE "+target.Sanitize()+" DISABLE TRIGGER "+quoteIdent(tg.Name))
	}
	return out, nil
}

// CutoverStatements renders what a move's cutover runs on the target in
// its transaction that commits after the decision, from d, the source's
// definition read under the cutover's lock: each trigger's enabled state,
// row-level security as on the source, and the foreign keys NOT VALID.
// ref names each referenced table on the target (identity for a move:
// the same names). skipFK leaves out foreign keys the target has already.
func (d TableDDL) CutoverStatements(target pgx.Identifier, ref func(pgx.Identifier) pgx.Identifier, skipFK func(name string) bool) []string {
	var out []string
	for _, tg := range d.Triggers {
		state := map[string]string{"O": "ENABLE", "D": "DISABLE", "R": "ENABLE REPLICA", "A": "ENABLE ALWAYS"}[tg.Enabled]
		if state == "" {
			state = "ENABLE"
		}
		out = append(out, "ALTER TABLE "+target.Sanitize()+" "+state+" TRIGGER "+quoteIdent(tg.Name))
	}
	if d.RowSecurity {
		out = append(out, "ALTER TABLE "+target.Sanitize()+" ENABLE ROW LEVEL SECURITY")
	}
	if d.ForceRowSecurity {
		out = append(out, "ALTER TABLE "+target.Sanitize()+" FORCE ROW LEVEL SECURITY")
	}
	for _, fk := range d.ForeignKeys {
		if skipFK != nil && skipFK(fk.Name) {
			continue
		}
		out = append(out, "ALTER TABLE "+target.Sanitize()+" ADD CONSTRAINT "+quoteIdent(fk.Name)+" "+fk.render(ref(fk.RefTable))+" NOT VALID")
	}
	return out
}

// ValidateStatements validates, after the cutover, the foreign keys the
// source has validated (CutoverStatements adds them NOT VALID).
func (d TableDDL) ValidateStatements(target pgx.Identifier) []string {
	var out []string
	for _, fk := range d.ForeignKeys {
		if fk.Valid {
			out = append(out, "ALTER TABLE "+target.Sanitize()+" VALIDATE CONSTRAINT "+quoteIdent(fk.Name))
		}
	}
	return out
}

// render is the foreign key's clause after ADD CONSTRAINT <name>,
// referencing ref.
func (fk ForeignKeyDef) render(ref pgx.Identifier) string {
	cols := func(cs []string) string {
		q := make([]string, len(cs))
		for i, c := range cs {
			q[i] = quoteIdent(c)
		}
		return "(" + strings.Join(q, ", ") + ")"
	}
	action := func(a string) string {
		return map[string]string{"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}[a]
	}
	s := "FOREIGN KEY " + cols(fk.Columns) + " REFERENCES " + ref.Sanitize() + " " + cols(fk.RefCols)
	switch fk.Match {
	case "f":
		s += " MATCH FULL"
	case "p":
		s += " MATCH PARTIAL"
	}
	s += " ON UPDATE " + action(fk.OnUpdate) + " ON DELETE " + action(fk.OnDelete)
	if len(fk.DelSetCol) > 0 {
		s += " " + cols(fk.DelSetCol)
	}
	if fk.Deferrable {
		s += " DEFERRABLE INITIALLY "
		if fk.Deferred {
			s += "DEFERRED"
		} else {
			s += "IMMEDIATE"
		}
	}
	return s
}

// create is CREATE POLICY for the policy on target.
func (p PolicyDef) create(target pgx.Identifier) string {
	as := "PERMISSIVE"
	if !p.Permissive {
		as = "RESTRICTIVE"
	}
	cmd := map[string]string{"r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE", "*": "ALL"}[p.Cmd]
	if cmd == "" {
		cmd = "ALL"
	}
	s := "CREATE POLICY " + quoteIdent(p.Name) + " ON " + target.Sanitize() + " AS " + as + " FOR " + cmd + " TO " + strings.Join(p.Roles, ", ")
	if p.Using != "" {
		s += " USING (" + p.Using + ")"
	}
	if p.Check != "" {
		s += " WITH CHECK (" + p.Check + ")"
	}
	return s
}

// diffObjects is Diff for the objects: the access method, policies,
// triggers (not their enabled state) and statistics. The row-level
// security flags and trigger states differ on a move's target until the
// cutover sets them from the source, and its foreign keys are added then,
// from the source's read under the cutover's lock.
func (d TableDDL) diffObjects(other TableDDL) string {
	if d.AccessMethod != other.AccessMethod {
		return fmt.Sprintf("the access method is %q on the source and %q on the target", d.AccessMethod, other.AccessMethod)
	}
	self := pgx.Identifier{"t"}
	if s := diffNamed("policy", d.Policies, other.Policies, func(p PolicyDef) (string, string) { return p.Name, p.create(self) }); s != "" {
		return s
	}
	if s := diffNamed("trigger", d.Triggers, other.Triggers, func(t TriggerDef) (string, string) { return t.Name, t.Def }); s != "" {
		return s
	}
	return diffNamed("statistics object", d.Statistics, other.Statistics, func(s StatisticDef) (string, string) { return s.Name.Sanitize(), s.Def })
}

// diffNamed compares two lists of named objects by name and definition.
func diffNamed[T any](what string, mine, theirs []T, key func(T) (string, string)) string {
	their := map[string]string{}
	for _, o := range theirs {
		n, def := key(o)
		their[n] = def
	}
	for _, o := range mine {
		n, def := key(o)
		od, ok := their[n]
		switch {
		case !ok:
			return fmt.Sprintf("%s %q is on the source only", what, n)
		case od != def:
			return fmt.Sprintf("%s %q is %s on the source and %s on the target", what, n, def, od)
		}
		delete(their, n)
	}
	for _, o := range theirs {
		if n, _ := key(o); hasKey(their, n) {
			return fmt.Sprintf("%s %q is on the target only", what, n)
		}
	}
	return ""
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }
