package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ctxtime"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// DaemonConfig configures the daemon.
type DaemonConfig struct {
	// Listen is the HTTP address (/metrics, /healthz, /readyz, /status).
	Listen string
	// Settle is how long the cluster must stay unchanged after a node is
	// added or reactivated before a rebalance starts, so that nodes added
	// together make one job.
	Settle time.Duration
	// Poll is how often the node catalog is read, and how often a standby tries
	// to become leader.
	Poll time.Duration
	// Schedules are cron expressions (5 fields, or 6 with seconds), or
	// descriptors (@daily, @every 1h); see ScheduleHelp.
	Schedules []string
	// Timezone names the schedules' zone (IANA name); empty is local time.
	Timezone string
	// KeepOldFor is the grace period after which the leader drops the old
	// shards of finished moves (it sweeps every SweepEvery).
	KeepOldFor time.Duration
	SweepEvery time.Duration
	// Plan and Limits shape each rebalance.
	Plan   PlanOptions
	Limits mover.Limits
	// Recheck is each rebalance's JobRequest.Recheck.
	Recheck int
	// Mover configures moves; its Logger is the daemon's logger.
	Mover mover.Config
}

// DefaultDaemonConfig returns the documented defaults.
func DefaultDaemonConfig() DaemonConfig {
	return DaemonConfig{Listen: "127.0.0.1:9187", Settle: 30 * time.Second, Poll: time.Second,
		KeepOldFor: 10 * time.Minute, SweepEvery: time.Minute, Recheck: DefaultRecheck,
		Plan: DefaultPlanOptions(), Limits: mover.DefaultLimits(), Mover: mover.DefaultConfig()}
}

// Daemon keeps a cluster balanced: one leader per cluster (a session
// advisory lock on the coordinator, with an epoch as fencing token) watches
// for added nodes, runs cron schedules and resumes unfinished jobs; every
// daemon serves HTTP and refreshes its metrics from the journal.
type Daemon struct {
	cfg       DaemonConfig
	cat       *metadata.Catalog
	log       *zap.Logger
	metrics   *Metrics
	runner    *Runner
	loc       *time.Location
	schedules []cron.Schedule
	ln        net.Listener
	holder    string

	mu     sync.Mutex
	state  LeaderState
	term   *metadata.Leadership
	record *metadata.LeaderRecord // the journal's leader row, as last read
	phases map[string]int64       // moves by phase, as last read
	// slots are the shardmover_* replication slots as last read (slotsLoop).
	slots        []metadata.StatusSlot
	slotWarnings []string
	slotsAt      time.Time
	lastErr      string
	lastPlan     time.Time
	running      sync.Mutex // held while a rebalance or a resumed job runs
}

// LeaderState is where a daemon stands in the election.
type LeaderState int

const (
	// Standby: the daemon does not lead; it serves HTTP and competes for
	// the leader lock every Poll.
	Standby LeaderState = iota
	// Leading: the daemon holds the leader lock and its epoch is current.
	Leading
	// Lost: the daemon lost the leader lock and is stopping its leader
	// loops (a cutover in progress finishes first); it then competes again.
	Lost
)

func (s LeaderState) String() string {
	switch s {
	case Leading:
		return "leader"
	case Lost:
		return "lost"
	}
	return "standby"
}

// Validate checks the configuration without connecting anywhere: the
// numbers, the time zone and every schedule (never-firing and sub-second
// schedules are refused). Errors match metadata.ErrInvalid and are
// metadata.OptionErrors naming the field at fault.
func (cfg DaemonConfig) Validate() error {
	_, _, err := cfg.check()
	return err
}

func (cfg DaemonConfig) check() (*time.Location, []cron.Schedule, error) {
	if cfg.Recheck < 0 {
		return nil, nil, optionf("Recheck", "must be 0 or more, got %d", cfg.Recheck)
	}
	if cfg.KeepOldFor < 0 {
		return nil, nil, optionf("KeepOldFor", "must not be negative, got %s", cfg.KeepOldFor)
	}
	if cfg.Settle < 0 {
		return nil, nil, optionf("Settle", "must not be negative, got %s", cfg.Settle)
	}
	if cfg.Poll < 0 {
		return nil, nil, optionf("Poll", "must not be negative, got %s", cfg.Poll)
	}
	if cfg.Limits.Concurrency < 1 {
		return nil, nil, optionf("Limits.Concurrency", "must be at least 1, got %d", cfg.Limits.Concurrency)
	}
	if cfg.Limits.PerNode < 1 {
		return nil, nil, optionf("Limits.PerNode", "must be at least 1, got %d", cfg.Limits.PerNode)
	}
	loc := time.Local
	if cfg.Timezone != "" {
		var err error
		if loc, err = time.LoadLocation(cfg.Timezone); err != nil {
			return nil, nil, optionf("Timezone", "%q is not a known time zone (use an IANA name such as Europe/Berlin or UTC)", cfg.Timezone)
		}
	}
	var scheds []cron.Schedule
	for _, spec := range cfg.Schedules {
		s, err := ParseSchedule(spec, loc, time.Now())
		if err != nil {
			return nil, nil, err
		}
		scheds = append(scheds, s)
	}
	if _, err := BuildInput(metadata.Status{SchemaVersion: 1}, cfg.Plan); err != nil {
		return nil, nil, err
	}
	return loc, scheds, nil
}

