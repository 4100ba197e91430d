package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ctxtime"
	"github.com/shardmover/shardmover/internal/pgerr"
	"github.com/shardmover/shardmover/internal/pgsql"
	"github.com/shardmover/shardmover/metadata"
)

// CutoverStepName names a point inside a cutover where Config.CutoverStep
// runs (the hook receives the name as a string).
type CutoverStepName string

// The cutover's named points, in order (docs/design.md 5.1).
const (
	// CutoverLocked: writes on the source are paused and its WAL flushed.
	CutoverLocked CutoverStepName = "locked"
	// CutoverCaughtUp: the applier has durably applied up to the pause's LSN.
	CutoverCaughtUp CutoverStepName = "caught_up"
	// CutoverPrepared: the fence on the source is prepared.
	CutoverPrepared CutoverStepName = "prepared"
	// CutoverDecided: the decision (the placement flip) committed.
	CutoverDecided CutoverStepName = "decided"
)

// atCutoverStep runs Config.CutoverStep at the named point.
func (r *run) atCutoverStep(name CutoverStepName) error { return r.cutoverHook(string(name)) }

// errPauseExceeded means the cutover rolled back to keep the write pause
// within its bound.
var errPauseExceeded = errors.New("write pause bound reached")

// cutover is docs/design.md 5.1. On entry (also after a restart) it first
// settles whatever an earlier attempt may have left: the decision by a read
// that waits for one in flight, then the fences to match. A decision found
// committed sends the move on to cleanup; otherwise the attempt below
// prepares under the freshly bumped epoch.
func (r *run) cutover(ctx context.Context, m metadata.Move) error {
	wait, err := r.cutoverAttempt(ctx, m)
	if err != nil || wait == 0 {
		return err
	}
	// The attempt rolled back. Its sessions are released by now: every
	// transaction it opened on every node (the fence's, the target's, each
	// metadata node's part and the decision) has ended, so nothing of ours
	// holds a lock through the backoff.
	return ctxtime.Sleep(ctx, wait)
}

