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

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
	"github.com/shardmover/shardmover/verify"
)

// Verify before cutover (Config.Verify, docs/design.md 6.1): the group's
// tables are compared on the source and the target read at one replication
// position, while the application keeps writing.
//
//  1. The applier is held below the source's current insert position L
//     (replication.Stream.Hold): it goes on applying up to L and stops there.
//  2. A temporary logical slot shardmover_<moveid>_verify is created on the
//     source: its consistent point C (>= L) and exported snapshot. A source
//     transaction imports the snapshot: it sees exactly the transactions
//     whose commit record starts before C. The slot's connection is then
//     closed, which drops the slot.
//  3. The hold moves up to C: the applier commits every transaction below C
//     on the target and stops before the first at or past it. A target
//     transaction takes its snapshot then, and the hold is released: the
//     applier paused from reaching L until then, the application never.
//  4. Both snapshots are compared table by table (verify.CompareTx), as
//     gently as VerifyBytesPerSecond asks. Any difference fails the move.
//
// The hold starts below L, before C is known, because the applier runs
// close behind the source: by the time the slot returns C it may already
// have applied transactions past C, and a target read after that cannot be
// compared with the snapshot.
const (
	// verifySlotTimeout bounds creating the temporary slot, which waits
	// for the transactions running on the source to end.
	verifySlotTimeout = 2 * time.Minute
	// verifyHoldTimeout bounds how long the applier may take to reach C.
	verifyHoldTimeout = 2 * time.Minute
	// verifyWatchEvery is how often a running verify checks the lease and
	// a cancel request.
	verifyWatchEvery = 2 * time.Second
)

// verifyBeforeCutover compares the move's tables on source and target at
// one replication position, once per run when Config.Verify is set. fresh
// is true when it compared just now (the caller measures the lag again: the
// comparison took time); a difference is a permanent error naming the
// table, both counts and checksums, and the first differing keys.
func (r *run) verifyBeforeCutover(ctx context.Context, m metadata.Move) (fresh bool, err error) {
	if !r.e.cfg.Verify || r.verified != "" {
		return false, nil
	}
	if r.stream == nil {
		return false, errors.New("verify before cutover: the applier is not running")
	}
	began := time.Now()
	vctx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); r.watchVerify(vctx, cancel) }()
	res, at, held, err := r.compareAtOnePoint(vctx, m)
	if cause := context.Cause(vctx); err != nil && cause != nil && ctx.Err() == nil {
		err = cause // a cancel request or a lost lease stopped it
	}
	cancel(nil)
	<-watched // the lease's connection is the run's again
	if err != nil {
		r.log.Warn("verify before cutover did not complete", zap.Duration("took", time.Since(began)), zap.Error(err))
		return false, err
	}
	var rows int64
	var diff []verify.TableResult
	for _, t := range res {
		if !t.Match {
			diff = append(diff, t)
		} else if t.Source != nil {
			rows += t.Source.Rows
		}
	}
	took := time.Since(began).Round(time.Millisecond)
	if len(diff) > 0 {
		var more string
		if len(diff) > 1 {
			var names []string
			for _, t := range diff[1:] {
				names = append(names, t.Table)
			}
			more = fmt.Sprintf(" (%s also differ)", strings.Join(names, ", "))
		}
		r.log.Error("verify before cutover found a difference", zap.Duration("took", took), zap.Stringer("position", at), zap.Int("tables_differing", len(diff)))
		return false, permanent(fmt.Errorf("verify before cutover refused the cutover: at source position %s, %s%s; the group stays on %s: something changed the target's copy behind the move's back",
			at, diff[0].Describe(), more, r.source.Addr()))
	}
	r.verified = fmt.Sprintf("; verified equal at %s (%d tables, %d rows, %s)", at, len(res), rows, took)
	r.log.Info("verify before cutover: source and target equal", zap.Stringer("position", at), zap.Int("tables", len(res)),
		zap.Int64("rows", rows), zap.Duration("took", took), zap.Duration("applier_reached_it_in", held))
	return true, nil
}

