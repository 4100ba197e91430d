package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/planner"
)

// Runner owns every way a job runs: rebalance and drain (planned, one at
// a time per cluster), a one-shot move (Move), and resuming or cancelling
// a recorded job (ResumeJob, CancelJob). All of them run their moves
// through mover.RunJob within mover.Limits, and RunJob records the job's
// state by mover.JobState. The CLI only parses flags, prints, and calls it.
type Runner struct {
	cat      *metadata.Catalog
	moverCfg mover.Config
	log      *zap.Logger
	metrics  *Metrics
}

// NewRunner returns a runner. moverCfg's hooks are wrapped to feed metrics.
func NewRunner(cat *metadata.Catalog, moverCfg mover.Config, m *Metrics) *Runner {
	if moverCfg.Logger == nil {
		moverCfg.Logger = zap.NewNop()
	}
	r := &Runner{cat: cat, moverCfg: moverCfg, log: moverCfg.Logger, metrics: m}
	if m != nil {
		onProgress, onCutover := moverCfg.OnProgress, moverCfg.OnCutover
		r.moverCfg.OnProgress = func(p mover.Progress) {
			m.progress(p)
			if onProgress != nil {
				onProgress(p)
			}
		}
		r.moverCfg.OnCutover = func(id int64, d time.Duration) {
			m.CutoverPause.Observe(d.Seconds())
			if onCutover != nil {
				onCutover(id, d)
			}
		}
	}
	return r
}

// Engine returns a mover engine with the runner's configuration.
func (r *Runner) Engine() *mover.Engine { return mover.New(r.moverCfg, r.cat) }

// Plan plans from the live cluster. A node that could not be measured
// makes it refuse (ErrUnmeasured) unless o.AllowUnmeasured; then each such
// node is logged and planned around (BuildLiveInput).
func (r *Runner) Plan(ctx context.Context, o PlanOptions) (planner.Result, error) {
	cl, unmeasured, err := r.cat.MeasuredSnapshot(ctx, metadata.SnapshotOptions{})
	if err != nil {
		return planner.Result{}, err
	}
	// Refused before by_load's window is waited for.
	if err := checkUnmeasured(unmeasured, o); err != nil {
		return planner.Result{}, err
	}
	for _, u := range unmeasured {
		r.log.Warn("planning without a node that could not be measured: its shard groups stay where they are and no move involves it",
			zap.String("node", u.Node.Addr()), zap.String("reason", u.Reason))
	}
	st, err := LiveStatus(ctx, r.cat, cl, unmeasured, o)
	if err != nil {
		return planner.Result{}, err
	}
	in, err := BuildLiveInput(st, unmeasured, o)
	if err != nil {
		return planner.Result{}, err
	}
	if err := ApplyClusterStrategy(ctx, r.cat, o, &in); err != nil {
		return planner.Result{}, err
	}
	res, err := planner.Plan(in)
	if err != nil {
		return res, invalidf("%v", err)
	}
	if r.metrics != nil {
		r.metrics.Imbalance.Set(imbalance(res.After))
	}
	return res, nil
}

// imbalance is the largest relative distance of a node's utilization from
// the average (0 = perfectly balanced).
func imbalance(nodes []planner.NodeUtil) float64 {
	var sum float64
	var n int
	for _, u := range nodes {
		if u.Capacity > 0 {
			sum += u.Utilization
			n++
		}
	}
	if n == 0 || sum == 0 {
		return 0
	}
	avg := sum / float64(n)
	worst := 0.0
	for _, u := range nodes {
		if u.Capacity > 0 {
			worst = math.Max(worst, math.Abs(u.Utilization-avg)/avg)
		}
	}
	return worst
}

