// Package mover runs shard-group moves as persisted, resumable state
// machines (docs/design.md section 5) and executes them with concurrency limits.
//
// The journal row (metadata.Move) is the truth: at the top of every step the
// engine re-reads it and derives the next step from its phase, never from
// memory. Every phase change goes through one transition, metadata's
// SetPhase(from, to), which fails if the phase changed underneath and logs
// the change in move_log. Every replication artifact is named
// shardmover_<moveid> and recorded in the cleanup table before it is created.
//
// The loop a caller sees:
//
//	eng := mover.New(mover.DefaultConfig(), cat)
//	if err := eng.Recover(ctx); err != nil { ... } // settle prepared transactions
//	job, moves, err := eng.Schedule(ctx, "move", []mover.Request{{ShardID: 102027, TargetGroup: 3}})
//	err = eng.Run(ctx, moves[0].ID)                  // until done, failed or cancelled
//
// Run after a crash resumes a move from its persisted phase: setup and
// copying start over (the exported snapshot died with the process that made
// it), indexing is re-run, catching_up resumes from the target's
// replication origin, cutover settles what an earlier attempt left, and
// cleanup finishes.
//
// Settling a cutover (settle.go). Each attempt prepares its fence on the
// source as shardmover_<moveid>_<epoch>, under the move's cutover_epoch. The
// outcome of a decision is never read with a plain SELECT: a decision whose
// client timed out may still commit. metadata.SettleDecision ends a
// decision still in flight (pg_terminate_backend of the session named
// shardmover_decide_<moveid>), takes the move row's lock, and, when nothing
// committed, bumps the epoch so that a decision arriving later is refused.
// Then the fence of the committed epoch is committed and every other one
// rolled back; a committed decision whose fence is gone has it
// re-established (and what the source took meanwhile carried over). While a
// fence may exist the mover keeps retrying the coordinator and the source
// with backoff. Recover, cleanup, cancel and fail all settle this way.
//
// The move's lease is checked every turn of the loop and during catch-up,
// and every phase change requires it (metadata's SetPhaseLeased); a lease
// lost with its connection is taken again, or the run stops if another
// mover took it.
//
// Guarantees, tested under a concurrent workload with a ledger and with the
// mover killed after each phase (Config.AfterPhase): no acknowledged write is
// lost or applied twice; at every instant each shard has exactly one
// placement; a failed or cancelled move leaves the source serving; the write
// pause of a cutover is bounded by Config.MaxWritePause, past which the
// cutover rolls back and is retried with backoff.
//
// Preflight also wants Config.DiskFactor (1.5) times the group's size free
// on the target's data directory, measured with df on the server through
// COPY FROM PROGRAM (superuser or pg_execute_server_program); a target that
// will not run it is logged and let through.
//
// Schema changes are not replicated: DDL on a shard while its move runs
// makes the apply fail, or, when no change carries it, the cutover finds it
// by comparing both definitions under its lock; either way the move fails
// with a sentence saying so, leaving the group on its source; moving it
// again copies the new definition.
//
// Verify before cutover (Config.Verify, verify.go): when the catch-up first
// passes the cutover gate in a run, the group's tables are compared on the
// source and the target at one replication position while the application
// keeps writing. The applier is held below the source's insert position, a
// temporary slot shardmover_<moveid>_verify gives a consistent point and an
// exported snapshot (imported by a source transaction, then the slot's
// connection closes), the hold moves up to the consistent point, and the
// target's snapshot is taken there; then the applier goes on and both
// snapshots are compared (verify.CompareTx), throttled by
// VerifyBytesPerSecond. A difference fails the move (the source keeps
// serving) with a sentence naming the table, both counts and checksums and
// the first differing keys; equality is recorded in the journal's message
// for the step to cutover. A resumed move verifies again.
//
// On Citus (12 or later) the phases are the same; the cutover also blocks
// Citus-routed writes with Citus's metadata lock on the coordinator and on
// every metadata node, flips every node's placements in the decision's
// two-phase commit (the parts prepared under the fence's gid, settled by
// the same recovery rule), and leaves the old shards to Citus's deferred
// cleanup (citus.go, docs/design.md 3.1). Preflight refuses while Citus
// itself rebalances or moves shards.
//
// Streams (stream.go, docs/design.md 6.2): with Limits.GroupsPerStream above
// 1, RunJob lets a job's moves between the same two node groups ride one
// stream. The first (the lead) carries the others (riders, moves.carried_by):
// the lead's run moves every member's shards at once, under the lead's name
// and lease; a rider's phase changes only with the lead's, in the same
// journal transaction; one decision flips every member, and is refused
// unless exactly the riders it was prepared for are there, none asked to
// cancel. A rider asked to cancel before the decision leaves the stream,
// which is set up again without it; what fails the stream fails every
// member, each group staying on its source.
package mover