// NewDaemon checks the configuration and binds the HTTP port. Errors match
// metadata.ErrInvalid and are metadata.OptionErrors naming the field at fault.
func NewDaemon(cfg DaemonConfig, cat *metadata.Catalog) (*Daemon, error) {
	if cfg.Mover.Logger == nil {
		cfg.Mover.Logger = zap.NewNop()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = time.Minute
	}
	loc, scheds, err := cfg.check()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, optionf("Listen", "%s cannot be used (%v); pick a free address", cfg.Listen, errors.Unwrap(err))
	}
	host, _ := os.Hostname()
	m := NewMetrics()
	d := &Daemon{cfg: cfg, cat: cat, log: cfg.Mover.Logger, metrics: m, loc: loc, schedules: scheds, ln: ln,
		holder: fmt.Sprintf("%s pid %d http %s", host, os.Getpid(), ln.Addr())}
	d.runner = NewRunner(cat, cfg.Mover, m)
	return d, nil
}

// Addr is the HTTP address the daemon listens on.
func (d *Daemon) Addr() string { return d.ln.Addr().String() }

// Metrics returns the daemon's metrics.
func (d *Daemon) Metrics() *Metrics { return d.metrics }

// IsLeader reports whether this daemon leads.
func (d *Daemon) IsLeader() bool { return d.State() == Leading }

// State reports where the daemon stands in the election.
func (d *Daemon) State() LeaderState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state
}

// Epoch is the epoch of the daemon's current term as leader, 0 when it
// does not lead.
func (d *Daemon) Epoch() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.term == nil || d.state != Leading {
		return 0
	}
	return d.term.Epoch
}

// checkTimeout bounds one check of the leader lock, and every other
// coordinator round trip of the daemon's own loops: a leader cut off from
// the coordinator steps down within checkEvery + checkTimeout, and the
// coordinator frees its lock after leaseTTL.
func (d *Daemon) checkTimeout() time.Duration {
	return min(max(5*d.cfg.Poll, 2*time.Second), 10*time.Second)
}

// leaseTTL is the leader lock's time to live on the coordinator: longer
// than the longest gap between two checks (checkEvery, plus a check that
// takes up to checkTimeout), so only a leader that stopped checking loses
// it.
func (d *Daemon) leaseTTL() time.Duration { return d.checkEvery() + 2*d.checkTimeout() }

// checkEvery is how often the leader checks its lock: every Poll, at least
// every second.
func (d *Daemon) checkEvery() time.Duration { return min(d.cfg.Poll, time.Second) }

// Start serves HTTP, refreshes the metrics from the journal and, while it
// holds the leader lock, does the leader's work; when it loses the lock it
// stops the leader's loops, reports leader 0 and competes again. It blocks
// until ctx is done, then stops cleanly: moves before their cutover
// decision stop where they are (resumable), a cutover in progress finishes.
//
// A coordinator that is not a cluster's (neither Citus nor compat
// catalogs) is refused at once (metadata.ErrNotCluster), before anything is
// served or created there; a coordinator that cannot be reached is not,
// and the daemon keeps trying it.
func (d *Daemon) Start(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, d.checkTimeout())
	err := d.cat.RequireCluster(cctx)
	cancel()
	if errors.Is(err, metadata.ErrNotCluster) {
		_ = d.ln.Close()
		return err
	}
	srv := &http.Server{Handler: d.mux(), ReadHeaderTimeout: 5 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(d.ln) }()
	var bg sync.WaitGroup
	defer func() {
		bg.Wait()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-httpDone
	}()
	bg.Add(1)
	go func() {
		defer bg.Done()
		d.refreshLoop(ctx)
	}()
	bg.Add(1)
	go func() {
		defer bg.Done()
		d.slotsLoop(ctx)
	}()
	bg.Add(1)
	go func() {
		defer bg.Done()
		d.fenceLoop(ctx)
	}()
	d.log.Info("daemon started", zap.String("listen", d.Addr()), zap.String("holder", d.holder))
	var lastWarn time.Time
	for {
		term, err := d.elect(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			d.setErr(err)
			// Once per 30s while the coordinator stays unreachable.
			if time.Since(lastWarn) >= 30*time.Second {
				lastWarn = time.Now()
				d.log.Warn("leader election failed: cannot take or record the leader lock on the coordinator; trying again every poll", zap.Error(err))
			}
		case term != nil:
			lastWarn = time.Time{}
			d.lead(ctx, term)
			if ctx.Err() != nil {
				return nil
			}
		}
		if err := ctxtime.Sleep(ctx, d.cfg.Poll); err != nil {
			return nil
		}
	}
}

