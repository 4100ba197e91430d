// Package replication moves the rows of a set of tables from a source
// PostgreSQL server to a target one while the application keeps writing:
// a snapshot copy, then a logical replication stream applied exactly once.
// It wraps pglogrepl (replication protocol, pgoutput decoding) and pgx.
//
// The loop a caller (the mover) sees:
//
//	// preflight: reads only, creates nothing
//	err := replication.CheckReplicaIdentity(ctx, src, tables)
//
//	// setup: publication, then the slot with its exported snapshot
//	err = replication.CreatePublication(ctx, src, name, tables)
//	snap, err := replication.CreateSlot(ctx, sourceDSN, name)
//
//	// copying: every table from the snapshot; the snapshot's connection
//	// stays idle until the copy has started everywhere
//	res, err := replication.Copy(ctx, replication.CopyOptions{
//		SourceDSN: sourceDSN, TargetDSN: targetDSN, Snapshot: snap.Name,
//		Tables: tables, Workers: 4, RangesPerTable: 4, Progress: report,
//	})
//	snap.Release(ctx)
//
//	// catching_up: apply changes committed after the snapshot
//	cfg := replication.DefaultStreamConfig()
//	cfg.SourceDSN, cfg.TargetDSN = sourceDSN, targetDSN
//	cfg.Slot, cfg.Publication, cfg.Origin = name, name, name
//	cfg.StartLSN = snap.ConsistentLSN
//	s, err := replication.NewStream(cfg)
//	go func() { done <- s.Run(ctx) }() // returns ctx.Err() when cancelled
//	for { bytes, age := s.Lag(); if bytes < gate && age < maxAge { break }; ... }
//
//	// cutover: with source writes blocked
//	lsn, err := replication.CurrentLSN(ctx, src)
//	err = s.WaitFor(ctx, lsn) // every write committed before is on the target
//
//	// cleanup: each idempotent
//	replication.DropSlot(ctx, src, name)
//	replication.DropPublication(ctx, src, name)
//	replication.DropOrigin(ctx, tgt, name)
//
// Contract:
//
//   - Names of slots, publications and origins are validated
//     (^[a-z0-9_]{1,63}$, ErrBadName) before anything connects: they are
//     interpolated into replication commands. Table names are quoted with
//     pgx.Identifier. Connection strings are never logged or put in errors;
//     servers are named by host:port.
//   - CheckReplicaIdentity fails, naming the table in a sentence that says
//     what to do, when a table has neither a primary key nor REPLICA
//     IDENTITY FULL (or a replica identity index).
//   - Copy streams binary COPY TO STDOUT straight into COPY FROM STDIN
//     through a pipe: no decoding, bounded memory. Workers import the
//     snapshot (REPEATABLE READ, SET TRANSACTION SNAPSHOT); a large table is
//     split into ctid block ranges copied concurrently. A table with a column
//     whose binary form embeds server-specific type OIDs (arrays or
//     composites of user-defined types) is copied in text format instead.
//     Copy is throttled by BytesPerSecond and reports progress in bytes.
//     With Adaptive, Copy starts one stream and adds one at a time while
//     each raises the measured throughput by a tenth or more (one-second
//     windows), up to Workers: on two busy cores a second stream of one
//     table measured slower than one, so the width is measured, not fixed.
//   - Stream decodes pgoutput: protocol 2 with streaming on PostgreSQL 14 and
//     later, protocol 1 before. A large transaction streamed while it runs
//     is spooled to a local temporary file (never held whole in memory),
//     rolled-back savepoints are dropped from it (Stream Abort), and it is
//     applied as one source transaction at its Stream Commit; a new session
//     gets it streamed again from its first block. Each change is applied to
//     the table of the same schema-qualified name on the target, by primary key
//     or replica identity: INSERT; UPDATE of the columns sent (an unchanged
//     TOASTed value is left alone; a changed key is located by the old key);
//     DELETE; TRUNCATE. Stored generated columns are neither sent by
//     pgoutput nor copied: the target computes them. An INSERT keeps the
//     source's identity values (OVERRIDING SYSTEM VALUE), even into a
//     target identity column GENERATED ALWAYS; an UPDATE, though, assigns
//     every column sent but an unchanged key, and an ALWAYS column refuses
//     that, so a target's identity columns other than its primary key (all
//     of them under REPLICA IDENTITY FULL) must be BY DEFAULT. Values travel as text with their type: built-in types
//     by OID, others (enums, domains, extension types) with a cast to the
//     type's name, so every value round-trips exactly. Statements are
//     prepared once per shape and pipelined; consecutive source transactions
//     are grouped into one target transaction up to BatchBytes and
//     BatchDelay, in commit order; while a WaitFor waits (a cutover's
//     pause, a catch-up), a source that has gone quiet for 2 ms is asked
//     for its WAL end (a status update requesting a reply, at most every
//     5 ms), and a keepalive whose WAL end covers a waiter's position ends
//     the group at once, so the waiter is held neither by BatchDelay nor
//     by the status cadence, while a backlog still arriving keeps its
//     groups whole. Apply is full duplex: one goroutine
//     reads and decodes the stream while another executes the previous
//     round trip on the target. The reading side takes in many walsender
//     messages per read: after a read that drained the socket it waits
//     1 ms before the next (a read of 32 KB or more goes on at once), so a
//     message waits at most 1 ms, and Insert, Update and Delete messages
//     are decoded from one copy of the message (decodeChange). Within a target transaction, changes to
//     distinct rows are regrouped into multi-row statements (INSERT ...
//     SELECT / UPDATE ... FROM / DELETE ... USING over unnest()ed text
//     arrays, each value still cast through its type's input function).
//     A multi-row statement casts a value of a built-in type to the type's
//     catalog name, schema-qualified and quoted ("pg_catalog"."bpchar",
//     "pg_catalog"."_numeric"), which carries no typmod: the value stays
//     whole and the column's own typmod (char(n), bit(n), numeric(p,s),
//     timestamp(p), interval fields) is applied by the assignment, or the
//     comparison with the key, exactly as for the single-row statements'
//     typed parameters. Not format_type(oid, NULL): its "character" and
//     "bit" mean char(1) and bit(1) (char(n) values were cut to one
//     character). Not format_type(atttypid, atttypmod) with the source's
//     typmod either: an explicit cast to char(n), varchar(n) or bit(n)
//     truncates silently where the assignment fails, so a target column
//     narrower than the source's would lose data instead of stopping the
//     move.
//     Changes of one row within the target transaction are folded into one
//     (insert+update, update+update of the same columns, insert+delete,
//     update+delete): only the final state is ever visible on the target.
//     Any other second change of a row starts a new segment, so each row's
//     changes keep their order. Should a regrouped round trip fail (a unique value moving
//     between rows can), nothing of its target transaction commits: the
//     session ends and the next one starts again from the origin's durable
//     progress (pg_replication_origin_progress; the slot's confirmed
//     position is never ahead of it) and replays every transaction up to
//     the last one the failed session had begun or received one statement
//     per change in exact source order; only that replay's failure counts.
//     The target transaction holding the end of the replayed stretch
//     commits, with its origin progress, before the first later
//     transaction is applied, so grouping resumes only behind durable
//     replayed progress and a later failure cannot take the replay with
//     it. When the failed statement broke an integrity constraint (SQLSTATE
//     class 23: UNIQUE, EXCLUDE, deferrable or not), its table is
//     remembered for the Stream's life: its INSERTs are still grouped, in
//     row batches of inserts alone, but each of its UPDATEs and DELETEs ends the
//     segment and is applied alone in source order. Inserts with no other
//     change of their table in between satisfy a constraint between rows in
//     any order, so a workload that keeps moving unique values between rows
//     falls back once per table, not once per move. An UPDATE or DELETE that finds fewer rows
//     than it names stops the stream with ErrDiverged, and its target
//     transaction does not commit: COMMIT is sent only after every row
//     count checks out.
//   - Exactly once: each target transaction records, through the replication
//     origin (pg_replication_origin_xact_setup), the end LSN of the last
//     source transaction it covers, and commits with synchronous_commit = on.
//     A new session resumes from pg_replication_origin_progress and skips any
//     transaction that ends at or before it, so after any crash or
//     cancellation no change is applied twice and none is skipped. Only this
//     durable position (or, with nothing pending, the WAL end the walsender
//     reports) is sent to the source as flushed.
//   - Processed follows the walsender's WAL end whenever no source
//     transaction is open, so an idle or unrelated-only source still reaches
//     any LSN. WaitFor writes nothing to the source: while it waits, status
//     updates go out every 100ms, which the walsender answers with keepalives.
//   - Run retries transient errors with capped exponential backoff and
//     returns ErrPermanent errors (bad names, missing slot, schema mismatch,
//     divergence, undecodable data) at once.
//   - Hold (hold.go): Stream.Hold(lsn) keeps the applier from applying any
//     transaction whose commit LSN (Begin's FinalLSN, a streamed
//     transaction's CommitLSN) is lsn or later until released; Wait returns
//     once every transaction committing before lsn is committed on the
//     target (the session commits its group and parks at the first later
//     Begin, still sending status updates; an idle source gets there
//     through the walsender's WAL end). A hold at a position the applier
//     has already let a transaction through is refused (ErrHoldPassed).
//     With CreateTemporarySlot (a TEMPORARY slot only for its consistent
//     point C and exported snapshot, dropped with its connection) and
//     ImportSnapshot, a source snapshot and a target snapshot taken while
//     held at C show the same source transactions: those committing
//     before C.
//   - Cleanup helpers are idempotent: DropSlot terminates a walsender that
//     holds the slot, DropOrigin a session bound to the origin.
package replication
