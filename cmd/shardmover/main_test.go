package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// run executes the CLI in-process and returns stdout, the error line and
// the exit code main would use.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	g := &globals{}
	root := newRoot(g)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	if err != nil {
		return out.String(), message(err), exitCode(err)
	}
	return out.String(), "", 0
}

func TestHelpListsEveryCommand(t *testing.T) {
	out, _, code := run(t, "--help")
	require.Equal(t, 0, code)
	root := newRoot(&globals{})
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		assert.NotEmpty(t, c.Short, c.Name())
		assert.Contains(t, out, c.Name())
		for _, sub := range c.Commands() {
			assert.NotEmpty(t, sub.Short, c.Name()+" "+sub.Name())
		}
	}
}

// TestHelpHidesTheEnvironmentsConnectionString: --help of every command
// shows no connection string from SHARDMOVER_COORDINATOR (cobra prints a
// flag's default, and the coordinator flag once defaulted to it), while
// the environment is still used to connect.
func TestHelpHidesTheEnvironmentsConnectionString(t *testing.T) {
	t.Setenv("SHARDMOVER_COORDINATOR", "host=127.0.0.1 port=1 user=alice password=hunter2 dbname=x")
	var walk func(args []string, c *cobra.Command)
	walk = func(args []string, c *cobra.Command) {
		out, msg, code := run(t, append(args, "--help")...)
		require.Equal(t, 0, code, "%v: %s", args, msg)
		assert.NotContains(t, out, "hunter2", args)
		assert.NotContains(t, out, "user=alice", args)
		for _, sub := range c.Commands() {
			if !sub.Hidden && sub.Name() != "help" {
				walk(append(append([]string(nil), args...), sub.Name()), sub)
			}
		}
	}
	walk(nil, newRoot(&globals{}))
	_, msg, code := run(t, "status")
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "127.0.0.1:1", "the environment's coordinator is used")
	assert.NotContains(t, msg, "hunter2")
}

func TestBadInputExitsTwo(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	busy := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)

	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"busy port", nil, []string{"sandbox", "up", "--dir", filepath.Join(dir, "a"), "--port", busy, "--nodes", "1"}, "already in use"},
		{"zero nodes", nil, []string{"sandbox", "up", "--dir", filepath.Join(dir, "b"), "--nodes", "0"}, "--nodes must be at least 1"},
		{"no binaries", map[string]string{"PG_BINDIR": filepath.Join(dir, "nothing")}, []string{"sandbox", "up", "--dir", filepath.Join(dir, "c"), "--port", "20000"}, "install Debian's postgresql-15"},
		{"unreachable coordinator", nil, []string{"status", "--coordinator", "host=127.0.0.1 port=1 user=alice password=hunter2 dbname=x"}, "127.0.0.1:1"},
		{"bad output", nil, []string{"status", "-o", "yaml"}, "-o must be table or json"},
		{"unknown flag", nil, []string{"status", "--frobnicate"}, "unknown flag"},
		{"bad node addr", nil, []string{"node", "add", "nonsense"}, "is not host:port"},
		{"no sandbox", nil, []string{"sandbox", "status", "--dir", filepath.Join(dir, "none")}, "no sandbox"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, msg, code := run(t, tc.args...)
			assert.Equal(t, 2, code, msg)
			assert.Contains(t, msg, tc.want)
			assert.NotContains(t, msg, "hunter2")
			assert.NotContains(t, msg, "password")
			assert.NotContains(t, msg, "\n", "one sentence, one line")
		})
	}
	for _, d := range []string{"a", "b", "c"} {
		_, err := os.Stat(filepath.Join(dir, d, "sandbox.json"))
		assert.True(t, os.IsNotExist(err), "refused sandbox up must not create %s", d)
	}
}

func TestClusterCommands(t *testing.T) {
	c := sandboxtest.New(t, 2)
	coord := c.Coordinator().DSN()
	ctx := context.Background()

	// Loading into a cluster with no workers is refused, changing nothing.
	_, msg, code := run(t, "sandbox", "load", "--coordinator", coord, "--users", "10", "--events", "10")
	require.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "is not a cluster's coordinator")
	conn, err := pgx.Connect(ctx, coord)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = 'github_events'").Scan(&n))
	assert.Zero(t, n, "a refused load must not create tables")

	out, msg, code := run(t, "node", "add", c.Workers()[1].Addr(), "--coordinator", coord, "--no-shards")
	require.Equal(t, 0, code, msg)
	// Catalogs now exist, but no worker may hold shards.
	_, msg, code = run(t, "sandbox", "load", "--coordinator", coord, "--users", "10", "--events", "10")
	require.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "no active worker")
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = 'github_events'").Scan(&n))
	assert.Zero(t, n, "a refused load must not create tables")

	w := c.Workers()[0]
	out, msg, code = run(t, "node", "add", w.Addr(), "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "registered "+w.Addr())
	_, msg, code = run(t, "node", "add", w.Addr(), "--coordinator", coord)
	assert.Equal(t, 2, code)
	assert.Contains(t, msg, "already registered")

	_, err = conn.Exec(ctx, "CREATE TABLE items (id bigint PRIMARY KEY, name text)")
	require.NoError(t, err)
	_, msg, code = run(t, "table", "create", "items", "--column", "nope", "--shards", "4", "--coordinator", coord)
	assert.Equal(t, 2, code)
	assert.Contains(t, msg, `no column "nope"`)
	out, msg, code = run(t, "table", "create", "items", "--column", "id", "--shards", "4", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "into 4 shards")
	_, msg, code = run(t, "table", "create", "items", "--column", "id", "--shards", "4", "--coordinator", coord)
	assert.Equal(t, 2, code)
	assert.Contains(t, msg, "already distributed")

	out, msg, code = run(t, "sandbox", "load", "--coordinator", coord, "--users", "50", "--events", "500", "--shards", "4")
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "loaded 50 users and 500 events")
	out, msg, code = run(t, "status", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "github_events")
	assert.Contains(t, out, w.Addr())
	out, msg, code = run(t, "status", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.True(t, strings.HasPrefix(out, "{"))
	assert.Contains(t, out, `"schema_version": 1`)
	out, msg, code = run(t, "plan", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "strategy by_disk_size, threshold 0.1")
	out, msg, code = run(t, "workload", "--coordinator", coord, "--duration", "1s", "--clients", "2", "--users", "50")
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "ledger: PASS")
}

