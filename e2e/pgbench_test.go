package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/pgbench"
	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// pgbenchScale is pgbench's scale factor: 200,000 accounts in 16 shard
// groups of about 2 MB; enough for moves that copy and catch up under load
// on a 2-core machine.
const (
	pgbenchScale  = 2
	pgbenchShards = 16
)

// pgbenchSlowest is the longest a transaction may take: the cutover's
// write pause is meant to be short, and a client that waited longer than
// this saw the move, which an online move must not let it.
const pgbenchSlowest = time.Second

// TestPgbenchCitus is the acceptance test of online moves with a client
// shardmover did not write: pgbench, which never retries, runs
// unthrottled through the coordinator and through every worker (Citus
// routes from each) while the binary rebalances onto a new worker, or
// drains a worker that pgbench keeps entering through. A transaction that
// fails aborts its pgbench client, so any error a move surfaces to an
// application fails the test. Afterwards every committed transaction must
// be there exactly once (history rows = transactions pgbench counted =
// transactions it logged; every balance = the sum of its deltas), no
// transaction may have waited a second, and every cutover must have
// committed while pgbench was running.
func TestPgbenchCitus(t *testing.T) {
	sandboxtest.RequireCitus(t)
	bin := buildBinary(t)
	for _, job := range []string{"rebalance", "drain"} {
		// Simple and prepared statements reach Citus's router through
		// different paths (a prepared statement's plan is cached in the
		// session and must follow a placement that flipped under it).
		for _, mode := range []string{"simple", "prepared"} {
			t.Run(job+"/"+mode, func(t *testing.T) { runPgbench(t, bin, job, mode) })
		}
	}
}

