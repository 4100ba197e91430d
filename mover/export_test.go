package mover

// SetSweepRead makes Sweep call f right after its first read of the
// journal, so a test can start a move in between.
func SetSweepRead(e *Engine, f func()) { e.sweepRead = f }
