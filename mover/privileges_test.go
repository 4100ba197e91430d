package mover_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// privileges lists an object's owner and privileges as they are in effect,
// one line per grant, so that two nodes compare.
func privileges(t *testing.T, ctx context.Context, conn *pgx.Conn, kind string, name string) string {
	t.Helper()
	var sql string
	switch kind {
	case "table":
		sql = `SELECT pg_get_userbyid(c.relowner) || ' | ' || coalesce(string_agg(e, ', ' ORDER BY e), '') FROM pg_class c
			LEFT JOIN LATERAL (SELECT coalesce(r.rolname, 'PUBLIC') || ':' || x.privilege_type || CASE WHEN x.is_grantable THEN '*' ELSE '' END AS e
				FROM aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) x LEFT JOIN pg_roles r ON r.oid = x.grantee
				UNION ALL
				SELECT a.attname || '.' || coalesce(r.rolname, 'PUBLIC') || ':' || x.privilege_type || CASE WHEN x.is_grantable THEN '*' ELSE '' END
				FROM pg_attribute a, aclexplode(a.attacl) x LEFT JOIN pg_roles r ON r.oid = x.grantee
				WHERE a.attrelid = c.oid AND a.attnum > 0) p ON true
			WHERE c.oid = to_regclass($1) GROUP BY c.relowner`
	case "schema":
		sql = `SELECT pg_get_userbyid(n.nspowner) || ' | ' || string_agg(coalesce(r.rolname, 'PUBLIC') || ':' || x.privilege_type, ', ' ORDER BY 1)
			FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) x LEFT JOIN pg_roles r ON r.oid = x.grantee
			WHERE n.nspname = $1 GROUP BY n.nspowner`
	}
	var out string
	require.NoError(t, conn.QueryRow(ctx, sql, name).Scan(&out), "%s %s", kind, name)
	return out
}

