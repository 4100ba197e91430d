package mover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ctxtime"
	"github.com/shardmover/shardmover/internal/pgerr"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
)

// run is one Run of one move: what lives only as long as this process
// does (the exported snapshot, the running stream).
type run struct {
	e     *Engine
	id    int64
	log   *zap.Logger
	lease *metadata.Lease

	source, target metadata.Node

	snapshot     *replication.Snapshot
	stream       *replication.Stream
	streamCancel context.CancelFunc
	streamDone   chan error

	cutoverBackoff time.Duration
	// copyRelease gives back the job's copy slot this run holds (nil:
	// none held).
	copyRelease func()
	// verified: verifyBeforeCutover found the group equal in this run (the
	// note for the journal); "" when not verified.
	verified string
	// targetFinished: this run committed the target's identity finishing
	// after the decision, so cleanup need not read both definitions again.
	targetFinished bool
	// decisionSettled: this run saw its decision commit and then committed
	// the fence and every Citus part itself (each found prepared), so the
	// cleanup phase of this run need not settle them again. A new run
	// (after a restart) always settles.
	decisionSettled bool
	// carryOverDue: a settlement in this run re-established the fence of a
	// committed decision; cleanup carries over what the source took before
	// it drops the slot.
	carryOverDue bool
	// validate are the statements that validate, after the cutover, the
	// foreign keys it added NOT VALID (set by the cutover that committed;
	// empty after a restart, when cleanup reads them again).
	validate []string
	// filenodes are the group's tables' relfilenodes on the source as setup
	// read them (the journal's source_filenodes), read again at each
	// cutover attempt; nil when not recorded.
	filenodes []int64

	// The stream, as the last readStream found it: the moves it carries
	// besides the run's own (riders, in id order), the move each of the
	// view's shard tables belongs to (owners), and the riders asked to
	// cancel before the decision (leaving).
	riders, owners, leaving []int64
}

// leaseTries and leaseRetry bound how long Run waits for a held move.
const (
	leaseTries = 5
	leaseRetry = 200 * time.Millisecond
)

// Run drives move id until it is done, failed or cancelled, resuming from
// its persisted phase. It returns nil when the move is done, an error
// saying why when it failed or was cancelled, ctx.Err() when stopped (the
// move can be resumed), and ErrLeased when another mover holds it.
func (e *Engine) Run(ctx context.Context, id int64) error {
	if m, err := e.cat.Move(ctx, id); err == nil && m.CarriedBy != 0 && !m.Terminal() {
		return e.runRider(ctx, m)
	}
	// A mover that just died may still hold the move for a moment, until
	// the server notices its connection is gone: ask a few times.
	var lease *metadata.Lease
	for try := 0; ; try++ {
		l, ok, err := e.cat.TryLease(ctx, id)
		if err != nil {
			return err
		}
		if ok {
			lease = l
			break
		}
		if try == leaseTries-1 {
			return fmt.Errorf("%w: move %d", ErrLeased, id)
		}
		if err := ctxtime.Sleep(ctx, leaseRetry); err != nil {
			return err
		}
	}
	r := &run{e: e, id: id, lease: lease, log: e.log.With(zap.Int64("move_id", id)), cutoverBackoff: e.cfg.CutoverBackoff}
	defer func() { r.lease.Release(context.WithoutCancel(ctx)) }()
	defer r.close()
	return r.loop(ctx)
}

// keepLease checks that the run still holds its move's lease. A lease lost
// with its connection (a coordinator restart, a cut) is taken again if no
// other mover took it meanwhile; if one did, the run stops with ErrLeased
// and leaves the move to it.
func (r *run) keepLease(ctx context.Context) error {
	err := r.lease.Held(ctx)
	if err == nil || ctx.Err() != nil {
		return ctx.Err()
	}
	r.log.Warn("lost the move's lease; taking it again", zap.Error(err))
	r.lease.Release(context.WithoutCancel(ctx))
	r.stopStream()
	l, ok, lerr := r.e.cat.TryLease(ctx, r.id)
	if lerr != nil {
		// The coordinator is unreachable: keep a dead lease, so the next
		// check tries again.
		r.lease = metadata.DeadLease(r.id)
		return lerr
	}
	if !ok {
		r.lease = metadata.DeadLease(r.id)
		return fmt.Errorf("%w: move %d was taken over after this mover lost its lease", ErrLeased, r.id)
	}
	r.lease = l
	return nil
}

func (r *run) close() {
	r.releaseCopySlot()
	r.stopStream()
	if r.snapshot != nil {
		_ = r.snapshot.Release(context.Background())
		r.snapshot = nil
	}
}

// Retry bounds of the loop: how fast a step that failed is tried again.
const (
	retryFirst = 500 * time.Millisecond
	retryMax   = 15 * time.Second
)

