// Package procs chooses how many threads the shardmover process runs Go
// code on at once (GOMAXPROCS): half the CPUs Go would use, at least one,
// unless the GOMAXPROCS environment variable sets it.
//
// The mover relays and applies: its own CPU is a small share of what a move
// costs (the servers' COPY, logical decoding and apply are the rest), and on
// a machine it shares with the servers every thread beyond what it needs
// costs them CPU: the Go scheduler wakes an idle thread for each hand-off
// between goroutines, which spins, polls and sleeps again. On two CPUs, with
// the walsender, the applying backend and the mover competing, one thread
// halved the mover's context switches, cut its CPU per change by a fifth to
// a third, and left the walsender, which sets the pace, more of the CPU
// (docs/performance.md).
//
// Setting GOMAXPROCS also stops Go's own updates of it when the process's
// CPU limit (cgroup quota) changes while it runs; Apply reads the limit as
// Go saw it at start.
package procs
