package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
)

// One stream per source and target (docs/design.md 6.2): a job's moves
// between the same two node groups can ride one stream, the first of
// them (the lead) carrying the others (riders). Each keeps its journal
// row; the lead's run drives them all, over a view of the stream that
// holds every member's shards and tables (readStream): one publication,
// one slot, one copy, one applier, one cutover and one cleanup, all named
// after the lead. The journal moves the riders' phases with the lead's
// in the same transaction, and the lead's decision flips every member.
// A rider asked to cancel before the decision leaves the stream, which
// is set up again without it (dropRiders); the lead's cancel cancels them
// all.

// errCarried: the run's move rides another move's stream.
var errCarried = errors.New("carried by another move's stream")

// streamBytesCap bounds the bytes one stream carries: a stream never
// grows past it with a second group (a group larger than it still moves,
// alone). A longer stream holds its slot, and the source's WAL, longer.
const streamBytesCap = 1 << 30

// formStreams groups moves (a job's unfinished moves, in plan order) into
// streams of at most perStream groups and streamBytesCap bytes: a move
// joins the open stream of its source and target when it has not started,
// nothing carries it yet, and no move between them in the plan moves out
// of that target (the plan may free space there first). It returns each
// lead's riders.
func formStreams(moves []metadata.Move, perStream int) map[int64][]int64 {
	type pair struct{ src, dst int32 }
	type open struct {
		lead  int64
		n     int
		bytes int64
	}
	out := map[int64][]int64{}
	streams := map[pair]*open{}
	for _, m := range moves {
		for p := range streams {
			if p.dst == m.SourceGroup {
				delete(streams, p) // m frees space on that target: later moves wait for it
			}
		}
		if perStream < 2 || metadata.Phase(m.Phase) != metadata.PhaseScheduled || m.CancelRequested || m.CarriedBy != 0 {
			continue
		}
		p := pair{m.SourceGroup, m.TargetGroup}
		if s := streams[p]; s != nil && s.n < perStream && s.bytes+m.BytesTotal <= streamBytesCap {
			out[s.lead] = append(out[s.lead], m.ID)
			s.n++
			s.bytes += m.BytesTotal
			continue
		}
		streams[p] = &open{lead: m.ID, n: 1, bytes: m.BytesTotal}
	}
	return out
}

// carryStreams records the streams formStreams found (each in its own
// transaction). A stream the journal refuses (a move changed meanwhile)
// is left out: its moves run alone.
func (e *Engine) carryStreams(ctx context.Context, moves []metadata.Move, perStream int) error {
	streams := formStreams(moves, perStream)
	leads := make([]int64, 0, len(streams))
	for lead, riders := range streams {
		if len(riders) > 0 {
			leads = append(leads, lead)
		}
	}
	slices.Sort(leads)
	for _, lead := range leads {
		err := e.cat.Carry(ctx, lead, streams[lead])
		switch {
		case errors.Is(err, metadata.ErrPhaseConflict):
			e.log.Warn("moves not carried in one stream; each runs alone", zap.Int64("lead", lead), zap.Error(err))
		case err != nil:
			return err
		default:
			e.log.Info("moves carried in one stream", zap.Int64("lead", lead), zap.Int64s("riders", streams[lead]))
		}
	}
	return nil
}

