package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// RunOptions describes a workload run.
type RunOptions struct {
	Clients  int
	Duration time.Duration
	Seed     uint64
	Users    int64 // user ids to write for (1..Users)
	// Mix is the percentage of inserts, updates and deletes (sums to 100).
	InsertPct, UpdatePct, DeletePct int
	// Pause between a client's operations (0: as fast as possible).
	Pause time.Duration
	// RunID keeps this run's rows apart from other runs' (0..255).
	RunID uint8
}

// TestPause is the Pause the test suites give each client of the
// workloads they run under moves. Every client still queues behind a
// cutover's lock within TestPause of it being taken, and writes stay in
// flight through every phase and cutover step, but the clients no longer
// take most of a two-core machine's CPU from the moves under test and from
// the packages tested beside them (TestKilledAtEveryPhase alone: 86 s of
// CPU unpaced, 63 s paced; about 1,500 acknowledged writes a case instead
// of 5,800).
const TestPause = 2 * time.Millisecond

// DefaultRunOptions: 8 clients for 30 s, 50% inserts, 35% updates, 15% deletes.
func DefaultRunOptions() RunOptions {
	return RunOptions{Clients: 8, Duration: 30 * time.Second, Seed: 7, Users: 1000, InsertPct: 50, UpdatePct: 35, DeletePct: 15}
}

// RunResult summarises a run.
type RunResult struct {
	Ledger    *Ledger
	Errors    map[string]int64 // by SQLSTATE or error class
	Latencies []Latency
	Retries   int64
	Refreshes int64
	Elapsed   time.Duration
	// Via counts acknowledged writes by the node they were sent to
	// (host:port). On compat that is the shard's placement; on Citus the
	// client's entry node (Router.Entry), which Citus routes from.
	Via map[string]int64
	// Details describes the first errors of the run (up to maxDetails per
	// client), each with its time, operation, row and the node the
	// statement went to, so that a test that fails on Errors can say when
	// and where (to lay beside the mover's log).
	Details []string
}

// maxDetails bounds RunResult.Details per client.
const maxDetails = 5

// Ops is the total of acknowledged operations.
func (r RunResult) Ops() int64 { return r.Ledger.Acknowledged() }

// LatencySummary is what a user of the database feels of a run: the
// median and 99th percentile, the worst write, and how many writes took
// longer than 100 ms and than 1 s.
type LatencySummary struct {
	P50, P99, Max     time.Duration
	Over100ms, Over1s int64
}

// Summarize summarizes every latency of the run.
func (r RunResult) Summarize() LatencySummary {
	s := LatencySummary{
		P50: Percentile(r.Latencies, 50, time.Time{}, time.Time{}),
		P99: Percentile(r.Latencies, 99, time.Time{}, time.Time{}),
	}
	for _, l := range r.Latencies {
		s.Max = max(s.Max, l.Dur)
		if l.Dur > 100*time.Millisecond {
			s.Over100ms++
		}
		if l.Dur > time.Second {
			s.Over1s++
		}
	}
	return s
}

