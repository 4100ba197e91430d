package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ctxtime"
	"github.com/shardmover/shardmover/internal/pgerr"
)

// StreamConfig configures a Stream.
type StreamConfig struct {
	// SourceDSN and TargetDSN are libpq connection strings. They are never
	// logged: logs and errors name servers by host:port.
	SourceDSN, TargetDSN string
	// Slot and Publication exist on the source (CreateSlot,
	// CreatePublication). Origin is created on the target when missing.
	Slot, Publication, Origin string
	// StartLSN is the slot's consistent point (Snapshot.ConsistentLSN).
	// Durable progress recorded under Origin, when later, takes precedence.
	StartLSN pglogrepl.LSN
	// BatchBytes and BatchDelay bound how many consecutive source
	// transactions are grouped into one target transaction: the group is
	// committed once it holds BatchBytes of changes or its first change is
	// BatchDelay old. A single source transaction is never split.
	BatchBytes int
	BatchDelay time.Duration
	// StatusInterval is how often the applied position is reported to the
	// source when nobody waits (every 100ms while a WaitFor is pending). It
	// must stay well below the source's wal_sender_timeout.
	StatusInterval time.Duration
	// MaxRetry is how long Run keeps retrying an error that repeats without
	// progress in between before returning it. Permanent errors
	// (ErrPermanent) are returned at once.
	MaxRetry time.Duration
	// Logger receives session starts, retries and stops. Nil means none.
	Logger *zap.Logger
}

// DefaultStreamConfig returns the defaults; fill in DSNs and names.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{
		BatchBytes:     4 << 20,
		BatchDelay:     50 * time.Millisecond,
		StatusInterval: time.Second,
		MaxRetry:       5 * time.Minute,
	}
}

// waitStatusInterval is the status cadence while a WaitFor is pending: every
// status the walsender reads with our write position behind its own makes
// it answer with a keepalive carrying its current WAL end.
const waitStatusInterval = 100 * time.Millisecond

// idleAfter is how long a receive waits, while a waiter is pending, before
// the source counts as quiet. idlePing is the shortest interval between the
// status updates that then ask the walsender for its WAL end.
const (
	idleAfter = 2 * time.Millisecond
	idlePing  = 5 * time.Millisecond
)

// maxReceiveWait bounds one receive, so timers and new waiters are noticed.
const maxReceiveWait = 100 * time.Millisecond

// Stream applies a logical replication slot's changes to the target, exactly
// once, and tracks how far it has got. See the package documentation.
type Stream struct {
	cfg    StreamConfig
	log    *zap.Logger
	srcCfg *pgconn.Config
	tgtCfg *pgconn.Config

	running atomic.Bool

	mu           sync.Mutex
	processed    pglogrepl.LSN // durably applied, or passed over with nothing to apply
	serverEnd    pglogrepl.LSN // highest WAL position the source reported
	serverTime   time.Time     // source clock of the latest message
	serverTimeAt time.Time     // local clock when it arrived
	unapplied    []time.Time   // commit time of the first transaction of each group received but not yet durable, oldest first
	waiting      map[pglogrepl.LSN]int
	advanced     chan struct{} // closed and replaced whenever processed moves
	// wake, while a session streams, cuts short its pending receive, so
	// that it notices a new waiter at once rather than at its read
	// deadline (up to BatchDelay or the status cadence away).
	wake     func()
	stopErr  error     // why the last Run returned; nil while running or before
	walBlock uint64    // the source's WAL page size
	hold     holdState // holds of the applier at a position (hold.go)

	// strictUntil: transactions that commit at or before it are applied
	// in strict source order, after regrouped changes failed there. The
	// target transaction holding the last of them commits before any
	// later transaction is applied (see session.handle), so the replayed
	// stretch is durable before grouping resumes. Only the Run goroutine
	// touches it.
	strictUntil pglogrepl.LSN
	// ordered holds the relations (by quoted, schema-qualified name) on
	// which a regrouped statement failed on an integrity constraint: a
	// constraint between rows (UNIQUE, EXCLUDE) that the source's order
	// satisfies and the regrouped order need not. For the rest of this
	// Stream's life only their INSERTs are grouped (into row batches of
	// inserts alone); their UPDATEs and DELETEs are applied one statement
	// per change in source order. Only the Run goroutine touches it
	// (sessions' appliers read it).
	ordered map[string]bool
}