// runPgbench is one case of TestPgbenchCitus: a fresh Citus cluster,
// pgbench in the given query mode through every node, and the shardmover
// command job (rebalance onto a new worker, or drain the first worker).
func runPgbench(t *testing.T, bin, job, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	sb, _ := sandboxtest.NewCitus(t, 2)
	pgbenchBin := filepath.Join(sb.BinDir, "pgbench")
	_, err := os.Stat(pgbenchBin)
	require.NoError(t, err, "pgbench ships with the PostgreSQL server packages and must be next to the sandbox's postgres in %s", sb.BinDir)
	coord := sb.Coordinator()

	// pgbench's own tables, distributed (internal/pgbench): accounts and
	// history colocated by aid, branches and tellers as reference tables.
	require.NoError(t, pgbench.InitCitus(ctx, pgbenchBin, coord.DSN(), pgbenchScale, pgbenchShards))
	conn, err := pgx.Connect(ctx, coord.DSN())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	// A third worker (citus_add_node, metadata synced) for the rebalance
	// to fill and the drain to empty into; pgbench enters through it too.
	added, err := sb.AddNode(ctx)
	require.NoError(t, err)
	args := []string{"rebalance", "--yes"}
	drained := sb.Workers()[0]
	if job == "drain" {
		args = []string{"drain", "--node", drained.Addr()}
	}
	// At info the binary logs each cutover's write pause; the journal
	// does not keep it.
	args = append(args, "--coordinator", coord.DSN(), "--log-level", "info")

	dir := t.TempDir()
	script, err := pgbench.WriteScript(dir)
	require.NoError(t, err)
	var procs []*pgbench.Proc
	for _, n := range sb.Nodes {
		p, err := pgbench.Start(ctx, pgbench.Options{Bin: pgbenchBin, DSN: n.DSN(), Name: n.Name, Mode: mode,
			Clients: 2, Scale: pgbenchScale, Script: script, LogDir: dir})
		require.NoError(t, err)
		t.Cleanup(p.Kill)
		procs = append(procs, p)
	}
	time.Sleep(2 * time.Second)

	cmdStart := time.Now()
	smCmd := exec.CommandContext(ctx, bin, args...)
	smCmd.Env = append(os.Environ(), "SHARDMOVER_COORDINATOR=")
	smOut, smErr := smCmd.CombinedOutput()
	cmdEnd := time.Now()
	report, pauses := readShardmoverOutput(string(smOut))
	t.Logf("shardmover %s took %s:\n%s", args[0], cmdEnd.Sub(cmdStart).Round(time.Millisecond), report)
	// Two more seconds of load on the new layout before pgbench ends: a
	// client the last cutover broke fails on its next transactions.
	time.Sleep(2 * time.Second)
	for _, p := range procs {
		assert.NoError(t, p.Stop(time.Minute))
	}
	assert.NoError(t, smErr, "shardmover %s failed: %s", args[0], report)

	// pgbench's verdict, one entry node at a time.
	var processed int64
	var txns []pgbench.Txn
	perNode := map[string][]pgbench.Txn{}
	var loadEnd time.Time // when the first pgbench process to end had its last transaction
	var endedFirst string
	for i, p := range procs {
		res := p.Wait()
		node := sb.Nodes[i] // procs were started in the order of sb.Nodes
		assert.NoError(t, res.Err, "pgbench through %s (%s) did not end as -T ends it (exit status 2: a client aborted):\n%s", node.Name, node.Addr(), res.Output)
		sum := pgbench.ParseSummary(res.Output)
		assert.Empty(t, sum.Problems, "pgbench through %s (%s) reported errors or aborted clients (pgbench never retries: each is a transaction an application saw fail):\n%s",
			node.Name, node.Addr(), strings.Join(firstN(sum.Problems, 10), "\n"))
		assert.Zero(t, sum.Failed, "pgbench through %s (%s) counted failed transactions:\n%s", node.Name, node.Addr(), res.Output)
		require.GreaterOrEqual(t, sum.Processed, int64(0), "pgbench through %s (%s) printed no summary:\n%s", node.Name, node.Addr(), res.Output)
		processed += sum.Processed
		logged, err := p.Transactions()
		require.NoError(t, err)
		require.NotEmpty(t, logged, "pgbench through %s (%s) logged no transaction:\n%s", node.Name, node.Addr(), res.Output)
		assert.Equal(t, sum.Processed, int64(len(logged)), "pgbench through %s (%s) logged %d transactions and counted %d", node.Name, node.Addr(), len(logged), sum.Processed)
		if _, last := pgbench.Span(logged); loadEnd.IsZero() || last.Before(loadEnd) {
			loadEnd, endedFirst = last, node.Name
		}
		perNode[node.Name] = logged
		txns = append(txns, logged...)
	}
	first, _ := pgbench.Span(txns)
	windows := func(txns []pgbench.Txn) string {
		return fmt.Sprintf("tps %.0f before the command, %.0f while it ran, %.0f after",
			pgbench.TPS(txns, first, cmdStart), pgbench.TPS(txns, cmdStart, cmdEnd), pgbench.TPS(txns, cmdEnd, loadEnd))
	}
	for _, n := range sb.Nodes {
		st := pgbench.Stats(perNode[n.Name])
		t.Logf("pgbench through %s (%s): %d transactions, %s; p99 %s, slowest %s",
			n.Name, n.Addr(), len(perNode[n.Name]), windows(perNode[n.Name]), st.P99, st.Slowest.Latency)
	}

	// Latency, from the per-transaction logs.
	st := pgbench.Stats(txns)
	t.Logf("all entry nodes: %d transactions, %s; p99 %s, slowest %s (through %s, ended %s after the command started)",
		len(txns), windows(txns), st.P99, st.Slowest.Latency, st.Slowest.Node, st.Slowest.End.Sub(cmdStart).Round(time.Millisecond))
	assert.Zero(t, st.Failed, "pgbench logged %d failed transactions", st.Failed)
	assert.Less(t, st.Slowest.Latency, pgbenchSlowest, "the slowest transaction (through %s, ended %s after the command started) took %s",
		st.Slowest.Node, st.Slowest.End.Sub(cmdStart).Round(time.Millisecond), st.Slowest.Latency)

	// Every transaction pgbench counted is there once, and nothing else:
	// more rows than transactions is a transaction pgbench saw fail that
	// committed (or one applied twice), fewer is a committed one lost.
	bal, err := pgbench.CheckBalances(ctx, conn)
	require.NoError(t, err)
	assert.Equal(t, processed, bal.History, "pgbench_history holds %d rows; pgbench counted %d transactions processed", bal.History, processed)
	assert.Equal(t, int64(len(txns)), bal.History, "pgbench_history holds %d rows; pgbench logged %d transactions", bal.History, len(txns))
	assert.Zero(t, bal.Wrong, "accounts whose balance is not the sum of their history's deltas (an UPDATE and its INSERT must commit together, once): %s", bal.Examples)

	// The journal: every move done, each decided while pgbench still ran.
	rows, err := conn.Query(ctx, `SELECT m.id, m.phase, m.error,
			(SELECT min(l.at) FROM shardmover.move_log l WHERE l.move_id = m.id AND l.to_phase = 'cleanup' AND l.message LIKE '%placements flipped%')
		FROM shardmover.moves m ORDER BY m.id`)
	require.NoError(t, err)
	type decided struct {
		id             int64
		phase, errText string
		at             *time.Time
	}
	var moves []decided
	for rows.Next() {
		var d decided
		require.NoError(t, rows.Scan(&d.id, &d.phase, &d.errText, &d.at))
		moves = append(moves, d)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, moves, "shardmover %s moved nothing", args[0])
	for _, m := range moves {
		assert.Equal(t, "done", m.phase, "move %d: %s", m.id, m.errText)
		if !assert.NotNil(t, m.at, "move %d has no decision in shardmover.move_log", m.id) {
			continue
		}
		// The row's time is the decision transaction's start (now()); it
		// commits within the write pause, long before pgbench ends (two
		// seconds after the command), unless pgbench ended early.
		assert.True(t, m.at.Before(loadEnd), "move %d was decided at %s, after pgbench through %s had ended (its last transaction at %s): its cutover did not happen under load",
			m.id, m.at.Format(time.RFC3339Nano), endedFirst, loadEnd.Format(time.RFC3339Nano))
	}
	var rolledBack int
	var why string
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(DISTINCT message, '; '), '')
		FROM shardmover.move_log WHERE from_phase = 'cutover' AND to_phase = 'catching_up'`).Scan(&rolledBack, &why))
	var maxPause time.Duration
	for _, d := range pauses {
		maxPause = max(maxPause, d)
	}
	t.Logf("moves: %d, cutovers committed: %d, longest write pause %s, cutover attempts rolled back: %d %s", len(moves), len(pauses), maxPause, rolledBack, why)

	// The layout afterwards, as Citus routes it.
	placedOn := func(n sandbox.Node) int {
		var c int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_dist_placement p
			JOIN pg_dist_shard s USING (shardid) JOIN pg_dist_partition d USING (logicalrelid)
			JOIN pg_dist_node n USING (groupid)
			WHERE d.partmethod = 'h' AND n.nodename = $1 AND n.nodeport = $2`, n.Host, n.Port).Scan(&c))
		return c
	}
	if job == "drain" {
		assert.Zero(t, placedOn(drained), "the drained worker %s still holds shards", drained.Addr())
	} else {
		assert.Positive(t, placedOn(added), "the new worker %s holds no shards after the rebalance", added.Addr())
	}
}

var (
	infoLineRE = regexp.MustCompile(`^\S+\t(debug|info)\t`)
	pauseRE    = regexp.MustCompile(`^\S+\tinfo\tcutover committed\t.*"write_pause": ([0-9.e+-]+)`)
)

// readShardmoverOutput splits the binary's output at --log-level info into
// what to show (all but its debug and info log lines) and the write pause
// of every cutover it committed.
func readShardmoverOutput(out string) (string, []time.Duration) {
	var keep []string
	var pauses []time.Duration
	for _, line := range strings.Split(out, "\n") {
		if m := pauseRE.FindStringSubmatch(line); m != nil {
			if sec, err := strconv.ParseFloat(m[1], 64); err == nil {
				pauses = append(pauses, time.Duration(sec*float64(time.Second)))
			}
		}
		if !infoLineRE.MatchString(line) {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n"), pauses
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... and %d more", len(s)-n))
	}
	return s
}
