package sandbox_test

import (
	"context"
	"net"
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

func TestClusterSettingsAndLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := sandboxtest.New(t, 2)
	require.Len(t, c.Nodes, 3)
	for _, n := range c.Nodes {
		conn, err := pgx.Connect(ctx, n.DSN())
		require.NoError(t, err)
		for setting, want := range map[string]string{
			"wal_level":                 "logical",
			"max_replication_slots":     "32",
			"max_wal_senders":           "32",
			"max_prepared_transactions": "32",
			"listen_addresses":          "127.0.0.1",
		} {
			var got string
			require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got))
			assert.Equal(t, want, got, "%s on %s", setting, n.Name)
		}
		conn.Close(ctx)
	}

	// Up again is idempotent: same nodes, still running.
	again, err := sandbox.Up(ctx, sandbox.Config{Dir: c.Dir, Workers: 2})
	require.NoError(t, err)
	assert.Equal(t, c.Nodes, again.Nodes)

	// A crash leaves a stale postmaster.pid; up must still start the node.
	w := c.Nodes[1]
	require.NoError(t, c.StopNode(ctx, w, "immediate"))
	require.NoError(t, os.WriteFile(filepath.Join(w.DataDir, "postmaster.pid"), []byte("999999\n"), 0o600))
	_, err = sandbox.Up(ctx, sandbox.Config{Dir: c.Dir, Workers: 2})
	require.NoError(t, err)
	st := c.Status(ctx)
	for _, s := range st {
		assert.True(t, s.Running, s.Name)
	}

	// add-node starts one more server.
	n, err := c.AddNode(ctx)
	require.NoError(t, err)
	assert.Equal(t, "worker3", n.Name)
	conn, err := pgx.Connect(ctx, n.DSN())
	require.NoError(t, err)
	conn.Close(ctx)
	reopened, err := sandbox.Open(c.Dir, nil)
	require.NoError(t, err)
	assert.Len(t, reopened.Nodes, 4)
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	_, err := sandbox.Up(ctx, sandbox.Config{Dir: dir, Workers: 0})
	require.ErrorIs(t, err, sandbox.ErrBadConfig)
	assert.Contains(t, err.Error(), "--nodes must be at least 1")

	// No binaries where we were told to look: a clear error, nothing created.
	noBin := filepath.Join(dir, "nobin")
	_, err = sandbox.Up(ctx, sandbox.Config{Dir: noBin, Workers: 1, BinDir: filepath.Join(dir, "nothing")})
	require.ErrorIs(t, err, sandbox.ErrNoBinaries)
	assert.Contains(t, err.Error(), "postgresql-15")
	_, statErr := os.Stat(noBin)
	assert.True(t, os.IsNotExist(statErr), "nothing may be created without binaries")

	// Busy port: nothing is created.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	busyDir := filepath.Join(dir, "busy")
	_, err = sandbox.Up(ctx, sandbox.Config{Dir: busyDir, Workers: 1, BasePort: port})
	require.ErrorIs(t, err, sandbox.ErrPortInUse)
	assert.Contains(t, err.Error(), l.Addr().String())
	_, statErr = os.Stat(filepath.Join(busyDir, "coordinator"))
	assert.True(t, os.IsNotExist(statErr), "no data dir may be created when a port is busy")
}

// Every node's data directory is a copy of one initdb template (template.go):
// the copies must be separate clusters, and no half-made copy may be left.
func TestNodesCopiedFromOneTemplateAreSeparate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := sandboxtest.New(t, 1)
	a, err := pgx.Connect(ctx, c.Nodes[0].DSN())
	require.NoError(t, err)
	defer a.Close(ctx)
	b, err := pgx.Connect(ctx, c.Nodes[1].DSN())
	require.NoError(t, err)
	defer b.Close(ctx)

	_, err = a.Exec(ctx, "CREATE TABLE only_on_a (id int)")
	require.NoError(t, err)
	var onB bool
	require.NoError(t, b.QueryRow(ctx, "SELECT to_regclass('only_on_a') IS NOT NULL").Scan(&onB))
	assert.False(t, onB, "a table made on one node must not show on another")

	for i, conn := range []*pgx.Conn{a, b} {
		n := c.Nodes[i]
		var encoding, collate string
		require.NoError(t, conn.QueryRow(ctx, "SELECT pg_encoding_to_char(encoding), datcollate FROM pg_database WHERE datname = current_database()").Scan(&encoding, &collate))
		assert.Equal(t, "UTF8", encoding, n.Name)
		assert.Equal(t, "C", collate, n.Name)
		st, err := os.Stat(n.DataDir)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "%s's data directory", n.Name)
	}
	leftover, err := filepath.Glob(filepath.Join(c.Dir, "*.init"))
	require.NoError(t, err)
	assert.Empty(t, leftover, "staging copies left in the sandbox directory")
}
