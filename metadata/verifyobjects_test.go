package metadata_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
)

// objectFindings runs VerifyCatalog and returns its object findings.
func objectFindings(t *testing.T, ctx context.Context, cat *metadata.Catalog) []metadata.Finding {
	t.Helper()
	rep, err := cat.VerifyCatalog(ctx)
	require.NoError(t, err)
	var out []metadata.Finding
	for _, f := range rep.Findings {
		if f.Kind == metadata.FindingObject {
			out = append(out, f)
		}
	}
	return out
}

// workerConn connects to the worker at port as Citus's own shard
// operations do: shards visible, changes to them allowed.
func workerConn(t *testing.T, ctx context.Context, c *sandbox.Cluster, port int) *pgx.Conn {
	t.Helper()
	for _, w := range c.Workers() {
		if w.Port != port {
			continue
		}
		conn, err := pgx.Connect(ctx, w.DSN())
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		for _, s := range []string{
			`SET citus.show_shards_for_app_name_prefixes = '*'`,
			`SET citus.enable_manual_changes_to_shards = on`,
		} {
			_, err := conn.Exec(ctx, s)
			require.NoError(t, err, s)
		}
		return conn
	}
	t.Fatalf("no worker on port %d", port)
	return nil
}

// TestCitusVerifyObjects: a distributed table with a trigger, extended
// statistics, a policy under row-level security, a fillfactor and a
// foreign key to a colocated table has the same objects on every shard,
// and VerifyCatalog says nothing about them; once one shard placement
// loses its trigger, foreign key, statistics, policy and fillfactor behind
// Citus's back (what a move that forgot them would leave), VerifyCatalog
// reports each, naming that shard and its node, and nothing on the others.
func TestCitusVerifyObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, cat := sandboxtest.NewCitus(t, 2)
	coord, err := pgx.Connect(ctx, c.Coordinator().DSN())
	require.NoError(t, err)
	defer coord.Close(ctx)
	for _, stmt := range []string{
		`CREATE TABLE users (user_id bigint PRIMARY KEY, name text)`,
		`SELECT create_distributed_table('users', 'user_id', shard_count := 4, colocate_with := 'none')`,
		`CREATE TABLE events (user_id bigint NOT NULL, event_id bigint NOT NULL, a int, b int, tenant text,
			PRIMARY KEY (user_id, event_id)) WITH (fillfactor = 70)`,
		`SELECT create_distributed_table('events', 'user_id', colocate_with := 'users')`,
		`ALTER TABLE events ADD CONSTRAINT events_user_fk FOREIGN KEY (user_id) REFERENCES users (user_id) ON DELETE CASCADE`,
		`CREATE STATISTICS events_ab ON a, b FROM events`,
		`CREATE FUNCTION events_touch() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.b := coalesce(NEW.b, 0); RETURN NEW; END$$`,
		`SET citus.enable_unsafe_triggers = on`,
		`CREATE TRIGGER events_touch BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION events_touch()`,
		`ALTER TABLE events ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY tenant_rows ON events USING (tenant = current_user)`,
		`INSERT INTO users SELECT g, 'u' || g FROM generate_series(1, 100) g`,
		`INSERT INTO events SELECT 1 + g % 100, g, g, g, 'x' FROM generate_series(1, 1000) g`,
	} {
		_, err := coord.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	assert.Empty(t, objectFindings(t, ctx, cat), "every shard has the same objects")

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	events, err := cl.Table("events")
	require.NoError(t, err)
	shard := cl.TableShards(events)[1]
	p, ok := cl.PlacementOf(shard.ID)
	require.True(t, ok)
	node, ok := cl.NodeByGroup(p.GroupID)
	require.True(t, ok)
	w := workerConn(t, ctx, c, node.Port)

	// The shard's own names, as Citus gave them (<name>_<shardid>).
	d, err := metadata.ReadTableDDL(ctx, w, shard.Ident())
	require.NoError(t, err)
	require.Len(t, d.Triggers, 1)
	require.Len(t, d.ForeignKeys, 1)
	require.Len(t, d.Statistics, 1)
	require.Len(t, d.Policies, 1)
	require.Contains(t, d.Options, "fillfactor=70")
	require.True(t, d.RowSecurity, "Citus enables row-level security on the shards")
	table := shard.Ident().Sanitize()
	for _, stmt := range []string{
		`DROP TRIGGER ` + pgx.Identifier{d.Triggers[0].Name}.Sanitize() + ` ON ` + table,
		`ALTER TABLE ` + table + ` DROP CONSTRAINT ` + pgx.Identifier{d.ForeignKeys[0].Name}.Sanitize(),
		`DROP STATISTICS ` + d.Statistics[0].Name.Sanitize(),
		`DROP POLICY ` + pgx.Identifier{d.Policies[0].Name}.Sanitize() + ` ON ` + table,
		`ALTER TABLE ` + table + ` RESET (fillfactor)`,
	} {
		_, err := w.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}

	found := objectFindings(t, ctx, cat)
	var objects []string
	for _, f := range found {
		assert.True(t, f.Problem, f.Message)
		assert.Equal(t, shard.ID, f.ShardID, "only the broken shard: %s", f.Message)
		assert.Equal(t, node.Addr(), f.Node)
		assert.Contains(t, f.Message, shard.Name())
		assert.Contains(t, f.Message, node.Addr())
		assert.Contains(t, f.Message, "3 of 4 shards of events")
		objects = append(objects, f.Object)
		t.Log(f.Message)
	}
	assert.ElementsMatch(t, []string{
		`storage parameter fillfactor=70`,
		`policy "tenant_rows"`,
		`trigger "events_touch"`,
		`foreign key "events_user_fk"`,
		`statistics object public.events_ab`,
	}, objects)
	rep, err := cat.VerifyCatalog(ctx)
	require.NoError(t, err)
	assert.False(t, rep.OK())

	// Row-level security turned off on that shard is a difference too.
	_, err = w.Exec(ctx, `ALTER TABLE `+table+` DISABLE ROW LEVEL SECURITY`)
	require.NoError(t, err)
	var rls []metadata.Finding
	for _, f := range objectFindings(t, ctx, cat) {
		if strings.HasPrefix(f.Object, "row-level security") {
			rls = append(rls, f)
		}
	}
	require.Len(t, rls, 1)
	assert.Equal(t, shard.ID, rls[0].ShardID)
	assert.Contains(t, rls[0].Message, "row-level security disabled where 3 of 4 shards of events have row-level security enabled")
}