// TestMoveKeepsOwnerAndPrivileges: a moved shard belongs to the source
// shard's owner and grants what the source granted, column privileges and
// grant options included; its schema, missing on the new node, is created
// with the source's owner and privileges; a grant given on the source
// during the move is carried at the cutover. The application's roles then
// read and write the moved shard as before. (Before, the target table
// belonged to the mover's role with no grants: the application lost
// access to every moved shard.)
func TestMoveKeepsOwnerAndPrivileges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCompat(t, 1)
	roles := []string{
		`CREATE ROLE "app owner" NOLOGIN`,
		`CREATE ROLE app_reader LOGIN`,
		`CREATE ROLE app_writer LOGIN`,
	}
	schema := []string{
		`CREATE SCHEMA "sales app" AUTHORIZATION "app owner"`,
		`GRANT USAGE ON SCHEMA "sales app" TO app_reader, app_writer`,
	}
	exec := func(n metadata.Node, stmts ...string) {
		t.Helper()
		conn, err := cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		defer conn.Close(ctx)
		for _, s := range stmts {
			_, err := conn.Exec(ctx, s)
			require.NoError(t, err, s)
		}
	}
	nodes, err := cat.Nodes(ctx)
	require.NoError(t, err)
	for _, n := range nodes {
		exec(n, append(roles, schema...)...)
	}
	exec(nodes[0], `CREATE TABLE "sales app".orders (id bigint PRIMARY KEY, amount numeric(10,2), note text)`)
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{
		Table: metadata.QualifiedName(pgx.Identifier{"sales app", "orders"}), Column: "id", ShardCount: 2})
	require.NoError(t, err)
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	var shard metadata.Shard
	var group metadata.ShardGroup
	for _, g := range cl.Groups {
		for _, s := range cl.Shards {
			if s.Schema == "sales app" && s.Table == "orders" && g.ShardIDs[0] == s.ID {
				shard, group = s, g
			}
		}
	}
	require.NotZero(t, shard.ID)
	src, ok := cl.NodeByGroup(group.GroupID)
	require.True(t, ok)
	table := shard.Ident().Sanitize()
	// The operator's privileges on the source shard, as an application
	// would have them: its owner, table and column grants, a grant
	// option, and a privilege the owner gave up.
	exec(src,
		`ALTER TABLE `+table+` OWNER TO "app owner"`,
		`GRANT SELECT ON `+table+` TO app_reader`,
		`GRANT INSERT, SELECT ON `+table+` TO app_writer WITH GRANT OPTION`,
		`GRANT UPDATE (amount, note) ON `+table+` TO app_writer`,
		`REVOKE TRUNCATE ON `+table+` FROM "app owner"`,
		`INSERT INTO `+table+` SELECT g, g, 'n' || g FROM generate_series(1, 200) g`)

	// A new node with the roles (roles are per server) but not the schema.
	sn, err := sb.AddNode(ctx)
	require.NoError(t, err)
	target, err := cat.AddNode(ctx, sn.Host, sn.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	exec(target, roles...)

	cfg := testConfig(t)
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p == mover.Indexing {
			// During the move: the cutover must carry this too.
			conn, err := cat.ConnectNode(context.Background(), src.Host, src.Port)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			_, err = conn.Exec(context.Background(), `GRANT DELETE ON `+table+` TO app_reader`)
			return err
		}
		return nil
	}
	eng := mover.New(cfg, cat)
	m := scheduleMove(t, eng, shard.ID, target)
	require.NoError(t, eng.Run(ctx, m.ID))

	srcConn, err := cat.ConnectNode(ctx, src.Host, src.Port)
	require.NoError(t, err)
	defer srcConn.Close(ctx)
	tgtConn, err := cat.ConnectNode(ctx, target.Host, target.Port)
	require.NoError(t, err)
	defer tgtConn.Close(ctx)
	old := pgx.Identifier{shard.Ident()[0], movedNameOf(t, cat, m.ID, shard)}.Sanitize()
	want := privileges(t, ctx, srcConn, "table", old)
	assert.Contains(t, want, "app_reader:DELETE", "the grant given during the move is on the source")
	assert.Equal(t, want, privileges(t, ctx, tgtConn, "table", table), "the moved shard's owner and privileges are the source's")
	assert.Equal(t, privileges(t, ctx, srcConn, "schema", "sales app"), privileges(t, ctx, tgtConn, "schema", "sales app"),
		"the schema made on the new node has the source's owner and privileges")

	// The application's roles, on the moved shard.
	as := func(role string, sql string) error {
		cfg := tgtConn.Config().Copy()
		cfg.User = role
		c, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		defer c.Close(ctx)
		_, err = c.Exec(ctx, sql)
		return err
	}
	assert.NoError(t, as("app_reader", `SELECT count(*) FROM `+table))
	assert.NoError(t, as("app_writer", `INSERT INTO `+table+` VALUES (1000001, 1, 'x')`))
	assert.NoError(t, as("app_writer", `UPDATE `+table+` SET amount = 2 WHERE id = 1000001`))
	assert.Error(t, as("app_writer", `DELETE FROM `+table+` WHERE id = 1000001`), "app_writer was never granted DELETE")
	assert.Error(t, as("app_reader", `INSERT INTO `+table+` VALUES (1000002, 1, 'x')`), "app_reader was never granted INSERT")
}

// movedNameOf is the name a finished move gave the old shard on its source.
func movedNameOf(t *testing.T, cat *metadata.Catalog, moveID int64, s metadata.Shard) string {
	t.Helper()
	recs, err := cat.Cleanups(context.Background(), moveID)
	require.NoError(t, err)
	for _, r := range recs {
		if r.ObjectType == metadata.ObjectTable && r.Policy == metadata.CleanupDeferred {
			id, err := metadata.ParseQualifiedName(r.Name)
			require.NoError(t, err)
			return id[1]
		}
	}
	t.Fatalf("move %d left no old shard record", moveID)
	return ""
}