// Percentile returns the p-th percentile (0..100) of latencies in [from, to).
func Percentile(lat []Latency, p float64, from, to time.Time) time.Duration {
	var ds []time.Duration
	for _, l := range lat {
		if (from.IsZero() || !l.At.Before(from)) && (to.IsZero() || l.At.Before(to)) {
			ds = append(ds, l.Dur)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(float64(len(ds)-1) * p / 100)
	return ds[i]
}

// stopGrace bounds how long a stopping workload waits for its statements
// in flight before cancelling them.
const stopGrace = 30 * time.Second

// Run drives the workload until ctx ends or Duration passes. It returns
// when every client has stopped; Ledger holds every acknowledged write.
// When Duration passes, clients start no new statement and the ones in
// flight finish (up to stopGrace): a statement cancelled mid-way may still
// commit on a node after the run has returned (through Citus, on the
// shard's node), which a check reading right after would see half-way.
func Run(ctx context.Context, r *Router, opts RunOptions) (RunResult, error) {
	stop := make(chan struct{})
	t := time.AfterFunc(opts.Duration, func() { close(stop) })
	defer t.Stop()
	return run(ctx, stop, r, opts)
}

// run is Run ending when stop closes (gracefully) or ctx ends (at once).
func run(ctx context.Context, stop <-chan struct{}, r *Router, opts RunOptions) (RunResult, error) {
	if opts.Clients < 1 {
		return RunResult{}, fmt.Errorf("--clients must be at least 1, got %d", opts.Clients)
	}
	if opts.Duration <= 0 {
		return RunResult{}, fmt.Errorf("--duration must be positive, got %s", opts.Duration)
	}
	if opts.InsertPct+opts.UpdatePct+opts.DeletePct != 100 {
		return RunResult{}, fmt.Errorf("the insert, update and delete percentages must sum to 100")
	}
	if opts.Users < 1 {
		opts.Users = 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
			return
		}
		select {
		case <-time.After(stopGrace):
			cancel()
		case <-ctx.Done():
		}
	}()
	res := RunResult{Ledger: NewLedger(), Errors: map[string]int64{}, Via: map[string]int64{}}
	res.Ledger.RunID = opts.RunID
	var mu sync.Mutex
	var wg sync.WaitGroup
	r0, f0 := r.Stats()
	start := time.Now()
	for c := 0; c < opts.Clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			cl := &client{id: c, r: r, l: res.Ledger, opts: opts,
				rng:  rand.New(rand.NewPCG(opts.Seed, uint64(c)+1)),
				gen:  NewGenerator(opts.Seed+uint64(c), opts.Users),
				errs: map[string]int64{}, via: map[string]int64{}}
			cl.run(ctx, stop)
			mu.Lock()
			for k, v := range cl.errs {
				res.Errors[k] += v
			}
			for k, v := range cl.via {
				res.Via[k] += v
			}
			res.Details = append(res.Details, cl.details...)
			res.Latencies = append(res.Latencies, cl.lat...)
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	r1, f1 := r.Stats()
	res.Refreshes, res.Retries = r1-r0, f1-f0
	sort.Slice(res.Latencies, func(i, j int) bool { return res.Latencies[i].At.Before(res.Latencies[j].At) })
	return res, nil
}

type client struct {
	id   int
	r    *Router
	l    *Ledger
	opts RunOptions
	rng  *rand.Rand
	gen  *Generator
	seq  int64
	live []Key         // rows this client owns and may still touch
	revs map[Key]int64 // last acknowledged rev per live row
	errs map[string]int64
	via  map[string]int64
	lat  []Latency
	// details: the first errors, described (RunResult.Details).
	details []string
}

func (c *client) run(ctx context.Context, stop <-chan struct{}) {
	c.revs = map[Key]int64{}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return ctx.Err() != nil
		}
	}
	for !stopped() {
		n := c.rng.IntN(100)
		switch {
		case n < c.opts.InsertPct || len(c.live) == 0:
			c.insert(ctx)
		case n < c.opts.InsertPct+c.opts.UpdatePct:
			c.update(ctx)
		default:
			c.delete(ctx)
		}
		if c.opts.Pause > 0 {
			select {
			case <-ctx.Done():
			case <-stop:
			case <-time.After(c.opts.Pause):
			}
		}
	}
}

// outcome classifies an error: nil means acknowledged; the string names the
// error class for the report.
func classify(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "context"
	}
	return "connection"
}

// sent reports whether an error may have happened after the statement
// reached the server (so its outcome is unknown).
func sent(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false // the server answered with an error: nothing committed
	}
	return !pgconn.SafeToRetry(err)
}

// sentThroughCitus is sent for a statement Citus routes: the node the client
// talks to forwards it to the shard's node, and some errors it answers with
// are about that second hop, after which the shard's node may have
// committed (an autocommit single-shard write commits there on its own). So
// besides errors of the client's own connection, these SQLSTATEs leave the
// outcome unknown: connection exceptions (class 08, which Citus raises when
// a worker connection fails), internal errors (XX000, Citus's catch-all for
// remote failures), a cancelled statement or a node shutting down (57014,
// 57P01-57P03) and statement_completion_unknown (40003).
func sentThroughCitus(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return sent(err)
	}
	switch c := pgErr.Code; {
	case strings.HasPrefix(c, "08"), c == "XX000", c == "57014", c == "57P01", c == "57P02", c == "57P03", c == "40003":
		return true
	}
	return false
}

func (c *client) record(op string, start time.Time, t Target) {
	c.lat = append(c.lat, Latency{At: start, Dur: time.Since(start), Op: op})
	c.via[t.Node.Addr()]++
}

func (c *client) insert(ctx context.Context) {
	c.seq++
	userID := c.gen.NextUserID()
	eventID := RunBase(c.opts.RunID) + int64(c.id)<<32 + c.seq
	e := c.gen.EventFor(eventID, userID, c.rng)
	k := Key{userID, eventID}
	start := time.Now()
	var via Target
	var affected int64
	err := c.r.do(ctx, c.id, EventsTable, userID, func(ctx context.Context, t Target) error {
		via = t
		tag, err := t.Pool.Exec(ctx, "INSERT INTO "+t.Rel.Sanitize()+
			" (event_id, event_type, event_public, repo_id, payload, repo, user_id, org, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
			e.Values()...)
		affected = tag.RowsAffected()
		return err
	})
	w := c.write("insert", 0, start, via, affected)
	if c.done(ctx, "insert", start, via, err, k, true, 0, w) {
		c.record("insert", start, via)
		c.l.ackInsert(k, w)
		c.live = append(c.live, k)
		c.revs[k] = 0
	}
}

