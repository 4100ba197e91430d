package reliability

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

// EnvOut names the file records are appended to. Unset: nothing is recorded.
const EnvOut = "SHARDMOVER_RELIABILITY_OUT"

// Families of faults, in the order RELIABILITY.md lists them.
const (
	FamilyProcessKill      = "process kill"
	FamilyProcessKillCitus = "process kill on Citus"
	FamilyNetwork          = "network fault"
	FamilyNode             = "node fault"
	FamilyBadInput         = "bad input"
)

// families orders the tables; a family not listed comes after, by name.
var families = []string{FamilyProcessKill, FamilyProcessKillCitus, FamilyNetwork, FamilyNode, FamilyBadInput}

// ScopeCase is Record.LedgerScope when the ledger checked one case alone.
const ScopeCase = "case"

// Record is one fault injected (or one bad input tried) and what followed.
type Record struct {
	Family string `json:"family"`
	// Case is the test that injected it (testing.T.Name()).
	Case string `json:"case"`
	// Fault says what was injected; Where, where: a phase, a cutover step,
	// a network message, a command.
	Fault string `json:"fault"`
	Where string `json:"where"`
	// Passed is true when every check of the case held; Outcome says what
	// happened.
	Passed  bool   `json:"passed"`
	Outcome string `json:"outcome"`

	// LedgerChecked is true when the workload's ledger was checked;
	// LedgerScope is ScopeCase when its workload ran for this case alone,
	// else the name of the test whose one workload ran across several
	// cases (the figures are then that workload's).
	LedgerChecked bool   `json:"ledger_checked"`
	LedgerScope   string `json:"ledger_scope,omitempty"`
	Acknowledged  int64  `json:"acknowledged_writes"`
	Lost          int    `json:"lost"`
	Duplicated    int    `json:"duplicated"`
	// Resurrected (a deleted row back), WrongValue (a stale value) and
	// Misplaced (a row on a node its placement does not name) are the
	// ledger's other violations.
	Resurrected int   `json:"resurrected"`
	WrongValue  int   `json:"wrong_value"`
	Misplaced   int   `json:"misplaced"`
	InDoubt     int64 `json:"in_doubt"`
	// MaxWritePauseMS is the longest acknowledged write of the workload,
	// in milliseconds: the longest clients waited.
	MaxWritePauseMS float64 `json:"max_write_pause_ms"`
	// OrphansChecked is true when the nodes were searched for shardmover_*
	// slots, publications, origins and prepared transactions; Orphans is
	// how many were left.
	OrphansChecked bool `json:"orphans_checked"`
	Orphans        int  `json:"orphans_left"`

	// Input is a bad input's command line; ExitCode the exit code it got
	// and Message what the command said.
	Input    []string `json:"input,omitempty"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Message  string   `json:"message,omitempty"`

	// ServerVersion is the PostgreSQL server's version (server_version),
	// CitusVersion the Citus extension's when the cluster runs it.
	ServerVersion string `json:"server_version,omitempty"`
	CitusVersion  string `json:"citus_version,omitempty"`
	// GoVersion and At are set by Append.
	GoVersion string    `json:"go_version"`
	At        time.Time `json:"at"`
}

// Enabled reports whether records are written (SHARDMOVER_RELIABILITY_OUT
// is set).
func Enabled() bool { return os.Getenv(EnvOut) != "" }

var mu sync.Mutex

// Append writes r as one JSON line to the file named by
// SHARDMOVER_RELIABILITY_OUT, setting GoVersion and At. It does nothing
// when the variable is unset.
func Append(r Record) error {
	path := os.Getenv(EnvOut)
	if path == "" {
		return nil
	}
	r.GoVersion = runtime.Version()
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("reliability record of %s: %w", r.Case, err)
	}
	line = append(line, '\n')
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s (%s): %w", path, EnvOut, err)
	}
	_, err = f.Write(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("append to %s (%s): %w", path, EnvOut, err)
	}
	return nil
}
