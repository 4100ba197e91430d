package mover

import (
	"fmt"

	"github.com/shardmover/shardmover/metadata"
)

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

// phaseNames maps each phase to its journal form, defined once in metadata.
var phaseNames = [...]metadata.Phase{
	Scheduled:  metadata.PhaseScheduled,
	Preflight:  metadata.PhasePreflight,
	Setup:      metadata.PhaseSetup,
	Copying:    metadata.PhaseCopying,
	Indexing:   metadata.PhaseIndexing,
	CatchingUp: metadata.PhaseCatchingUp,
	Cutover:    metadata.PhaseCutover,
	Cleanup:    metadata.PhaseCleanup,
	Done:       metadata.PhaseDone,
	Failed:     metadata.PhaseFailed,
	Cancelled:  metadata.PhaseCancelled,
}

func (p Phase) String() string {
	if p > 0 && int(p) < len(phaseNames) {
		return string(phaseNames[p])
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// Journal is the phase as the journal stores it ("" for an unknown phase).
func (p Phase) Journal() metadata.Phase {
	if p > 0 && int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return ""
}

// ParsePhase reads a journal phase.
func ParsePhase(s string) (Phase, error) {
	for p, name := range phaseNames {
		if string(name) == s && p > 0 {
			return Phase(p), nil
		}
	}
	return 0, fmt.Errorf("unknown move phase %q", s)
}

// Terminal reports whether the move has ended (metadata.TerminalPhases).
func (p Phase) Terminal() bool { return p.Journal().Terminal() }

// BeforeDecision reports whether a move in this phase can still be rolled
// back leaving the source as it was.
func (p Phase) BeforeDecision() bool { return p < Cleanup }