// cutoverAttempt settles what an earlier attempt left and makes one
// attempt; a rolled-back attempt returns the backoff to wait before the
// next one, which the caller waits only after every session of the attempt
// has been released.
func (r *run) cutoverAttempt(ctx context.Context, m metadata.Move) (backoff time.Duration, err error) {
	sp := newSplits()
	defer sp.log(r.log, "cutover prelude timings")
	// The sessions of the attempt are opened, all at once, while the
	// decision is settled (clean ones of the pool when there are): the
	// source's that locks and fences, a second on the source that flushes
	// its WAL at the recorded position (step 2), one on the target to
	// compare definitions and finish identity columns under the lock, and
	// on Citus one on every other metadata node. They go back to the pool
	// only when the attempt ended without error and each is idle outside a
	// transaction (a prepared fence is no longer its session's).
	//
	// The first definitions read on a session plans its catalog queries
	// (tens of milliseconds); later reads reuse the plans. So both the
	// source's and the target's session read once as soon as they are
	// open, while the decision is settled and the applier catches up, and
	// the read inside the pause is quick. Only a warm-up: a failure shows
	// again, and counts, inside the attempt. Bounded, so that a lost reply
	// cannot hold the cutover here (a cancelled read closes its session,
	// and the attempt then fails and is retried).
	var (
		src, flush, dst *pgx.Conn
		cc              *citusCutover
		connErr         [4]error
		connected       = make(chan struct{})
		warmed          = make(chan struct{})
	)
	wctx, cancelWarm := context.WithTimeout(ctx, 5*time.Second)
	go func() {
		defer close(warmed)
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); src, connErr[0] = r.e.session(wctx, r.source) }()
		go func() { defer wg.Done(); flush, connErr[1] = r.e.session(wctx, r.source) }()
		go func() { defer wg.Done(); dst, connErr[2] = r.e.session(wctx, r.target) }()
		cc, connErr[3] = r.openCitus(wctx)
		wg.Wait()
		close(connected)
		if errors.Join(connErr[:]...) != nil {
			return
		}
		tables := shardIdents(m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = metadata.ReadTablesDDL(wctx, dst, tables)
		}()
		_, _ = metadata.ReadTablesDDL(wctx, src, tables)
		wg.Wait()
	}()
	defer func() {
		cancelWarm()
		<-warmed
		r.e.release(r.source, src, &err)
		r.e.release(r.source, flush, &err)
		r.e.release(r.target, dst, &err)
		cc.release(ctx, r.e, &err)
	}()
	st, err := r.settle(ctx, m)
	if err != nil {
		return 0, err
	}
	sp.mark("settle")
	if st.Committed {
		return 0, metadata.ErrPhaseConflict // re-read: the move is past its decision
	}
	m.CutoverEpoch = st.Epoch
	if r.filenodes, err = r.e.cat.SourceFilenodes(ctx, m.ID); err != nil {
		return 0, err
	}
	// Citus's own mover may have moved the group while this one copied
	// and caught up: then this move ends (checkOnSource says so). While
	// Citus moves shards, no cutover: the attempt waits for its backoff.
	if busy, err := r.e.cat.CitusBusy(ctx); err != nil {
		return 0, err
	} else if busy != "" {
		return r.rolledBack(ctx, m, fmt.Errorf("%w: %s", errCitusBusy, busy))
	}
	if err := r.e.checkOnSource(ctx, m, r.source); err != nil {
		return 0, err
	}
	<-connected
	if err := errors.Join(connErr[:]...); err != nil {
		return 0, err
	}
	sp.mark("connect")
	if err := r.startStream(ctx, m); err != nil {
		return 0, err
	}
	r.catchUpBeforePause(ctx, flush)
	sp.mark("catch_up")
	<-warmed // the attempt uses the sessions the warm-up read on
	sp.mark("warm")
	cancelWarm()

	err = r.tryCutover(ctx, m, cutoverConns{src: src, flush: flush, dst: dst, citus: cc})
	sp.mark("attempt")
	switch {
	case err == nil:
		r.cutoverBackoff = r.e.cfg.CutoverBackoff
		return 0, nil
	case errors.Is(err, ErrKilled), ctx.Err() != nil:
		return 0, err
	case errors.Is(err, errPauseExceeded) || pgerr.IsLockTimeout(err):
		return r.rolledBack(ctx, m, err)
	}
	return 0, err
}

// errCitusBusy: Citus is moving shards; no cutover until it is done.
var errCitusBusy = errors.New("Citus is moving shards")

// rolledBack records an attempt that rolled back (or did not begin) for
// why, and returns the backoff to wait before the next one.
func (r *run) rolledBack(ctx context.Context, m metadata.Move, why error) (time.Duration, error) {
	wait := r.cutoverBackoff
	r.cutoverBackoff = min(2*r.cutoverBackoff, r.e.cfg.CutoverMaxBackoff)
	r.log.Warn("cutover rolled back", zap.Error(why), zap.Duration("retry_in", wait))
	if err := r.changePhase(ctx, m, Cutover, CatchingUp, rolledBack,
		fmt.Sprintf("cutover rolled back (%v); retry in %s", why, wait), ""); err != nil {
		return 0, err
	}
	return max(wait, time.Nanosecond), nil
}

