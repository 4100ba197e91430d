package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	// Schedules are cron expressions (5 fields, or 6 with seconds).
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
	// Mover configures moves; its Logger is the daemon's logger.
	Mover mover.Config
}

// DefaultDaemonConfig returns the documented defaults.
func DefaultDaemonConfig() DaemonConfig {
	return DaemonConfig{Listen: "127.0.0.1:9187", Settle: 30 * time.Second, Poll: time.Second,
		KeepOldFor: 10 * time.Minute, SweepEvery: time.Minute,
		Plan: DefaultPlanOptions(), Limits: mover.DefaultLimits(), Mover: mover.DefaultConfig()}
}

// Daemon keeps a cluster balanced: one leader per cluster (a session
// advisory lock on the coordinator) watches for added nodes, runs cron
// schedules and resumes unfinished jobs; every daemon serves HTTP.
type Daemon struct {
	cfg     DaemonConfig
	cat     *metadata.Catalog
	log     *zap.Logger
	metrics *Metrics
	runner  *Runner
	loc     *time.Location
	ln      net.Listener

	mu       sync.Mutex
	leader   bool
	lastErr  string
	lastPlan time.Time
	running  sync.Mutex // held while a rebalance runs
}

// NewDaemon checks the configuration and binds the HTTP port. Errors match
// metadata.ErrInvalid and name the flag at fault.
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
	if cfg.KeepOldFor < 0 {
		return nil, invalidf("--keep-old-for must not be negative, got %s", cfg.KeepOldFor)
	}
	if cfg.Settle < 0 {
		return nil, invalidf("--settle must not be negative, got %s", cfg.Settle)
	}
	if cfg.Limits.Concurrency < 1 {
		return nil, invalidf("--concurrency must be at least 1, got %d", cfg.Limits.Concurrency)
	}
	if cfg.Limits.PerNode < 1 {
		return nil, invalidf("--per-node must be at least 1, got %d", cfg.Limits.PerNode)
	}
	loc := time.Local
	if cfg.Timezone != "" {
		var err error
		if loc, err = time.LoadLocation(cfg.Timezone); err != nil {
			return nil, invalidf("--timezone %q is not a known time zone (use an IANA name such as Europe/Berlin or UTC)", cfg.Timezone)
		}
	}
	for _, spec := range cfg.Schedules {
		if _, err := cronParser.Parse(spec); err != nil {
			return nil, invalidf("--schedule %q is not a cron expression (%v); write 5 fields like \"0 3 * * *\", or 6 with seconds first", spec, err)
		}
	}
	if _, err := BuildInput(metadata.Status{SchemaVersion: 1}, cfg.Plan); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, invalidf("--listen %s cannot be used (%v); pick a free address", cfg.Listen, errors.Unwrap(err))
	}
	m := NewMetrics()
	d := &Daemon{cfg: cfg, cat: cat, log: cfg.Mover.Logger, metrics: m, loc: loc, ln: ln}
	d.runner = NewRunner(cat, cfg.Mover, m)
	return d, nil
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Addr is the HTTP address the daemon listens on.
func (d *Daemon) Addr() string { return d.ln.Addr().String() }

// Metrics returns the daemon's metrics.
func (d *Daemon) Metrics() *Metrics { return d.metrics }

// IsLeader reports whether this daemon leads.
func (d *Daemon) IsLeader() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leader
}

// Start serves HTTP and, while it holds the leader lock, does the leader's
// work. It blocks until ctx is done, then stops cleanly: moves before their
// cutover decision stop where they are (resumable), a cutover in progress
// finishes.
func (d *Daemon) Start(ctx context.Context) error {
	srv := &http.Server{Handler: d.mux(), ReadHeaderTimeout: 5 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(d.ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-httpDone
	}()
	d.log.Info("daemon started", zap.String("listen", d.Addr()))
	for {
		lease, ok, err := d.cat.TryLock(ctx, metadata.LockLeader, 1)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			d.setErr(err)
			d.log.Warn("leader election failed", zap.Error(err))
		case ok:
			d.lead(ctx, lease)
			lease.Release(context.WithoutCancel(ctx))
			if ctx.Err() != nil {
				return nil
			}
		}
		if err := ctxtime.Sleep(ctx, d.cfg.Poll); err != nil {
			return nil
		}
	}
}

