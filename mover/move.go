package mover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
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
	// targetFinished: this run committed the target's identity finishing
	// after the decision, so cleanup need not read both definitions again.
	targetFinished bool
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
		m, err := r.e.cat.Move(ctx, r.id)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, metadata.ErrNotFound) {
				r.log.Warn("read the move, retrying", zap.Error(err), zap.Duration("retry_in", wait))
				if err := ctxtime.Sleep(ctx, wait); err != nil {
					return err
				}
				wait = min(2*wait, retryMax)
				continue
			}
			return err
		}
		phase, err := ParsePhase(m.Phase)
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
		err = r.guarded(ctx, m, phase) // the step, under the WAL-retention guard
		switch {
		case err == nil:
			conflicts = 0
			if streak.Failing() {
				if next, perr := r.e.cat.Move(ctx, r.id); perr == nil {
					if p, _ := ParsePhase(next.Phase); p > errPhase {
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
		return r.transition(ctx, m, Scheduled, Preflight, "picked")
	case Preflight:
		if err := r.e.preflight(ctx, m, r.source, r.target); err != nil {
			return err
		}
		return r.transition(ctx, m, Preflight, Setup, "checks passed")
	case Setup:
		return r.setup(ctx, m)
	case Copying:
		if r.snapshot == nil {
			// The exported snapshot died with the process that made it.
			return r.transition(ctx, m, Copying, Setup, "snapshot lost in a restart; setting up again")
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

// transition persists from -> to and then runs the AfterPhase hook.
func (r *run) transition(ctx context.Context, m metadata.Move, from, to Phase, msg string) error {
	if err := r.setPhase(ctx, m.ID, from, to, msg, ""); err != nil {
		return err
	}
	r.log.Info("phase changed", zap.String("from", from.String()), zap.String("phase", to.String()), zap.String("why", msg))
	r.progress(Progress{MoveID: m.ID, Phase: to, BytesDone: m.BytesCopied, BytesTotal: m.BytesTotal})
	return r.hook(from)
}

// setPhase persists a phase change if this run still holds the move's
// lease (checked in the same coordinator transaction).
func (r *run) setPhase(ctx context.Context, id int64, from, to Phase, msg, errText string) error {
	return r.e.cat.SetPhaseLeased(ctx, r.lease, id, from.String(), to.String(), msg, errText)
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

// connectBoth opens one connection to the source and one to the target.
func (r *run) connectBoth(ctx context.Context) (*pgx.Conn, *pgx.Conn, error) {
	src, err := r.e.connect(ctx, r.source)
	if err != nil {
		return nil, nil, err
	}
	dst, err := r.e.connect(ctx, r.target)
	if err != nil {
		src.Close(ctx)
		return nil, nil, err
	}
	return src, dst, nil
}

func closeBoth(ctx context.Context, conns ...*pgx.Conn) {
	for _, c := range conns {
		c.Close(context.WithoutCancel(ctx))
	}
}

// setup creates the target tables, the publication and the slot with its
// exported snapshot. Anything a crashed earlier attempt left is dropped
// first: every artifact was recorded before it was created.
func (r *run) setup(ctx context.Context, m metadata.Move) error {
	if err := r.dropArtifacts(ctx, m, metadata.CleanupAlways, metadata.CleanupOnFailure); err != nil {
		return err
	}
	// On Citus, reference tables first, as Citus does before a move.
	if err := r.e.cat.EnsureReferenceTables(ctx); err != nil {
		return err
	}
	src, dst, err := r.connectBoth(ctx)
	if err != nil {
		return err
	}
	defer closeBoth(ctx, src, dst)
	if r.citus() {
		if err := metadata.ActAsCitusRebalancer(ctx, dst); err != nil {
			return err
		}
	}
	for _, t := range shardIdents(m) {
		ddl, err := metadata.ReadTableDDL(ctx, src, t)
		if err != nil {
			return err
		}
		if err := r.e.cat.AddCleanup(ctx, m.ID, m.TargetGroup, "table", metadata.QualifiedName(t), metadata.CleanupOnFailure); err != nil {
			return err
		}
		// Identity columns are BY DEFAULT until the cutover's FinishStatements.
		if err := metadata.RunDDL(ctx, dst, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{t[0]}.Sanitize(),
			ddl.CreateStatement(t, "", metadata.MoveTarget)); err != nil {
			return fmt.Errorf("create %s on %s: %w", t.Sanitize(), r.target.Addr(), err)
		}
	}
	name := m.Name()
	if err := r.e.cat.AddCleanup(ctx, m.ID, m.SourceGroup, "publication", name, metadata.CleanupAlways); err != nil {
		return err
	}
	if err := replication.CreatePublication(ctx, src, name, shardIdents(m)); err != nil {
		return err
	}
	if err := r.e.cat.AddCleanup(ctx, m.ID, m.TargetGroup, "origin", name, metadata.CleanupAlways); err != nil {
		return err
	}
	if err := r.e.cat.AddCleanup(ctx, m.ID, m.SourceGroup, "slot", name, metadata.CleanupAlways); err != nil {
		return err
	}
	snap, err := replication.CreateSlot(ctx, r.e.dsn(r.source), name)
	if err != nil {
		return err
	}
	r.snapshot = snap
	r.log.Info("slot created", zap.String("slot", name), zap.Stringer("lsn", snap.ConsistentLSN))
	if err := r.e.cat.SetProgress(ctx, m.ID, 0, 0, snap.ConsistentLSN.String(), ""); err != nil {
		return err
	}
	return r.transition(ctx, m, Setup, Copying, "slot "+name+" at "+snap.ConsistentLSN.String())
}

// copy copies every table from the exported snapshot.
func (r *run) copy(ctx context.Context, m metadata.Move) error {
	last := time.Now()
	res, err := replication.Copy(ctx, replication.CopyOptions{
		SourceDSN:      r.e.dsn(r.source),
		TargetDSN:      r.e.dsn(r.target),
		Snapshot:       r.snapshot.Name,
		Tables:         shardIdents(m),
		Workers:        r.e.cfg.CopyWorkers,
		RangesPerTable: r.e.cfg.RangesPerTable,
		BytesPerSecond: r.e.cfg.BytesPerSecond,
		Limiter:        r.e.copyLimiter,
		Progress: func(done, total int64) {
			r.progress(Progress{MoveID: m.ID, Phase: Copying, BytesDone: done, BytesTotal: total})
			if time.Since(last) > time.Second {
				last = time.Now()
				_ = r.e.cat.SetProgress(ctx, m.ID, done, total, "", "")
			}
		},
		Logger: r.log,
	})
	_ = r.snapshot.Release(ctx)
	r.snapshot = nil
	if err != nil {
		return err
	}
	if err := r.e.cat.SetProgress(ctx, m.ID, res.Bytes, res.Bytes, "", ""); err != nil {
		return err
	}
	return r.transition(ctx, m, Copying, Indexing, fmt.Sprintf("%d rows, %d bytes", res.Rows, res.Bytes))
}

// index builds secondary indexes (and other constraints the source has) on
// the target and analyzes the tables.
func (r *run) index(ctx context.Context, m metadata.Move) error {
	src, dst, err := r.connectBoth(ctx)
	if err != nil {
		return err
	}
	defer closeBoth(ctx, src, dst)
	if r.citus() {
		if err := metadata.ActAsCitusRebalancer(ctx, dst); err != nil {
			return err
		}
	}
	for _, t := range shardIdents(m) {
		ddl, err := metadata.ReadTableDDL(ctx, src, t)
		if err != nil {
			return err
		}
		// Indexes, NOT VALID constraints and the replica identity, then
		// ANALYZE: each without statement_timeout, one statement at a time.
		if err := metadata.RunDDL(ctx, dst, append(ddl.IndexStatements(t, ""), "ANALYZE "+t.Sanitize())...); err != nil {
			return fmt.Errorf("build indexes of %s on %s: %w", t.Sanitize(), r.target.Addr(), err)
		}
	}
	return r.transition(ctx, m, Indexing, CatchingUp, "indexes built")
}

// startStream runs the applier in the background until stopStream.
func (r *run) startStream(ctx context.Context, m metadata.Move) error {
	if r.stream != nil {
		select {
		case err := <-r.streamDone:
			r.stream, r.streamDone = nil, nil
			r.streamCancel()
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("applier stopped: %w", err)
			}
		default:
			return nil
		}
	}
	start, err := pglogrepl.ParseLSN(m.SourceLSN)
	if err != nil {
		return permanent(fmt.Errorf("move %d has no valid slot position %q", m.ID, m.SourceLSN))
	}
	s, err := replication.NewStream(replication.StreamConfig{
		SourceDSN:   r.e.dsn(r.source),
		TargetDSN:   r.e.dsn(r.target),
		Slot:        m.Name(),
		Publication: m.Name(),
		Origin:      m.Name(),
		StartLSN:    start,
		Logger:      r.log,
	})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	r.stream, r.streamCancel, r.streamDone = s, cancel, done
	return nil
}

func (r *run) stopStream() {
	if r.stream == nil {
		return
	}
	r.streamCancel()
	<-r.streamDone
	r.stream, r.streamDone, r.streamCancel = nil, nil, nil
}

// streamErr returns the applier's error if it stopped.
func (r *run) streamErr() error {
	if r.stream == nil {
		return errors.New("applier not running")
	}
	select {
	case err := <-r.streamDone:
		r.streamCancel()
		r.stream, r.streamDone, r.streamCancel = nil, nil, nil
		if err == nil {
			err = errors.New("applier stopped")
		}
		return fmt.Errorf("applier: %w", err)
	default:
		return nil
	}
}

// catchUp streams until the lag is under the cutover gate. The byte lag is
// measured against the source's current WAL insert position (not against
// what the applier has heard of, which is nothing before it connects); the
// time lag is the age of the oldest received, unapplied transaction.
func (r *run) catchUp(ctx context.Context, m metadata.Move) error {
	if err := r.startStream(ctx, m); err != nil {
		return err
	}
	src, err := r.e.connect(ctx, r.source)
	if err != nil {
		return err
	}
	defer src.Close(context.WithoutCancel(ctx))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastSave := time.Now()
	for {
		if err := r.streamErr(); err != nil {
			return err
		}
		var current string
		if err := src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&current); err != nil {
			return err
		}
		head, err := pglogrepl.ParseLSN(current)
		if err != nil {
			return err
		}
		processed := r.stream.Processed()
		var lagBytes uint64
		if head > processed {
			lagBytes = uint64(head - processed)
		}
		_, lag := r.stream.Lag()
		r.progress(Progress{MoveID: m.ID, Phase: CatchingUp, BytesDone: m.BytesCopied, BytesTotal: m.BytesTotal, LagBytes: lagBytes, Lag: lag})
		if time.Since(lastSave) > 2*time.Second {
			lastSave = time.Now()
			_ = r.e.cat.SetProgress(ctx, m.ID, m.BytesCopied, m.BytesTotal, "", processed.String())
			if err := r.lease.Held(ctx); err != nil {
				return err // the loop takes the lease again, or stops
			}
			cur, err := r.e.cat.Move(ctx, m.ID)
			if err == nil && cur.CancelRequested {
				return metadata.ErrPhaseConflict // re-read: the loop cancels
			}
		}
		if processed > 0 && lagBytes <= r.e.cfg.CutoverMaxLagBytes && lag <= r.e.cfg.CutoverMaxLag {
			_ = r.e.cat.SetProgress(ctx, m.ID, m.BytesCopied, m.BytesTotal, "", processed.String())
			return r.transition(ctx, m, CatchingUp, Cutover, fmt.Sprintf("lag %d bytes, %s", lagBytes, lag.Round(time.Millisecond)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }

// isPermanent: our own permanent errors, replication's, refusals, and
// SQLSTATEs that no retry fixes (pgerr.IsPermanent: data, integrity,
// authorization, syntax and access rules, disk full).
func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p) || errors.Is(err, metadata.ErrInvalid) || errors.Is(err, replication.ErrPermanent) || pgerr.IsPermanent(err)
}