// maxPageHeader is SizeOfXLogLongPHD, the largest WAL page header. No WAL
// record starts or ends inside a page header.
const maxPageHeader = 40

// reached reports whether processed covers lsn. A position at a page start
// is the same point as one just past that page's header (the "start" and
// "end" spellings of one position: pg_current_wal_insert_lsn() reports the
// former after a record that ends on a page boundary, the walsender the
// latter), so such an lsn counts as reached.
func reached(processed, lsn pglogrepl.LSN, walBlock uint64) bool {
	if processed >= lsn {
		return true
	}
	return walBlock > 0 && uint64(processed)%walBlock == 0 && lsn-processed <= maxPageHeader
}

// NewStream checks cfg and returns a Stream; it connects to nothing.
func NewStream(cfg StreamConfig) (*Stream, error) {
	def := DefaultStreamConfig()
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = def.BatchBytes
	}
	if cfg.BatchDelay <= 0 {
		cfg.BatchDelay = def.BatchDelay
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = def.StatusInterval
	}
	if cfg.MaxRetry <= 0 {
		cfg.MaxRetry = def.MaxRetry
	}
	for _, n := range []struct{ kind, name string }{{"slot", cfg.Slot}, {"publication", cfg.Publication}, {"origin", cfg.Origin}} {
		if err := ValidateName(n.kind, n.name); err != nil {
			return nil, err
		}
	}
	src, err := parseDSN("source", cfg.SourceDSN)
	if err != nil {
		return nil, err
	}
	tgt, err := parseDSN("target", cfg.TargetDSN)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("slot", cfg.Slot), zap.String("origin", cfg.Origin),
		zap.String("source", addr(src)), zap.String("target", addr(tgt)))
	return &Stream{
		cfg: cfg, log: log, srcCfg: src, tgtCfg: tgt,
		waiting:  map[pglogrepl.LSN]int{},
		ordered:  map[string]bool{},
		walBlock: 8192,
		advanced: make(chan struct{}),
	}, nil
}

// Processed returns the source position up to which every change is durably
// applied on the target. When no source transaction is open it follows the
// WAL end the source reports, so an idle stream still reaches any LSN.
func (s *Stream) Processed() pglogrepl.LSN {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.processed
}

// Lag returns how far the target is behind: bytes between the WAL end the
// source last reported and Processed, and the source-clock age of the oldest
// transaction received but not yet applied (zero when every received
// transaction is applied). The walsender reports only WAL it has decoded;
// for the byte lag against everything written, compare CurrentLSN with
// Processed.
func (s *Stream) Lag() (bytes uint64, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serverEnd > s.processed {
		bytes = uint64(s.serverEnd - s.processed)
	}
	if len(s.unapplied) > 0 && !s.serverTime.IsZero() {
		now := s.serverTime.Add(time.Since(s.serverTimeAt))
		if d = now.Sub(s.unapplied[0]); d < 0 {
			d = 0
		}
	}
	return bytes, d
}

