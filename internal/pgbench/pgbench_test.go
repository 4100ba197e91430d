package pgbench_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/pgbench"
)

// The runs in testdata are real pgbench 15 output (testdata/README.md
// says how each was made).
var runs = []struct {
	dir, prefix       string
	processed, failed int64
	aborted           int
	problems          []string
	files             int
	firstEnd          time.Time
	firstLatency      time.Duration
	slowest           time.Duration
}{
	{dir: "prepared", prefix: "coordinator", processed: 568, failed: 0, files: 1,
		firstEnd: time.Unix(1796411949, 831628000), firstLatency: 1688 * time.Microsecond, slowest: 3934 * time.Microsecond},
	{dir: "simple", prefix: "worker2", processed: 1032, failed: 0, files: 2},
	{dir: "serialization", prefix: "coordinator", processed: 40, failed: 108, files: 2},
	{dir: "failures-detailed", prefix: "coordinator", processed: 37, failed: 102, files: 2},
	{dir: "aborted", prefix: "worker1", processed: 13, failed: 0, aborted: 2, files: 1, problems: []string{
		"pgbench: error: client 1 script 0 aborted in command 3 query 0: ERROR:  division by zero",
		"pgbench: error: client 0 script 0 aborted in command 3 query 0: ERROR:  division by zero",
		"pgbench: error: Run was aborted; the above results are incomplete.",
	}},
}

func TestParseSummary(t *testing.T) {
	for _, r := range runs {
		t.Run(r.dir, func(t *testing.T) {
			out, err := os.ReadFile(filepath.Join("testdata", r.dir, "summary.txt"))
			require.NoError(t, err)
			s := pgbench.ParseSummary(string(out))
			assert.Equal(t, r.processed, s.Processed)
			assert.Equal(t, r.failed, s.Failed)
			assert.Equal(t, r.aborted, s.Aborted)
			assert.Equal(t, r.problems, s.Problems)
		})
	}
	// No summary (pgbench killed, or never connected).
	s := pgbench.ParseSummary("pgbench (15.20 (Debian 15.20-0+deb12u1))\n")
	assert.Equal(t, pgbench.Summary{Processed: -1, Failed: -1}, s)
}

// Every transaction pgbench finished is logged: the lines are its
// processed plus its failed transactions, across its threads' files.
func TestReadLogs(t *testing.T) {
	for _, r := range runs {
		t.Run(r.dir, func(t *testing.T) {
			prefix := filepath.Join("testdata", r.dir, r.prefix)
			files, err := filepath.Glob(prefix + ".*")
			require.NoError(t, err)
			require.Len(t, files, r.files)
			txns, err := pgbench.ReadLogs(prefix)
			require.NoError(t, err)
			require.Len(t, txns, int(r.processed+r.failed))
			st := pgbench.Stats(txns)
			assert.Equal(t, int(r.processed), st.N)
			assert.Equal(t, int(r.failed), st.Failed)
			for _, x := range txns {
				assert.Equal(t, r.prefix, x.Node)
				assert.Equal(t, x.Failed, x.Latency == 0, "a failed transaction has no latency, every other one has")
				assert.Equal(t, 2026, x.End.UTC().Year())
			}
			if !r.firstEnd.IsZero() {
				assert.Equal(t, pgbench.Txn{Node: r.prefix, Client: 0, End: r.firstEnd, Latency: r.firstLatency}, txns[0])
				assert.Equal(t, r.slowest, st.Slowest.Latency)
			}
			assert.LessOrEqual(t, st.P99, st.Slowest.Latency)
		})
	}
}

// The logs of the --failures-detailed run name the failure: each is
// still a failed transaction.
func TestParseLogFailureWords(t *testing.T) {
	b, err := os.ReadFile("testdata/failures-detailed/coordinator.2045")
	require.NoError(t, err)
	require.Contains(t, string(b), " serialization ")
	txns, err := pgbench.ParseLog(strings.NewReader(string(b)), "n")
	require.NoError(t, err)
	failed := 0
	for _, x := range txns {
		if x.Failed {
			failed++
		}
	}
	assert.Equal(t, strings.Count(string(b), " serialization "), failed)
}

