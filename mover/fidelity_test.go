package mover_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// fidelitySchema is a schema with what a moved shard must keep besides its
// rows: a foreign key between colocated tables with ON DELETE CASCADE, one
// to a reference table, a trigger, extended statistics, a storage
// parameter, row-level security with a policy, a comment, and an INCLUDE
// index.
var fidelitySchema = []string{
	`SET citus.enable_unsafe_triggers = on`,
	`CREATE ROLE tenant_a LOGIN`,
	`CREATE ROLE tenant_b LOGIN`,
	`CREATE TABLE countries (code text PRIMARY KEY)`,
	`SELECT create_reference_table('countries')`,
	`INSERT INTO countries VALUES ('de'), ('fr')`,
	`CREATE TABLE users (id bigint PRIMARY KEY, country text, name text, tenant text) WITH (fillfactor = 70)`,
	`CREATE INDEX users_name_idx ON users (name) INCLUDE (tenant)`,
	`SELECT create_distributed_table('users', 'id', shard_count := 4)`,
	`ALTER TABLE users ADD CONSTRAINT users_country_fk FOREIGN KEY (country) REFERENCES countries (code)`,
	`CREATE TABLE events (uid bigint, id bigint, note text, PRIMARY KEY (uid, id))`,
	`SELECT create_distributed_table('events', 'uid', colocate_with := 'users')`,
	`ALTER TABLE events ADD CONSTRAINT events_user_fk FOREIGN KEY (uid) REFERENCES users (id) ON DELETE CASCADE`,
	`CREATE FUNCTION upper_name() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.name := upper(NEW.name); RETURN NEW; END$$`,
	`CREATE TRIGGER users_upper BEFORE INSERT OR UPDATE ON users FOR EACH ROW EXECUTE FUNCTION upper_name()`,
	`CREATE STATISTICS users_stats (dependencies) ON id, country FROM users`,
	`ALTER TABLE users ENABLE ROW LEVEL SECURITY`,
	`CREATE POLICY tenant_pol ON users USING (tenant = current_user)`,
	`GRANT SELECT ON users TO tenant_a, tenant_b`,
	`COMMENT ON TABLE users IS 'the users'`,
	`INSERT INTO users SELECT g, CASE WHEN g % 2 = 0 THEN 'de' ELSE 'fr' END, 'n' || g, CASE WHEN g % 2 = 0 THEN 'tenant_a' ELSE 'tenant_b' END FROM generate_series(1, 400) g`,
	`INSERT INTO events SELECT u, e, 'e' FROM generate_series(1, 400) u, generate_series(1, 3) e`,
}

