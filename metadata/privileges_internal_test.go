package metadata

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
)

func TestPrivilegeStatements(t *testing.T) {
	tbl := pgx.Identifier{"s p", "t_1"}
	g := func(col, who, priv string, opt bool) Grant {
		return Grant{Column: col, Grantee: who, Privilege: priv, Grantable: opt}
	}
	src := TableDDL{Owner: "app", Grants: []Grant{
		g("", "app", "SELECT", false), g("", "reader", "SELECT", false), g("", "writer", "INSERT", true), g("a b", "", "UPDATE", false),
	}}
	// A fresh target: the mover's own table with its default privileges.
	fresh := TableDDL{Owner: "mover", Grants: []Grant{g("", "mover", "SELECT", false), g("", "mover", "TRUNCATE", false)}}
	assert.Equal(t, []string{
		`ALTER TABLE "s p"."t_1" OWNER TO "app"`,
		// The owner change made mover's TRUNCATE app's; app gave it up on the source.
		`REVOKE TRUNCATE ON TABLE "s p"."t_1" FROM "app" CASCADE`,
		`GRANT SELECT ON TABLE "s p"."t_1" TO "reader"`,
		`GRANT INSERT ON TABLE "s p"."t_1" TO "writer" WITH GRANT OPTION`,
		`GRANT UPDATE ("a b") ON TABLE "s p"."t_1" TO PUBLIC`,
	}, src.PrivilegeStatements(tbl, fresh))

	// Already equal: nothing. A grant option too many, or too few.
	assert.Empty(t, src.PrivilegeStatements(tbl, src))
	more := TableDDL{Owner: "app", Grants: []Grant{
		g("", "app", "SELECT", false), g("", "reader", "SELECT", true), g("", "writer", "INSERT", true), g("a b", "", "UPDATE", false),
	}}
	assert.Equal(t, []string{
		`REVOKE GRANT OPTION FOR SELECT ON TABLE "s p"."t_1" FROM "reader"`,
		`GRANT SELECT ON TABLE "s p"."t_1" TO "reader"`,
	}, src.PrivilegeStatements(tbl, more))
	fewer := TableDDL{Owner: "app", Grants: []Grant{
		g("", "app", "SELECT", false), g("", "reader", "SELECT", false), g("", "writer", "INSERT", false), g("a b", "", "UPDATE", false),
	}}
	assert.Equal(t, []string{
		`REVOKE INSERT ON TABLE "s p"."t_1" FROM "writer" CASCADE`,
		`GRANT INSERT ON TABLE "s p"."t_1" TO "writer" WITH GRANT OPTION`,
	}, src.PrivilegeStatements(tbl, fewer))
	// A role named like a statement stays a quoted name.
	evil := TableDDL{Owner: `x"; DROP TABLE t; --`}
	assert.Equal(t, []string{`ALTER TABLE "s p"."t_1" OWNER TO "x""; DROP TABLE t; --"`}, evil.PrivilegeStatements(tbl, TableDDL{Owner: "app"}))
}