// WaitFor blocks until Processed() >= lsn (a page start counts as the
// position after its page header), ctx is done (ctx.Err()), or Run returns
// (its error, wrapped). It writes nothing to the source: while it
// waits the stream reports status every 100ms, to which the walsender
// answers with keepalives carrying its current WAL end.
func (s *Stream) WaitFor(ctx context.Context, lsn pglogrepl.LSN) error {
	s.mu.Lock()
	s.waiting[lsn]++
	if wake := s.wake; wake != nil && !reached(s.processed, lsn, s.walBlock) {
		wake()
	}
	defer func() {
		s.mu.Lock()
		if s.waiting[lsn]--; s.waiting[lsn] <= 0 {
			delete(s.waiting, lsn)
		}
		s.mu.Unlock()
	}()
	for {
		if reached(s.processed, lsn, s.walBlock) {
			s.mu.Unlock()
			return nil
		}
		if s.stopErr != nil {
			err := s.stopErr
			s.mu.Unlock()
			return fmt.Errorf("wait for %s: stream stopped at %s: %w", lsn, s.Processed(), err)
		}
		ch := s.advanced
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
		s.mu.Lock()
	}
}

// advance moves processed forward (never back) and wakes waiters.
func (s *Stream) advance(lsn pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lsn <= s.processed {
		return
	}
	s.processed = lsn
	close(s.advanced)
	s.advanced = make(chan struct{})
}

// waiterAtOrBelow reports whether a WaitFor waits for a position <= lsn;
// hasWaiters whether any waits at all.
func (s *Stream) waiters(lsn pglogrepl.LSN) (hasWaiters, atOrBelow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.waiting {
		hasWaiters = true
		if reached(lsn, w, s.walBlock) {
			return true, true
		}
	}
	return hasWaiters, false
}

// noteServer records the WAL end and the server clock t of a message that
// arrived at now.
func (s *Stream) noteServer(end pglogrepl.LSN, t, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if end > s.serverEnd {
		s.serverEnd = end
	}
	if !t.IsZero() {
		s.serverTime, s.serverTimeAt = t, now
	}
}

// pushOldest notes the commit time of a new group's first transaction;
// popOldest drops the oldest group once it is durable.
func (s *Stream) pushOldest(t time.Time) {
	s.mu.Lock()
	s.unapplied = append(s.unapplied, t)
	s.mu.Unlock()
}

func (s *Stream) popOldest() {
	s.mu.Lock()
	if len(s.unapplied) > 0 {
		s.unapplied = s.unapplied[1:]
	}
	s.mu.Unlock()
}

// Run streams from the slot and applies to the target until ctx is done,
// then returns ctx.Err(). It retries transient errors (lost connections, a
// server restart, an origin still held by a previous session that is
// exiting) with exponential backoff, and returns a permanent error at once
// or an error that repeated for MaxRetry without progress. Only one Run may
// be active per Stream; a new Stream with the same Origin resumes exactly
// where durable progress is.
func (s *Stream) Run(ctx context.Context) (err error) {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("replication stream: Run is already active")
	}
	s.mu.Lock()
	s.stopErr = nil
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.stopErr = err
		close(s.advanced) // wake waiters so they see stopErr
		s.advanced = make(chan struct{})
		s.mu.Unlock()
		s.running.Store(false)
	}()
	const minBackoff, maxBackoff = 100 * time.Millisecond, 10 * time.Second
	backoff := minBackoff
	streak := pgerr.RetryCap{Max: s.cfg.MaxRetry}
	for {
		before := s.Processed()
		err := s.session(ctx)
		if ctx.Err() != nil {
			s.log.Info("replication stream stopped", zap.Stringer("lsn", s.Processed()))
			return ctx.Err()
		}
		if err == nil {
			continue
		}
		if isPermanent(err) {
			s.log.Error("replication stream failed", zap.Error(err))
			return err
		}
		if s.Processed() > before || !streak.Failing() {
			backoff = minBackoff
			streak.Reset()
		}
		if streak.Fail() {
			s.log.Error("replication stream gave up retrying", zap.Error(err), zap.Duration("failing_for", streak.Elapsed()))
			return fmt.Errorf("replication stream failing for %s: %w", streak.Elapsed().Round(time.Second), err)
		}
		s.log.Warn("replication stream retrying", zap.Error(err), zap.Duration("backoff", backoff))
		if err := ctxtime.Sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