// TestVerifyObjectsCompat: on a compat cluster, a trigger put on every
// shard of a table (each named after its shard, as Citus would) and a
// foreign key from each github_events shard to its colocated github_users
// shard compare equal across the shards; the trigger dropped on one shard
// is reported for that shard, and a trigger on only one shard is reported
// as one too many there.
func TestVerifyObjectsCompat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	_, cat := sandboxtest.NewCompat(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, 4))
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	users, err := cl.Table(workload.UsersTable)
	require.NoError(t, err)
	events, err := cl.Table(workload.EventsTable)
	require.NoError(t, err)
	userShards, eventShards := cl.TableShards(users), cl.TableShards(events)
	require.Len(t, userShards, 4)
	require.Len(t, eventShards, 4)

	conns := map[int32]*pgx.Conn{}
	connOf := func(s metadata.Shard) (*pgx.Conn, metadata.Node) {
		p, ok := cl.PlacementOf(s.ID)
		require.True(t, ok)
		n, ok := cl.NodeByGroup(p.GroupID)
		require.True(t, ok)
		if conns[n.GroupID] == nil {
			conn, err := cat.ConnectNode(ctx, n.Host, n.Port)
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close(context.Background()) })
			conns[n.GroupID] = conn
			_, err = conn.Exec(ctx, `CREATE FUNCTION public.stamp() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$`)
			require.NoError(t, err)
		}
		return conns[n.GroupID], n
	}
	exec := func(conn *pgx.Conn, sql string) {
		t.Helper()
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	trigger := func(s metadata.Shard) pgx.Identifier {
		return pgx.Identifier{"stamp_" + strings.TrimPrefix(s.Name(), s.Table+"_")}
	}
	for i, s := range userShards {
		conn, _ := connOf(s)
		exec(conn, `CREATE TRIGGER `+trigger(s).Sanitize()+` BEFORE UPDATE ON `+s.Ident().Sanitize()+` FOR EACH ROW EXECUTE FUNCTION public.stamp()`)
		ev := eventShards[i]
		econn, _ := connOf(ev)
		require.Same(t, conn, econn, "colocated shards share a node")
		exec(conn, `ALTER TABLE `+ev.Ident().Sanitize()+` ADD CONSTRAINT `+pgx.Identifier{"events_user_" + strings.TrimPrefix(ev.Name(), ev.Table+"_")}.Sanitize()+
			` FOREIGN KEY (user_id) REFERENCES `+s.Ident().Sanitize()+` (user_id)`)
	}
	assert.Empty(t, objectFindings(t, ctx, cat), "every shard has the same objects")

	broken := userShards[2]
	conn, node := connOf(broken)
	exec(conn, `DROP TRIGGER `+trigger(broken).Sanitize()+` ON `+broken.Ident().Sanitize())
	found := objectFindings(t, ctx, cat)
	require.Len(t, found, 1, "%+v", found)
	assert.True(t, found[0].Problem)
	assert.Equal(t, broken.ID, found[0].ShardID)
	assert.Equal(t, node.Addr(), found[0].Node)
	assert.Equal(t, `trigger "stamp"`, found[0].Object)
	assert.Contains(t, found[0].Message, broken.Name()+" on "+node.Addr()+` has no trigger "stamp", which 3 of 4 shards of github_users have`)

	// Put back, and one shard of github_events gets a trigger of its own.
	exec(conn, `CREATE TRIGGER `+trigger(broken).Sanitize()+` BEFORE UPDATE ON `+broken.Ident().Sanitize()+` FOR EACH ROW EXECUTE FUNCTION public.stamp()`)
	extra := eventShards[0]
	econn, enode := connOf(extra)
	exec(econn, `CREATE TRIGGER odd BEFORE UPDATE ON `+extra.Ident().Sanitize()+` FOR EACH ROW EXECUTE FUNCTION public.stamp()`)
	found = objectFindings(t, ctx, cat)
	require.Len(t, found, 1, "%+v", found)
	assert.Equal(t, extra.ID, found[0].ShardID)
	assert.Equal(t, enode.Addr(), found[0].Node)
	assert.Contains(t, found[0].Message, `has trigger "odd", which only 1 of 4 shards of github_events have`)
}
