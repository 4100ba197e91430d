package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// planMoves runs plan -o json and returns its moves as (from, to) node
// addresses.
func planMoves(t *testing.T, args ...string) [][2]string {
	t.Helper()
	out, msg, code := run(t, append([]string{"plan", "-o", "json"}, args...)...)
	require.Equal(t, 0, code, msg)
	var res struct {
		Moves []struct {
			FromName string `json:"from_name"`
			ToName   string `json:"to_name"`
		} `json:"moves"`
	}
	// by_load says on stderr (here the same buffer) that it measures.
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res), out)
	var moves [][2]string
	for _, m := range res.Moves {
		moves = append(moves, [2]string{m.FromName, m.ToName})
	}
	return moves
}

// assertRefusedUnmeasured runs a planning command and checks it is refused
// with exit code 2 and one sentence naming every node in names (with the
// reason in reasons) and saying what to do.
func assertRefusedUnmeasured(t *testing.T, args []string, names []string, reasons ...string) {
	t.Helper()
	out, msg, code := run(t, args...)
	assert.Equal(t, 2, code, "%v: %s", args, msg)
	for _, n := range names {
		assert.Contains(t, msg, n, args)
	}
	for _, r := range reasons {
		assert.Contains(t, msg, r, args)
	}
	assert.Contains(t, msg, "could not be measured", args)
	assert.Contains(t, msg, "--allow-unmeasured", args)
	assert.Contains(t, msg, "--node-conninfo", args)
	assert.NotContains(t, msg, "\n", "one sentence: %v", args)
	assert.NotContains(t, out, "moves in", "no plan is printed: %v", args)
}

// assertNothingChanged checks that no job was recorded and every worker
// may still hold shards.
func assertNothingChanged(t *testing.T, coord string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, coord)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var jobs int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM shardmover.jobs").Scan(&jobs))
	assert.Zero(t, jobs, "a refused command records no job")
	var drained int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM shardmover_catalog.pg_dist_node WHERE groupid <> 0 AND NOT shouldhaveshards").Scan(&drained))
	assert.Zero(t, drained, "a refused drain marks no node")
}

// TestPlanningRefusesUnmeasuredNode: a node shardmover cannot measure
// (its credentials refused by a wrong --node-conninfo password, or the
// server stopped, whether it holds shard groups or not) makes plan,
// rebalance (with --dry-run or not) and drain refuse with exit code 2 and
// one sentence naming the node and saying what to do, changing nothing;
// with --allow-unmeasured the plan never involves that node, and still
// balances the others. Before, the node's groups read as empty and the
// plan moved groups onto it and between the healthy nodes.
func TestPlanningRefusesUnmeasuredNode(t *testing.T) {
	ctx := context.Background()
	// w1 and w2 hold 8 shard groups; w3 is new and empty.
	c, coord, _ := loadedCluster(t, 3, 2, 8)
	w := c.Workers()
	w1, w2, w3 := w[0].Addr(), w[1].Addr(), w[2].Addr()
	require.NotEmpty(t, planMoves(t, "--coordinator", coord), "the new node is empty: the plan fills it")

	// A role whose password w2 checks (scram-sha-256); w1 and w3 trust
	// loopback, as the sandbox does, and ignore passwords.
	for _, n := range w {
		nc, err := pgx.Connect(ctx, n.DSN())
		require.NoError(t, err)
		_, err = nc.Exec(ctx, "CREATE ROLE alice LOGIN SUPERUSER PASSWORD 'right'")
		nc.Close(ctx)
		require.NoError(t, err)
	}
	hba := filepath.Join(w[1].DataDir, "pg_hba.conf")
	body, err := os.ReadFile(hba)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(hba, append([]byte("host all alice 127.0.0.1/32 scram-sha-256\n"), body...), 0o600))
	nc, err := pgx.Connect(ctx, w[1].DSN())
	require.NoError(t, err)
	_, err = nc.Exec(ctx, "SELECT pg_reload_conf()")
	nc.Close(ctx)
	require.NoError(t, err)

	wrong := []string{"--coordinator", coord, "--node-conninfo", "user=alice password=wrong"}
	for _, args := range [][]string{
		{"plan"},
		{"plan", "--strategy", "by_shard_count"},
		{"rebalance", "--dry-run"},
		{"rebalance", "--yes"},
		{"drain", "--node", w3},
	} {
		assertRefusedUnmeasured(t, append(args, wrong...), []string{w2}, "password authentication failed")
		_, msg, _ := run(t, append(args, wrong...)...)
		assert.NotContains(t, msg, w1, "only the node that refused is named")
		assert.NotContains(t, msg, "wrong", "no password is printed")
	}
	assertNothingChanged(t, coord)
	moves := planMoves(t, append(wrong, "--allow-unmeasured")...)
	require.NotEmpty(t, moves, "the others are still balanced")
	for _, m := range moves {
		assert.NotContains(t, m, w2, "a move involves the node that could not be measured: %v", moves)
	}

	// A stopped worker holding shard groups.
	require.NoError(t, c.StopNode(ctx, w[0], "fast"))
	for _, args := range [][]string{
		{"plan"},
		{"plan", "--strategy", "by_shard_count"},
		{"rebalance", "--dry-run"},
		{"rebalance", "--yes"},
		{"drain", "--node", w3},
		{"drain", "--node", w2},
	} {
		assertRefusedUnmeasured(t, append(args, "--coordinator", coord), []string{w1}, "connection refused")
	}
	_, msg, code := run(t, "drain", "--node", w1, "--allow-unmeasured", "--coordinator", coord)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "node "+w1+" could not be measured (connection refused), so its shard groups cannot be copied from it")
	assertNothingChanged(t, coord)
	moves = planMoves(t, "--allow-unmeasured", "--coordinator", coord)
	require.NotEmpty(t, moves, "w2 still has more than the empty w3")
	for _, m := range moves {
		assert.Equal(t, [2]string{w2, w3}, m, "only the measured nodes move groups: %v", moves)
	}
	// by_load refuses before it waits for the window, and with
	// --allow-unmeasured measures the load of the other nodes only.
	start := time.Now()
	assertRefusedUnmeasured(t, []string{"plan", "--strategy", "by_load", "--load-window", "1m", "--coordinator", coord}, []string{w1}, "connection refused")
	assert.Less(t, time.Since(start), time.Minute, "refused before the load window")
	moves = planMoves(t, "--strategy", "by_load", "--load-window", "1s", "--allow-unmeasured", "--coordinator", coord)
	require.NotEmpty(t, moves)
	for _, m := range moves {
		assert.Equal(t, [2]string{w2, w3}, m, "only the measured nodes move groups: %v", moves)
	}

	// The empty new node stopped too: it is named as well, though it
	// holds nothing to measure.
	require.NoError(t, c.StopNode(ctx, w[2], "fast"))
	assertRefusedUnmeasured(t, []string{"plan", "--coordinator", coord}, []string{"nodes " + w1 + " (connection refused) and " + w3 + " (connection refused)"})
	assert.Empty(t, planMoves(t, "--allow-unmeasured", "--coordinator", coord), "w2 alone: nothing to move")
	assertNothingChanged(t, coord)

	// A snapshot file is planned as written.
	_, msg, code = run(t, "plan", "--snapshot", filepath.Join(t.TempDir(), "none.json"), "--allow-unmeasured")
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "--allow-unmeasured applies to a live cluster")
}

