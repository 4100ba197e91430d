package metadata

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Grant is one privilege a table (or one of its columns) grants.
type Grant struct {
	// Column is the column's name for a column privilege, "" for the table.
	Column string
	// Grantee is the role's name, "" for PUBLIC.
	Grantee string
	// Privilege is SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES or
	// TRIGGER.
	Privilege string
	// Grantable: WITH GRANT OPTION.
	Grantable bool
}

// grantsSQL reads a table's privileges ($1 schema, $2 name): the table's
// ACL as it is in effect (an unset ACL is acldefault's, the owner's own
// privileges) and every column's, ordered so that two reads compare.
const grantsSQL = `WITH t AS (` + tableSQL + `)
	SELECT '' AS col, coalesce(r.rolname::text, '') AS grantee, x.privilege_type::text, x.is_grantable
	FROM t JOIN pg_catalog.pg_class c ON c.oid = t.oid
	CROSS JOIN LATERAL pg_catalog.aclexplode(coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner))) x
	LEFT JOIN pg_catalog.pg_roles r ON r.oid = x.grantee
	UNION ALL
	SELECT a.attname::text, coalesce(r.rolname::text, ''), x.privilege_type::text, x.is_grantable
	FROM t JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
	CROSS JOIN LATERAL pg_catalog.aclexplode(a.attacl) x
	LEFT JOIN pg_catalog.pg_roles r ON r.oid = x.grantee
	ORDER BY 1, 2, 3`

// PrivilegeStatements returns what makes target, whose definition reads
// have, belong to d's owner and grant exactly d's privileges: ALTER TABLE
// OWNER TO when the owners differ (which also hands over the target's
// identity sequences, and, as PostgreSQL does, turns the old owner's
// entries in the ACLs into the new owner's), then the REVOKEs of
// privileges the target has and d does not and the GRANTs of those d has
// and the target does not (a grant option counts as a privilege of its
// own). None when they agree. The session running them must be the owner,
// a member of it, or a superuser.
func (d TableDDL) PrivilegeStatements(target pgx.Identifier, have TableDDL) []string {
	var out []string
	haveGrants := have.Grants
	if d.Owner != "" && d.Owner != have.Owner {
		out = append(out, "ALTER TABLE "+target.Sanitize()+" OWNER TO "+pgx.Identifier{d.Owner}.Sanitize())
		haveGrants = make([]Grant, len(have.Grants))
		for i, g := range have.Grants {
			if g.Grantee == have.Owner {
				g.Grantee = d.Owner
			}
			haveGrants[i] = g
		}
	}
	return append(out, grantDiff("TABLE "+target.Sanitize(), d.Grants, haveGrants)...)
}

// grantDiff returns the REVOKEs and GRANTs on object ("TABLE x", "SCHEMA
// y") that turn the privileges have into want.
func grantDiff(object string, want, have []Grant) []string {
	var out []string
	wantSet, haveSet := grantSet(want), grantSet(have)
	for _, g := range have {
		if !wantSet[g] {
			out = append(out, g.statement(object, false))
			wantSet[g] = true // once, even if listed twice after an owner change
		}
	}
	for _, g := range want {
		if !haveSet[g] {
			out = append(out, g.statement(object, true))
		}
	}
	return out
}

func grantSet(gs []Grant) map[Grant]bool {
	m := make(map[Grant]bool, len(gs))
	for _, g := range gs {
		m[g] = true
	}
	return m
}

// statement grants (or revokes) g on object ("TABLE x", "SCHEMA y").
func (g Grant) statement(object string, grant bool) string {
	priv := g.Privilege
	if g.Column != "" {
		priv += " (" + pgx.Identifier{g.Column}.Sanitize() + ")"
	}
	who := "PUBLIC"
	if g.Grantee != "" {
		who = pgx.Identifier{g.Grantee}.Sanitize()
	}
	switch {
	case grant && g.Grantable:
		return fmt.Sprintf("GRANT %s ON %s TO %s WITH GRANT OPTION", priv, object, who)
	case grant:
		return fmt.Sprintf("GRANT %s ON %s TO %s", priv, object, who)
	case g.Grantable:
		return fmt.Sprintf("REVOKE GRANT OPTION FOR %s ON %s FROM %s", priv, object, who)
	}
	return fmt.Sprintf("REVOKE %s ON %s FROM %s CASCADE", priv, object, who)
}

// schemaSQL reads a schema's owner and its privileges as they are in
// effect ($1: the schema's name); no row when it does not exist.
const schemaSQL = `SELECT pg_catalog.pg_get_userbyid(n.nspowner)::text, '' AS col, coalesce(r.rolname::text, ''),
		x.privilege_type::text, x.is_grantable
	FROM pg_catalog.pg_namespace n
	CROSS JOIN LATERAL pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) x
	LEFT JOIN pg_catalog.pg_roles r ON r.oid = x.grantee
	WHERE n.nspname = $1
	ORDER BY 2, 3, 4`

// readSchema returns schema's owner and privileges; ok is false when the
// schema does not exist.
func readSchema(ctx context.Context, conn *pgx.Conn, schema string) (owner string, grants []Grant, ok bool, err error) {
	rows, err := conn.Query(ctx, schemaSQL, schema)
	if err != nil {
		return "", nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var g Grant
		if err := rows.Scan(&owner, &g.Column, &g.Grantee, &g.Privilege, &g.Grantable); err != nil {
			return "", nil, false, err
		}
		grants = append(grants, g)
		ok = true
	}
	return owner, grants, ok, rows.Err()
}

// EnsureSchemaLike creates schema on dst when it is missing there, with the
// owner and privileges it has on src, so that the application can reach a
// table moved into it (USAGE). A schema that already exists on dst is left
// as it is: it holds other tables, and its privileges are its operator's.
func EnsureSchemaLike(ctx context.Context, src, dst *pgx.Conn, schema string) error {
	if _, _, ok, err := readSchema(ctx, dst, schema); err != nil || ok {
		return err
	}
	owner, want, ok, err := readSchema(ctx, src, schema)
	if err != nil {
		return err
	}
	if !ok {
		return invalidf("schema %s does not exist on the source", pgx.Identifier{schema}.Sanitize())
	}
	name := pgx.Identifier{schema}.Sanitize()
	if err := RunDDL(ctx, dst, "CREATE SCHEMA IF NOT EXISTS "+name); err != nil {
		return err
	}
	have, haveGrants, _, err := readSchema(ctx, dst, schema)
	if err != nil {
		return err
	}
	var stmts []string
	if owner != have {
		stmts = append(stmts, "ALTER SCHEMA "+name+" OWNER TO "+pgx.Identifier{owner}.Sanitize())
		for i := range haveGrants {
			if haveGrants[i].Grantee == have {
				haveGrants[i].Grantee = owner
			}
		}
	}
	return RunDDL(ctx, dst, append(stmts, grantDiff("SCHEMA "+name, want, haveGrants)...)...)
}