// JobRequest describes a rebalance or drain.
type JobRequest struct {
	Kind   string // "rebalance" or "drain"
	Plan   PlanOptions
	Limits mover.Limits
	// Confirm, when set, sees the plan before anything is recorded; false
	// stops with no job.
	Confirm func(planner.Result) bool
	// OnJob, when set, learns the job id once it is recorded.
	OnJob func(metadata.Job)
	// Fence, when set, is the daemon leadership the job is recorded under:
	// the job carries its epoch, and is recorded only while it is current
	// (metadata.ErrNotLeader otherwise).
	Fence *metadata.Leadership
	// Recheck, for a rebalance, is how many times the cluster is measured
	// again after a job that finished every move, each time running one
	// more job when the fresh plan still has moves (0: never). A copied
	// group is smaller on its new node than it was on its old one (the
	// copy carries none of the old one's dead rows and free space), so the
	// bytes the nodes end with are not quite the bytes the plan balanced.
	Recheck int
}

// DefaultRecheck is JobRequest.Recheck's default for rebalances: one more
// measurement after the job.
const DefaultRecheck = 1

// JobOutcome is what a rebalance or drain did.
type JobOutcome struct {
	Plan   planner.Result
	Job    *metadata.Job
	Result mover.JobResult
	// Rechecks are the jobs run after measuring again (JobRequest.Recheck),
	// in order; only those that had moves to make.
	Rechecks []JobOutcome
}

// ErrBusy is returned (wrapped, matching metadata.ErrInvalid) when another
// rebalance or drain job holds the cluster.
var ErrBusy = errors.New("another rebalance is running")