func (r *run) loop(ctx context.Context) error {
	// streak times the current run of failures, and errPhase is the
	// furthest phase it reached: a step back (copying -> setup after a
	// failed copy) does not restart the clock, only getting past errPhase
	// does. So a copy that keeps failing (a full disk) ends the move after
	// RetryFor instead of recopying forever.
	streak := pgerr.RetryCap{Max: r.e.cfg.RetryFor}
	var errPhase Phase
	wait := retryFirst
	conflicts := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := r.keepLease(ctx); err != nil {
			if errors.Is(err, ErrLeased) || ctx.Err() != nil {
				return err
			}
			r.log.Warn("coordinator unreachable, retrying", zap.Error(err), zap.Duration("retry_in", wait))
			if err := ctxtime.Sleep(ctx, wait); err != nil {
				return err
			}
			wait = min(2*wait, retryMax)
			continue
		}
		m, err := r.readStream(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, metadata.ErrNotFound) && !errors.Is(err, errCarried) {
				r.log.Warn("read the move, retrying", zap.Error(err), zap.Duration("retry_in", wait))
				if err := ctxtime.Sleep(ctx, wait); err != nil {
					return err
				}
				wait = min(2*wait, retryMax)
				continue
			}
			return err
		}
		phase, err := ParsePhase(string(m.Phase))
		if err != nil {
			return err
		}
		switch phase {
		case Done:
			return nil
		case Failed:
			return fmt.Errorf("move %d failed: %s", m.ID, m.Error)
		case Cancelled:
			return fmt.Errorf("move %d was cancelled", m.ID)
		}
		if r.source.ID == 0 {
			if err := r.resolveNodes(ctx, m); err != nil {
				return r.fail(ctx, m, phase, err)
			}
		}
		if m.CancelRequested && !m.CutoverCommitted {
			return r.abort(ctx, m, phase, Cancelled, "cancelled by request")
		}
		if len(r.leaving) > 0 {
			// Riders asked to cancel leave the stream, which is set up
			// again without them; the others go on.
			if err := r.dropRiders(ctx, m, phase, r.leaving); err != nil && !errors.Is(err, errPastDecision) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r.log.Warn("taking cancelled moves out of the stream, retrying", zap.Int64s("moves", r.leaving), zap.Error(err), zap.Duration("retry_in", wait))
				if err := ctxtime.Sleep(ctx, wait); err != nil {
					return err
				}
				wait = min(2*wait, retryMax)
			}
			continue
		}
		err = r.guarded(ctx, m, phase) // the step, under the WAL-retention guard
		switch {
		case err == nil:
			conflicts = 0
			if streak.Failing() {
				if next, perr := r.e.cat.Move(ctx, r.id); perr == nil { // the lead's row: its phase is the stream's
					if p, _ := ParsePhase(string(next.Phase)); p > errPhase {
						streak.Reset()
						errPhase, wait = 0, retryFirst
					}
				}
			}
			continue
		case errors.Is(err, ErrKilled):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, metadata.ErrLeaseLost):
			continue // the next turn takes the lease again, or stops
		case errors.Is(err, metadata.ErrPhaseConflict):
			// Re-read the row: a cancel or another transition won. Repeated
			// conflicts back off instead of spinning.
			conflicts++
			if conflicts > 3 {
				r.log.Warn("phase conflict, backing off", zap.Error(err), zap.Int("conflicts", conflicts))
				if err := ctxtime.Sleep(ctx, min(time.Duration(conflicts)*retryFirst, retryMax)); err != nil {
					return err
				}
			}
			continue
		case isPermanent(err) || phase <= Preflight:
			if m.CutoverCommitted {
				return err // past the decision a move never fails: it must finish
			}
			if ferr := r.fail(ctx, m, phase, err); !errors.Is(ferr, errPastDecision) {
				return ferr
			}
			continue // the decision committed after all: the move finishes
		}
		// Transient: retry the step with backoff, but not for longer than
		// RetryFor without getting past the phase where it began.
		if !streak.Failing() {
			errPhase = phase
		}
		errPhase = max(errPhase, phase)
		exceeded := streak.Fail()
		r.log.Warn("step failed, retrying", zap.String("phase", phase.String()), zap.Error(err), zap.Duration("retry_in", wait))
		if exceeded && !m.CutoverCommitted {
			if ferr := r.fail(ctx, m, phase, fmt.Errorf("gave up after %s: %w", r.e.cfg.RetryFor, err)); !errors.Is(ferr, errPastDecision) {
				return ferr
			}
			continue
		}
		if err := ctxtime.Sleep(ctx, wait); err != nil {
			return err
		}
		wait = min(2*wait, retryMax)
	}
}

func (r *run) resolveNodes(ctx context.Context, m metadata.Move) error {
	nodes, err := r.e.nodes(ctx)
	if err != nil {
		return err
	}
	var ok bool
	if r.source, ok = nodes[m.SourceGroup]; !ok {
		return permanent(fmt.Errorf("source node group %d of move %d is not registered", m.SourceGroup, m.ID))
	}
	if r.target, ok = nodes[m.TargetGroup]; !ok {
		return permanent(fmt.Errorf("target node group %d of move %d is not registered", m.TargetGroup, m.ID))
	}
	return nil
}