// lead runs the leader's loops until ctx ends or the lease is lost.
func (d *Daemon) lead(ctx context.Context, lease *metadata.Lease) {
	d.setLeader(true)
	defer d.setLeader(false)
	d.log.Info("became leader")
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()

	// Unfinished jobs first: a leader that died mid-job left them.
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.running.Lock()
		defer d.running.Unlock()
		if err := d.runner.Resume(lctx, d.cfg.Limits); err != nil && lctx.Err() == nil {
			d.setErr(err)
			d.log.Warn("resume unfinished jobs", zap.Error(err))
		}
	}()

	c := cron.New(cron.WithParser(cronParser), cron.WithLocation(d.loc),
		cron.WithChain(cron.Recover(cronLogger{d.log}), cron.SkipIfStillRunning(cronLogger{d.log})))
	for _, spec := range d.cfg.Schedules {
		spec := spec
		if _, err := c.AddFunc(spec, func() { d.trigger(lctx, "cron", false) }); err != nil {
			d.log.Error("add schedule", zap.String("schedule", spec), zap.Error(err))
		}
	}
	c.Start()
	defer func() { <-c.Stop().Done() }()

	wg.Add(1)
	go func() {
		defer wg.Done()
		d.watch(lctx)
	}()

	// Drop old shards past their grace period, and leftovers, regularly.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctxtime.Sleep(lctx, d.cfg.SweepEvery) == nil {
			d.sweep(lctx)
		}
	}()

	// Keep leading while the lease's connection lives.
	for {
		if err := ctxtime.Sleep(lctx, d.cfg.Poll); err != nil {
			return
		}
		if !lease.Alive(lctx) && lctx.Err() == nil {
			d.log.Warn("lost the leader lock")
			return
		}
		_ = d.metrics.refreshPhases(lctx, d.cat)
	}
}

// sweep runs the cleanup of finished moves, never during a rebalance (whose
// moves own their artifacts anyway).
func (d *Daemon) sweep(ctx context.Context) {
	if !d.running.TryLock() {
		return
	}
	defer d.running.Unlock()
	rep, err := d.runner.Engine().Sweep(ctx, mover.SweepOptions{KeepOldFor: d.cfg.KeepOldFor})
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("cleanup failed", zap.Error(err))
		}
		return
	}
	for _, it := range rep.Dropped {
		d.log.Info("cleaned up", zap.String("object", it.Object), zap.String("name", it.Name), zap.String("node", it.Node), zap.String("why", it.Why))
	}
}

// watch reads the node catalog (through metadata) every Poll, and at once
// when the coordinator announces a change (compat clusters); a node added,
// reactivated or given shouldhaveshards starts the settle timer, and when
// the cluster has been quiet for Settle a rebalance runs.
func (d *Daemon) watch(ctx context.Context) {
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
	seen, err := d.nodeStates(ctx)
	for err != nil {
		if wait() != nil {
			return
		}
		seen, err = d.nodeStates(ctx)
	}
	for {
		if wait() != nil {
			return
		}
		now, err := d.nodeStates(ctx)
		if err != nil {
			d.setErr(err)
			continue
		}
		for id, st := range now {
			old, known := seen[id]
			if !known || (st.usable && !old.usable) {
				d.log.Info("node added or reactivated", zap.String("node", st.addr), zap.Duration("settle", d.cfg.Settle))
				due = time.Now().Add(d.cfg.Settle)
			}
		}
		seen = now
		if !due.IsZero() && !time.Now().Before(due) {
			due = time.Time{}
			d.trigger(ctx, "node_added", true)
		}
	}
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
		out[n.ID] = nodeState{addr: n.Addr(), usable: n.IsActive && n.ShouldHaveShards}
	}
	return out, nil
}

// trigger plans from fresh metadata and runs a rebalance when the plan has
// moves. A trigger while a rebalance runs waits for it when wait is set
// (a node was added: the running job did not plan for it), and is skipped
// otherwise (cron).
func (d *Daemon) trigger(ctx context.Context, source string, wait bool) {
	d.metrics.Triggers.WithLabelValues(source).Inc()
	if wait {
		d.running.Lock()
	} else if !d.running.TryLock() {
		d.log.Info("rebalance still running: trigger skipped", zap.String("source", source))
		return
	}
	defer d.running.Unlock()
	if ctx.Err() != nil {
		return
	}
	d.log.Info("rebalance triggered", zap.String("source", source))
	out, err := d.runner.Run(ctx, JobRequest{Kind: "rebalance", Plan: d.cfg.Plan, Limits: d.cfg.Limits})
	d.mu.Lock()
	d.lastPlan = time.Now()
	d.mu.Unlock()
	switch {
	case err != nil && ctx.Err() == nil:
		d.setErr(err)
		d.log.Warn("rebalance failed", zap.String("source", source), zap.Error(err))
	case out.Job == nil && err == nil:
		d.log.Info("already balanced: nothing to do", zap.String("source", source))
	}
}

func (d *Daemon) setLeader(v bool) {
	d.mu.Lock()
	d.leader = v
	d.mu.Unlock()
	if v {
		d.metrics.Leader.Set(1)
	} else {
		d.metrics.Leader.Set(0)
	}
}

func (d *Daemon) setErr(err error) {
	d.mu.Lock()
	d.lastErr = err.Error()
	d.mu.Unlock()
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
		if err := d.cat.Pool().Ping(ctx); err != nil {
			http.Error(w, "coordinator unreachable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
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
		d.mu.Lock()
		body := map[string]any{"leader": d.leader, "last_error": d.lastErr, "jobs": nonNil(jobs), "active_moves": nonNil(moves)}
		if !d.lastPlan.IsZero() {
			body["last_plan_at"] = d.lastPlan
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

// cronLogger adapts zap to cron.Logger.
type cronLogger struct{ l *zap.Logger }

func (c cronLogger) Info(msg string, kv ...any) { c.l.Sugar().Infow(msg, kv...) }
func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Sugar().Errorw(msg, append(kv, "error", err)...)
}
