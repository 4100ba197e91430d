package metadata_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
)

func TestFencedName(t *testing.T) {
	assert.Equal(t, "t_102008_moved_7", metadata.FencedName("t_102008", 7))
	long := strings.Repeat("é", 40) + "_102008"
	got := metadata.FencedName(long, 12)
	assert.LessOrEqual(t, len(got), 63)
	assert.True(t, strings.HasSuffix(got, "_moved_12"))
	assert.NotEqual(t, got, metadata.FencedName(strings.Repeat("é", 40)+"_102009", 12), "long names stay distinct")
}

// TestVerifyCatalog breaks the catalogs and the nodes one way at a time and
// checks that VerifyCatalog names each break, and that the cluster is clean
// again once it is repaired.
func TestVerifyCatalog(t *testing.T) {
	ctx := context.Background()
	sb, cat := sandboxtest.NewCompat(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, 2))
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	users, err := cl.Table("github_users")
	require.NoError(t, err)
	shards := cl.TableShards(users)
	require.Len(t, shards, 2)
	s0 := shards[0]
	p0, _ := cl.PlacementOf(s0.ID)
	holder, _ := cl.NodeByGroup(p0.GroupID)
	var other metadata.Node
	for _, n := range cl.Nodes {
		if !n.IsCoordinator() && n.GroupID != holder.GroupID {
			other = n
		}
	}
	require.NotZero(t, other.ID)

	coord, err := pgx.Connect(ctx, sb.Coordinator().DSN())
	require.NoError(t, err)
	defer coord.Close(ctx)
	connect := func(n metadata.Node) *pgx.Conn {
		c, err := cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close(ctx) })
		return c
	}
	onHolder, onOther := connect(holder), connect(other)
	exec := func(c *pgx.Conn, sql string, args ...any) {
		t.Helper()
		_, err := c.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	clean := func(t *testing.T) {
		t.Helper()
		rep, err := cat.VerifyCatalog(ctx)
		require.NoError(t, err)
		assert.True(t, rep.OK(), "problems: %+v", rep.Problems())
		assert.Equal(t, len(cl.Shards), rep.Shards)
		assert.Equal(t, 3, rep.Nodes)
	}
	// expect runs VerifyCatalog and returns its problems of one kind.
	expect := func(t *testing.T, kind string) []metadata.Finding {
		t.Helper()
		rep, err := cat.VerifyCatalog(ctx)
		require.NoError(t, err)
		assert.False(t, rep.OK())
		var out []metadata.Finding
		for _, f := range rep.Problems() {
			if f.Kind == kind {
				out = append(out, f)
			}
		}
		require.NotEmpty(t, out, "want a %s problem, got %+v", kind, rep.Findings)
		return out
	}
	clean(t)

	t.Run("placement pointing at a missing table", func(t *testing.T) {
		exec(onHolder, "ALTER TABLE "+s0.Ident().Sanitize()+" RENAME TO hidden_users")
		f := expect(t, metadata.FindingTable)
		assert.Equal(t, s0.ID, f[0].ShardID)
		assert.Equal(t, holder.Addr(), f[0].Node)
		assert.Contains(t, f[0].Message, "does not exist there")
		exec(onHolder, "ALTER TABLE public.hidden_users RENAME TO "+pgx.Identifier{s0.Name()}.Sanitize())
		clean(t)
	})

	t.Run("duplicate placement", func(t *testing.T) {
		exec(coord, "DROP INDEX shardmover_catalog.pg_dist_placement_one_per_shard")
		exec(coord, `INSERT INTO shardmover_catalog.pg_dist_placement (placementid, shardid, shardstate, shardlength, groupid)
			VALUES (999999, $1, 1, 0, $2)`, s0.ID, other.GroupID)
		f := expect(t, metadata.FindingPlacement)
		assert.Equal(t, s0.ID, f[0].ShardID)
		assert.Contains(t, f[0].Message, "has 2 placements")
		// The second placement names a node without the table, too.
		assert.Contains(t, expect(t, metadata.FindingTable)[0].Message, other.Addr())
		exec(coord, "DELETE FROM shardmover_catalog.pg_dist_placement WHERE placementid = 999999")
		exec(coord, "CREATE UNIQUE INDEX pg_dist_placement_one_per_shard ON shardmover_catalog.pg_dist_placement (shardid)")
		clean(t)
	})

	t.Run("range gap and overlap", func(t *testing.T) {
		exec(coord, "UPDATE shardmover_catalog.pg_dist_shard SET shardmaxvalue = (shardmaxvalue::int - 10)::text WHERE shardid = $1", s0.ID)
		f := expect(t, metadata.FindingRange)
		require.Len(t, f, 1)
		assert.Contains(t, f[0].Message, "table github_users has a gap")
		assert.Contains(t, f[0].Message, "[-10, -1]", "2 shards split at 0: the first now ends at -11")
		exec(coord, "UPDATE shardmover_catalog.pg_dist_shard SET shardmaxvalue = (shardmaxvalue::int + 20)::text WHERE shardid = $1", s0.ID)
		f = expect(t, metadata.FindingRange)
		assert.Contains(t, f[0].Message, "overlap")
		exec(coord, "UPDATE shardmover_catalog.pg_dist_shard SET shardmaxvalue = (shardmaxvalue::int - 10)::text WHERE shardid = $1", s0.ID)
		exec(coord, "UPDATE shardmover_catalog.pg_dist_shard SET shardmaxvalue = $2 WHERE shardid = $1", shards[1].ID, "2147483000")
		f = expect(t, metadata.FindingRange)
		assert.Contains(t, f[0].Message, "[2147483001, 2147483647]")
		exec(coord, "UPDATE shardmover_catalog.pg_dist_shard SET shardmaxvalue = $2 WHERE shardid = $1", shards[1].ID, "2147483647")
		assert.Equal(t, int32(math.MaxInt32), shards[1].Max)
		clean(t)
	})

	t.Run("orphan fenced copy", func(t *testing.T) {
		orphan := pgx.Identifier{"public", metadata.FencedName(s0.Name(), 42)}
		exec(onOther, "CREATE TABLE "+orphan.Sanitize()+" (id int)")
		f := expect(t, metadata.FindingOrphan)
		assert.Equal(t, int64(42), f[0].MoveID)
		assert.Equal(t, other.Addr(), f[0].Node)
		assert.Contains(t, f[0].Message, "move 42 is not in the journal")
		exec(onOther, "DROP TABLE "+orphan.Sanitize())
		clean(t)
	})

	t.Run("shard table of an unknown shard", func(t *testing.T) {
		exec(onOther, "CREATE TABLE public.github_users_999999 (id int)")
		f := expect(t, metadata.FindingUnknownShard)
		assert.Contains(t, f[0].Message, "no shard 999999")
		exec(onOther, "DROP TABLE public.github_users_999999")
		clean(t)
	})

	t.Run("shard table on a node its placement does not name", func(t *testing.T) {
		exec(onOther, "CREATE TABLE "+s0.Ident().Sanitize()+" (id int)")
		f := expect(t, metadata.FindingTable)
		assert.Contains(t, f[0].Message, "also exists on "+other.Addr())
		exec(onOther, "DROP TABLE "+s0.Ident().Sanitize())
		clean(t)
	})

	t.Run("placement on an inactive node", func(t *testing.T) {
		exec(coord, "UPDATE shardmover_catalog.pg_dist_node SET isactive = false WHERE nodeid = $1", holder.ID)
		f := expect(t, metadata.FindingPlacement)
		assert.Contains(t, f[0].Message, "not active")
		exec(coord, "UPDATE shardmover_catalog.pg_dist_node SET isactive = true WHERE nodeid = $1", holder.ID)
		clean(t)
	})
}
