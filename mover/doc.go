// Package mover runs shard-group moves as persisted, resumable state
// machines (DESIGN.md section 5) and executes them with concurrency limits.
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
// copying start over (the exported snapshot died with the process),
// indexing is re-run, catching_up resumes from the target's replication
// origin, cutover settles its prepared transaction by the recovery rule
// (COMMIT PREPARED when the journal says cutover_committed, else ROLLBACK
// PREPARED and back to catching_up), and cleanup finishes.
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
// makes the apply fail, and the move fails with a sentence saying so,
// leaving the group on its source; moving it again copies the new
// definition.
//
// Only compat clusters are moved so far; a Citus cluster is refused in
// preflight with a sentence saying so.
package mover