// pauseErr reports err from the step what of a cutover attempt: when the
// step's context, bounded by the write pause that began at pauseStart, ran
// out while the run's own context did not, as errPauseExceeded (the
// attempt rolls back and is retried); else as it is, prefixed by what
// unless what is empty.
func pauseErr(ctx, stepCtx context.Context, pauseStart time.Time, what string, err error) error {
	if ctx.Err() == nil && errors.Is(stepCtx.Err(), context.DeadlineExceeded) {
		if what == "" {
			what = "the step" // err says which
		}
		return fmt.Errorf("%w: %s not done %s into the pause (%v)", errPauseExceeded, what, time.Since(pauseStart).Round(time.Millisecond), err)
	}
	if what == "" {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// tryCutover runs one attempt. Errors before PREPARE abort the transaction
// (the connection's deferred close rolls it back). After PREPARE, a decision
// that fails or whose reply is lost is settled (settle): the decision's
// outcome is read in a way that cannot miss it in flight, and the fence is
// committed or rolled back to match, retrying until that is done.
func (r *run) tryCutover(ctx context.Context, m metadata.Move, c cutoverConns) error {
	src := c.src
	tables := shardIdents(m)
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Sanitize()
	}
	if err := r.e.cat.AddCleanup(ctx, m.ID, m.SourceGroup, metadata.ObjectPrepared, m.Name(), metadata.CleanupAlways); err != nil {
		return err
	}
	budget := r.e.cfg.MaxWritePause
	// Everything up to the fence is bounded too: a message to the source
	// that is lost must not hang the attempt (its connection is closed,
	// which ends the transaction and its lock on the server).
	preCtx, cancelPre := context.WithTimeout(ctx, budget+10*time.Second)
	defer cancelPre()
	tx, err := src.Begin(preCtx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The lock wait counts against the pause: writers queue behind it.
	lockWait := budget / 4
	lockTimeout := fmt.Sprintf("%dms", lockWait.Milliseconds())
	if _, err := tx.Exec(preCtx, "SELECT set_config('lock_timeout', $1, true)", lockTimeout); err != nil {
		return err
	}
	// On Citus the decision and every part's transaction open now, before
	// the pause: they lock nothing yet.
	var dec *metadata.Decision
	if c.citus != nil {
		if dec, err = r.e.cat.OpenDecision(preCtx, m.ID); err != nil {
			return fmt.Errorf("open the decision on the coordinator: %w", err)
		}
		defer dec.Close(ctx)
		if err := c.citus.begin(preCtx); err != nil {
			return err
		}
	}
	pauseStart := time.Now()
	sp := &splits{last: pauseStart}
	defer sp.log(r.log, "cutover timings")
	// The locks, the insert position and the flush open the pause, so they
	// are bounded by it, not by preCtx: a message among them that is lost
	// or held ends the attempt as soon as the pause could no longer finish
	// in time (as the applier's wait below does), rather than ten seconds
	// later with Citus's writes blocked all along by the metadata locks
	// already taken. The attempt then rolls back and is retried.
	lockCtx, cancelLock := context.WithDeadline(preCtx, pauseStart.Add(budget*3/4))
	defer cancelLock()
	inPause := func(what string, err error) error {
		return pauseErr(ctx, lockCtx, pauseStart, what, err)
	}
	// On Citus, Citus-routed writes are blocked first: the decision takes
	// the coordinator's metadata lock, then every other metadata node's at
	// once (lockCitusWrites), all before the source table lock. On the
	// target, its distributed tables are locked before its metadata lock
	// (see metadata.BlockCitusWrites).
	if c.citus != nil {
		if err := dec.BlockWrites(lockCtx, m.ShardIDs, lockWait, m.TargetGroup == 0); err != nil {
			return inPause("block Citus writes on the coordinator", err)
		}
		if err := r.lockCitusWrites(lockCtx, m, tx, c.citus, lockTimeout); err != nil {
			return inPause("", err) // the error names the node
		}
	}
	// On compat the application routes itself, so the source's shards are
	// locked against writes (EXCLUSIVE: reads go on). On Citus every write
	// is routed by Citus and is held by the metadata locks just taken on
	// every node it may enter, as in Citus's own moves; a lock on the shard
	// table would add nothing but a wait: Citus plans a statement entering
	// on the source against its local shard, taking the shard's row lock
	// before it reaches the metadata lock in the executor, so an EXCLUSIVE
	// lock here would wait for writes that wait for us, until lock_timeout.
	// ACCESS SHARE conflicts with neither reads nor writes, only with DDL
	// (ACCESS EXCLUSIVE), so the definitions compared below cannot change
	// until the fence ends.
	if _, err := pgsql.ExecOne(lockCtx, tx.Conn(), "LOCK TABLE "+strings.Join(names, ", ")+" IN "+sourceLockMode(c.citus != nil)+" MODE"); err != nil {
		return inPause("lock source shards", err)
	}
	sp.mark("lock")
	// The insert position, not pg_current_wal_lsn() (the write position):
	// with synchronous_commit = off a commit is acknowledged before its WAL
	// is written, so only the insert position is sure to be past every
	// acknowledged commit.
	var lsnText string
	if err := tx.QueryRow(lockCtx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsnText); err != nil {
		return inPause("read the source's insert position", err)
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return err
	}
	// Flush it now rather than waiting for the WAL writer (which, on an
	// idle source, may not come for a long while): the walsender sends only
	// flushed WAL, so the applier could never reach lsn in time.
	if err := flushWAL(lockCtx, c.flush); err != nil {
		return inPause("flush the source's WAL", err)
	}
	sp.mark("flush")
	if err := r.atCutoverStep(CutoverLocked); err != nil {
		return err
	}
	// Wait for the applier to have durably applied everything up to lsn,
	// within what is left of the pause budget (keeping room for the rest).
	waitCtx, cancel := context.WithDeadline(ctx, pauseStart.Add(budget*3/4))
	err = r.stream.WaitFor(waitCtx, lsn)
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: applier did not reach %s in time", errPauseExceeded, lsn)
		}
		if serr := r.streamErr(); serr != nil {
			return serr
		}
		return err
	}
	sp.mark("applier")
	if err := r.atCutoverStep(CutoverCaughtUp); err != nil {
		return err
	}
	// From here on a stop request (SIGTERM) must not cut the cutover in
	// half: the remaining steps run to their end or their own deadline.
	fenceCtx, cancelFence := context.WithDeadline(context.WithoutCancel(ctx), pauseStart.Add(budget+5*time.Second))
	defer cancelFence()
	// The target's transaction finishing identity columns commits only
	// after the decision: until then the applier may still need to write
	// explicit values, and a rolled-back attempt leaves the target as it
	// was. Writers that reach the target once placements flip wait for it.
	// Until the PREPARE an attempt that gives up costs nothing but a
	// retry, so the steps before it end with the pause's bound, like the
	// locks: a lost reply must not hold the writes for the fence's slack.
	beforePrepare, cancelBefore := context.WithDeadline(fenceCtx, pauseStart.Add(budget))
	defer cancelBefore()
	dtx, err := c.dst.Begin(beforePrepare)
	if err != nil {
		return pauseErr(ctx, beforePrepare, pauseStart, "begin on the target", err)
	}
	defer func() { _ = dtx.Rollback(context.WithoutCancel(ctx)) }()
	if err := r.compareDefinitions(beforePrepare, m, tx, dtx); err != nil {
		return pauseErr(ctx, beforePrepare, pauseStart, "", err)
	}
	sp.mark("definitions")
	// Fence. On compat: rename the old shards inside the locking
	// transaction, in one round trip (each its own statement), so that a
	// client routing by stale metadata fails instead of writing where
	// nobody reads. On Citus the old shards keep their names, as in Citus's
	// own moves: Citus routes every statement, after the metadata locks,
	// by the placements that flip with this fence, and a rename (ACCESS
	// EXCLUSIVE) would stall every read of the shard behind it and fail
	// the statements Citus planned against the local shard before they
	// reached the metadata lock. Citus's deferred cleanup drops them.
	var old, renames []string
	if c.citus == nil {
		// The rename needs ACCESS EXCLUSIVE: it waits for the reads of
		// the old shard in flight, and every read that comes after it
		// queues behind it. A long read must not stall the others for
		// more than a moment: past fenceLockWait the attempt rolls back
		// (the reads go on) and is retried after its backoff.
		renames = append(renames, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", min(fenceLockWait, lockWait).Milliseconds()))
	}
	for _, t := range tables {
		if c.citus != nil {
			old = append(old, metadata.QualifiedName(t))
			continue
		}
		moved := movedName(t[1], m.ID)
		renames = append(renames, "ALTER TABLE "+t.Sanitize()+" RENAME TO "+pgx.Identifier{moved}.Sanitize())
		old = append(old, metadata.QualifiedName(pgx.Identifier{t[0], moved}))
	}
	if i, err := pgsql.ExecEach(beforePrepare, tx.Conn(), renames); err != nil {
		return pauseErr(ctx, beforePrepare, pauseStart, "fence "+tables[max(i-1, 0)].Sanitize(), err)
	}
	if time.Since(pauseStart) > budget {
		return fmt.Errorf("%w: %s before prepare", errPauseExceeded, time.Since(pauseStart).Round(time.Millisecond))
	}
	if c.citus != nil && c.citus.sourceMeta {
		// The source's own copy of the placements flips with its fence.
		if err := metadata.UpdatePlacements(fenceCtx, tx, m.ShardIDs, m.SourceGroup, m.TargetGroup); err != nil {
			return fmt.Errorf("flip placements on the source %s: %w", r.source.Addr(), err)
		}
	}
	sp.mark("fence")
	gid := fenceGID(m.ID, m.CutoverEpoch)
	if _, err := pgsql.ExecOne(fenceCtx, tx.Conn(), "PREPARE TRANSACTION "+quoteLiteral(gid)); err != nil {
		// It may have been prepared all the same. No decision was sent for
		// this epoch, so rolling it back is safe.
		_ = tx.Rollback(fenceCtx)
		_, _ = settlePrepared(fenceCtx, src, gid, false)
		return fmt.Errorf("prepare fence on %s: %w", r.source.Addr(), err)
	}
	if c.citus != nil {
		// Every other metadata node's flip, prepared under the same gid. A
		// failure here is settled as a rolled-back attempt at the next
		// cutover entry (settle), on every node.
		if err := r.prepareCitusParts(fenceCtx, m, c.citus.parts, gid); err != nil {
			return err
		}
	}
	sp.mark("prepare")
	if err := r.atCutoverStep(CutoverPrepared); err != nil {
		return err
	}
	// The decision: placements and journal in one coordinator transaction,
	// bounded by what is left of the budget.
	decideCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), pauseStart.Add(budget))
	flip := metadata.CutoverFlip{
		MoveID: m.ID, ShardIDs: m.ShardIDs, SourceGroup: m.SourceGroup, TargetGroup: m.TargetGroup,
		OldTables: old, Lease: r.lease, Epoch: m.CutoverEpoch,
		OldTableMoves: slices.Clone(r.owners), Riders: slices.Clone(r.riders),
	}
	if dec != nil {
		err = dec.Commit(decideCtx, flip)
	} else {
		err = r.e.cat.CommitCutover(decideCtx, flip)
	}
	cancel()
	sp.mark("decision")
	if err != nil {
		// Failed, timed out, or lost on the way back: only a settlement
		// that waits for a decision in flight can say which.
		r.log.Warn("cutover decision failed or unknown; settling it", zap.Error(err))
		st, serr := r.settle(ctx, m)
		if serr != nil {
			return serr
		}
		if !st.Committed {
			if errors.Is(err, metadata.ErrPlacementMoved) {
				return permanent(fmt.Errorf("cutover decision: %w", err))
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%w: decision not committed within the pause", errPauseExceeded)
			}
			return fmt.Errorf("cutover decision: %w", err)
		}
		// Committed after all; settle committed the fence and every part.
		r.log.Info("cutover decision committed after all")
		r.decisionSettled = true
		r.finishTarget(ctx, dtx)
	} else {
		if err := r.atCutoverStep(CutoverDecided); err != nil {
			return err
		}
		r.finishTarget(ctx, dtx)
		found, err := settlePrepared(context.WithoutCancel(ctx), src, gid, true)
		if err != nil {
			// The decision stands; cleanup settles the fence again.
			return fmt.Errorf("commit fence: %w", err)
		}
		// A fence or part not found was rolled back by someone after it
		// was prepared: cleanup's settlement re-establishes it.
		r.decisionSettled = found
		if c.citus != nil && !r.commitCitusParts(context.WithoutCancel(ctx), c.citus.parts, gid) {
			r.decisionSettled = false
		}
	}
	pause := time.Since(pauseStart)
	sp.mark("commit")
	r.log.Info("cutover committed", zap.Duration("write_pause", pause), zap.Stringer("lsn", lsn))
	r.recordPause(m.ID, pause)
	r.stopStream()
	sp.mark("stop_stream")
	err = r.changePhase(ctx, m, Cutover, Cleanup, decided, fmt.Sprintf("placements flipped; writes paused %s", pause.Round(time.Millisecond)), "")
	sp.mark("phase")
	return err
}

