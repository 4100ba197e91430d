package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

type distNode struct {
	Group            int32
	Host             string
	Port             int
	HasMetadata      bool
	MetadataSynced   bool
	ShouldHaveShards bool
	IsActive         bool
}

func distNodes(t *testing.T, ctx context.Context, n sandbox.Node) []distNode {
	t.Helper()
	conn, err := pgx.Connect(ctx, n.DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT groupid, nodename, nodeport, hasmetadata, metadatasynced, shouldhaveshards, isactive
		FROM pg_dist_node ORDER BY groupid`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[distNode])
	require.NoError(t, err)
	return out
}

// TestCitusCluster: a Citus sandbox is one Citus cluster with metadata
// synced to every worker, AddNode joins it, and Up again changes nothing.
func TestCitusCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, _ := sandboxtest.NewCitus(t, 2)
	require.Len(t, c.Nodes, 3)
	assert.True(t, c.Citus)

	for _, n := range c.Nodes {
		conn, err := pgx.Connect(ctx, n.DSN())
		require.NoError(t, err)
		for setting, want := range map[string]string{
			"wal_level":                 "logical",
			"max_prepared_transactions": "32",
			"max_replication_slots":     "32",
			"shared_preload_libraries":  "citus",
			"citus.node_conninfo":       "sslmode=disable",
			"ssl":                       "off",
		} {
			var got string
			require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got))
			assert.Equal(t, want, got, "%s on %s", setting, n.Name)
		}
		var version string
		require.NoError(t, conn.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname = 'citus'").Scan(&version))
		assert.Regexp(t, `^1[2-9]\.`, version, "citus extension on %s", n.Name)
		conn.Close(ctx)
	}

	check := func(nodes []sandbox.Node) {
		t.Helper()
		want := []distNode{{Group: 0, Host: nodes[0].Host, Port: nodes[0].Port, HasMetadata: true, MetadataSynced: true, ShouldHaveShards: false, IsActive: true}}
		for _, w := range nodes[1:] {
			want = append(want, distNode{Host: w.Host, Port: w.Port, HasMetadata: true, MetadataSynced: true, ShouldHaveShards: true, IsActive: true})
		}
		// Metadata is synced: every node has the same pg_dist_node.
		for _, n := range nodes {
			got := distNodes(t, ctx, n)
			require.Len(t, got, len(want), "pg_dist_node on %s", n.Name)
			for i := range got {
				if i > 0 {
					assert.Positive(t, got[i].Group)
					want[i].Group = got[i].Group
				}
			}
			assert.Equal(t, want, got, "pg_dist_node on %s", n.Name)
		}
	}
	check(c.Nodes)

	// add-node on a Citus sandbox: citus_add_node, metadata synced to it.
	w, err := c.AddNode(ctx)
	require.NoError(t, err)
	assert.Equal(t, "worker3", w.Name)
	check(c.Nodes)

	// Up again (without asking for Citus) keeps the Citus cluster as it is.
	again, err := sandbox.Up(ctx, sandbox.Config{Dir: c.Dir, Workers: 2})
	require.NoError(t, err)
	assert.True(t, again.Citus)
	assert.Equal(t, c.Nodes, again.Nodes)
	check(again.Nodes)
}

// TestCitusBadInput: asking for Citus where it cannot be had is a clear
// error and creates nothing; a compat sandbox is never turned into Citus.
func TestCitusBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Server binaries without Citus next to them.
	real, err := sandbox.FindBinDir("")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "15", "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	for _, f := range []string{"initdb", "pg_ctl", "postgres"} {
		require.NoError(t, os.Symlink(filepath.Join(real, f), filepath.Join(bin, f)))
	}
	require.ErrorIs(t, sandbox.CitusAvailable(bin), sandbox.ErrNoCitus)
	dir := filepath.Join(t.TempDir(), "citus")
	_, err = sandbox.Up(ctx, sandbox.Config{Dir: dir, Workers: 1, BinDir: bin, Citus: true})
	require.ErrorIs(t, err, sandbox.ErrNoCitus)
	assert.Contains(t, err.Error(), "install Citus")
	_, statErr := os.Stat(dir)
	assert.True(t, os.IsNotExist(statErr), "nothing may be created without Citus")

	// An existing compat sandbox stays compat.
	c := sandboxtest.New(t, 1)
	_, err = sandbox.Up(ctx, sandbox.Config{Dir: c.Dir, Workers: 1, Citus: true})
	require.ErrorIs(t, err, sandbox.ErrBadConfig)
	assert.Contains(t, err.Error(), "compat")
	conn, err := pgx.Connect(ctx, c.Coordinator().DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var preload string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('shared_preload_libraries')").Scan(&preload))
	assert.Empty(t, preload, "a compat sandbox preloads nothing")
}