// watchVerify stops a running verify when the run loses its lease or the
// move (or one its stream carries) is asked to cancel, as the catch-up loop
// does between its turns. The lease's check is never cancelled midway (pgx
// closes a connection whose query is cancelled, which would lose the
// lease).
func (r *run) watchVerify(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(verifyWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := r.lease.Held(hctx)
		hcancel()
		if err != nil {
			cancel(err)
			return
		}
		if r.cancelAsked(ctx) {
			cancel(metadata.ErrPhaseConflict) // re-read: the loop cancels
			return
		}
	}
}

// compareAtOnePoint runs steps 1 to 4 above and returns the comparison,
// the position C, and how long the applier took to reach C once it was known.
func (r *run) compareAtOnePoint(ctx context.Context, m metadata.Move) ([]verify.TableResult, pglogrepl.LSN, time.Duration, error) {
	bg := context.WithoutCancel(ctx)
	src, err := r.e.connect(ctx, r.source)
	if err != nil {
		return nil, 0, 0, err
	}
	defer src.Close(bg)
	tgt, err := r.e.connect(ctx, r.target)
	if err != nil {
		return nil, 0, 0, err
	}
	defer tgt.Close(bg)

	// 1. Hold below the insert position. The applier may let a transaction
	// past it between the read and the hold; then read it again.
	var low *replication.Hold
	for try := 0; low == nil; try++ {
		lsn, err := replication.CurrentLSN(ctx, src)
		if err != nil {
			return nil, 0, 0, err
		}
		low, err = r.stream.Hold(lsn)
		if err != nil && (!errors.Is(err, replication.ErrHoldPassed) || try >= 10) {
			return nil, 0, 0, fmt.Errorf("verify before cutover: hold the applier: %w", err)
		}
	}
	defer low.Release()

	// 2. The consistent point and the source's snapshot at it.
	sctx, scancel := context.WithTimeout(ctx, verifySlotTimeout)
	snap, err := replication.CreateTemporarySlot(sctx, r.e.dsn(r.source), m.Name()+"_verify")
	scancel()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("verify before cutover: %w", err)
	}
	defer func() { _ = snap.Release(bg) }()
	at := snap.ConsistentLSN
	stx, err := src.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, 0, 0, err
	}
	defer func() { _ = stx.Rollback(bg) }()
	if err := replication.ImportSnapshot(ctx, stx, snap.Name); err != nil {
		return nil, 0, 0, err
	}
	if err := snap.Release(ctx); err != nil { // the temporary slot goes with its connection
		return nil, 0, 0, err
	}

	// 3. The target at C. BEGIN takes no snapshot; the first query does.
	ttx, err := tgt.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, 0, 0, err
	}
	defer func() { _ = ttx.Rollback(bg) }()
	hold, err := r.stream.Hold(at)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("verify before cutover: hold the applier at %s: %w", at, err)
	}
	defer hold.Release()
	low.Release()
	heldFrom := time.Now()
	hctx, hcancel := context.WithTimeout(ctx, verifyHoldTimeout)
	err = hold.Wait(hctx)
	hcancel()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("verify before cutover: wait for the applier to reach %s: %w", at, err)
	}
	if _, err := ttx.Exec(ctx, "SELECT 1"); err != nil {
		return nil, 0, 0, err
	}
	hold.Release()
	held := time.Since(heldFrom)

	// 4. Compare.
	res, err := verify.CompareTx(ctx, stx, ttx, shardIdents(m), verify.Options{BytesPerSecond: r.e.cfg.VerifyBytesPerSecond})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("verify before cutover: %w", err)
	}
	for i := range res {
		if res[i].Source != nil {
			res[i].Source.Node = r.source.Addr()
		}
		if res[i].Target != nil {
			res[i].Target.Node = r.target.Addr()
		}
	}
	return res, at, held, nil
}