// fenceLockWait bounds how long the compat fence's rename waits for the
// reads of the old shard in flight, with every later read queued behind it.
const fenceLockWait = 100 * time.Millisecond

// sourceLockMode is the lock the cutover takes on the source's shard
// tables: EXCLUSIVE on compat (writes wait, reads go on), ACCESS SHARE on
// Citus (only DDL waits; Citus's metadata locks hold the writes).
func sourceLockMode(citus bool) string {
	if citus {
		return "ACCESS SHARE"
	}
	return "EXCLUSIVE"
}

// finishTarget commits the target transaction that finished identity
// columns, after the decision. When it commits, the cleanup phase of this
// run need not check them again; when it does not (or the process dies
// first), cleanup finishes them.
func (r *run) finishTarget(ctx context.Context, dtx pgx.Tx) {
	if err := dtx.Commit(context.WithoutCancel(ctx)); err != nil {
		r.log.Error("finishing identity columns on the target failed after the decision; the cleanup phase finishes them", zap.Error(err))
		return
	}
	r.targetFinished = true
}

// cutoverConns are the sessions a cutover attempt uses, opened before its
// pause: the source session that locks, fences and prepares; a second
// source session that flushes WAL; a target session.
type cutoverConns struct {
	src, flush, dst *pgx.Conn
	// citus is nil on compat.
	citus *citusCutover
}