// TestCitusMovedShardIsTheSameTable is the oracle of table fidelity: one
// shard group moved by shardmover, a sibling group of the same tables
// moved by Citus's own citus_move_shard_placement, onto the same worker.
// Each moved shard's definition as pg_dump prints it (shard ids masked)
// must be Citus's, and the tables must behave as before in both groups:
// the cascade deletes a user's events, a country that does not exist is
// refused, the trigger fires, a tenant sees only its rows, and later DDL
// on the distributed tables (which Citus runs on every shard by its
// shard-suffixed names) succeeds. (A group moved by shardmover came back
// without foreign keys, trigger, statistics, storage parameter, policy or
// row-level security: the cascade and the refusal were lost, the tenant
// saw another's rows, and the DDL failed on the moved shard.)
func TestCitusMovedShardIsTheSameTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := newOracle(t, ctx, fidelitySchema)
	coord, added, target, nodes := o.coord, o.added, o.target, o.nodes

	// Two groups on the same worker: ours moves the first, Citus the second.
	type group struct {
		users, events int64
		user          int64 // a user of the group, tenant_a's
	}
	rows, err := coord.Query(ctx, `SELECT u.shardid, e.shardid, p.groupid FROM pg_dist_shard u
		JOIN pg_dist_shard e ON e.logicalrelid = 'events'::regclass AND e.shardminvalue = u.shardminvalue
		JOIN pg_dist_placement p ON p.shardid = u.shardid
		WHERE u.logicalrelid = 'users'::regclass ORDER BY p.groupid, u.shardid`)
	require.NoError(t, err)
	var groups []group
	var groupIDs []int32
	for rows.Next() {
		var g group
		var gid int32
		require.NoError(t, rows.Scan(&g.users, &g.events, &gid))
		if len(groups) == 0 || groupIDs[0] == gid {
			groups, groupIDs = append(groups, g), append(groupIDs, gid)
		}
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(groups), 2, "two groups on the first worker")
	ours, citus := groups[0], groups[1]
	for _, g := range []*group{&ours, &citus} {
		require.NoError(t, coord.QueryRow(ctx, `SELECT min(id) FROM users WHERE tenant = 'tenant_a' AND get_shard_id_for_distribution_column('users', id) = $1`, g.users).Scan(&g.user))
	}
	source := nodeOfGroupIn(t, nodes, groupIDs[0])

	o.moveWithShardmover(t, ctx, ours.users)
	_, err = coord.Exec(ctx, "SELECT citus_move_shard_placement($1, $2, $3, $4, $5, shard_transfer_mode := 'force_logical')",
		citus.users, source.Host, source.Port, target.Host, target.Port)
	require.NoError(t, err)

	// The definitions, as pg_dump prints them on the target.
	dump := func(shard int64, table string) string { return o.dump(t, ctx, "public."+table+"_"+itoa(shard)) }
	for _, table := range []string{"users", "events"} {
		shardOf := map[string][2]int64{"users": {ours.users, citus.users}, "events": {ours.events, citus.events}}[table]
		mine, theirs := dump(shardOf[0], table), dump(shardOf[1], table)
		assert.Equal(t, theirs, mine, "%s: the shard shardmover moved must be defined as the one Citus moved", table)
		for _, want := range map[string][]string{
			"users":  {"fillfactor", "users_country_fk", "users_upper", "ROW LEVEL SECURITY", "tenant_pol", "INCLUDE"},
			"events": {"events_user_fk", "ON DELETE CASCADE"},
		}[table] {
			assert.Contains(t, mine, want, "%s on the target", table)
		}
	}

	// pg_dump -t leaves extended statistics out: the catalog says.
	tconn, err := pgx.Connect(ctx, added.DSN())
	require.NoError(t, err)
	defer tconn.Close(ctx)
	_, err = tconn.Exec(ctx, "SET citus.show_shards_for_app_name_prefixes = '*'")
	require.NoError(t, err)
	for name, shard := range map[string]int64{"shardmover's": ours.users, "Citus's": citus.users} {
		var stats []string
		rows, err := tconn.Query(ctx, "SELECT stxname::text FROM pg_statistic_ext WHERE stxrelid = $1::regclass ORDER BY 1", "public.users_"+itoa(shard))
		require.NoError(t, err)
		stats, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		assert.Equal(t, []string{"users_stats_" + itoa(shard)}, stats, "%s moved shard's extended statistics", name)
	}

	// Behaviour, group by group, through the coordinator.
	for name, g := range map[string]group{"shardmover's": ours, "Citus's": citus} {
		var evs int
		require.NoError(t, coord.QueryRow(ctx, "SELECT count(*) FROM events WHERE uid = $1", g.user).Scan(&evs))
		require.Equal(t, 3, evs, "%s group: the user's events", name)
		_, err := coord.Exec(ctx, "DELETE FROM users WHERE id = $1", g.user)
		require.NoError(t, err)
		require.NoError(t, coord.QueryRow(ctx, "SELECT count(*) FROM events WHERE uid = $1", g.user).Scan(&evs))
		assert.Zero(t, evs, "%s group: ON DELETE CASCADE must delete the user's events", name)
		_, err = coord.Exec(ctx, "INSERT INTO users VALUES ($1, 'xx', 'lower', 'tenant_a')", g.user)
		assert.Error(t, err, "%s group: a country that does not exist must be refused", name)
		_, err = coord.Exec(ctx, "INSERT INTO users VALUES ($1, 'de', 'lower', 'tenant_a')", g.user)
		require.NoError(t, err)
		var stored string
		require.NoError(t, coord.QueryRow(ctx, "SELECT name FROM users WHERE id = $1", g.user).Scan(&stored))
		assert.Equal(t, "LOWER", stored, "%s group: the trigger must fire", name)
		var visible, other int
		err = pgx.BeginFunc(ctx, coord, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE tenant_a"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE tenant <> 'tenant_a') FROM users
				WHERE get_shard_id_for_distribution_column('users', id) = $1`, g.users).Scan(&visible, &other)
		})
		require.NoError(t, err)
		assert.Positive(t, visible, "%s group: tenant_a sees its rows", name)
		assert.Zero(t, other, "%s group: tenant_a must see only its own rows", name)
	}

	// Later DDL, which Citus runs on every shard by its shard-suffixed names.
	for _, stmt := range []string{
		`DROP TRIGGER users_upper ON users`,
		`DROP STATISTICS users_stats`,
		`DROP POLICY tenant_pol ON users`,
		`ALTER TABLE events DROP CONSTRAINT events_user_fk`,
		`ALTER TABLE users DROP CONSTRAINT users_country_fk`,
	} {
		_, err := coord.Exec(ctx, stmt)
		assert.NoError(t, err, stmt)
	}
}

// oracle is a Citus sandbox with a schema and a third worker added, the
// target of the moves the oracle tests compare.
type oracle struct {
	sb     *sandbox.Cluster
	cat    *metadata.Catalog
	coord  *pgx.Conn
	added  sandbox.Node
	target metadata.Node
	nodes  []metadata.Node
}

// newOracle starts it: stmts run on the coordinator, then the worker is
// added.
func newOracle(t *testing.T, ctx context.Context, stmts []string) *oracle {
	t.Helper()
	o := &oracle{}
	o.sb, o.cat = sandboxtest.NewCitus(t, 2)
	var err error
	o.coord, err = pgx.Connect(ctx, o.sb.Coordinator().DSN())
	require.NoError(t, err)
	t.Cleanup(func() { o.coord.Close(context.Background()) })
	for _, stmt := range stmts {
		_, err := o.coord.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	o.added, err = o.sb.AddNode(ctx)
	require.NoError(t, err)
	o.nodes, err = o.cat.Nodes(ctx)
	require.NoError(t, err)
	for _, n := range o.nodes {
		if n.Port == o.added.Port {
			o.target = n
		}
	}
	require.NotZero(t, o.target.Port)
	return o
}

// moveWithShardmover moves the group of shard to the added worker.
func (o *oracle) moveWithShardmover(t *testing.T, ctx context.Context, shard int64) {
	t.Helper()
	eng := mover.New(testConfig(t), o.cat)
	specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: shard, Target: o.target}})
	require.NoError(t, err)
	require.NoError(t, eng.Preflight(ctx, specs[0]))
	_, moves, err := eng.Schedule(ctx, "move", specs)
	require.NoError(t, err)
	require.NoError(t, eng.Run(ctx, moves[0].ID))
}

// dump is pg_dump --schema-only of the shard table name (schema.table)
// on the added worker, normalized (normalizeDump).
func (o *oracle) dump(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(o.sb.BinDir, "pg_dump"), "--schema-only", "--no-owner", "-t", name, o.added.DSN())
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c citus.show_shards_for_app_name_prefixes=* -c citus.enable_manual_changes_to_shards=on")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "pg_dump %s: %s", name, out)
	return normalizeDump(string(out))
}

var (
	dumpShardRE   = regexp.MustCompile(`_1[0-9]{5}\b`)
	dumpCommentRE = regexp.MustCompile(`(?m)^(--|\\restrict |\\unrestrict ).*$`)
	dumpBlankRE   = regexp.MustCompile(`\n{2,}`)
)

// normalizeDump masks shard ids and drops pg_dump's comment lines, which
// name the dumped objects' shard ids and the server, and its \restrict
// lines, which carry a random key.
func normalizeDump(s string) string {
	s = dumpCommentRE.ReplaceAllString(s, "")
	s = dumpShardRE.ReplaceAllString(s, "_<shard>")
	return strings.TrimSpace(dumpBlankRE.ReplaceAllString(s, "\n"))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// nodeOfGroupIn is the node of group id among nodes.
func nodeOfGroupIn(t *testing.T, nodes []metadata.Node, id int32) metadata.Node {
	t.Helper()
	for _, n := range nodes {
		if n.GroupID == id {
			return n
		}
	}
	t.Fatalf("no node in group %d", id)
	return metadata.Node{}
}

// TestCitusUnmovableTablesAreRefusedUpFront: groups shardmover cannot move
// by logical replication must be left out of plans, and a move of one
// refused before anything is created, with a sentence saying why and what
// to use instead; every group colocated with such a table too. A
// partitioned table (a parent's shard and its partitions' move together;
// not done yet): preflight and --dry-run passed, and the move failed in
// setup on relkind "p". A columnar table: Citus refuses every INSERT into
// a published columnar table ("cannot insert into columnar table that is
// a part of a publication") and columnar takes no UPDATE at all, so the
// application's writes would fail for the whole move.
func TestCitusUnmovableTablesAreRefusedUpFront(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema []string
		tables []string // whose shards must be refused
		want   []string // in the refusal
	}{
		{"partitioned", []string{
			`CREATE TABLE pevents (uid bigint, at date, PRIMARY KEY (uid, at)) PARTITION BY RANGE (at)`,
			`CREATE TABLE pevents_2024 PARTITION OF pevents FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')`,
			`CREATE TABLE pevents_2025 PARTITION OF pevents FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`,
			`SELECT create_distributed_table('pevents', 'uid', shard_count := 4, colocate_with := 'none')`,
			`CREATE TABLE pusers (uid bigint PRIMARY KEY)`,
			`SELECT create_distributed_table('pusers', 'uid', colocate_with := 'pevents')`,
		}, []string{"pevents", "pevents_2024", "pusers"}, []string{"shardmover does not move partitioned tables yet", "citus_move_shard_placement"}},
		{"columnar", []string{
			`CREATE EXTENSION IF NOT EXISTS citus_columnar`,
			`CREATE TABLE facts (id bigint, v text) USING columnar`,
			`SELECT create_distributed_table('facts', 'id', shard_count := 4, colocate_with := 'none')`,
			`INSERT INTO facts SELECT g, 'v' FROM generate_series(1, 100) g`,
		}, []string{"facts"}, []string{"columnar access method", "block_writes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sb, cat := sandboxtest.NewCitus(t, 2)
			coord, err := pgx.Connect(ctx, sb.Coordinator().DSN())
			require.NoError(t, err)
			defer coord.Close(ctx)
			schema := append(tc.schema, `CREATE TABLE plain (id bigint PRIMARY KEY)`,
				`SELECT create_distributed_table('plain', 'id', shard_count := 4, colocate_with := 'none')`)
			for _, stmt := range schema {
				_, err := coord.Exec(ctx, stmt)
				require.NoError(t, err, stmt)
			}
			_, err = sb.AddNode(ctx)
			require.NoError(t, err)
			cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
			require.NoError(t, err)
			require.NotEmpty(t, cl.Groups, "the other table's groups are there")
			nodes, err := cat.Nodes(ctx)
			require.NoError(t, err)
			for _, table := range tc.tables {
				for _, g := range cl.Groups {
					for _, tb := range g.Tables {
						assert.NotContains(t, tb, table, "the group must stay out of the snapshot plans are made from")
					}
				}
				var shard int64
				require.NoError(t, coord.QueryRow(ctx, `SELECT min(shardid) FROM pg_dist_shard WHERE logicalrelid = $1::regclass`, table).Scan(&shard))
				_, err := mover.New(testConfig(t), cat).Resolve(ctx, []mover.Request{{ShardID: shard, Target: nodes[len(nodes)-1]}})
				require.Error(t, err, "a move of %s's shard must be refused", table)
				for _, w := range tc.want {
					assert.Contains(t, err.Error(), w, table)
				}
				assert.ErrorIs(t, err, metadata.ErrInvalid, "a refusal (exit 2)")
			}
		})
	}
}

