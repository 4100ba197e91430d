package metadata_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// citusShard is a row of Citus's own citus_shards view.
type citusShard struct {
	Table        string
	ShardID      int64
	Type         string
	ColocationID int32
	Addr         string
	Size         int64
}

func citusShards(t *testing.T, ctx context.Context, conn *pgx.Conn) []citusShard {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT table_name::text, shardid, citus_table_type, colocation_id,
			nodename || ':' || nodeport, coalesce(shard_size, -1)
		FROM citus_shards ORDER BY shardid, nodeport`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[citusShard])
	require.NoError(t, err)
	return out
}

// TestCitusSnapshot: on a real Citus 13 cluster, Snapshot reads the
// pg_dist_* catalogs as Citus means them: nodes, movable shard groups of
// hash-distributed tables and of distributed schemas (one colocation group
// per schema), never reference or citus-local tables, one placement per
// shard, and sizes equal to what citus_shards reports.
func TestCitusSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, cat := sandboxtest.NewCitus(t, 2)
	require.Equal(t, metadata.Citus, cat.Flavor())

	conn, err := pgx.Connect(ctx, c.Coordinator().DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, stmt := range []string{
		`CREATE TABLE users (user_id bigint PRIMARY KEY, name text NOT NULL)`,
		`SELECT create_distributed_table('users', 'user_id', shard_count := 4, colocate_with := 'none')`,
		`CREATE TABLE events (user_id bigint NOT NULL, event_id bigint NOT NULL, payload text, PRIMARY KEY (user_id, event_id))`,
		`SELECT create_distributed_table('events', 'user_id', colocate_with := 'users')`,
		`CREATE TABLE tags (tag text PRIMARY KEY, n int)`,
		`SELECT create_distributed_table('tags', 'tag', shard_count := 2, colocate_with := 'none')`,
		`CREATE TABLE countries (code text PRIMARY KEY, name text)`,
		`SELECT create_reference_table('countries')`,
		`CREATE TABLE local_notes (id int PRIMARY KEY, note text)`,
		`SELECT citus_add_local_table_to_metadata('local_notes')`,
		`SET citus.enable_schema_based_sharding = on`,
		`CREATE SCHEMA tenant_a`,
		`CREATE TABLE tenant_a.items (id bigint PRIMARY KEY, v text)`,
		`CREATE TABLE tenant_a.orders (id bigint PRIMARY KEY, item bigint, qty int)`,
		`CREATE SCHEMA tenant_b`,
		`CREATE TABLE tenant_b.items (id bigint PRIMARY KEY, v text)`,
		`RESET citus.enable_schema_based_sharding`,
		// Rows go in through the coordinator; Citus routes them.
		`INSERT INTO users SELECT g, 'user ' || g FROM generate_series(1, 2000) g`,
		`INSERT INTO events SELECT 1 + g % 2000, g, repeat(md5(g::text), 8) FROM generate_series(1, 20000) g`,
		`INSERT INTO tags SELECT 'tag-' || g, g FROM generate_series(1, 500) g`,
		`INSERT INTO countries VALUES ('de', 'Germany'), ('fr', 'France')`,
		`INSERT INTO local_notes SELECT g, 'note' FROM generate_series(1, 100) g`,
		`INSERT INTO tenant_a.items SELECT g, repeat('a', 200) FROM generate_series(1, 3000) g`,
		`INSERT INTO tenant_a.orders SELECT g, g, 1 FROM generate_series(1, 3000) g`,
		`INSERT INTO tenant_b.items SELECT g, repeat('b', 200) FROM generate_series(1, 1000) g`,
		// VACUUM creates the visibility and free-space maps now, so the
		// sizes stay put between Citus's reading and ours.
		`VACUUM users, events, tags, tenant_a.items, tenant_a.orders, tenant_b.items`,
	} {
		_, err := conn.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{})
	require.NoError(t, err)
	assert.Equal(t, metadata.Citus, cl.Flavor)
	assert.Empty(t, cl.Warnings)

	// Nodes: pg_dist_node as it is, the coordinator as group 0.
	require.Len(t, cl.Nodes, 3)
	assert.Equal(t, int32(0), cl.Nodes[0].GroupID)
	assert.Equal(t, c.Coordinator().Port, cl.Nodes[0].Port)
	assert.False(t, cl.Nodes[0].ShouldHaveShards, "citus_set_coordinator_host leaves the coordinator without shards")
	for i, w := range c.Workers() {
		n := cl.Nodes[i+1]
		assert.Equal(t, w.Host, n.Host)
		assert.Equal(t, w.Port, n.Port)
		assert.True(t, n.IsActive && n.ShouldHaveShards && n.HasMetadata && n.MetadataSynced, "%+v", n)
		assert.Equal(t, "primary", n.Role)
		assert.Equal(t, "default", n.Cluster)
	}

	// Tables: hash-distributed and schema tables, nothing else.
	var names []string
	for _, tb := range cl.Tables {
		names = append(names, tb.DisplayName())
	}
	assert.ElementsMatch(t, []string{"users", "events", "tags", "tenant_a.items", "tenant_a.orders", "tenant_b.items"}, names)
	users, err := cl.Table("users")
	require.NoError(t, err)
	assert.Equal(t, "h", users.Method)
	assert.Equal(t, "user_id", users.Column)
	assert.Equal(t, 1, users.ColumnAttNum)
	assert.Equal(t, "bigint", users.ColumnType)
	assert.Equal(t, 4, users.ShardCount)
	tags, err := cl.Table("tags")
	require.NoError(t, err)
	assert.Equal(t, "tag", tags.Column)
	assert.Equal(t, "text", tags.ColumnType)
	assert.NotEqual(t, users.ColocationID, tags.ColocationID)
	schemaColoc := map[string]int32{}
	rows, err := conn.Query(ctx, `SELECT schemaid::regnamespace::text, colocationid FROM pg_dist_schema`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		var id int32
		require.NoError(t, rows.Scan(&s, &id))
		schemaColoc[s] = id
	}
	require.NoError(t, rows.Err())
	require.Len(t, schemaColoc, 2)
	for _, name := range []string{"tenant_a.items", "tenant_a.orders", "tenant_b.items"} {
		tb, err := cl.Table(name)
		require.NoError(t, err)
		assert.Equal(t, "n", tb.Method, name)
		assert.Empty(t, tb.Column, name)
		assert.Equal(t, 1, tb.ShardCount, name)
		assert.Equal(t, schemaColoc[tb.Schema], tb.ColocationID, "%s is in its schema's colocation group", name)
	}
	assert.NotEqual(t, schemaColoc["tenant_a"], schemaColoc["tenant_b"])

	// Against citus_shards: every shard of a distributed or schema table is
	// in exactly one group, on the node Citus names, with Citus's size;
	// reference and citus-local shards are in none.
	shards := citusShards(t, ctx, conn)
	movable := map[int64]citusShard{}
	seenTypes := map[string]bool{}
	for _, s := range shards {
		seenTypes[s.Type] = true
		if s.Type == "distributed" || s.Type == "schema" {
			_, dup := movable[s.ShardID]
			require.False(t, dup, "shard %d of %s has one placement", s.ShardID, s.Table)
			movable[s.ShardID] = s
		}
	}
	assert.Equal(t, map[string]bool{"distributed": true, "schema": true, "reference": true, "local": true}, seenTypes)
	assert.Len(t, movable, 4+4+2+2+1)
	inGroup := map[int64]string{}
	perColoc := map[int32]int{}
	for _, g := range cl.Groups {
		node, ok := cl.NodeByGroup(g.GroupID)
		require.True(t, ok, "group %s", g.Key())
		assert.Equal(t, node.ID, g.NodeID)
		assert.False(t, node.IsCoordinator(), "group %s is on a worker", g.Key())
		assert.True(t, g.SizeKnown, g.Key())
		assert.Positive(t, g.Bytes, g.Key())
		var want int64
		for _, id := range g.ShardIDs {
			s, ok := movable[id]
			require.True(t, ok, "shard %d of group %s is a distributed or schema shard in citus_shards", id, g.Key())
			_, dup := inGroup[id]
			require.False(t, dup, "shard %d is in one group", id)
			inGroup[id] = g.Key()
			assert.Equal(t, node.Addr(), s.Addr, "shard %d (%s) placement", id, s.Table)
			assert.Equal(t, g.ColocationID, s.ColocationID, "shard %d colocation", id)
			assert.Positive(t, s.Size, "citus_shards size of %d", id)
			want += s.Size
		}
		assert.Equal(t, want, g.Bytes, "group %s bytes = sum of citus_shards sizes", g.Key())
		perColoc[g.ColocationID]++
	}
	assert.Len(t, inGroup, len(movable), "every movable shard is in a group")
	assert.Equal(t, map[int32]int{users.ColocationID: 4, tags.ColocationID: 2, schemaColoc["tenant_a"]: 1, schemaColoc["tenant_b"]: 1}, perColoc)
	for _, g := range cl.Groups {
		switch g.ColocationID {
		case users.ColocationID:
			assert.Equal(t, []string{"events", "users"}, g.Tables, g.Key())
		case schemaColoc["tenant_a"]:
			assert.Equal(t, []string{"tenant_a.items", "tenant_a.orders"}, g.Tables, g.Key())
		}
	}

	// Placements: exactly pg_dist_placement's rows of the movable shards.
	var want []string
	rows, err = conn.Query(ctx, `SELECT placementid, shardid, groupid FROM pg_dist_placement ORDER BY shardid, placementid`)
	require.NoError(t, err)
	for rows.Next() {
		var pid, sid int64
		var gid int32
		require.NoError(t, rows.Scan(&pid, &sid, &gid))
		if _, ok := movable[sid]; ok {
			want = append(want, fmt.Sprintf("%d/%d@%d", pid, sid, gid))
		}
	}
	require.NoError(t, rows.Err())
	var got []string
	for _, p := range cl.Placements {
		got = append(got, fmt.Sprintf("%d/%d@%d", p.ID, p.ShardID, p.GroupID))
	}
	sort.Strings(want)
	sort.Strings(got)
	assert.Equal(t, want, got)

	// Shards: hash ranges as Citus stored them; schema shards have none.
	for _, s := range cl.TableShards(users) {
		var lo, hi string
		require.NoError(t, conn.QueryRow(ctx, `SELECT shardminvalue, shardmaxvalue FROM pg_dist_shard WHERE shardid = $1`, s.ID).Scan(&lo, &hi))
		assert.Equal(t, lo, strconv.Itoa(int(s.Min)))
		assert.Equal(t, hi, strconv.Itoa(int(s.Max)))
	}
	// The distribution column's hash picks the shard Citus routes to.
	for _, id := range []int64{1, 7, 1999} {
		s, err := cl.ShardFor(users, id)
		require.NoError(t, err)
		var citusShard int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT get_shard_id_for_distribution_column('users', $1::bigint)`, id).Scan(&citusShard))
		assert.Equal(t, citusShard, s.ID, "user %d", id)
	}

	// A worker sees the same catalogs (metadata synced): the same snapshot.
	wcat, err := metadata.Open(ctx, metadata.Config{Coordinator: c.Workers()[0].DSN()})
	require.NoError(t, err)
	defer wcat.Close()
	require.Equal(t, metadata.Citus, wcat.Flavor())
	wcl, err := wcat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	assert.Equal(t, cl.Nodes, wcl.Nodes)
	assert.Equal(t, cl.Tables, wcl.Tables)
	assert.Equal(t, cl.Placements, wcl.Placements)
}