func TestParseLogRefuses(t *testing.T) {
	for name, line := range map[string]string{
		"cut mid-way":        "0 12 31",
		"unknown time":       "0 1 skipped 0 1796411949 831628",
		"extra column":       "0 1 1688 0 1796411949 831628 12",
		"not a number epoch": "0 1 1688 0 x 831628",
	} {
		t.Run(name, func(t *testing.T) {
			good := "0 1 1688 0 1796411949 831628\n"
			txns, err := pgbench.ParseLog(strings.NewReader(good+line+"\n"), "n")
			require.Error(t, err)
			assert.Contains(t, err.Error(), "line 2")
			assert.Len(t, txns, 1)
		})
	}
}

// Only prefix.<pid> and prefix.<pid>.<thread> are logs: another file
// sharing the prefix is not read.
func TestReadLogsOnlyLogFiles(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/prepared/coordinator.2020")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "coordinator.2020"), b, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "coordinator.sql"), []byte(pgbench.Script), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "coordinator2.77"), []byte("garbage\n"), 0o644))
	txns, err := pgbench.ReadLogs(filepath.Join(dir, "coordinator"))
	require.NoError(t, err)
	assert.Len(t, txns, 568)

	_, err = pgbench.ReadLogs(filepath.Join(dir, "worker1"))
	assert.ErrorContains(t, err, "pgbench wrote no log under")
}

func TestStats(t *testing.T) {
	at := time.Unix(1796411949, 0)
	ms := time.Millisecond
	var txns []pgbench.Txn
	for i := 1; i <= 200; i++ {
		txns = append(txns, pgbench.Txn{Node: "w", End: at.Add(time.Duration(i) * 10 * ms), Latency: time.Duration(i) * ms})
	}
	txns = append(txns, pgbench.Txn{Node: "w", End: at.Add(500 * ms), Failed: true})
	st := pgbench.Stats(txns)
	assert.Equal(t, 200, st.N)
	assert.Equal(t, 1, st.Failed)
	assert.Equal(t, 198*ms, st.P99, "nearest rank: the 198th of 200")
	assert.Equal(t, 200*ms, st.Slowest.Latency)
	assert.Equal(t, at.Add(2000*ms), st.Slowest.End)

	// [0.1 s, 1.1 s): transactions 10..109, and the failed one not counted.
	assert.InDelta(t, 100.0, pgbench.TPS(txns, at.Add(100*ms), at.Add(1100*ms)), 1e-9)
	assert.Len(t, pgbench.Ended(txns, at.Add(100*ms), at.Add(1100*ms)), 101)
	assert.Zero(t, pgbench.TPS(txns, at, at))
	first, last := pgbench.Span(txns)
	assert.Equal(t, at.Add(10*ms), first)
	assert.Equal(t, at.Add(2000*ms), last)

	assert.Equal(t, pgbench.Latency{}, pgbench.Stats(nil))
	first, last = pgbench.Span(nil)
	assert.True(t, first.IsZero() && last.IsZero())
}

// With two scripts the summary names each script file on a line of its
// own ("SQL script 2: abort.sql"), as "transaction type:" names the one
// script otherwise: those lines are not problems, whatever the file is
// called. -t prints processed as done/planned.
func TestParseSummaryScriptNames(t *testing.T) {
	out, err := os.ReadFile("testdata/two-scripts/summary.txt")
	require.NoError(t, err)
	require.Contains(t, string(out), "\nSQL script 2: abort.sql\n")
	s := pgbench.ParseSummary(string(out))
	assert.Equal(t, pgbench.Summary{Processed: 5, Failed: 0, Aborted: 1, Problems: []string{
		"pgbench: error: client 0 script 1 aborted in command 3 query 0: ERROR:  division by zero",
		"pgbench: error: Run was aborted; the above results are incomplete.",
	}}, s)
}