// TestPlanningRefusesUnmeasuredNodeCitus: on Citus, citus_shard_sizes()
// skips a stopped worker with only a WARNING, so its shard groups read
// as empty and measured; now they are unknown (measured on the node, which
// fails), and plan refuses naming the worker; with --allow-unmeasured no
// move involves it.
func TestPlanningRefusesUnmeasuredNodeCitus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, _ := sandboxtest.NewCitus(t, 2)
	coord := c.Coordinator().DSN()
	_, msg, code := run(t, "sandbox", "load", "--coordinator", coord, "--users", "300", "--events", "3000", "--shards", "8")
	require.Equal(t, 0, code, msg)
	_, err := c.AddNode(ctx)
	require.NoError(t, err)
	w := c.Workers()
	require.Len(t, w, 3)
	require.NoError(t, c.StopNode(ctx, w[1], "fast"))
	stopped := w[1].Addr()

	out, msg, code := run(t, "status", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	var st metadata.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	var id int32
	for _, n := range st.Nodes {
		if n.Addr == stopped {
			id = n.ID
		}
	}
	require.NotZero(t, id)
	on := 0
	for _, g := range st.ShardGroups {
		if g.NodeID == id {
			on++
			assert.False(t, g.SizeKnown, "group %s is on the stopped worker: its size is unknown", g.ID)
		} else {
			assert.True(t, g.SizeKnown, "group %s", g.ID)
		}
	}
	require.Positive(t, on)
	assert.Contains(t, strings.Join(st.Warnings, "\n"), "sizes on "+stopped+" unknown")

	for _, args := range [][]string{{"plan"}, {"plan", "--strategy", "by_shard_count"}, {"rebalance", "--dry-run"}} {
		assertRefusedUnmeasured(t, append(args, "--coordinator", coord), []string{stopped}, "connection refused")
	}
	moves := planMoves(t, "--allow-unmeasured", "--coordinator", coord)
	require.NotEmpty(t, moves, "the new worker is empty: the measured worker fills it")
	for _, m := range moves {
		assert.Equal(t, [2]string{w[0].Addr(), w[2].Addr()}, m, "only the measured workers move groups: %v", moves)
	}
}
