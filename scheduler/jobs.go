package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// MoveRequest is a one-shot move (`shardmover move`): the shard groups
// holding ShardIDs move to Target, as one job of kind "move".
type MoveRequest struct {
	// ShardIDs name the groups to move, by any shard of each; two shards of
	// one group move it once.
	ShardIDs []int64
	Target   metadata.Node
	// Limits bound how the job's moves run together, as for a rebalance.
	Limits mover.Limits
	// DryRun runs the preflight checks only; nothing is recorded.
	DryRun bool
	// OnJob, when set, learns the job and its moves once they are recorded.
	OnJob func(metadata.Job, []metadata.Move)
}

// MoveOutcome is what a one-shot move did.
type MoveOutcome struct {
	// Specs are the moves resolved from the request, in its order.
	Specs []metadata.MoveSpec
	// Job is nil when nothing was recorded (a dry run, or a refusal).
	Job *metadata.Job
	// Moves are the job's moves as they ended, in id order (the order of
	// Specs).
	Moves  []metadata.Move
	Result mover.JobResult
}

// Move resolves and preflights a one-shot move, records it as a job and
// runs it through mover.RunJob within req.Limits. Its error says, per
// move that did not end done, whether the source still serves the group
// (failed or cancelled) or the move stopped unsettled; an interrupted
// move is named as resumable.
func (r *Runner) Move(ctx context.Context, req MoveRequest) (MoveOutcome, error) {
	var out MoveOutcome
	eng := r.Engine()
	reqs := make([]mover.Request, 0, len(req.ShardIDs))
	for _, id := range req.ShardIDs {
		reqs = append(reqs, mover.Request{ShardID: id, Target: req.Target})
	}
	specs, err := eng.Resolve(ctx, reqs)
	if err != nil {
		return out, err
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if !seen[s.Group.Key()] {
			seen[s.Group.Key()] = true
			out.Specs = append(out.Specs, s)
		}
	}
	for _, s := range out.Specs {
		if err := eng.Preflight(ctx, s); err != nil {
			return out, err
		}
	}
	if req.DryRun {
		return out, nil
	}
	if err := eng.Recover(ctx); err != nil {
		return out, err
	}
	job, moves, err := eng.Schedule(ctx, "move", out.Specs)
	if err != nil {
		return out, err
	}
	out.Job = &job
	if req.OnJob != nil {
		req.OnJob(job, moves)
	}
	r.log.Info("job started", zap.Int64("job_id", job.ID), zap.String("kind", "move"), zap.Int("moves", len(moves)))
	out.Result, err = eng.RunJob(ctx, job.ID, req.Limits)
	final, rerr := r.cat.Moves(context.WithoutCancel(ctx), metadata.MoveFilter{JobID: job.ID})
	if rerr == nil {
		out.Moves = final
	}
	r.log.Info("job ended", zap.Int64("job_id", job.ID), zap.Int("done", out.Result.Done), zap.Int("failed", out.Result.Failed),
		zap.Int("cancelled", out.Result.Cancelled), zap.Int("unfinished", out.Result.Unfinished), zap.Error(err))
	if rerr != nil && err == nil {
		return out, rerr
	}
	if err == nil || (rerr == nil && out.Result.Done == len(final)) {
		// Every move is done (RunJob reports a ctx that ended after the
		// last move did; the moves are what count).
		return out, nil
	}
	if rerr != nil {
		// The journal could not be read: say so, and name every move.
		final = moves
		for i := range final {
			final[i].Phase = ""
		}
	}
	return out, moveFailure(job.ID, final, err)
}