// Run plans and runs one rebalance or drain job. Only one runs per
// cluster: a second is refused naming the first job's id.
func (r *Runner) Run(ctx context.Context, req JobRequest) (JobOutcome, error) {
	var out JobOutcome
	lock, err := r.lock(ctx)
	if err != nil {
		return out, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	if jobs, err := r.cat.UnfinishedJobs(ctx, "rebalance", "drain"); err != nil {
		return out, err
	} else if len(jobs) > 0 {
		return out, &busyError{msg: fmt.Sprintf("%s job %d is unfinished; resume it with `shardmover jobs resume %d` or cancel it with `shardmover jobs cancel %d`",
			jobs[0].Kind, jobs[0].ID, jobs[0].ID, jobs[0].ID)}
	}
	return r.runLocked(ctx, req)
}

func (r *Runner) lock(ctx context.Context) (*metadata.Lease, error) {
	if err := r.cat.InstallJournal(ctx); err != nil {
		return nil, err
	}
	lock, ok, err := r.cat.TryLock(ctx, metadata.LockRebalance, 1)
	if err != nil {
		return nil, err
	}
	if !ok {
		jobs, _ := r.cat.UnfinishedJobs(ctx, "rebalance", "drain")
		if len(jobs) > 0 {
			return nil, &busyError{msg: fmt.Sprintf("%s job %d is already running; wait for it, or cancel it with `shardmover jobs cancel %d`", jobs[0].Kind, jobs[0].ID, jobs[0].ID)}
		}
		return nil, &busyError{msg: "another rebalance is being planned right now; try again in a moment"}
	}
	return lock, nil
}

type busyError struct{ msg string }

func (e *busyError) Error() string { return e.msg }
func (e *busyError) Is(target error) bool {
	return target == ErrBusy || target == metadata.ErrInvalid
}

// runOne plans and runs one job.
func (r *Runner) runOne(ctx context.Context, req JobRequest) (JobOutcome, error) {
	var out JobOutcome
	res, err := r.Plan(ctx, req.Plan)
	if err != nil {
		return out, err
	}
	out.Plan = res
	if len(res.Moves) == 0 {
		return out, nil
	}
	if req.Confirm != nil && !req.Confirm(res) {
		return out, nil
	}
	eng := r.Engine()
	reqs := make([]mover.Request, 0, len(res.Moves))
	nodes, err := r.cat.Nodes(ctx)
	if err != nil {
		return out, err
	}
	byID := map[int64]metadata.Node{}
	for _, n := range nodes {
		byID[int64(n.ID)] = n
	}
	for _, m := range res.Moves {
		reqs = append(reqs, mover.Request{ShardID: m.ShardIDs[0], Target: byID[m.To]})
	}
	specs, err := eng.Resolve(ctx, reqs)
	if err != nil {
		return out, err
	}
	for _, s := range specs {
		if err := eng.Preflight(ctx, s); err != nil {
			return out, err
		}
	}
	var job metadata.Job
	if req.Fence != nil {
		job, _, err = r.cat.CreateLeaderJob(ctx, req.Fence, req.Kind, "", specs)
		if errors.Is(err, metadata.ErrGroupBusy) {
			err = invalidf("%s", strings.TrimPrefix(err.Error(), metadata.ErrGroupBusy.Error()+": "))
		}
	} else {
		job, _, err = eng.Schedule(ctx, req.Kind, specs)
	}
	if err != nil {
		return out, err
	}
	out.Job = &job
	if req.OnJob != nil {
		req.OnJob(job)
	}
	r.log.Info("job started", zap.Int64("job_id", job.ID), zap.String("kind", req.Kind), zap.Int("moves", len(specs)))
	start := time.Now()
	out.Result, err = eng.RunJobAs(ctx, job.ID, req.Limits, req.Fence)
	if r.metrics != nil {
		r.metrics.JobDuration.WithLabelValues(req.Kind).Observe(time.Since(start).Seconds())
	}
	r.log.Info("job ended", zap.Int64("job_id", job.ID), zap.Int("done", out.Result.Done), zap.Int("failed", out.Result.Failed),
		zap.Int("unfinished", out.Result.Unfinished), zap.Error(err))
	return out, err
}

// runLocked runs req's job and then, for a rebalance, its rechecks
// (JobRequest.Recheck): each after a job that finished every move.
func (r *Runner) runLocked(ctx context.Context, req JobRequest) (JobOutcome, error) {
	out, err := r.runOne(ctx, req)
	last := out
	for left := req.Recheck; left > 0 && req.Kind == "rebalance"; left-- {
		if err != nil || last.Job == nil || ctx.Err() != nil || last.Result.Failed+last.Result.Cancelled+last.Result.Unfinished > 0 {
			break
		}
		r.log.Info("measuring the cluster again after the job", zap.Int64("job_id", last.Job.ID), zap.Int("rechecks_left", left-1))
		last, err = r.runOne(ctx, req)
		if last.Job == nil {
			if err != nil {
				// Not the refusal of a request (exit code 2): the job's
				// moves are done.
				err = fmt.Errorf("the job's moves are done, but measuring again to settle the balance failed: %v", err)
			}
			break
		}
		out.Rechecks = append(out.Rechecks, last)
	}
	return out, err
}

// Resume runs every unfinished rebalance or drain job (after a crash or a
// leader change).
func (r *Runner) Resume(ctx context.Context, lim mover.Limits) error {
	lock, err := r.lock(ctx)
	if err != nil {
		return err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	jobs, err := r.cat.UnfinishedJobs(ctx, "rebalance", "drain", "move")
	if err != nil {
		return err
	}
	var errs []error
	for _, j := range jobs {
		r.log.Info("resuming job", zap.Int64("job_id", j.ID), zap.String("kind", j.Kind))
		if _, err := r.Engine().RunJob(ctx, j.ID, lim); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Errorf("job %d: %w", j.ID, err))
		}
	}
	return errors.Join(errs...)
}

