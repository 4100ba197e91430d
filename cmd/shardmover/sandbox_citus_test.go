package main

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

// TestSandboxUpCitusNotInstalled: without Citus, `sandbox up --citus` is one
// sentence and exit code 2, and creates nothing.
func TestSandboxUpCitusNotInstalled(t *testing.T) {
	real, err := sandbox.FindBinDir("")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "15", "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	for _, f := range []string{"initdb", "pg_ctl", "postgres"} {
		require.NoError(t, os.Symlink(filepath.Join(real, f), filepath.Join(bin, f)))
	}
	t.Setenv("PG_BINDIR", bin)
	dir := filepath.Join(t.TempDir(), "sb")
	_, msg, code := run(t, "sandbox", "up", "--citus", "--dir", dir, "--port", "20000", "--nodes", "1")
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "Citus extension is not installed")
	assert.Contains(t, msg, "install Citus")
	assert.NotContains(t, msg, "\n")
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "a refused sandbox up --citus must create nothing")
}

// TestSandboxCitusLoadAndAddNode: on a Citus sandbox, `sandbox load`
// distributes with create_distributed_table and loads through the
// coordinator (every node then answers queries: Citus routes), and
// `sandbox add-node` joins the new worker with citus_add_node.
func TestSandboxCitusLoadAndAddNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, _ := sandboxtest.NewCitus(t, 2)
	coord := c.Coordinator().DSN()

	out, msg, code := run(t, "sandbox", "load", "--coordinator", coord, "--users", "300", "--events", "3000", "--shards", "8")
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "through the Citus coordinator")

	conn, err := pgx.Connect(ctx, coord)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var shards, nodes int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT nodeport) FROM citus_shards
		WHERE table_name IN ('github_users'::regclass, 'github_events'::regclass) AND citus_table_type = 'distributed'`).Scan(&shards, &nodes))
	assert.Equal(t, 16, shards)
	assert.Equal(t, 2, nodes)
	var colocations int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(DISTINCT colocationid) FROM pg_dist_partition
		WHERE logicalrelid IN ('github_users'::regclass, 'github_events'::regclass)`).Scan(&colocations))
	assert.Equal(t, 1, colocations, "github_users and github_events are colocated")
	for _, n := range c.Nodes {
		nc, err := pgx.Connect(ctx, n.DSN())
		require.NoError(t, err)
		var users, events int64
		require.NoError(t, nc.QueryRow(ctx, "SELECT (SELECT count(*) FROM github_users), (SELECT count(*) FROM github_events)").Scan(&users, &events))
		nc.Close(ctx)
		assert.Equal(t, int64(300), users, "github_users through %s", n.Name)
		assert.Equal(t, int64(3000), events, "github_events through %s", n.Name)
	}

	out, msg, code = run(t, "sandbox", "add-node", "--dir", c.Dir)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "worker3")
	reopened, err := sandbox.Open(c.Dir, nil)
	require.NoError(t, err)
	require.Len(t, reopened.Nodes, 4)
	w := reopened.Nodes[3]
	var synced bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT hasmetadata AND metadatasynced AND isactive FROM pg_dist_node WHERE nodename = $1 AND nodeport = $2`,
		w.Host, w.Port).Scan(&synced))
	assert.True(t, synced, "the added worker is in pg_dist_node with metadata synced")
	t.Cleanup(func() {
		// The sandbox's own cleanup knows only the nodes it started with.
		_ = reopened.StopNode(context.Background(), w, "immediate")
	})
}