// errDefinitionChanged: a shard's definition differs between source and
// target at the cutover. Permanent: the move fails and the group stays on
// its source.
type errDefinitionChanged struct{ msg string }

func (e *errDefinitionChanged) Error() string { return e.msg }

// compareDefinitions reads each shard's definition on the source inside the
// locked transaction (so nothing can change it until the decision) and on
// the target, and refuses the cutover when they differ: DDL is not
// replicated, so a column, index or constraint added during the move would
// otherwise be missing on the target without a word. It then queues, in
// the target transaction dtx, what finishes the target's identity columns
// (the source's kind and sequence position, read under the lock).
func (r *run) compareDefinitions(ctx context.Context, m metadata.Move, tx, dtx pgx.Tx) error {
	// Both sides are read at once (two sessions), each in one batch for
	// the whole group: this runs inside the write pause.
	tables := shardIdents(m)
	r.validate = nil
	var got []metadata.TableDDL
	tgtErr := make(chan error, 1)
	go func() {
		var err error
		if got, err = metadata.ReadTablesDDL(ctx, dtx, tables); err != nil {
			err = fmt.Errorf("read the group's definitions on the target: %w", err)
		}
		tgtErr <- err
	}()
	want, srcErr := metadata.ReadTablesDDL(ctx, tx, tables)
	if srcErr != nil {
		srcErr = fmt.Errorf("read the group's definitions on the source: %w", srcErr)
	}
	if err := errors.Join(srcErr, <-tgtErr); err != nil {
		return err
	}
	for i, t := range tables {
		if diff := want[i].Diff(got[i]); diff != "" {
			return permanent(&errDefinitionChanged{msg: fmt.Sprintf(
				"shard table %s changed on the source during the move (%s); schema changes are not replicated, so the move fails and the group stays on its source: move it again to copy the new definition",
				t.Sanitize(), diff)})
		}
		// Owner and privileges changed on the source during the move are
		// set again (they are not compared: nothing is lost by a change).
		// Then the triggers' states, row-level security and the foreign
		// keys as the source has them now (metadata/objects.go).
		stmts := append(want[i].PrivilegeStatements(t, got[i]), want[i].FinishStatements(t)...)
		stmts = append(stmts, want[i].CutoverStatements(t, sameTable, nil)...)
		r.validate = append(r.validate, want[i].ValidateStatements(t)...)
		for _, stmt := range stmts {
			if _, err := pgsql.ExecOne(ctx, dtx.Conn(), stmt); err != nil {
				return fmt.Errorf("finish the identity columns, privileges, trigger states, row-level security and foreign keys of %s on the target: %w", t.Sanitize(), err)
			}
		}
	}
	// The same definition may still hide a change nothing decoded: a
	// rewrite (ALTER TABLE ... TYPE ... USING) or a column dropped and
	// added again under its name changes rows without a decoded change.
	// The table's storage and column count tell (sourceFilenodes).
	if len(r.filenodes) == 2*len(tables) {
		now, err := sourceFilenodes(ctx, tx, tables)
		if err != nil {
			return err
		}
		for i, t := range tables {
			switch {
			case now[2*i] != r.filenodes[2*i]:
				return permanent(&errDefinitionChanged{msg: fmt.Sprintf(
					"shard table %s was rewritten on the source during the move (its storage is new: ALTER TABLE ... TYPE, VACUUM FULL, CLUSTER or TRUNCATE), and what a rewrite changes is not replicated, so the move fails and the group stays on its source: move it again",
					t.Sanitize())})
			case now[2*i+1] != r.filenodes[2*i+1]:
				return permanent(&errDefinitionChanged{msg: fmt.Sprintf(
					"a column of shard table %s was dropped and added again on the source during the move, and the values it lost there are not replicated, so the move fails and the group stays on its source: move it again",
					t.Sanitize())})
			}
		}
	}
	return nil
}