// elect tries the leader lock once; on success it starts a term (a new
// epoch). It returns nil, nil when another daemon leads.
func (d *Daemon) elect(ctx context.Context) (*metadata.Leadership, error) {
	ectx, cancel := context.WithTimeout(ctx, max(d.checkTimeout(), 10*time.Second))
	defer cancel()
	lease, ok, err := d.cat.TryLeaderLock(ectx)
	if err != nil || !ok {
		return nil, err
	}
	term, err := d.cat.TakeLeadership(ectx, lease, d.holder, d.leaseTTL())
	if err != nil {
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		lease.Release(rctx)
		rcancel()
		return nil, err
	}
	return term, nil
}

// lead runs the leader's loops until ctx ends or the lock is lost, then
// stops every one of them before it returns.
func (d *Daemon) lead(ctx context.Context, term *metadata.Leadership) {
	log := d.log.With(zap.Int64("epoch", term.Epoch))
	d.setState(Leading, term)
	log.Info("became leader", zap.String("holder", term.Holder), zap.Uint32("lock_pid", term.PID()))
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup

	// Unfinished jobs first: a leader that died or lost its lock mid-job
	// left them. The first pass holds the rebalance slot from here, so no
	// trigger plans before it.
	d.running.Lock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.jobs(lctx, term, log)
	}()

	c := cron.New(cron.WithLocation(d.loc))
	for i, sched := range d.schedules {
		spec := d.cfg.Schedules[i]
		l := cronLogger{log.With(zap.String("schedule", spec))}
		job := cron.NewChain(cron.Recover(l), cron.SkipIfStillRunning(l)).Then(cron.FuncJob(func() {
			d.trigger(lctx, term, "cron", false)
		}))
		c.Schedule(sched, job)
	}
	c.Start()

	wg.Add(1)
	go func() {
		defer wg.Done()
		d.watch(lctx, term, log)
	}()

	// Drop old shards past their grace period, and leftovers, regularly.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctxtime.Sleep(lctx, d.cfg.SweepEvery) == nil {
			d.sweep(lctx, log)
		}
	}()

	// Keep leading while the lock's session holds it and the epoch is ours.
	if err := d.heartbeat(lctx, term); err != nil {
		d.setState(Lost, term)
		d.setErr(err)
		log.Warn("lost the leader lock: stepping down", zap.Error(err))
	}
	cancel()
	stopped := make(chan struct{})
	go func() {
		<-c.Stop().Done()
		wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		log.Warn("the leader's loops are still stopping (a cutover in progress finishes first)")
		<-stopped
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	term.Release(rctx)
	rcancel()
	d.setState(Standby, nil)
	log.Info("stopped leading: every leader loop has stopped")
}

