package mover_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardmover/shardmover/internal/reliability"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
)

// Records for RELIABILITY.md (internal/reliability): each fault case calls
// faultCase once; verifyAllowing notes its ledger verdict with
// noteVerdict. A case's record is written when the case ends, with the
// verdict of its own workload, or, for cases that share the workload of
// their test (TestCutoverNetworkFaults), when the test checks it. Without
// SHARDMOVER_RELIABILITY_OUT all of this does nothing.

// ledgerNote is what a ledger check produced, for the records.
type ledgerNote struct {
	v                    workload.Verdict
	maxPause             time.Duration
	orphans              int
	orphansOK            bool
	server, citusVersion string
}

var rel struct {
	mu       sync.Mutex
	verdicts map[string]ledgerNote // by test name
	pending  []reliability.Record  // cases waiting for their test's verdict
}

// TestMain writes, after every test, the records of cases whose shared
// verdict never came (their test stopped before checking the ledger).
func TestMain(m *testing.M) {
	code := m.Run()
	rel.mu.Lock()
	for _, r := range rel.pending {
		if err := reliability.Append(r); err != nil {
			os.Stderr.WriteString("reliability: " + err.Error() + "\n")
			code = 1
		}
	}
	rel.pending = nil
	rel.mu.Unlock()
	os.Exit(code)
}

// faultCase records the case t as one injected fault of family: what was
// injected (fault; the subtest's name when empty), where (a phase, a
// cutover step, a connection), and what passing means (outcome). Call it
// once at the start of the case.
func faultCase(t *testing.T, family, fault, where, outcome string) {
	t.Helper()
	if !reliability.Enabled() {
		return
	}
	if fault == "" {
		fault = t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]
		fault = strings.ReplaceAll(fault, "_", " ")
	}
	t.Cleanup(func() {
		rec := reliability.Record{Family: family, Case: t.Name(), Fault: fault, Where: where, Passed: !t.Failed(), Outcome: outcome}
		rel.mu.Lock()
		defer rel.mu.Unlock()
		if n, ok := rel.verdicts[t.Name()]; ok {
			n.fill(&rec, reliability.ScopeCase)
			appendRecord(t, rec)
			return
		}
		rel.pending = append(rel.pending, rec)
	})
}

// killCase records a case of TestKilledAtEveryPhase: the mover killed at
// point ("copying": after that phase; "cutover:locked": at that step).
func killCase(t *testing.T, point string) {
	t.Helper()
	where := "after phase " + point
	if step, ok := strings.CutPrefix(point, "cutover:"); ok {
		where = "cutover step " + step
	}
	faultCase(t, reliability.FamilyProcessKill, "mover killed", where, "a new mover recovered the move and finished it")
}

// nodeCase records a case of TestNodeFaultWorkers or
// TestNodeFaultCoordinator, the fault named by the subtest.
func nodeCase(t *testing.T, where, outcome string) {
	t.Helper()
	faultCase(t, reliability.FamilyNode, "", where, outcome)
}

// citusKillCase records a case of TestCitusMoveUnderWorkload: kill is the
// cutover step the mover is killed at, "" for the plain move.
func citusKillCase(t *testing.T, kill string) {
	t.Helper()
	if kill == "" {
		faultCase(t, reliability.FamilyProcessKillCitus, "none (the plain move, for comparison)", "-", "the move finished; Citus routed every write")
		return
	}
	faultCase(t, reliability.FamilyProcessKillCitus, "mover killed", "cutover step "+kill, "a new mover recovered the move and finished it; Citus routed every write")
}

// netCase records a case of TestCutoverNetworkFaults, injected on the
// mover's connection to on ("coordinator" or "source").
func netCase(t *testing.T, name, on string) {
	t.Helper()
	faultCase(t, reliability.FamilyNetwork, name, "mover's connection to the "+on,
		"the move finished: group flipped to the target, old shards fenced, nothing prepared")
}

// noteVerdict keeps the ledger verdict of t's workload, with the longest
// acknowledged write, the shardmover_* leftovers on every node and the
// server's version, and writes the pending records of t's cases.
func noteVerdict(t *testing.T, c *cluster, v workload.Verdict, res workload.RunResult) {
	t.Helper()
	if !reliability.Enabled() {
		return
	}
	n := ledgerNote{v: v}
	for _, l := range res.Latencies {
		n.maxPause = max(n.maxPause, l.Dur)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.cat.Pool().QueryRow(ctx, "SELECT current_setting('server_version'), coalesce((SELECT extversion FROM pg_extension WHERE extname = 'citus'), '')").
		Scan(&n.server, &n.citusVersion)
	if cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true}); err == nil {
		n.orphansOK = true
		for _, node := range cl.Nodes {
			conn, err := c.cat.ConnectNode(ctx, node.Host, node.Port)
			if err != nil {
				n.orphansOK = false
				break
			}
			var left int
			err = conn.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%') +
				(SELECT count(*) FROM pg_publication WHERE pubname LIKE 'shardmover%') +
				(SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%') +
				(SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'shardmover%')`).Scan(&left)
			conn.Close(ctx)
			if err != nil {
				n.orphansOK = false
				break
			}
			n.orphans += left
		}
	}
	rel.mu.Lock()
	defer rel.mu.Unlock()
	if rel.verdicts == nil {
		rel.verdicts = map[string]ledgerNote{}
	}
	rel.verdicts[t.Name()] = n
	prefix := t.Name() + "/"
	rel.pending = slices.DeleteFunc(rel.pending, func(r reliability.Record) bool {
		if !strings.HasPrefix(r.Case, prefix) {
			return false
		}
		n.fill(&r, t.Name())
		appendRecord(t, r)
		return true
	})
}

func (n ledgerNote) fill(r *reliability.Record, scope string) {
	r.LedgerChecked, r.LedgerScope = true, scope
	r.Acknowledged, r.InDoubt = n.v.Acknowledged, n.v.InDoubt
	r.Lost, r.Duplicated = n.v.Lost, n.v.Duplicated
	r.Resurrected, r.WrongValue, r.Misplaced = n.v.Resurrected, n.v.WrongValue, n.v.Misplaced
	r.MaxWritePauseMS = float64(n.maxPause) / float64(time.Millisecond)
	r.OrphansChecked, r.Orphans = n.orphansOK, n.orphans
	r.ServerVersion, r.CitusVersion = n.server, n.citusVersion
}

func appendRecord(t *testing.T, r reliability.Record) {
	if err := reliability.Append(r); err != nil {
		t.Errorf("record the case for RELIABILITY.md: %v", err)
	}
}
