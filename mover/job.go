package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ratelimit"
	"github.com/shardmover/shardmover/metadata"
)

// Limits bound how a job's moves run together.
type Limits struct {
	// Concurrency is how many moves copy at once in the whole cluster
	// (from the slot's creation through indexing); see jobSched for how
	// the other stages of moves overlap the copies.
	Concurrency int
	// PerNode is how many copying moves one node may take part in, as
	// source or target.
	PerNode int
	// BytesPerSecond is the total copy bandwidth of the job: one limiter
	// shared by the copies of every running move, so a lone move gets all
	// of it and two running moves share it (0: no limit).
	BytesPerSecond int64
	// Overlap lets the stages of moves overlap (jobSched): the limits then
	// count copy streams, and the next move prepares, and the last one
	// finishes, while one copies. A rebalance of small groups ends
	// sooner, and the application's writes pay for it (docs/design.md 6,
	// docs/performance.md: on a busy two-core cluster 9.0 s instead of
	// 14.6 s, the writes' rate 0.69 of before instead of 0.85). Without
	// Overlap the limits count whole moves: Concurrency moves run at once
	// in the cluster, PerNode on any node, each from its preflight to its
	// end.
	Overlap bool
	// GroupsPerStream lets up to that many moves between the same two
	// node groups ride one stream (docs/design.md 6.2): one publication,
	// slot, copy, applier and cutover for all of them, the fixed cost of a
	// move paid once. 0 or 1: each move has its own.
	GroupsPerStream int
}

// DefaultLimits runs one move at a time, stages not overlapped.
func DefaultLimits() Limits { return Limits{Concurrency: 1, PerNode: 1, GroupsPerStream: 1} }

// JobResult counts how a job's moves ended.
type JobResult struct {
	Done, Failed, Cancelled, Unfinished int
}

// RunJob runs every unfinished move of a job, in id order (the plan's
// order), within the limits, which count copy streams (jobSched: the next
// move prepares while one copies, and one that copied finishes while the
// next copies). It returns when every move has ended, or ctx is done:
// moves before their decision then stop where they are (resumable), moves
// past it finish first. The job's state is recorded at the end.
func (e *Engine) RunJob(ctx context.Context, jobID int64, lim Limits) (JobResult, error) {
	return e.RunJobAs(ctx, jobID, lim, nil)
}

