package mover

import "fmt"

// Phase is where a move stands. Its string form is what the journal stores.
type Phase int

const (
	_ Phase = iota
	// Scheduled: waiting for a worker slot. Exit: picked by an engine.
	Scheduled
	// Preflight: every check of docs/design.md section 5 runs before anything is
	// created. Exit: all pass (-> Setup), or the move fails cleanly.
	Preflight
	// Setup: target tables (columns, defaults, primary key), publication,
	// origin and a slot with an exported snapshot. Exit: snapshot held.
	// A move found here after a crash is reset: its artifacts are dropped
	// and setup starts over, because the snapshot died with the mover.
	Setup
	// Copying: every table copied from the snapshot. Exit: all copied. Reset
	// to Setup after a crash, like Setup.
	Copying
	// Indexing: secondary indexes and ANALYZE on the target. Exit: done
	// (re-runnable: IF NOT EXISTS).
	Indexing
	// CatchingUp: the slot streams into the target with exactly-once apply.
	// Exit: lag below the cutover gate. Resumes from the target's origin.
	CatchingUp
	// Cutover: docs/design.md 5.1. Exit: placements flipped (the phase becomes
	// Cleanup in the same transaction), or rolled back to CatchingUp.
	Cutover
	// Cleanup: slot, publication and origin dropped; old shards recorded
	// for deferred drop. Exit: nothing left.
	Cleanup
	// Done: the group lives on the target.
	Done
	// Failed: the source serves as before; the error says why.
	Failed
	// Cancelled: stopped before the decision; the source serves as before.
	Cancelled
)

var phaseNames = [...]string{
	Scheduled:  "scheduled",
	Preflight:  "preflight",
	Setup:      "setup",
	Copying:    "copying",
	Indexing:   "indexing",
	CatchingUp: "catching_up",
	Cutover:    "cutover",
	Cleanup:    "cleanup",
	Done:       "done",
	Failed:     "failed",
	Cancelled:  "cancelled",
}

func (p Phase) String() string {
	if p > 0 && int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// ParsePhase reads a journal phase.
func ParsePhase(s string) (Phase, error) {
	for p, name := range phaseNames {
		if name == s && p > 0 {
			return Phase(p), nil
		}
	}
	return 0, fmt.Errorf("unknown move phase %q", s)
}

// Terminal reports whether the move has ended.
func (p Phase) Terminal() bool { return p == Done || p == Failed || p == Cancelled }

// BeforeDecision reports whether a move in this phase can still be rolled
// back leaving the source as it was.
func (p Phase) BeforeDecision() bool { return p < Cleanup }