// catchUpBeforePause brings the applier up to the source's current WAL
// just before the write pause. The source may commit asynchronously (its
// WAL writer then flushes every wal_writer_delay, 200 ms by default), and
// the walsender sends only flushed WAL: without this the pause would begin
// with up to that much WAL unsent and wait, writes blocked, for the applier
// to take it in. So: read the insert position, flush the WAL up to it, wait
// for the applier to apply it; again while that wait was long, at most
// three times. Only a wait, bounded (5 s in all, so that a lost reply
// cannot hold the cutover here: a cancelled query closes conn, and the
// attempt then fails and is retried): an error or a timeout leaves the
// work to the pause, which has its own bounds.
func (r *run) catchUpBeforePause(ctx context.Context, conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for range 3 {
		var text string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&text); err != nil {
			return
		}
		lsn, err := pglogrepl.ParseLSN(text)
		if err != nil || flushWAL(ctx, conn) != nil {
			return
		}
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		err = r.stream.WaitFor(wctx, lsn)
		cancel()
		if err != nil || time.Since(start) < caughtUpWait {
			return
		}
	}
}

// caughtUpWait: an applier that took in the source's flushed WAL within
// this is as close as it gets before the pause.
const caughtUpWait = 15 * time.Millisecond

// flushWAL flushes the server's WAL up to a commit record written now, on
// conn. A commit is flushed only when its transaction wrote WAL of its own
// (RecordTransactionCommit): an xid alone (txid_current) is not enough and
// its commit stays as asynchronous as the rest. So the transaction writes a
// transactional logical message, which pgoutput does not send (the stream
// does not ask for messages), and commits with synchronous_commit = on:
// one statement in its own implicit transaction (one round trip inside the
// pause), whose local setting still holds when it commits.
func flushWAL(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, "SELECT set_config('synchronous_commit', 'on', true), pg_logical_emit_message(true, 'shardmover', 'flush')")
	return err
}

func (r *run) recordPause(id int64, d time.Duration) {
	if r.e.cfg.OnCutover != nil {
		r.e.cfg.OnCutover(id, d)
	}
}