// RunJobAs is RunJob for a daemon's job, run under leadership term: before
// each move starts, the term is verified in the journal (a leader that lost
// its term starts nothing more; moves already running are fenced by their
// own leases), and the job's final state is recorded only if the term still
// owns the job. A nil term is RunJob.
func (e *Engine) RunJobAs(ctx context.Context, jobID int64, lim Limits, term *metadata.Leadership) (JobResult, error) {
	if lim.Concurrency < 1 {
		lim.Concurrency = 1
	}
	if lim.PerNode < 1 {
		lim.PerNode = 1
	}
	if err := e.Recover(ctx); err != nil {
		return JobResult{}, err
	}
	moves, err := e.cat.Moves(ctx, metadata.MoveFilter{JobID: jobID, ActiveOnly: true})
	if err != nil {
		return JobResult{}, err
	}
	if lim.GroupsPerStream > 1 {
		if err := e.carryStreams(ctx, moves, lim.GroupsPerStream); err != nil {
			return JobResult{}, err
		}
		if moves, err = e.cat.Moves(ctx, metadata.MoveFilter{JobID: jobID, ActiveOnly: true}); err != nil {
			return JobResult{}, err
		}
	}
	// A stream's lead runs the moves it carries.
	moves = slices.DeleteFunc(moves, func(m metadata.Move) bool { return m.CarriedBy != 0 })
	// On Citus, reference tables reach every node once, before any move:
	// copying them holds Citus's move locks on the coordinator, which the
	// preflight of a move overlapping the copy would take for a Citus
	// rebalance in progress and refuse. (Each move's setup checks again;
	// it then finds nothing to copy.)
	if len(moves) > 0 {
		if err := e.cat.EnsureReferenceTables(ctx); err != nil {
			return JobResult{}, err
		}
	}
	// One limiter for the whole job: a lone running move copies at the full
	// rate, running moves share it.
	runner := *e
	runner.cfg.BytesPerSecond = 0
	runner.copyLimiter = ratelimit.New(lim.BytesPerSecond) // nil: no limit

	var (
		mu    sync.Mutex
		cond  = sync.NewCond(&mu)
		sched = newJobSched(lim, moves)
		index = make(map[int64]int, len(moves))
		wg    sync.WaitGroup
		errs  []error
	)
	for i, m := range moves {
		index[m.ID] = i
	}
	// Stop waiting when ctx ends.
	stopWake := context.AfterFunc(ctx, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
	defer stopWake()

	// A move's copy stage waits here for its slot (see jobSched); the slot
	// is given back once, when the stage ends or the move does.
	runner.copySlot = func(ctx context.Context, id int64) (func(), error) {
		i := index[id]
		stop := context.AfterFunc(ctx, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
		defer stop()
		mu.Lock()
		defer mu.Unlock()
		for !sched.canCopy(i) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			cond.Wait()
		}
		sched.takeCopy(i)
		cond.Broadcast() // a later move sharing a node may copy once this one holds its slot
		var once sync.Once
		return func() {
			once.Do(func() {
				mu.Lock()
				sched.pass(i)
				cond.Broadcast()
				mu.Unlock()
			})
		}, nil
	}
	mu.Lock()
	for i := range moves {
		for !sched.canStart(i) && ctx.Err() == nil {
			cond.Wait()
		}
		if ctx.Err() != nil {
			break
		}
		m := moves[i]
		if term != nil {
			mu.Unlock()
			err := e.cat.VerifyLeadership(ctx, term)
			mu.Lock()
			if err != nil {
				if ctx.Err() == nil {
					errs = append(errs, fmt.Errorf("move %d not started: %w", m.ID, err))
				}
				break
			}
		}
		sched.start(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := runner.Run(ctx, m.ID)
			mu.Lock()
			defer mu.Unlock()
			sched.end(i)
			if err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("move %d: %w", m.ID, err))
				e.log.Warn("move ended with an error", zap.Int64("move_id", m.ID), zap.Error(err))
			}
			cond.Broadcast()
		}()
	}
	mu.Unlock()
	wg.Wait()

	final, err := e.cat.Moves(context.WithoutCancel(ctx), metadata.MoveFilter{JobID: jobID})
	if err != nil {
		return JobResult{}, err
	}
	var res JobResult
	for _, m := range final {
		switch metadata.Phase(m.Phase) {
		case metadata.PhaseDone:
			res.Done++
		case metadata.PhaseFailed:
			res.Failed++
		case metadata.PhaseCancelled:
			res.Cancelled++
		default:
			res.Unfinished++
		}
	}
	errText := ""
	if err := errors.Join(errs...); err != nil {
		errText = err.Error()
	}
	if term != nil {
		if err := e.cat.FinishLeaderJob(context.WithoutCancel(ctx), term, jobID, jobState(res), errText); err != nil {
			e.log.Warn("job state not recorded: this daemon no longer leads", zap.Int64("job_id", jobID), zap.Error(err))
		}
	} else {
		_ = e.cat.FinishJob(context.WithoutCancel(ctx), jobID, jobState(res), errText)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, errors.Join(errs...)
}

// JobState is the one rule for a job's state, from how its moves ended;
// RunJob records it, and every command that ends a job goes through
// RunJob. Worst outcome wins:
//
//   - paused while any move is unfinished (the job can be resumed);
//   - failed if any move failed;
//   - cancelled if any move was cancelled (and none failed);
//   - done only when every move is done (a job with no moves is done).
//
// A job with some moves done and some cancelled is cancelled, not done:
// it did not carry out its plan, and the operator (or a process acting for
// one) stopped it; the moves that were done stay done, and the counts of
// each end are in the job's moves. "done" always means the whole plan
// happened, so nobody needs to read the moves to trust it.
//
// The states are metadata's JobState constants; JobState returns the
// journal's string (what jobs.state and the CLI show).
func JobState(r JobResult) string { return string(jobState(r)) }

// jobState is JobState, typed.
func jobState(r JobResult) metadata.JobState {
	switch {
	case r.Unfinished > 0:
		return metadata.JobPaused
	case r.Failed > 0:
		return metadata.JobFailed
	case r.Cancelled > 0:
		return metadata.JobCancelled
	}
	return metadata.JobDone
}
