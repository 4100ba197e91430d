package reliability

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAppendDoesNothingWhenUnset(t *testing.T) {
	t.Setenv(EnvOut, "")
	if Enabled() {
		t.Fatal("Enabled with the variable empty")
	}
	if err := Append(Record{Family: FamilyNode, Case: "x"}); err != nil {
		t.Fatal(err)
	}
}

func TestAppendReadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	t.Setenv(EnvOut, path)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Append(Record{Family: FamilyProcessKill, Case: "TestX/" + string(rune('a'+i)), Passed: true, Acknowledged: int64(i)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 20 {
		t.Fatalf("read %d records, want 20", len(recs))
	}
	var sum int64
	for _, r := range recs {
		sum += r.Acknowledged
		if r.GoVersion == "" || r.At.IsZero() {
			t.Errorf("Append must set the Go version and the time: %+v", r)
		}
	}
	if sum != 190 {
		t.Errorf("acknowledged writes sum to %d, want 190", sum)
	}
}

func TestRender(t *testing.T) {
	two := 2
	recs := []Record{
		{Family: FamilyNetwork, Case: "TestNet/drop", Fault: "commit dropped", Where: "coordinator", Passed: true, Outcome: "finished",
			LedgerChecked: true, LedgerScope: "TestNet", Acknowledged: 1000, InDoubt: 3, OrphansChecked: true, MaxWritePauseMS: 1500, ServerVersion: "15.8"},
		{Family: FamilyNetwork, Case: "TestNet/delay", Fault: "commit delayed | 4s", Where: "coordinator", Passed: true, Outcome: "finished",
			LedgerChecked: true, LedgerScope: "TestNet", Acknowledged: 1000, InDoubt: 3, OrphansChecked: true, MaxWritePauseMS: 1500, ServerVersion: "15.8"},
		{Family: FamilyProcessKill, Case: "TestKill/copying", Fault: "mover killed", Where: "after phase copying", Passed: true, Outcome: "recovered",
			LedgerChecked: true, LedgerScope: ScopeCase, Acknowledged: 2500, Lost: 0, OrphansChecked: true, Orphans: 1, MaxWritePauseMS: 12, ServerVersion: "15.8"},
		{Family: FamilyProcessKill, Case: "TestKill/setup", Fault: "mover killed", Where: "after phase setup", Passed: false, Outcome: "recovered"},
		{Family: FamilyBadInput, Case: "TestHostile/zero", Fault: "zero", Where: "move", Passed: true, Outcome: "refused",
			Input: []string{"move", "--shard", "0"}, ExitCode: &two, Message: "shardmover: --shard must be positive"},
	}
	var buf bytes.Buffer
	if err := Render(&buf, recs, Meta{Command: "make reliability", Took: 90 * time.Second, Generated: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	doc := buf.String()
	for _, want := range []string{
		"- Produced by: `make reliability` (took 1m30s)",
		"- Date: 2026-01-02 03:04 UTC",
		"- PostgreSQL: 15.8",
		"- Cases: 5, 4 passed, 1 FAILED",
		// The shared workload counts once in the family's summary.
		"| network fault | 2 | 2 | 1,000 | 0 | 0 | 0 | 3 | 0 | 1.50 s |",
		"| process kill | 2 | 1 | 2,500 | 0 | 0 | 0 | 0 | 1 | 12 ms |",
		"| commit delayed \\| 4s | coordinator | finished | one workload, below |",
		"| *the 2 cases above of TestNet, under one workload* | | ledger intact | 1,000 |",
		"| mover killed | after phase setup | **FAILED**",
		"exit code 2: 1.",
		"| zero | `move --shard 0` | 2 | shardmover: --shard must be positive | refused |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the document lacks %q:\n%s", want, doc)
		}
	}
	if strings.Index(doc, "## Process kill") > strings.Index(doc, "## Network fault") {
		t.Error("families must come in their fixed order")
	}
}
