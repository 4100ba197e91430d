package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// pgbenchScale is pgbench's scale factor: 200,000 accounts in 16 shard
// groups of about 2 MB; enough for moves that copy and catch up under load
// on a 2-core machine.
const pgbenchScale = 2

// pgbenchScript is pgbench's TPC-B-like transaction reduced to the two
// distributed tables: the account's UPDATE and the history's INSERT go to
// the same shard group (both distributed by aid), so every transaction
// touches exactly one group, the one a move may be cutting over.
const pgbenchScript = `\set aid random(1, 100000 * :scale)
\set bid random(1, 1 * :scale)
\set tid random(1, 10 * :scale)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
`

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
	pgbench := filepath.Join(sb.BinDir, "pgbench")
	_, err := os.Stat(pgbench)
	require.NoError(t, err, "pgbench ships with the PostgreSQL server packages and must be next to the sandbox's postgres in %s", sb.BinDir)
	coord := sb.Coordinator()

	// pgbench's own tables, distributed: accounts and history colocated by
	// aid (history gets a primary key: a move refuses a table without a
	// replica identity), branches and tellers as reference tables.
	out, err := exec.CommandContext(ctx, pgbench, "-i", "-s", strconv.Itoa(pgbenchScale), coord.DSN()).CombinedOutput()
	require.NoError(t, err, "pgbench -i: %s", out)
	conn, err := pgx.Connect(ctx, coord.DSN())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, stmt := range []string{
		`ALTER TABLE pgbench_history ADD COLUMN hid bigserial`,
		`ALTER TABLE pgbench_history ADD PRIMARY KEY (aid, hid)`,
		`SET citus.shard_count = 16`,
		`SELECT create_reference_table('pgbench_branches')`,
		`SELECT create_reference_table('pgbench_tellers')`,
		`SELECT create_distributed_table('pgbench_accounts', 'aid')`,
		`SELECT create_distributed_table('pgbench_history', 'aid', colocate_with => 'pgbench_accounts')`,
		`SELECT truncate_local_data_after_distributing_table(t) FROM unnest(ARRAY['pgbench_branches', 'pgbench_tellers', 'pgbench_accounts', 'pgbench_history']::regclass[]) t`,
	} {
		_, err := conn.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
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
	script := filepath.Join(dir, "tpcb-distributed.sql")
	require.NoError(t, os.WriteFile(script, []byte(pgbenchScript), 0o644))
	var procs []*pgbenchProc
	for _, n := range sb.Nodes {
		procs = append(procs, startPgbench(t, pgbench, n, mode, script, dir))
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
		p.stop(t)
	}
	assert.NoError(t, smErr, "shardmover %s failed: %s", args[0], report)

	// pgbench's verdict, one entry node at a time.
	var processed int64
	var txns []pgbenchTxn
	perNode := map[string][]pgbenchTxn{}
	var loadEnd time.Time // when the first pgbench process to end had its last transaction
	var endedFirst string
	for _, p := range procs {
		summary := p.out.String()
		assert.NoError(t, p.err, "pgbench through %s (%s) did not end as -T ends it (exit status 2: a client aborted):\n%s", p.node.Name, p.node.Addr(), summary)
		n, bad := parsePgbenchOutput(summary)
		assert.Empty(t, bad, "pgbench through %s (%s) reported errors or aborted clients (pgbench never retries: each is a transaction an application saw fail):\n%s",
			p.node.Name, p.node.Addr(), strings.Join(firstN(bad, 10), "\n"))
		assert.Contains(t, summary, "number of failed transactions: 0 ", "pgbench through %s (%s) counted failed transactions:\n%s", p.node.Name, p.node.Addr(), summary)
		require.GreaterOrEqual(t, n, int64(0), "pgbench through %s (%s) printed no summary:\n%s", p.node.Name, p.node.Addr(), summary)
		processed += n
		logged := readPgbenchLogs(t, p.prefix)
		require.NotEmpty(t, logged, "pgbench through %s (%s) logged no transaction:\n%s", p.node.Name, p.node.Addr(), summary)
		assert.Equal(t, n, int64(len(logged)), "pgbench through %s (%s) logged %d transactions and counted %d", p.node.Name, p.node.Addr(), len(logged), n)
		last := logged[0].end
		for _, x := range logged {
			if x.end.After(last) {
				last = x.end
			}
		}
		if loadEnd.IsZero() || last.Before(loadEnd) {
			loadEnd, endedFirst = last, p.node.Name
		}
		perNode[p.node.Name] = logged
		txns = append(txns, logged...)
	}
	first := loadEnd
	for _, x := range txns {
		if x.end.Before(first) {
			first = x.end
		}
	}
	for _, p := range procs {
		st := pgbenchStats(perNode[p.node.Name])
		t.Logf("pgbench through %s (%s): %d transactions, tps %.0f before the command, %.0f while it ran, %.0f after; p99 %s, slowest %s",
			p.node.Name, p.node.Addr(), len(perNode[p.node.Name]),
			pgbenchTPS(perNode[p.node.Name], first, cmdStart), pgbenchTPS(perNode[p.node.Name], cmdStart, cmdEnd), pgbenchTPS(perNode[p.node.Name], cmdEnd, loadEnd),
			st.p99, st.slowest.latency)
	}

	// Latency, from the per-transaction logs.
	st := pgbenchStats(txns)
	t.Logf("all entry nodes: %d transactions, tps %.0f before the command, %.0f while it ran, %.0f after; p99 %s, slowest %s (through %s, ended %s after the command started)",
		len(txns), pgbenchTPS(txns, first, cmdStart), pgbenchTPS(txns, cmdStart, cmdEnd), pgbenchTPS(txns, cmdEnd, loadEnd),
		st.p99, st.slowest.latency, st.slowest.node, st.slowest.end.Sub(cmdStart).Round(time.Millisecond))
	assert.Zero(t, st.failed, "pgbench logged %d failed transactions", st.failed)
	assert.Less(t, st.slowest.latency, pgbenchSlowest, "the slowest transaction (through %s, ended %s after the command started) took %s",
		st.slowest.node, st.slowest.end.Sub(cmdStart).Round(time.Millisecond), st.slowest.latency)

	// Every transaction pgbench counted is there once, and nothing else:
	// more rows than transactions is a transaction pgbench saw fail that
	// committed (or one applied twice), fewer is a committed one lost.
	var history int64
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pgbench_history").Scan(&history))
	assert.Equal(t, processed, history, "pgbench_history holds %d rows; pgbench counted %d transactions processed", history, processed)
	assert.Equal(t, int64(len(txns)), history, "pgbench_history holds %d rows; pgbench logged %d transactions", history, len(txns))
	var wrong int64
	var examples string
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(format('aid %s: balance %s, deltas %s', aid, abalance, s), '; ') FILTER (WHERE rn <= 5), '')
		FROM (SELECT a.aid, a.abalance, coalesce(h.s, 0) s, row_number() OVER (ORDER BY a.aid) rn
			FROM pgbench_accounts a LEFT JOIN (SELECT aid, sum(delta) s FROM pgbench_history GROUP BY aid) h USING (aid)
			WHERE a.abalance <> coalesce(h.s, 0)) w`).Scan(&wrong, &examples))
	assert.Zero(t, wrong, "accounts whose balance is not the sum of their history's deltas (an UPDATE and its INSERT must commit together, once): %s", examples)

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

// pgbenchProc is one pgbench process, entering the cluster through one
// node.
type pgbenchProc struct {
	node   sandbox.Node
	prefix string // of its per-transaction log files
	cmd    *exec.Cmd
	out    *bytes.Buffer
	done   chan struct{}
	err    error // of cmd.Wait, set when done is closed
}

// startPgbench runs pgbench with the script through node: 2 clients, one
// thread, no rate limit, a log line per transaction; -s sets the script's
// :scale. Its -T is only a bound (the test would have failed long
// before); stop ends it.
func startPgbench(t *testing.T, pgbench string, node sandbox.Node, mode, script, dir string) *pgbenchProc {
	t.Helper()
	p := &pgbenchProc{node: node, prefix: filepath.Join(dir, node.Name), out: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(pgbench, "-n", "-c", "2", "-j", "1", "-T", "600", "-M", mode,
		"-s", strconv.Itoa(pgbenchScale), "-f", script, "-l", "--log-prefix="+p.prefix, node.DSN())
	// One buffer for both: exec.Cmd then writes to it from one goroutine.
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start(), "start pgbench through %s", node.Name)
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop ends pgbench as its -T does, with SIGALRM: pgbench 15 implements -T
// with alarm(2), and its handler only sets the flag the clients check
// between transactions, so every client finishes the transaction it is in,
// the log files are flushed and closed, and the summary is printed.
// SIGINT or SIGTERM would kill it (it has no handler for them): no summary,
// log lines cut mid-way and transactions committed but never logged. A
// computed -T would have to guess how long the command takes.
func (p *pgbenchProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGALRM) // fails only when it has already ended
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("pgbench through %s did not end within a minute of SIGALRM", p.node.Name)
	}
}

var pgbenchProcessedRE = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)

// parsePgbenchOutput returns the transactions pgbench counted as processed
// (-1 without a summary) and every line reporting an error or an aborted
// client.
func parsePgbenchOutput(out string) (int64, []string) {
	processed := int64(-1)
	if m := pgbenchProcessedRE.FindStringSubmatch(out); m != nil {
		processed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	var bad []string
	for _, line := range strings.Split(out, "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "abort") || strings.Contains(l, "error") {
			bad = append(bad, line)
		}
	}
	return processed, bad
}

type pgbenchLatency struct {
	p99     time.Duration
	slowest pgbenchTxn
	failed  int
}

// pgbenchStats returns the 99th percentile and the slowest of the
// transactions that did not fail, and how many failed.
func pgbenchStats(txns []pgbenchTxn) pgbenchLatency {
	var out pgbenchLatency
	lat := make([]time.Duration, 0, len(txns))
	for _, x := range txns {
		if x.failed {
			out.failed++
			continue
		}
		lat = append(lat, x.latency)
		if x.latency > out.slowest.latency {
			out.slowest = x
		}
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		out.p99 = lat[(len(lat)*99+99)/100-1]
	}
	return out
}

// pgbenchTPS returns the transactions per second that ended in [from, to).
func pgbenchTPS(txns []pgbenchTxn, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	n := 0
	for _, x := range txns {
		if !x.end.Before(from) && x.end.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// pgbenchTxn is one line of pgbench's per-transaction log.
type pgbenchTxn struct {
	node    string
	end     time.Time
	latency time.Duration
	failed  bool
}

// readPgbenchLogs reads the per-transaction logs pgbench wrote under
// prefix (prefix.<pid>, and .<thread> for threads past the first). A line
// is "client_id transaction_no time script_no time_epoch time_us
// [schedule_lag]": time is the latency in microseconds (or "failed",
// "serialization", "deadlock" when it failed), time_epoch.time_us when it
// ended.
func readPgbenchLogs(t *testing.T, prefix string) []pgbenchTxn {
	t.Helper()
	files, err := filepath.Glob(prefix + ".*")
	require.NoError(t, err)
	require.NotEmpty(t, files, "pgbench wrote no log under %s", prefix)
	var out []pgbenchTxn
	node := filepath.Base(prefix)
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			require.GreaterOrEqual(t, len(fields), 6, "%s: malformed log line %q", f, sc.Text())
			sec, err1 := strconv.ParseInt(fields[4], 10, 64)
			usec, err2 := strconv.ParseInt(fields[5], 10, 64)
			require.NoError(t, errors.Join(err1, err2), "%s: malformed log line %q", f, sc.Text())
			x := pgbenchTxn{node: node, end: time.Unix(sec, usec*1000)}
			if us, err := strconv.ParseInt(fields[2], 10, 64); err == nil {
				x.latency = time.Duration(us) * time.Microsecond
			} else {
				x.failed = true
			}
			out = append(out, x)
		}
		require.NoError(t, sc.Err())
		require.NoError(t, fh.Close())
	}
	return out
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