// step runs the work of one phase and persists the transition out of it.
func (r *run) step(ctx context.Context, m metadata.Move, p Phase) error {
	switch p {
	case Scheduled:
		return r.changePhase(ctx, m, Scheduled, Preflight, stepped, "picked", "")
	case Preflight:
		if err := r.e.preflight(ctx, m, r.source, r.target); err != nil {
			return err
		}
		return r.changePhase(ctx, m, Preflight, Setup, stepped, "checks passed", "")
	case Setup:
		return r.setup(ctx, m)
	case Copying:
		if r.snapshot == nil {
			// The exported snapshot died with the process that made it.
			return r.changePhase(ctx, m, Copying, Setup, stepped, "snapshot lost in a restart; setting up again", "")
		}
		return r.copy(ctx, m)
	case Indexing:
		return r.index(ctx, m)
	case CatchingUp:
		return r.catchUp(ctx, m)
	case Cutover:
		return r.cutover(ctx, m)
	case Cleanup:
		return r.cleanup(ctx, m)
	}
	return fmt.Errorf("no step for phase %s", p)
}

// holdCopySlot waits, in a job, for the move's turn to copy (Limits count
// copy streams). The turn is kept through copying and indexing and given
// back when the move leaves them or the run ends.
func (r *run) holdCopySlot(ctx context.Context) error {
	if r.copyRelease != nil || r.e.copySlot == nil {
		return nil
	}
	release, err := r.e.copySlot(ctx, r.id)
	if err != nil {
		return err
	}
	r.copyRelease = release
	return nil
}

func (r *run) releaseCopySlot() {
	if r.copyRelease != nil {
		r.copyRelease()
		r.copyRelease = nil
	}
}

// phaseChange says how a move's phase changed; see changePhase.
type phaseChange int

const (
	// stepped: the step of phase from finished; recorded by changePhase.
	stepped phaseChange = iota
	// decided: the cutover decision recorded cutover -> cleanup in the
	// transaction that flipped the placements.
	decided
	// rolledBack: a cutover attempt rolled back to catching_up.
	rolledBack
	// aborted: the move ends failed or cancelled.
	aborted
)

// changePhase is the one way a move's phase changes. It records from -> to
// under the run's lease (unless the decision already recorded it), logs it,
// reports progress, and runs the AfterPhase hook when the step of phase
// from completed (stepped, decided); a rollback or an abort did not
// complete it, so no hook runs for them.
func (r *run) changePhase(ctx context.Context, m metadata.Move, from, to Phase, how phaseChange, why, errText string) error {
	if how != decided {
		if err := r.e.cat.SetPhaseLeased(ctx, r.lease, m.ID, from.String(), to.String(), why, errText); err != nil {
			return err
		}
	}
	if to != Setup && to != Copying && to != Indexing {
		r.releaseCopySlot()
	}
	r.log.Info("phase changed", zap.String("from", from.String()), zap.String("phase", to.String()), zap.String("why", why))
	r.progress(Progress{MoveID: m.ID, Phase: to, BytesDone: m.BytesCopied, BytesTotal: m.BytesTotal})
	if how == stepped || how == decided {
		return r.hook(from)
	}
	return nil
}

func (r *run) hook(p Phase) error {
	if r.e.cfg.AfterPhase == nil {
		return nil
	}
	if err := r.e.cfg.AfterPhase(r.id, p); err != nil {
		return fmt.Errorf("%w: after %s: %v", ErrKilled, p, err)
	}
	return nil
}

func (r *run) cutoverHook(step string) error {
	if r.e.cfg.CutoverStep == nil {
		return nil
	}
	if err := r.e.cfg.CutoverStep(r.id, step); err != nil {
		return fmt.Errorf("%w: cutover %s: %v", ErrKilled, step, err)
	}
	return nil
}

func (r *run) progress(p Progress) {
	if r.e.cfg.OnProgress != nil {
		r.e.cfg.OnProgress(p)
	}
}

// shardIdents returns the move's shard tables. The journal stores them
// quoted (metadata.QualifiedName); a name it cannot read was written by
// no version of ours and is passed through whole as one identifier, which
// then fails to resolve rather than naming some other table.
func shardIdents(m metadata.Move) []pgx.Identifier {
	out := make([]pgx.Identifier, len(m.ShardTables))
	for i, t := range m.ShardTables {
		id, err := metadata.ParseQualifiedName(t)
		if err != nil {
			id = pgx.Identifier{t}
		}
		out[i] = id
	}
	return out
}

// movedName is the fenced name of an old shard (metadata.FencedName):
// <shard>_moved_<moveid>, with a prefix and a hash when that would pass 63
// bytes.
func movedName(name string, moveID int64) string { return metadata.FencedName(name, moveID) }