// runRider runs the stream that carries rider m, and says how m ended.
func (e *Engine) runRider(ctx context.Context, m metadata.Move) error {
	err := e.Run(ctx, m.CarriedBy)
	cur, rerr := e.cat.Move(context.WithoutCancel(ctx), m.ID)
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	switch metadata.Phase(cur.Phase) {
	case metadata.PhaseDone:
		return nil
	case metadata.PhaseFailed:
		return fmt.Errorf("move %d failed: %s", m.ID, cur.Error)
	case metadata.PhaseCancelled:
		return fmt.Errorf("move %d was cancelled", m.ID)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("move %d is unfinished, and the stream of move %d that carries it ended", m.ID, m.CarriedBy)
}

// readStream reads the run's move and the moves its stream carries, and
// returns the view the steps work on: the lead's row with every member's
// shards and tables (the lead's first, then each rider's in id order).
// The lead's row holds the stream's bytes and progress. It sets
// r.riders, r.owners and r.leaving.
func (r *run) readStream(ctx context.Context) (metadata.Move, error) {
	ms, err := r.e.cat.Stream(ctx, r.id)
	if err != nil {
		return metadata.Move{}, err
	}
	m := ms[0]
	if m.CarriedBy != 0 && !m.Terminal() {
		return m, fmt.Errorf("%w: move %d rides the stream of move %d, whose run moves it", errCarried, m.ID, m.CarriedBy)
	}
	r.riders, r.owners, r.leaving = nil, nil, nil
	for range m.ShardTables {
		r.owners = append(r.owners, m.ID)
	}
	if len(ms) == 1 {
		return m, nil
	}
	m.ShardIDs = slices.Clone(m.ShardIDs)
	m.ShardTables = slices.Clone(m.ShardTables)
	for _, x := range ms[1:] {
		r.riders = append(r.riders, x.ID)
		if x.CancelRequested && !x.CutoverCommitted {
			r.leaving = append(r.leaving, x.ID)
		}
		m.ShardIDs = append(m.ShardIDs, x.ShardIDs...)
		m.ShardTables = append(m.ShardTables, x.ShardTables...)
		for range x.ShardTables {
			r.owners = append(r.owners, x.ID)
		}
	}
	return m, nil
}

// cancelAsked reports whether the run's move, or a move its stream
// carries, was asked to cancel (a step waiting on something long returns
// so that the loop acts on it).
func (r *run) cancelAsked(ctx context.Context) bool {
	ms, err := r.e.cat.Stream(ctx, r.id)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.CancelRequested && !m.CutoverCommitted {
			return true
		}
	}
	return false
}

// dropRiders takes the riders ids out of the stream of m (in phase p)
// before its decision: the stream stops, a cutover attempt in flight is
// settled first (a decision that committed after all keeps them: they
// finish, errPastDecision), and then one journal transaction ends them
// cancelled and sends the lead back to setup, which drops everything the
// stream made (their target tables included) and makes it again without
// them.
func (r *run) dropRiders(ctx context.Context, m metadata.Move, p Phase, ids []int64) error {
	r.stopStream()
	if r.snapshot != nil {
		_ = r.snapshot.Release(context.WithoutCancel(ctx))
		r.snapshot = nil
	}
	if p >= Cutover {
		st, err := r.settle(ctx, m)
		if err != nil {
			return err
		}
		if st.Committed {
			return errPastDecision
		}
	}
	if err := r.e.cat.DropRiders(ctx, r.lease, m.ID, p.Journal(), ids, "cancelled by request"); err != nil {
		return err
	}
	r.log.Info("cancelled moves left the stream; it goes on without them", zap.Int64s("moves", ids), zap.String("phase", p.String()))
	for _, id := range ids {
		r.progress(Progress{MoveID: id, Phase: Cancelled})
	}
	return nil
}

// cancelRider rolls rider m out of its stream when no mover runs the
// stream: it takes the lead's lease, takes m out (dropRiders), and drops
// what the stream made, which its next setup would make again. When a
// mover holds the lead, that mover takes m out (ErrLeased).
func (e *Engine) cancelRider(ctx context.Context, m metadata.Move) error {
	lease, ok, err := e.cat.TryLease(ctx, m.CarriedBy)
	if err != nil {
		return err
	}
	if !ok {
		return ErrLeased
	}
	r := &run{e: e, id: m.CarriedBy, lease: lease, log: e.log.With(zap.Int64("move_id", m.CarriedBy)), cutoverBackoff: e.cfg.CutoverBackoff}
	defer func() { r.lease.Release(context.WithoutCancel(ctx)) }()
	defer r.close()
	view, err := r.readStream(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(r.leaving, m.ID) {
		return nil // it ended, or its decision committed: nothing to take out
	}
	p, err := ParsePhase(string(view.Phase))
	if err != nil {
		return err
	}
	if err := r.resolveNodes(ctx, view); err != nil {
		return err
	}
	if err := r.dropRiders(ctx, view, p, r.leaving); err != nil {
		return err
	}
	if p >= Setup {
		return r.dropArtifacts(ctx, view, metadata.CleanupAlways, metadata.CleanupOnFailure)
	}
	return nil
}