// moveFailure is the error of a one-shot move job that did not end with
// every move done. A move with an empty phase is one whose journal row
// could not be read.
func moveFailure(jobID int64, moves []metadata.Move, err error) error {
	if errors.Is(err, context.Canceled) {
		var ids []int64
		for _, m := range moves {
			if !m.Terminal() {
				ids = append(ids, m.ID)
			}
		}
		switch {
		case len(ids) == 1:
			return fmt.Errorf("interrupted: move %d stopped in a resumable state; continue it with `shardmover jobs resume %d` or roll it back with `shardmover jobs cancel %d`", ids[0], jobID, jobID)
		case len(ids) > 1:
			return fmt.Errorf("interrupted: moves %v stopped in a resumable state; continue them with `shardmover jobs resume %d` or roll them back with `shardmover jobs cancel %d`", ids, jobID, jobID)
		}
	}
	if len(moves) == 1 {
		m := moves[0]
		cause := soleCause(err)
		if (m.Phase == metadata.PhaseFailed || m.Phase == metadata.PhaseCancelled) && !m.CutoverCommitted {
			return fmt.Errorf("move %d failed: %w; the source still serves the group, and `shardmover jobs show %d` has the details", m.ID, cause, jobID)
		}
		phase := "an unknown phase (the journal could not be read)"
		if m.Phase != "" {
			phase = "phase " + string(m.Phase)
		}
		return fmt.Errorf("move %d stopped in %s: %w; it is not settled yet, so its source shards may still be fenced: finish it with `shardmover jobs resume %d`, or settle it with `shardmover cleanup`", m.ID, phase, cause, jobID)
	}
	var ended, unsettled []string
	for _, m := range moves {
		switch {
		case m.Phase == metadata.PhaseDone:
		case (m.Phase == metadata.PhaseFailed || m.Phase == metadata.PhaseCancelled) && !m.CutoverCommitted:
			ended = append(ended, fmt.Sprintf("%d (%s)", m.ID, m.Phase))
		case m.Phase == "":
			unsettled = append(unsettled, fmt.Sprintf("%d (unknown phase)", m.ID))
		default:
			unsettled = append(unsettled, fmt.Sprintf("%d (%s)", m.ID, m.Phase))
		}
	}
	var parts []string
	if len(ended) > 0 {
		parts = append(parts, fmt.Sprintf("moves %s ended without moving; their sources still serve their groups", strings.Join(ended, ", ")))
	}
	if len(unsettled) > 0 {
		parts = append(parts, fmt.Sprintf("moves %s are not settled yet, so their source shards may still be fenced: finish them with `shardmover jobs resume %d`, or settle them with `shardmover cleanup`", strings.Join(unsettled, ", "), jobID))
	}
	return fmt.Errorf("job %d: %s: %w; `shardmover jobs show %d` has the details", jobID, strings.Join(parts, "; "), oneLine{err}, jobID)
}

// soleCause is the one move error RunJob joined ("move N: cause"), or err
// as it is when it holds several or none.
func soleCause(err error) error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	subs := j.Unwrap()
	if len(subs) != 1 {
		return oneLine{err}
	}
	if c := errors.Unwrap(subs[0]); c != nil {
		return c
	}
	return subs[0]
}

// oneLine shows a joined error on one line.
type oneLine struct{ err error }

func (e oneLine) Error() string { return strings.ReplaceAll(e.err.Error(), "\n", "; ") }
func (e oneLine) Unwrap() error { return e.err }

// JobRun is what resuming or cancelling a job did to the moves that were
// unfinished when it began.
type JobRun struct {
	Job metadata.Job
	// Moves are those moves as they are now, in id order.
	Moves []RunMove
	// Result counts how all of the job's moves ended.
	Result mover.JobResult
}

// RunMove is one move of a JobRun.
type RunMove struct {
	metadata.Move
	// PastDecision: the move was past its cutover decision when the action
	// began; a cancel cannot roll it back, so it completes instead.
	PastDecision bool
	// Held: another mover holds the move; it was left to that mover.
	Held bool
}

// ResumeJob runs a job's unfinished moves from their journal phases,
// through mover.RunJob within lim. A move another mover holds is refused
// (metadata.ErrInvalid) after the others have run.
func (r *Runner) ResumeJob(ctx context.Context, id int64, lim mover.Limits) (JobRun, error) {
	out, active, err := r.jobRun(ctx, id)
	if err != nil {
		return out, err
	}
	r.log.Info("resuming job", zap.Int64("job_id", id), zap.String("kind", out.Job.Kind), zap.Int("moves", len(active)))
	res, runErr := r.Engine().RunJob(ctx, id, lim)
	out.Result = res
	if err := r.ended(ctx, &out, active); err != nil {
		return out, err
	}
	if runErr == nil {
		return out, nil
	}
	if err := interrupted(ctx, out); err != nil {
		return out, err
	}
	var held []int64
	for _, m := range out.Moves {
		if m.Held {
			held = append(held, m.ID)
		}
	}
	switch {
	case len(held) == 1:
		return out, invalidf("move %d is being run by another mover right now", held[0])
	case len(held) > 1:
		return out, invalidf("moves %v are being run by another mover right now", held)
	}
	return out, runErr
}