// TestPreflightNamesWhatTheTargetLacks: on compat every node has its own
// functions and roles, so a shard's trigger function or a role it grants
// to may be missing on the target. Preflight must refuse the move naming
// what to create there, before anything is created. (It passed, and the
// move failed in setup with `function public.f() does not exist`, the
// target's tables already made.)
func TestPreflightNamesWhatTheTargetLacks(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 4, 50, 200)
	target := c.newNode(t)
	shard, group := groupShard(t, c, 0)
	eng := mover.New(testConfig(t), c.cat)
	specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: shard, Target: target}})
	require.NoError(t, err)
	m := metadata.Move{ShardTables: specs[0].ShardTables}
	src := nodeOfGroup(t, c, group)
	for _, stmt := range []string{
		`CREATE ROLE only_on_source`,
		`CREATE FUNCTION public.only_on_source() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$`,
	} {
		require.NoError(t, execOnShards(ctx, c, src, metadata.Move{ShardTables: specs[0].ShardTables[:1]}, stmt))
	}
	require.NoError(t, execOnShards(ctx, c, src, m, `CREATE TRIGGER %n BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION public.only_on_source()`))
	require.NoError(t, execOnShards(ctx, c, src, m, `GRANT SELECT ON %s TO only_on_source`))
	err = eng.Preflight(ctx, specs[0])
	require.Error(t, err)
	assert.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "lacks the trigger function public.only_on_source()")
	assert.Contains(t, err.Error(), "the role only_on_source")
}