// resumeAs is the daemon leader's resume: it adopts unfinished jobs for
// term (every one when own is false, at the start of a term; else only
// the term's own, to run them again after an error) and runs them. done is
// false when nothing could be adopted because another process holds the
// rebalance lock (a CLI rebalance, or a leader that lost its lock and is
// still stopping): the caller tries again.
func (r *Runner) resumeAs(ctx context.Context, term *metadata.Leadership, own bool, lim mover.Limits) (done bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	jobs, err := r.cat.UnfinishedJobs(rctx, "rebalance", "drain", "move")
	cancel()
	if err != nil {
		return false, err
	}
	if len(jobs) == 0 {
		return true, nil
	}
	lock, err := r.lock(ctx)
	if errors.Is(err, ErrBusy) {
		r.log.Debug("unfinished jobs wait: another process holds the rebalance lock", zap.Int64("epoch", term.Epoch), zap.Error(err))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	adopted, err := r.cat.AdoptJobs(ctx, term, own, "rebalance", "drain", "move")
	if err != nil {
		return false, err
	}
	var errs []error
	for _, j := range adopted {
		r.log.Info("resuming job", zap.Int64("job_id", j.ID), zap.String("kind", j.Kind), zap.Int64("epoch", term.Epoch))
		start := time.Now()
		res, err := r.Engine().RunJobAs(ctx, j.ID, lim, term)
		if r.metrics != nil {
			r.metrics.JobDuration.WithLabelValues(j.Kind).Observe(time.Since(start).Seconds())
		}
		r.log.Info("resumed job ended", zap.Int64("job_id", j.ID), zap.Int("done", res.Done), zap.Int("failed", res.Failed),
			zap.Int("unfinished", res.Unfinished), zap.Error(err))
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("job %d: %w", j.ID, err))
		} else if res.Unfinished > 0 {
			errs = append(errs, fmt.Errorf("job %d: %d moves are unfinished", j.ID, res.Unfinished))
		}
	}
	return true, errors.Join(errs...)
}

// Drain marks a node shouldhaveshards = false and moves every group off it,
// as one job. Draining the last node that may hold shards is refused.
// While a node could not be measured the drain is refused before the node
// is marked, as Plan refuses (ErrUnmeasured; with AllowUnmeasured it goes
// on without that node), and a drain of that node itself always is: its
// groups could not be copied from it.
func (r *Runner) Drain(ctx context.Context, addr string, o PlanOptions, lim mover.Limits) (JobOutcome, error) {
	node, err := r.cat.NodeByAddr(ctx, addr)
	if err != nil {
		return JobOutcome{}, optionf("node", "%s is not a registered node; `shardmover node list` shows them", addr)
	}
	nodes, err := r.cat.Nodes(ctx)
	if err != nil {
		return JobOutcome{}, err
	}
	others := 0
	for _, n := range nodes {
		if n.ID != node.ID && n.IsActive && n.ShouldHaveShards && !n.IsCoordinator() {
			others++
		}
	}
	if others == 0 {
		return JobOutcome{}, invalidf("%s is the last node that may hold shards; add a node before draining it", addr)
	}
	lock, err := r.lock(ctx)
	if err != nil {
		return JobOutcome{}, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	if jobs, err := r.cat.UnfinishedJobs(ctx, "rebalance", "drain"); err != nil {
		return JobOutcome{}, err
	} else if len(jobs) > 0 {
		return JobOutcome{}, &busyError{msg: fmt.Sprintf("%s job %d is unfinished; resume or cancel it first", jobs[0].Kind, jobs[0].ID)}
	}
	_, unmeasured, err := r.cat.MeasuredSnapshot(ctx, metadata.SnapshotOptions{})
	if err != nil {
		return JobOutcome{}, err
	}
	for _, u := range unmeasured {
		if u.Node.ID == node.ID {
			return JobOutcome{}, unmeasuredDrain(u)
		}
	}
	if err := checkUnmeasured(unmeasured, o); err != nil {
		return JobOutcome{}, err
	}
	if node.ShouldHaveShards {
		if err := r.cat.SetShouldHaveShards(ctx, node.ID, false); err != nil {
			return JobOutcome{}, err
		}
		r.log.Info("node marked shouldhaveshards = false", zap.String("node", addr))
	}
	o.Drain = append(o.Drain, addr)
	o.DrainOnly = true
	return r.runLocked(ctx, JobRequest{Kind: "drain", Plan: o, Limits: lim})
}