// heartbeat checks the leader lock every checkEvery, each check bounded by
// checkTimeout. It returns nil when ctx ends, and why when the lock or the
// epoch is lost.
func (d *Daemon) heartbeat(ctx context.Context, term *metadata.Leadership) error {
	for {
		if err := ctxtime.Sleep(ctx, d.checkEvery()); err != nil {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, d.checkTimeout())
		err := d.cat.CheckLeadership(cctx, term)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// jobKinds are the jobs a leader resumes.
var jobKinds = []string{"rebalance", "drain", "move"}

// jobs resumes unfinished jobs: at the start of the term every one (it
// adopts them: they carry this term's epoch from then on), and while it
// leads the ones of this term that stopped early (a mover's connection
// failed, a worker restarted), with backoff. The caller holds d.running for
// the first pass.
func (d *Daemon) jobs(ctx context.Context, term *metadata.Leadership, log *zap.Logger) {
	adoptAll, held := true, true
	var backoff time.Duration
	for {
		if !held {
			if err := ctxtime.Sleep(ctx, max(d.cfg.Poll, backoff)); err != nil {
				return
			}
			if !d.running.TryLock() {
				continue
			}
		}
		held = false
		done, err := d.runner.resumeAs(ctx, term, !adoptAll, d.cfg.Limits)
		d.running.Unlock()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			backoff = min(max(2*backoff, time.Second), time.Minute)
			d.setErr(err)
			log.Warn("unfinished jobs did not run to the end; retrying", zap.Duration("retry_in", backoff), zap.Error(err))
		case !done:
			// Another process holds the rebalance lock (a CLI job, or a
			// leader still stopping): look again in a while.
			backoff = 2 * time.Second
		default:
			backoff = 0
		}
		if done {
			adoptAll = false
		}
	}
}

// fenceEvery is how often every daemon, leader or standby, looks for
// fences a dead mover left (mover.Engine.SettleOrphans): a fence prepared
// without a decision keeps the source's shards locked (on compat even
// reads wait), so it must not wait for the minute's sweep. Each look costs
// a query on each active node and one on the coordinator.
const fenceEvery = 2 * time.Second

// fenceLoop settles, every fenceEvery, the fences prepared more than
// mover.OrphanAge ago whose moves no mover holds, and re-establishes the
// fence of a decided move found gone on a compat source. It runs in every
// daemon and beside a rebalance: the moves' leases keep it off every fence
// a live mover holds.
func (d *Daemon) fenceLoop(ctx context.Context) {
	eng := d.runner.Engine()
	var lastWarn time.Time
	for ctxtime.Sleep(ctx, fenceEvery) == nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := eng.SettleOrphans(cctx, mover.OrphanAge)
		cancel()
		if err != nil && ctx.Err() == nil && time.Since(lastWarn) >= 30*time.Second {
			lastWarn = time.Now()
			d.log.Warn("settling the fences of dead movers failed; trying again every few seconds", zap.Error(err))
		}
	}
}

// sweep runs the cleanup of finished moves, never during a rebalance (whose
// moves own their artifacts anyway).
func (d *Daemon) sweep(ctx context.Context, log *zap.Logger) {
	if !d.running.TryLock() {
		return
	}
	defer d.running.Unlock()
	rep, err := d.runner.Engine().Sweep(ctx, mover.SweepOptions{KeepOldFor: d.cfg.KeepOldFor})
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("cleanup sweep of finished moves failed", zap.Error(err))
		}
		return
	}
	for _, it := range rep.Dropped {
		log.Info("cleanup sweep dropped a leftover of a finished move", zap.String("object", it.Object), zap.String("name", it.Name),
			zap.String("node", it.Node), zap.String("why", it.Why))
	}
}

// watch reads the node catalog (through metadata) every Poll, and at once
// when the coordinator announces a change (compat clusters); a node added,
// reactivated or given shouldhaveshards starts the settle timer, and when
// the cluster has been quiet for Settle a rebalance runs. It starts from
// the nodes the last leader accounted for (recorded in the journal), not
// from what it sees first, so a node added while no daemon led counts as
// added; it records the nodes again whenever no rebalance is owed.
func (d *Daemon) watch(ctx context.Context, term *metadata.Leadership, log *zap.Logger) {
	notes := d.cat.WatchNodes(ctx)
	var due time.Time
	wait := func() error {
		timeout := d.cfg.Poll
		if !due.IsZero() {
			timeout = max(0, min(timeout, time.Until(due)))
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-notes:
		}
		return nil
	}
	read := func() (map[int32]nodeState, []int32, bool, error) {
		rctx, cancel := context.WithTimeout(ctx, d.checkTimeout())
		defer cancel()
		now, err := d.nodeStates(rctx)
		if err != nil {
			return nil, nil, false, err
		}
		rec, ok, err := d.cat.NodesSeen(rctx)
		return now, rec, ok, err
	}
	var (
		seen      map[int32]nodeState
		recorded  []int32 // what the journal says was accounted for
		owed      bool
		backoff   time.Duration
		firstRead = true
	)
	for {
		if !firstRead {
			if wait() != nil {
				return
			}
		}
		now, rec, ok, err := read()
		if err != nil {
			if ctx.Err() == nil {
				d.setErr(err)
				log.Warn("node watch cannot read the node catalog; trying again", zap.Error(err))
			}
			if firstRead && wait() != nil {
				return
			}
			continue
		}
		if firstRead {
			firstRead = false
			recorded = rec
			if ok {
				seen = map[int32]nodeState{}
				for _, id := range rec {
					seen[id] = nodeState{usable: true}
				}
			} else {
				seen = now
			}
		}
		for id, st := range now {
			old, known := seen[id]
			if st.usable && (!known || !old.usable) {
				log.Info("node added or reactivated: rebalancing after the settle period", zap.String("node", st.addr),
					zap.Duration("settle", d.cfg.Settle))
				due, owed, backoff = time.Now().Add(d.cfg.Settle), true, 0
			}
		}
		seen = now
		if owed && !time.Now().Before(due) {
			accounted := usableIDs(seen)
			if d.trigger(ctx, term, "node_added", true) {
				owed, due = false, time.Time{}
				d.recordNodes(ctx, term, accounted, &recorded, log)
			} else if ctx.Err() == nil {
				backoff = min(max(2*backoff, d.cfg.Settle, time.Second), 5*time.Minute)
				due = time.Now().Add(backoff)
				log.Warn("rebalance for an added node did not finish; trying again", zap.Duration("retry_in", backoff))
			}
			continue
		}
		if !owed {
			d.recordNodes(ctx, term, usableIDs(seen), &recorded, log)
		}
	}
}

