package mover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ctxtime"
	"github.com/shardmover/shardmover/metadata"
)

// errPauseExceeded means the cutover rolled back to keep the write pause
// within its bound.
var errPauseExceeded = errors.New("write pause bound reached")

// cutover is DESIGN.md 5.1. On entry (also after a restart) it first settles
// a prepared transaction a previous attempt may have left: the journal says
// not committed (the phase is still cutover), so it is rolled back.
func (r *run) cutover(ctx context.Context, m metadata.Move) error {
	gid := m.Name()
	src, err := r.e.connect(ctx, r.source)
	if err != nil {
		return err
	}
	defer src.Close(context.WithoutCancel(ctx))
	if err := settlePrepared(ctx, src, gid, false); err != nil {
		return err
	}
	if err := r.startStream(ctx, m); err != nil {
		return err
	}

	err = r.tryCutover(ctx, m, src)
	switch {
	case err == nil:
		r.cutoverBackoff = r.e.cfg.CutoverBackoff
		return nil
	case errors.Is(err, ErrKilled), ctx.Err() != nil:
		return err
	case errors.Is(err, errPauseExceeded) || isLockTimeout(err):
		wait := r.cutoverBackoff
		r.cutoverBackoff = min(2*r.cutoverBackoff, r.e.cfg.CutoverMaxBackoff)
		r.log.Warn("cutover rolled back", zap.Error(err), zap.Duration("retry_in", wait))
		if err := r.e.cat.SetPhase(ctx, m.ID, Cutover.String(), CatchingUp.String(),
			fmt.Sprintf("cutover rolled back (%v); retry in %s", err, wait), ""); err != nil {
			return err
		}
		return ctxtime.Sleep(ctx, wait)
	}
	return err
}

func isLockTimeout(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "SQLSTATE 55P03") || strings.Contains(err.Error(), "lock timeout"))
}

// tryCutover runs one attempt. Errors before PREPARE abort the transaction
// (the connection's deferred close rolls it back); after PREPARE, a failed
// decision rolls the prepared transaction back unless its outcome is
// unknown, in which case it is left for the recovery rule.
func (r *run) tryCutover(ctx context.Context, m metadata.Move, src *pgx.Conn) error {
	tables := shardIdents(m)
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Sanitize()
	}
	if err := r.e.cat.AddCleanup(ctx, m.ID, m.SourceGroup, "prepared", m.Name(), metadata.CleanupAlways); err != nil {
		return err
	}
	budget := r.e.cfg.MaxWritePause
	tx, err := src.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// The lock wait counts against the pause: writers queue behind it.
	lockWait := budget / 4
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", lockWait.Milliseconds())); err != nil {
		return err
	}
	pauseStart := time.Now()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(names, ", ")+" IN EXCLUSIVE MODE"); err != nil {
		return fmt.Errorf("lock source shards: %w", err)
	}
	// The insert position, not pg_current_wal_lsn() (the write position):
	// with synchronous_commit = off a commit is acknowledged before its WAL
	// is written, so only the insert position is sure to be past every
	// acknowledged commit. (The WAL writer flushes it within
	// wal_writer_delay; the applier then sees it.)
	var lsnText string
	if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsnText); err != nil {
		return err
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return err
	}
	if err := r.cutoverHook("locked"); err != nil {
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
	if err := r.cutoverHook("caught_up"); err != nil {
		return err
	}
	// From here on a stop request (SIGTERM) must not cut the cutover in
	// half: the remaining steps run to their end or their own deadline.
	fenceCtx, cancelFence := context.WithDeadline(context.WithoutCancel(ctx), pauseStart.Add(budget+5*time.Second))
	defer cancelFence()
	// Fence: rename the old shards inside the locking transaction.
	var old []string
	for _, t := range tables {
		moved := movedName(t[1], m.ID)
		if _, err := tx.Exec(fenceCtx, "ALTER TABLE "+t.Sanitize()+" RENAME TO "+pgx.Identifier{moved}.Sanitize()); err != nil {
			return fmt.Errorf("fence %s: %w", t.Sanitize(), err)
		}
		old = append(old, t[0]+"."+moved)
	}
	if time.Since(pauseStart) > budget {
		return fmt.Errorf("%w: %s before prepare", errPauseExceeded, time.Since(pauseStart).Round(time.Millisecond))
	}
	if _, err := tx.Exec(fenceCtx, "PREPARE TRANSACTION "+quoteLiteral(m.Name())); err != nil {
		// It may have been prepared all the same: undo it, or leave it to
		// the recovery rule (which rolls it back: nothing was decided).
		_ = tx.Rollback(fenceCtx)
		_ = settlePrepared(fenceCtx, src, m.Name(), false)
		return fmt.Errorf("prepare fence on %s: %w", r.source.Addr(), err)
	}
	if err := r.cutoverHook("prepared"); err != nil {
		return err
	}
	// The decision: placements and journal in one coordinator transaction,
	// bounded by what is left of the budget.
	decideCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), pauseStart.Add(budget))
	err = r.e.cat.CommitCutover(decideCtx, metadata.CutoverFlip{
		MoveID: m.ID, ShardIDs: m.ShardIDs, SourceGroup: m.SourceGroup, TargetGroup: m.TargetGroup,
		OldTables: old, Lease: r.lease,
	})
	cancel()
	if err != nil {
		// Did the decision commit anyway? Ask the journal.
		cur, rerr := r.e.cat.Move(context.WithoutCancel(ctx), m.ID)
		if rerr != nil {
			// Unknown: leave the prepared transaction; the recovery rule
			// settles it once the journal can be read.
			return fmt.Errorf("cutover decision of move %d unknown (%v); the source stays fenced until recovery: %w", m.ID, rerr, err)
		}
		if !cur.CutoverCommitted {
			if rbErr := settlePrepared(context.WithoutCancel(ctx), src, m.Name(), false); rbErr != nil {
				return fmt.Errorf("roll back fence after failed decision: %w (decision error: %v)", rbErr, err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%w: decision not committed within the pause", errPauseExceeded)
			}
			return fmt.Errorf("cutover decision: %w", err)
		}
	}
	pause := time.Since(pauseStart)
	if err := r.cutoverHook("decided"); err != nil {
		return err
	}
	if err := settlePrepared(context.WithoutCancel(ctx), src, m.Name(), true); err != nil {
		// The decision stands; cleanup settles the fence again.
		return fmt.Errorf("commit fence: %w", err)
	}
	r.log.Info("cutover committed", zap.Duration("write_pause", time.Since(pauseStart)), zap.Stringer("lsn", lsn))
	r.recordPause(m.ID, pause)
	r.stopStream()
	return r.hook(Cutover)
}

func (r *run) recordPause(id int64, d time.Duration) {
	if r.e.cfg.OnCutover != nil {
		r.e.cfg.OnCutover(id, d)
	}
}