func TestMoveBadInput(t *testing.T) {
	c := sandboxtest.New(t, 2)
	coord := c.Coordinator().DSN()
	for _, w := range c.Workers() {
		_, msg, code := run(t, "node", "add", w.Addr(), "--coordinator", coord)
		require.Equal(t, 0, code, msg)
	}
	_, msg, code := run(t, "sandbox", "load", "--coordinator", coord, "--users", "20", "--events", "100", "--shards", "2")
	require.Equal(t, 0, code, msg)
	ctx := context.Background()
	extra, err := c.AddNode(ctx)
	require.NoError(t, err)
	_, msg, code = run(t, "node", "add", extra.Addr(), "--no-shards", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	// w1 holds the group of shard 102008, w2 does not.
	out, msg, code := run(t, "status", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	var st metadata.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	var w1, w2 string
	for _, g := range st.ShardGroups {
		if g.ShardIDs[len(g.ShardIDs)-1] == 102008 || g.ShardIDs[0] == 102008 {
			for _, n := range st.Nodes {
				if n.ID == g.NodeID {
					w1 = n.Addr
				}
			}
		}
	}
	for _, w := range c.Workers()[:2] {
		if w.Addr() != w1 {
			w2 = w.Addr()
		}
	}
	require.NotEmpty(t, w1)

	cases := []struct {
		args []string
		want string
	}{
		{[]string{"move", "--shard", "999", "--to", w2}, "shard 999 does not exist"},
		{[]string{"move", "--shard", "102008", "--to", w1}, "already on " + w1},
		{[]string{"move", "--shard", "102008", "--to", "127.0.0.1:1"}, "no node 127.0.0.1:1 is registered"},
		{[]string{"move", "--shard", "102008", "--to", extra.Addr()}, "shouldhaveshards = false"},
		{[]string{"move", "--shard", "102008", "--to-node", "99"}, "no node has id 99"},
		{[]string{"move", "--shard", "102008"}, "exactly one of --to"},
		{[]string{"move", "--shard", "102008", "--to", w2, "--throttle", "fast"}, "is not a rate"},
		{[]string{"jobs", "show", "abc"}, "is not a job id"},
		{[]string{"jobs", "show", "77"}, "there is no job 77"},
		{[]string{"cleanup", "--keep-old-for", "-1s"}, "must not be negative"},
	}
	for _, tc := range cases {
		_, msg, code := run(t, append(tc.args, "--coordinator", coord)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, msg)
		assert.Contains(t, msg, tc.want, tc.args)
	}
	out, msg, code = run(t, "move", "--shard", "102008", "--to", w2, "--dry-run", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "preflight passed")
	out, msg, code = run(t, "jobs", "list", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.NotContains(t, out, "move", "a dry run records no job")

	out, msg, code = run(t, "move", "--shard", "102008", "--to", w2, "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "moved shard group 1:0")
	out, msg, code = run(t, "jobs", "show", "1", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "done")
	out, msg, code = run(t, "cleanup", "--keep-old-for", "0s", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "dropped table public.github_users_102008_moved_1")
}

func TestRebalanceDrainDaemonBadInput(t *testing.T) {
	c := sandboxtest.New(t, 1)
	coord := c.Coordinator().DSN()
	w := c.Workers()[0].Addr()
	_, msg, code := run(t, "node", "add", w, "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"rebalance", "--concurrency", "0"}, "--concurrency must be at least 1"},
		{[]string{"rebalance", "--per-node", "0"}, "--per-node must be at least 1"},
		{[]string{"rebalance", "--strategy", "nope", "--dry-run"}, "does not exist"},
		{[]string{"rebalance", "--max-bandwidth", "lots"}, "is not a rate"},
		{[]string{"rebalance", "--recheck", "-1"}, "--recheck must be 0 or more"},
		{[]string{"daemon", "--recheck", "-2"}, "--recheck must be 0 or more"},
		{[]string{"drain"}, "--node is required"},
		{[]string{"drain", "--node", "127.0.0.1:1"}, "not a registered node"},
		{[]string{"drain", "--node", w}, "last node that may hold shards"},
		{[]string{"daemon", "--schedule", "0 3 * *"}, "is not a cron expression"},
		{[]string{"daemon", "--timezone", "Nowhere/Land"}, "is not a known time zone"},
		{[]string{"daemon", "--concurrency", "0"}, "--concurrency must be at least 1"},
		{[]string{"daemon", "--listen", l.Addr().String()}, "cannot be used"},
	}
	for _, tc := range cases {
		_, msg, code := run(t, append(tc.args, "--coordinator", coord)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, msg)
		assert.Contains(t, msg, tc.want, tc.args)
	}
	out, msg, code := run(t, "rebalance", "--coordinator", coord, "--yes")
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "already balanced")
}