// CancelJob cancels a job's unfinished moves: each before its decision is
// asked to stop and rolled back (by its own mover when another one holds
// it, else here); a move past its decision completes instead. Everything
// runs through mover.RunJob, all of the job's moves at once (a rollback or
// a cleanup is short), and the job's state follows mover.JobState.
func (r *Runner) CancelJob(ctx context.Context, id int64) (JobRun, error) {
	out, active, err := r.jobRun(ctx, id)
	if err != nil {
		return out, err
	}
	for _, m := range active {
		if m.CutoverCommitted {
			continue
		}
		if _, err := r.cat.RequestCancel(ctx, m.ID); err != nil && !errors.Is(err, metadata.ErrInvalid) {
			// ErrInvalid: it passed its decision meanwhile and completes.
			return out, err
		}
	}
	n := max(len(active), 1)
	res, _ := r.Engine().RunJob(ctx, id, mover.Limits{Concurrency: n, PerNode: n})
	out.Result = res
	if err := r.ended(ctx, &out, active); err != nil {
		return out, err
	}
	if err := interrupted(ctx, out); err != nil {
		return out, err
	}
	var errs []error
	for _, m := range out.Moves {
		switch {
		case m.Held:
			r.log.Info("cancel requested; the mover holding the move will roll it back", zap.Int64("move_id", m.ID))
		case m.Phase == metadata.PhaseCancelled || m.Phase == metadata.PhaseDone:
		case m.Phase == metadata.PhaseFailed:
			errs = append(errs, fmt.Errorf("move %d failed: %s", m.ID, m.Error))
		case m.PastDecision || m.CutoverCommitted:
			// Left for `jobs resume`: the caller says so.
		default:
			errs = append(errs, fmt.Errorf("move %d stopped in phase %s: %s", m.ID, m.Phase, m.Error))
		}
	}
	return out, errors.Join(errs...)
}

// jobRun reads a job and its unfinished moves.
func (r *Runner) jobRun(ctx context.Context, id int64) (JobRun, []metadata.Move, error) {
	job, err := r.cat.Job(ctx, id)
	if err != nil {
		return JobRun{}, nil, err
	}
	active, err := r.cat.Moves(ctx, metadata.MoveFilter{JobID: id, ActiveOnly: true})
	if err != nil {
		return JobRun{Job: job}, nil, err
	}
	return JobRun{Job: job}, active, nil
}

// ended reads the moves that were active as they are now, and finds which
// of those still unfinished another mover holds.
func (r *Runner) ended(ctx context.Context, out *JobRun, active []metadata.Move) error {
	rctx := context.WithoutCancel(ctx)
	for _, m := range active {
		now, err := r.cat.Move(rctx, m.ID)
		if err != nil {
			return err
		}
		rm := RunMove{Move: now, PastDecision: m.CutoverCommitted}
		if !now.Terminal() && ctx.Err() == nil {
			lease, ok, err := r.cat.TryLease(rctx, m.ID)
			if err != nil {
				return err
			}
			if ok {
				lease.Release(rctx)
			}
			rm.Held = !ok
		}
		out.Moves = append(out.Moves, rm)
	}
	if j, err := r.cat.Job(rctx, out.Job.ID); err == nil {
		out.Job = j
	}
	return nil
}

// interrupted is the error of a resume or cancel stopped by ctx, naming
// the moves that can be resumed.
func interrupted(ctx context.Context, out JobRun) error {
	if ctx.Err() == nil {
		return nil
	}
	var ids []int64
	for _, m := range out.Moves {
		if !m.Terminal() {
			ids = append(ids, m.ID)
		}
	}
	switch {
	case len(ids) == 1:
		return fmt.Errorf("interrupted; move %d can be resumed: %w", ids[0], ctx.Err())
	case len(ids) > 1:
		return fmt.Errorf("interrupted; moves %v can be resumed: %w", ids, ctx.Err())
	}
	return nil
}