// TestCitusMovedTenantKeepsItsForeignKey: a distributed schema's tables
// (schema-based sharding: one shard group per schema) with a foreign key
// between them. One tenant moved by shardmover, another by Citus's own
// citus_move_shard_placement, onto the same worker: the moved shards'
// definitions are the same (pg_dump, shard ids masked), and the foreign
// key refuses and cascades in both. (A moved tenant lost its internal
// foreign key.)
func TestCitusMovedTenantKeepsItsForeignKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stmts []string
	for _, tenant := range []string{"tenant_one", "tenant_two"} {
		stmts = append(stmts,
			`SET citus.enable_schema_based_sharding = on`,
			`CREATE SCHEMA `+tenant,
			`CREATE TABLE `+tenant+`.orders (id bigint PRIMARY KEY, note text)`,
			`CREATE TABLE `+tenant+`.lines (order_id bigint REFERENCES `+tenant+`.orders (id) ON DELETE CASCADE, n int, PRIMARY KEY (order_id, n))`,
			`RESET citus.enable_schema_based_sharding`,
			`INSERT INTO `+tenant+`.orders SELECT g, 'o' FROM generate_series(1, 50) g`,
			`INSERT INTO `+tenant+`.lines SELECT g, n FROM generate_series(1, 50) g, generate_series(1, 2) n`)
	}
	o := newOracle(t, ctx, stmts)
	coord, target, nodes := o.coord, o.target, o.nodes
	shardOf := func(table string) (int64, int32) {
		var shard int64
		var group int32
		require.NoError(t, coord.QueryRow(ctx, `SELECT s.shardid, p.groupid FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
			WHERE s.logicalrelid = $1::regclass`, table).Scan(&shard, &group))
		return shard, group
	}
	ours, _ := shardOf("tenant_one.orders")
	o.moveWithShardmover(t, ctx, ours)
	theirs, theirGroup := shardOf("tenant_two.orders")
	src := nodeOfGroupIn(t, nodes, theirGroup)
	_, err := coord.Exec(ctx, "SELECT citus_move_shard_placement($1, $2, $3, $4, $5, shard_transfer_mode := 'force_logical')",
		theirs, src.Host, src.Port, target.Host, target.Port)
	require.NoError(t, err)

	dump := func(tenant, table string) string {
		shard, _ := shardOf(tenant + "." + table)
		return strings.ReplaceAll(o.dump(t, ctx, tenant+"."+table+"_"+itoa(shard)), tenant, "<tenant>")
	}
	for _, table := range []string{"orders", "lines"} {
		mine, theirs := dump("tenant_one", table), dump("tenant_two", table)
		assert.Equal(t, theirs, mine, "%s: the tenant shardmover moved must be defined as the one Citus moved", table)
	}
	assert.Contains(t, dump("tenant_one", "lines"), "FOREIGN KEY", "the moved tenant keeps its foreign key")
	for _, tenant := range []string{"tenant_one", "tenant_two"} {
		_, err := coord.Exec(ctx, `INSERT INTO `+tenant+`.lines VALUES (999, 1)`)
		assert.Error(t, err, "%s: a line without its order must be refused", tenant)
		_, err = coord.Exec(ctx, `DELETE FROM `+tenant+`.orders WHERE id = 1`)
		require.NoError(t, err)
		var n int
		require.NoError(t, coord.QueryRow(ctx, `SELECT count(*) FROM `+tenant+`.lines WHERE order_id = 1`).Scan(&n))
		assert.Zero(t, n, "%s: deleting an order deletes its lines", tenant)
	}
}
