package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// TestCitusMoveAndRebalanceCLI runs the binary's commands on a Citus
// sandbox: bad input is one sentence, exit code 2 and no job (a reference
// table's shard, a node Citus does not know, a rebalance while Citus runs
// its own); a move and a rebalance onto a worker added with
// citus_add_node succeed; verify finds everything in order; and Citus's
// own planner then has nothing left to move.
func TestCitusMoveAndRebalanceCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, _ := sandboxtest.NewCitus(t, 2)
	coord := c.Coordinator().DSN()
	_, msg, code := run(t, "sandbox", "load", "--coordinator", coord, "--users", "300", "--events", "3000", "--shards", "8")
	require.Equal(t, 0, code, msg)
	conn, err := pgx.Connect(ctx, coord)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, stmt := range []string{
		`CREATE TABLE countries (code text PRIMARY KEY, name text)`,
		`SELECT create_reference_table('countries')`,
	} {
		_, err := conn.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	_, msg, code = run(t, "sandbox", "add-node", "--dir", c.Dir)
	require.Equal(t, 0, code, msg)
	reopened, err := sandbox.Open(c.Dir, nil)
	require.NoError(t, err)
	w := reopened.Nodes[len(reopened.Nodes)-1]
	t.Cleanup(func() { _ = reopened.StopNode(context.Background(), w, "immediate") })
	to := w.Addr()

	jobs := func() int {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM shardmover.jobs").Scan(&n)
		if err != nil {
			return 0 // the journal is not even installed
		}
		return n
	}
	var ref, events int64
	require.NoError(t, conn.QueryRow(ctx, "SELECT min(shardid) FROM pg_dist_shard WHERE logicalrelid = 'countries'::regclass").Scan(&ref))
	require.NoError(t, conn.QueryRow(ctx, "SELECT min(shardid) FROM pg_dist_shard WHERE logicalrelid = 'github_events'::regclass").Scan(&events))
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"move", "--shard", strconv.FormatInt(ref, 10), "--to", to}, "reference table countries"},
		{[]string{"move", "--shard", strconv.FormatInt(events, 10), "--to", "127.0.0.1:1"}, "no node 127.0.0.1:1 is registered"},
	} {
		_, msg, code := run(t, append(tc.args, "--coordinator", coord)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, msg)
		assert.Contains(t, msg, tc.says)
		assert.NotContains(t, msg, "\n")
		assert.Zero(t, jobs(), "a refused move records nothing")
	}

	// Citus rebalancing on its own: shardmover's rebalance is refused.
	_, err = conn.Exec(ctx, "SELECT citus_rebalance_start(shard_transfer_mode := 'block_writes')")
	require.NoError(t, err)
	_, msg, code = run(t, "rebalance", "--yes", "--coordinator", coord)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "Citus background job")
	_, err = conn.Exec(ctx, "SELECT citus_rebalance_wait()")
	require.NoError(t, err)
	assert.Zero(t, jobs())

	// A move back onto the new worker (Citus's rebalance may have put the
	// group there already: then onto the first worker), and a rebalance.
	var onNew bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT nodeport = $2 FROM citus_shards WHERE shardid = $1`, events, w.Port).Scan(&onNew))
	dest := to
	if onNew {
		dest = c.Workers()[0].Addr()
	}
	_, msg, code = run(t, "move", "--shard", strconv.FormatInt(events, 10), "--to", dest, "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	_, msg, code = run(t, "rebalance", "--yes", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	out, msg, code := run(t, "verify", "--all", "--coordinator", coord)
	assert.Equal(t, 0, code, "%s%s", out, msg)
	var left int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM get_rebalance_table_shards_plan()").Scan(&left))
	assert.Zero(t, left, "Citus's planner has nothing left to move after shardmover's rebalance")
}
