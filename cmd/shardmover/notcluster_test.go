package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// runFor is run with a deadline: a command that would run until stopped
// (the daemon) ends when it passes, as if interrupted.
func runFor(t *testing.T, d time.Duration, args ...string) (string, int) {
	t.Helper()
	g := &globals{}
	root := newRoot(g)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		return message(err), exitCode(err)
	}
	return out.String(), 0
}

// TestNotAClusterRefused: pointed at a database that is not a cluster's
// coordinator (no citus extension, no shardmover catalogs), every command
// but `node add` refuses with exit code 2 and one sentence, having
// created nothing there: no schema shardmover (before, `cleanup --dry-run`
// created it with its tables, and the daemon became leader and logged
// every second that it could not read the node catalog). `node add` still
// makes the database a compat cluster's coordinator.
func TestNotAClusterRefused(t *testing.T) {
	ctx := context.Background()
	c := sandboxtest.New(t, 1) // nothing registered: the coordinator is a plain database
	coord := c.Coordinator().DSN()
	w := c.Workers()[0].Addr()
	conn, err := pgx.Connect(ctx, coord)
	require.NoError(t, err)
	defer conn.Close(ctx)
	ours := func() int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'shardmover%'`).Scan(&n))
		return n
	}
	require.Zero(t, ours())

	sentence := c.Coordinator().Addr() + " is not a cluster's coordinator"
	for _, args := range [][]string{
		{"cleanup", "--dry-run"},
		{"cleanup"},
		{"plan"},
		{"status"},
		{"daemon", "--listen", "127.0.0.1:0"},
		{"rebalance", "--dry-run"},
		{"rebalance", "--yes"},
		{"drain", "--node", w},
		{"move", "--shard", "102008", "--to", w},
		{"jobs", "list"},
		{"jobs", "show", "1"},
		{"jobs", "resume", "1"},
		{"jobs", "cancel", "1"},
		{"verify", "--all"},
		{"node", "list"},
		{"table", "create", "t", "--column", "id"},
		{"sandbox", "load", "--users", "10", "--events", "10"},
		{"workload", "--duration", "1s"},
	} {
		msg, code := runFor(t, 20*time.Second, append(args, "--coordinator", coord)...)
		assert.Equal(t, 2, code, "%v: %s", args, msg)
		assert.Contains(t, msg, sentence, args)
		assert.Contains(t, msg, "`shardmover node add host:port`", args)
		assert.NotContains(t, msg, "\n", "one sentence: %v", args)
		assert.Zero(t, ours(), "%v created a shardmover schema", args)
	}

	// The way a compat cluster is made: the first worker registered.
	out, msg, code := run(t, "node", "add", w, "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "registered "+w)
	out, msg, code = run(t, "status", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, w)
	_, msg, code = run(t, "cleanup", "--dry-run", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
}