// recordNodes records the usable nodes the leader has accounted for, when
// they differ from what is recorded.
func (d *Daemon) recordNodes(ctx context.Context, term *metadata.Leadership, ids []int32, recorded *[]int32, log *zap.Logger) {
	if *recorded != nil && slices.Equal(ids, *recorded) {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, d.checkTimeout())
	defer cancel()
	if err := d.cat.RecordNodesSeen(rctx, term, ids); err != nil {
		if ctx.Err() == nil {
			log.Warn("node watch cannot record the nodes it has accounted for", zap.Error(err))
		}
		return
	}
	*recorded = ids
}

func usableIDs(m map[int32]nodeState) []int32 {
	ids := []int32{}
	for id, st := range m {
		if st.usable {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

type nodeState struct {
	addr   string
	usable bool
}

func (d *Daemon) nodeStates(ctx context.Context) (map[int32]nodeState, error) {
	nodes, err := d.cat.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int32]nodeState{}
	for _, n := range nodes {
		if n.IsCoordinator() {
			continue
		}
		out[n.ID] = nodeState{addr: n.Addr(), usable: n.IsActive && n.ShouldHaveShards}
	}
	return out, nil
}

// trigger plans from fresh metadata and runs a rebalance when the plan has
// moves; the job is recorded only while term is current. A trigger while a
// rebalance runs waits for it when wait is set (a node was added: the
// running job did not plan for it), and is skipped otherwise (cron). It
// reports whether the cluster ended as planned (balanced, or the job done).
func (d *Daemon) trigger(ctx context.Context, term *metadata.Leadership, source string, wait bool) bool {
	log := d.log.With(zap.Int64("epoch", term.Epoch), zap.String("source", source))
	d.metrics.Triggers.WithLabelValues(source).Inc()
	if wait {
		d.running.Lock()
	} else if !d.running.TryLock() {
		log.Info("rebalance trigger skipped: a rebalance or a resumed job is still running")
		return false
	}
	defer d.running.Unlock()
	if ctx.Err() != nil {
		return false
	}
	log.Info("rebalance triggered")
	out, err := d.runner.Run(ctx, JobRequest{Kind: "rebalance", Plan: d.cfg.Plan, Limits: d.cfg.Limits, Fence: term, Recheck: d.cfg.Recheck})
	d.mu.Lock()
	d.lastPlan = time.Now()
	d.mu.Unlock()
	switch {
	case errors.Is(err, ErrUnmeasured) && ctx.Err() == nil:
		// Nothing was planned or changed; a node-added round is tried
		// again with backoff, a cron round at its next time.
		d.setErr(err)
		log.Warn("rebalance round skipped: a node could not be measured, and planning without it would guess", zap.Error(err))
	case err != nil && ctx.Err() == nil:
		d.setErr(err)
		log.Warn("rebalance failed", zap.Error(err))
	case out.Job == nil && err == nil:
		log.Info("rebalance trigger found the cluster balanced: nothing to do")
	case err == nil:
		log.Info("rebalance finished", zap.Int64("job_id", out.Job.ID), zap.Int("rechecks", len(out.Rechecks)))
	}
	return err == nil
}

func (d *Daemon) setState(s LeaderState, term *metadata.Leadership) {
	d.mu.Lock()
	was := d.state
	d.state = s
	if term != nil {
		d.term = term
	}
	if s == Standby {
		d.term = nil
	}
	d.mu.Unlock()
	if s == Leading {
		d.metrics.Leader.Set(1)
	} else {
		d.metrics.Leader.Set(0)
	}
	if (was == Leading) != (s == Leading) {
		d.metrics.LeaderChanges.Inc()
	}
}

func (d *Daemon) setErr(err error) {
	d.mu.Lock()
	d.lastErr = err.Error()
	d.mu.Unlock()
}

// refreshLoop reads, every Poll and whether or not this daemon leads, the
// moves by phase and the leader row from the journal, for /metrics and
// /status.
func (d *Daemon) refreshLoop(ctx context.Context) {
	for {
		rctx, cancel := context.WithTimeout(ctx, d.checkTimeout())
		phases, perr := d.cat.MovesByPhase(rctx)
		rec, ok, rerr := d.cat.CurrentLeader(rctx)
		cancel()
		if perr == nil {
			d.metrics.setPhases(phases)
		}
		d.mu.Lock()
		if perr == nil {
			d.phases = phases
		}
		if rerr == nil {
			d.record = nil
			if ok {
				d.record = &rec
				d.metrics.Epoch.Set(float64(rec.Epoch))
			}
		}
		d.mu.Unlock()
		if err := ctxtime.Sleep(ctx, d.cfg.Poll); err != nil {
			return
		}
	}
}

// Readiness is the body of /readyz.
type Readiness struct {
	// State is leader, standby or lost (lost the lock, still stopping).
	State string `json:"state"`
	// Epoch is this daemon's term when it leads.
	Epoch int64 `json:"epoch,omitempty"`
	// Leader names the daemon the journal records as leader.
	Leader string `json:"leader,omitempty"`
	// Reason says why the daemon is not ready.
	Reason string `json:"reason,omitempty"`
}

func (d *Daemon) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		st := d.State()
		body := Readiness{State: st.String(), Epoch: d.Epoch()}
		d.mu.Lock()
		if d.record != nil && d.record.Held {
			body.Leader = d.record.Holder
		}
		d.mu.Unlock()
		code := http.StatusOK
		switch {
		case d.cat.Pool().Ping(ctx) != nil:
			code, body.Reason = http.StatusServiceUnavailable, "coordinator unreachable"
		case st == Lost:
			code, body.Reason = http.StatusServiceUnavailable, "lost the leader lock; stopping the leader's loops"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		jobs, err := d.cat.Jobs(r.Context(), 20)
		if err != nil {
			http.Error(w, "cannot read the journal", http.StatusServiceUnavailable)
			return
		}
		moves, err := d.cat.Moves(r.Context(), metadata.MoveFilter{ActiveOnly: true})
		if err != nil {
			http.Error(w, "cannot read the journal", http.StatusServiceUnavailable)
			return
		}
		st := d.State()
		epoch := d.Epoch()
		d.mu.Lock()
		body := map[string]any{"leader": st == Leading, "state": st.String(), "holder": d.holder, "last_error": d.lastErr,
			"jobs": nonNil(jobs), "active_moves": nonNil(moves), "moves_by_phase": d.phases}
		if epoch > 0 {
			body["epoch"] = epoch
		}
		if d.record != nil {
			body["leader_record"] = d.record
		}
		if !d.lastPlan.IsZero() {
			body["last_plan_at"] = d.lastPlan
		}
		if !d.slotsAt.IsZero() {
			body["replication_slots"] = slotsStatus{ReadAt: d.slotsAt, Slots: nonNil(d.slots), Warnings: d.slotWarnings}
		}
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	})
	return mux
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// cronLogger adapts zap to cron.Logger, and says what cron's terse
// messages are about.
type cronLogger struct{ l *zap.Logger }

func (c cronLogger) Info(msg string, kv ...any) {
	if msg == "skip" {
		msg = "cron schedule fired while its previous run is still going: this run is skipped"
	}
	c.l.Sugar().Infow(msg, kv...)
}

func (c cronLogger) Error(err error, msg string, kv ...any) {
	if msg == "panic" {
		msg = "cron-triggered rebalance panicked; the schedule keeps running"
	}
	c.l.Sugar().Errorw(msg, append(kv, "error", err)...)
}
