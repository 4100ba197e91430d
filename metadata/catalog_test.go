package metadata_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

func exec(t *testing.T, ctx context.Context, dsn string, sql ...string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, s := range sql {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}
}

func catalogDump(t *testing.T, ctx context.Context, cat *metadata.Catalog) string {
	t.Helper()
	var s string
	require.NoError(t, cat.Pool().QueryRow(ctx, `SELECT
		(SELECT coalesce(string_agg(format('%s', n), ';' ORDER BY nodeid), '') FROM shardmover_catalog.pg_dist_node n) ||
		(SELECT coalesce(string_agg(format('%s', p), ';' ORDER BY placementid), '') FROM shardmover_catalog.pg_dist_placement p) ||
		(SELECT count(*)::text FROM pg_class WHERE relnamespace = 'shardmover_catalog'::regnamespace)`).Scan(&s))
	return s
}

func TestInstallTwiceAndSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, cat := sandboxtest.NewCompat(t, 2)
	assert.Equal(t, metadata.Compat, cat.Flavor())

	before := catalogDump(t, ctx, cat)
	require.NoError(t, cat.Install(ctx))
	assert.Equal(t, before, catalogDump(t, ctx, cat), "a second install must change nothing")

	exec(t, ctx, c.Coordinator().DSN(),
		`CREATE TABLE users (user_id bigint PRIMARY KEY, login text NOT NULL DEFAULT 'x')`,
		`CREATE TABLE events (user_id bigint, event_id bigint, body jsonb, created_at timestamptz DEFAULT now(),
			PRIMARY KEY (user_id, event_id), CHECK (event_id > 0))`,
		`CREATE INDEX events_created ON events (created_at)`,
		`CREATE TABLE tags (name text PRIMARY KEY)`)
	users, err := cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "users", Column: "user_id", ShardCount: 8})
	require.NoError(t, err)
	events, err := cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "events", Column: "user_id", ColocateWith: "users"})
	require.NoError(t, err)
	tags, err := cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "tags", Column: "name", ShardCount: 3})
	require.NoError(t, err)
	assert.Equal(t, users.ColocationID, events.ColocationID)
	assert.NotEqual(t, users.ColocationID, tags.ColocationID)

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{})
	require.NoError(t, err)
	require.Len(t, cl.Nodes, 3)
	assert.True(t, cl.Nodes[0].IsCoordinator())
	assert.False(t, cl.Nodes[0].ShouldHaveShards)
	require.Len(t, cl.Tables, 3)
	ev, err := cl.Table("events")
	require.NoError(t, err)
	assert.Equal(t, "user_id", ev.Column)
	assert.Equal(t, "bigint", ev.ColumnType)
	assert.Equal(t, 8, ev.ShardCount)
	require.Len(t, cl.Shards, 8+8+3)
	us := cl.TableShards(users)
	assert.Equal(t, int64(102008), us[0].ID, "shard ids start at 102008 like Citus")
	require.Len(t, cl.Groups, 8+3)
	for _, g := range cl.Groups {
		assert.True(t, g.SizeKnown)
		assert.Positive(t, g.Bytes, "group %s has indexes, so a size", g.Key())
		assert.NotZero(t, g.NodeID)
	}
	// Colocated shards share placements; round robin spreads over both workers.
	perNode := map[int32]int{}
	for _, g := range cl.Groups[:8] {
		require.Len(t, g.ShardIDs, 2)
		p0, _ := cl.PlacementOf(g.ShardIDs[0])
		p1, _ := cl.PlacementOf(g.ShardIDs[1])
		assert.Equal(t, p0.GroupID, p1.GroupID)
		perNode[g.NodeID]++
	}
	assert.Equal(t, map[int32]int{2: 4, 3: 4}, perNode)

	// Shard tables exist on their nodes with constraints and indexes.
	for _, s := range cl.TableShards(ev) {
		p, _ := cl.PlacementOf(s.ID)
		n, _ := cl.NodeByGroup(p.GroupID)
		conn, err := cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		var cons, idx int
		require.NoError(t, conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_constraint WHERE conrelid = $1::regclass),
			(SELECT count(*) FROM pg_index WHERE indrelid = $1::regclass)`, s.Ident().Sanitize()).Scan(&cons, &idx))
		conn.Close(ctx)
		assert.Equal(t, 2, cons, "primary key and check on %s", s.Name())
		assert.Equal(t, 2, idx, "primary key index and events_created on %s", s.Name())
	}

	// ShardFor agrees with the server's hash.
	sh, err := cl.ShardFor(ev, int64(42))
	require.NoError(t, err)
	h := metadata.HashInt8(42)
	assert.True(t, h >= sh.Min && h <= sh.Max)
	_, err = cl.ShardFor(ev, "not a number")
	assert.ErrorIs(t, err, metadata.ErrInvalid)
}

func TestDistributeBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, cat := sandboxtest.NewCompat(t, 1)
	exec(t, ctx, c.Coordinator().DSN(),
		`CREATE TABLE t (id bigint PRIMARY KEY, v text)`,
		`CREATE TABLE full_table (id bigint PRIMARY KEY)`, `INSERT INTO full_table VALUES (1)`,
		`CREATE TABLE nokey (id bigint)`,
		`CREATE TABLE floaty (id float8 PRIMARY KEY)`, `CREATE TABLE t2 (id bigint PRIMARY KEY)`)
	_, err := cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "t", Column: "id", ShardCount: 4})
	require.NoError(t, err)
	before := catalogDump(t, ctx, cat)

	cases := []struct {
		name string
		opts metadata.DistributeOptions
		want string
	}{
		{"exists", metadata.DistributeOptions{Table: "t", Column: "id", ShardCount: 4}, "already distributed"},
		{"missing table", metadata.DistributeOptions{Table: "nope", Column: "id", ShardCount: 4}, "does not exist"},
		{"missing column", metadata.DistributeOptions{Table: "full_table", Column: "nope", ShardCount: 4}, `no column "nope"`},
		{"not empty", metadata.DistributeOptions{Table: "full_table", Column: "id", ShardCount: 4}, "not empty"},
		{"no key", metadata.DistributeOptions{Table: "nokey", Column: "id", ShardCount: 4}, "no primary key"},
		{"type", metadata.DistributeOptions{Table: "floaty", Column: "id", ShardCount: 4}, "not supported"},
		{"colocate count", metadata.DistributeOptions{Table: "t2", Column: "id", ShardCount: 5, ColocateWith: "t"}, "has 4 shards"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cat.CreateDistributedTable(ctx, tc.opts)
			require.ErrorIs(t, err, metadata.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	assert.Equal(t, before, catalogDump(t, ctx, cat), "refused requests change nothing")
}

func TestNoWorkersAndUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := sandboxtest.New(t, 1)
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: c.Coordinator().DSN()})
	require.NoError(t, err)
	defer cat.Close()
	require.NoError(t, cat.Install(ctx))
	exec(t, ctx, c.Coordinator().DSN(), `CREATE TABLE t (id bigint PRIMARY KEY)`)
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "t", Column: "id", ShardCount: 4})
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "no active worker")

	// A node that does not answer: refused, named by host:port only.
	_, err = cat.AddNode(ctx, "127.0.0.1", 1, metadata.DefaultAddNodeOptions())
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), "127.0.0.1:1")
	// wal_level must be logical: the worker is; the check passes and the
	// node is registered once.
	w := c.Workers()[0]
	_, err = cat.AddNode(ctx, w.Host, w.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	_, err = cat.AddNode(ctx, w.Host, w.Port, metadata.DefaultAddNodeOptions())
	require.ErrorIs(t, err, metadata.ErrExists)

	_, err = metadata.Open(ctx, metadata.Config{Coordinator: "host=127.0.0.1 port=1 user=u password=sekret dbname=x"})
	require.ErrorIs(t, err, metadata.ErrUnreachable)
	assert.Contains(t, err.Error(), "127.0.0.1:1")
	assert.NotContains(t, err.Error(), "sekret")
	assert.NotContains(t, err.Error(), "password")
}

func TestParseConnString(t *testing.T) {
	s, err := metadata.ParseConnString("host=a port=5 user='o\\'brien' password=x dbname=db")
	require.NoError(t, err)
	assert.Equal(t, "o'brien", s["user"])
	back, err := metadata.ParseConnString(s.String())
	require.NoError(t, err)
	assert.Equal(t, s, back)
	u, err := metadata.ParseConnString("postgres://me:pw@h:7/db?sslmode=disable")
	require.NoError(t, err)
	assert.Equal(t, metadata.ConnSettings{"user": "me", "password": "pw", "host": "h", "port": "7", "dbname": "db", "sslmode": "disable"}, u)
	assert.Equal(t, "h:7", u.Describe())
	_, err = metadata.ParseConnString("host")
	assert.ErrorIs(t, err, metadata.ErrInvalid)
}