func (c *client) update(ctx context.Context) {
	i := c.rng.IntN(len(c.live))
	k := c.live[i]
	rev := c.revs[k] + 1
	start := time.Now()
	var affected int64
	var via Target
	err := c.r.do(ctx, c.id, EventsTable, k.UserID, func(ctx context.Context, t Target) error {
		via = t
		tag, err := t.Pool.Exec(ctx, "UPDATE "+t.Rel.Sanitize()+
			" SET payload = jsonb_set(payload, '{rev}', to_jsonb($3::bigint)) WHERE user_id = $1 AND event_id = $2", k.UserID, k.EventID, rev)
		affected = tag.RowsAffected()
		return err
	})
	w := c.write("update", rev, start, via, affected)
	if c.done(ctx, "update", start, via, err, k, true, rev, w) {
		c.record("update", start, via)
		if affected != 1 {
			// The row the ledger says exists was not there: keep the ledger
			// as it is so that Check reports it.
			c.errs["update_missing_row"]++
			c.detail(start, "update", k, via, errors.New("update_missing_row: the UPDATE found no row"))
			c.forget(i)
			return
		}
		c.l.ackUpdate(k, rev, w)
		c.revs[k] = rev
	} else {
		c.forget(i)
	}
}

func (c *client) delete(ctx context.Context) {
	i := c.rng.IntN(len(c.live))
	k := c.live[i]
	start := time.Now()
	var via Target
	var affected int64
	err := c.r.do(ctx, c.id, EventsTable, k.UserID, func(ctx context.Context, t Target) error {
		via = t
		tag, err := t.Pool.Exec(ctx, "DELETE FROM "+t.Rel.Sanitize()+" WHERE user_id = $1 AND event_id = $2", k.UserID, k.EventID)
		affected = tag.RowsAffected()
		return err
	})
	w := c.write("delete", 0, start, via, affected)
	if c.done(ctx, "delete", start, via, err, k, false, 0, w) {
		c.record("delete", start, via)
		c.l.ackDelete(k, w)
		if affected != 1 {
			// The row the ledger says exists was not there (or was
			// there twice): the delete is recorded as acknowledged, and
			// the run reports the error.
			c.errs["delete_missing_row"]++
			c.detail(start, "delete", k, via, fmt.Errorf("delete_missing_row: the DELETE found %d rows", affected))
		}
	}
	c.forget(i)
}

// write describes a statement of this client for the ledger's history.
func (c *client) write(op string, rev int64, start time.Time, via Target, affected int64) Write {
	return Write{Op: op, Rev: rev, Start: start, End: time.Now(), Via: fmt.Sprintf("client %d to %s", c.id, viaName(via)), Affected: affected}
}

// viaName names the node and relation a statement was sent to.
func viaName(via Target) string {
	if via.Pool == nil {
		return "?"
	}
	return via.Node.Addr() + " " + via.Rel.Sanitize()
}

// detail describes one error for RunResult.Details (the first few only).
func (c *client) detail(at time.Time, op string, k Key, via Target, err error) {
	if len(c.details) >= maxDetails {
		return
	}
	c.details = append(c.details, fmt.Sprintf("%s client %d %s user_id=%d event_id=%d via %s: %v",
		at.UTC().Format("15:04:05.000000"), c.id, op, k.UserID, k.EventID, viaName(via), err))
}

func (c *client) forget(i int) {
	k := c.live[i]
	c.live[i] = c.live[len(c.live)-1]
	c.live = c.live[:len(c.live)-1]
	delete(c.revs, k)
}

// done interprets a write's error: true when acknowledged. An error that
// may have come after the server committed makes the row in doubt.
func (c *client) done(ctx context.Context, op string, start time.Time, via Target, err error, k Key, present bool, rev int64, w Write) bool {
	if err == nil {
		return true
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// Stopped mid-write: the outcome is unknown.
		c.l.doubt(k, present, rev, w)
		return false
	}
	c.errs[classify(err)]++
	c.detail(start, op, k, via, err)
	inDoubt := sent
	if c.r.citus() {
		inDoubt = sentThroughCitus
	}
	if inDoubt(err) {
		c.l.doubt(k, present, rev, w)
	}
	return false
}

// Background is a workload running until Stop.
type Background struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    RunResult
	err    error
}

// Start runs the workload in the background; opts.Duration bounds it (use
// a long one and call Stop).
func Start(ctx context.Context, r *Router, opts RunOptions) *Background {
	stop := make(chan struct{})
	var once sync.Once
	b := &Background{cancel: func() { once.Do(func() { close(stop) }) }, done: make(chan struct{})}
	t := time.AfterFunc(opts.Duration, b.cancel)
	go func() {
		defer close(b.done)
		defer t.Stop()
		b.res, b.err = run(ctx, stop, r, opts)
	}()
	return b
}

// Stop ends the workload and returns what it acknowledged: clients start
// no new statement, and the ones in flight finish first (up to stopGrace).
func (b *Background) Stop() (RunResult, error) {
	b.cancel()
	<-b.done
	return b.res, b.err
}
