package mover

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ratelimit"
	"github.com/shardmover/shardmover/metadata"
)

// ErrLeased is returned by Run when another mover holds the move.
var ErrLeased = errors.New("move is held by another mover")

// ErrKilled is what a fault hook returns to stop a move as if its process
// died: Run returns at once, leaving every artifact and the journal as a
// crash would.
var ErrKilled = errors.New("killed by fault hook")

// Config tunes an Engine.
type Config struct {
	Logger *zap.Logger

	// MaxWritePause bounds the cutover's write pause (lock to COMMIT
	// PREPARED). Past it the cutover rolls back and is retried.
	MaxWritePause time.Duration
	// CutoverMaxLagBytes and CutoverMaxLag gate the cutover: it starts only
	// when the applier is this close to the source.
	CutoverMaxLagBytes uint64
	CutoverMaxLag      time.Duration
	// CutoverBackoff is the first wait after a rolled-back cutover; it
	// doubles up to CutoverMaxBackoff.
	CutoverBackoff    time.Duration
	CutoverMaxBackoff time.Duration

	// Copy tuning: the most parallel copy streams (a move's copy starts
	// with one and adds streams while each pays, replication.CopyOptions
	// Adaptive), ctid ranges per large table, and a bandwidth limit in
	// bytes/s (0: none).
	CopyWorkers    int
	RangesPerTable int
	BytesPerSecond int64

	// RetryFor caps how long one transient error may repeat before the move
	// fails.
	RetryFor time.Duration

	// MaxRetainedWAL and MaxRetainedWALFraction bound the WAL a move's slot
	// may retain on the source before the move's decision: at most
	// MaxRetainedWAL bytes (0: 10 GB; negative: no byte limit) and at most
	// MaxRetainedWALFraction of the source's free disk when that can be
	// measured (0: 0.5; negative: no disk limit). Past the limit the move
	// fails and its slot is dropped.
	MaxRetainedWAL         int64
	MaxRetainedWALFraction float64

	// Verify compares each move's tables on source and target at one
	// replication position before its cutover (mover/verify.go), and fails
	// the move on a difference. It costs a temporary replication slot on the
	// source for a moment, a read of the group on both nodes, and a
	// REPEATABLE READ snapshot held open on both while it reads.
	// VerifyBytesPerSecond paces that read (0: no limit).
	Verify               bool
	VerifyBytesPerSecond int64

	// DiskFactor: a move's preflight wants this many times the shard
	// group's size free on the target's data directory (0: 1.5; negative:
	// no check).
	DiskFactor float64

	// AfterPhase, when set, runs after a move leaves phase p (the new phase
	// is persisted). Returning an error stops Run as if the process died.
	AfterPhase func(moveID int64, p Phase) error
	// CutoverStep, when set, runs at named points inside the cutover
	// ("locked", "caught_up", "prepared", "decided"), and after a
	// settlement re-established the fence of a committed decision
	// ("refenced", before the carry-over). Returning an error stops Run as
	// if the process died at that point.
	CutoverStep func(moveID int64, step string) error
	// OnProgress, when set, receives progress of running moves.
	OnProgress func(Progress)
	// OnCutover, when set, receives each committed cutover's write pause.
	OnCutover func(moveID int64, pause time.Duration)
}

// DefaultConfig returns production defaults.
func DefaultConfig() Config {
	return Config{
		MaxWritePause:      2 * time.Second,
		CutoverMaxLagBytes: 8 << 20,
		CutoverMaxLag:      time.Second,
		CutoverBackoff:     500 * time.Millisecond,
		CutoverMaxBackoff:  30 * time.Second,
		CopyWorkers:        4,
		RangesPerTable:     4,
		RetryFor:           5 * time.Minute,
		DiskFactor:         defaultDiskFactor,

		MaxRetainedWAL:         defaultMaxRetainedWAL,
		MaxRetainedWALFraction: defaultMaxRetainedWALFraction,
	}
}

// Progress is a snapshot of one running move.
type Progress struct {
	MoveID     int64
	Phase      Phase
	BytesDone  int64
	BytesTotal int64
	LagBytes   uint64
	Lag        time.Duration
}

// Engine runs moves.
type Engine struct {
	cfg Config
	cat Store
	log *zap.Logger
	// copyLimiter, set by RunJob, paces the copies of every running move of
	// a job together (cfg.BytesPerSecond is then unused).
	copyLimiter *ratelimit.Limiter
	// copySlot, set by RunJob, waits for a move's turn to copy within the
	// job's limits and returns how to give the turn back (nil: no wait).
	copySlot func(ctx context.Context, moveID int64) (release func(), err error)
	// sessions keeps node sessions for the next step (sessions.go); disk
	// keeps the targets' last free-space measurements (disk.go). Both are
	// shared with the engine's copies.
	sessions *sessionPool
	disk     *diskCache
	// sweepRead, when set (tests), runs in Sweep right after its first
	// read of the journal.
	sweepRead func()
}

// New returns an engine on the coordinator's catalog (a *metadata.Catalog,
// or anything else that is a Store).
func New(cfg Config, cat Store) *Engine {
	def := DefaultConfig()
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxWritePause <= 0 {
		cfg.MaxWritePause = def.MaxWritePause
	}
	if cfg.DiskFactor == 0 {
		cfg.DiskFactor = def.DiskFactor
	}
	if cfg.CutoverMaxLagBytes == 0 {
		cfg.CutoverMaxLagBytes = def.CutoverMaxLagBytes
	}
	if cfg.CutoverMaxLag <= 0 {
		cfg.CutoverMaxLag = def.CutoverMaxLag
	}
	if cfg.CutoverBackoff <= 0 {
		cfg.CutoverBackoff = def.CutoverBackoff
	}
	if cfg.CutoverMaxBackoff <= 0 {
		cfg.CutoverMaxBackoff = def.CutoverMaxBackoff
	}
	if cfg.CopyWorkers <= 0 {
		cfg.CopyWorkers = def.CopyWorkers
	}
	if cfg.RangesPerTable <= 0 {
		cfg.RangesPerTable = def.RangesPerTable
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = def.RetryFor
	}
	if cfg.MaxRetainedWAL == 0 {
		cfg.MaxRetainedWAL = def.MaxRetainedWAL
	}
	if cfg.MaxRetainedWALFraction == 0 {
		cfg.MaxRetainedWALFraction = def.MaxRetainedWALFraction
	}
	return &Engine{cfg: cfg, cat: cat, log: cfg.Logger, sessions: newSessionPool(), disk: newDiskCache()}
}

// Request asks to move the shard group holding ShardID to a node.
type Request struct {
	ShardID int64
	// Target is the node to move to.
	Target metadata.Node
}

// Resolve turns requests into move specs against a fresh snapshot,
// refusing (metadata.ErrInvalid) an unknown shard, an unknown, inactive or
// shouldhaveshards = false target, or a group already on its target.
func (e *Engine) Resolve(ctx context.Context, reqs []Request) ([]metadata.MoveSpec, error) {
	cl, err := e.cat.Snapshot(ctx, metadata.SnapshotOptions{})
	if err != nil {
		return nil, err
	}
	var specs []metadata.MoveSpec
	for _, r := range reqs {
		spec, err := resolve(cl, r)
		var none *noSuchShardError
		if errors.As(err, &none) {
			why, werr := e.cat.WhyNotMovable(ctx, r.ShardID)
			if werr == nil && why != "" {
				return nil, invalidf("%s", why)
			}
		}
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// noSuchShardError is a shard in no movable group: the catalog may still
// know it (a reference table's shard), and Resolve then says why.
type noSuchShardError struct{ error }

func (e *noSuchShardError) Unwrap() error { return e.error }

func resolve(cl *metadata.Cluster, r Request) (metadata.MoveSpec, error) {
	var group *metadata.ShardGroup
	for i := range cl.Groups {
		for _, id := range cl.Groups[i].ShardIDs {
			if id == r.ShardID {
				group = &cl.Groups[i]
			}
		}
	}
	if group == nil {
		return metadata.MoveSpec{}, &noSuchShardError{invalidf("shard %d does not exist; `shardmover status -o json` lists the shard groups and their shard ids", r.ShardID)}
	}
	var target *metadata.Node
	for i := range cl.Nodes {
		if cl.Nodes[i].ID == r.Target.ID {
			target = &cl.Nodes[i]
		}
	}
	switch {
	case target == nil:
		return metadata.MoveSpec{}, invalidf("node %d is not registered; `shardmover node list` shows the nodes", r.Target.ID)
	case !target.IsActive:
		return metadata.MoveSpec{}, invalidf("target %s is not active; activate it before moving shards to it", target.Addr())
	case !target.ShouldHaveShards:
		return metadata.MoveSpec{}, invalidf("target %s has shouldhaveshards = false; it may not receive shards", target.Addr())
	case target.GroupID == group.GroupID:
		return metadata.MoveSpec{}, invalidf("shard group of shard %d (shards %v) is already on %s; the target must differ from the source", r.ShardID, group.ShardIDs, target.Addr())
	}
	source, ok := cl.NodeByGroup(group.GroupID)
	if !ok || !source.IsActive {
		return metadata.MoveSpec{}, invalidf("the source node of shard %d (group %d) is not active", r.ShardID, group.GroupID)
	}
	shardByID := map[int64]metadata.Shard{}
	for _, s := range cl.Shards {
		shardByID[s.ID] = s
	}
	var tables []string
	for _, id := range group.ShardIDs {
		s := shardByID[id]
		tables = append(tables, metadata.QualifiedName(s.Ident()))
	}
	return metadata.MoveSpec{Group: *group, ShardTables: tables, SourceGroup: group.GroupID, TargetGroup: target.GroupID}, nil
}

// Schedule records a job of moves (phase scheduled). Callers run Preflight
// first so that a refused move records nothing.
func (e *Engine) Schedule(ctx context.Context, kind string, specs []metadata.MoveSpec) (metadata.Job, []metadata.Move, error) {
	if err := e.cat.InstallJournal(ctx); err != nil {
		return metadata.Job{}, nil, err
	}
	job, moves, err := e.cat.CreateJob(ctx, kind, "", specs)
	if errors.Is(err, metadata.ErrGroupBusy) {
		return job, moves, metadata.Invalidf("%s", strings.TrimPrefix(err.Error(), metadata.ErrGroupBusy.Error()+": "))
	}
	return job, moves, err
}

// nodes returns the registered nodes by group.
func (e *Engine) nodes(ctx context.Context) (map[int32]metadata.Node, error) {
	ns, err := e.cat.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int32]metadata.Node{}
	for _, n := range ns {
		if n.Role == "primary" || n.Role == "" {
			out[n.GroupID] = n
		}
	}
	return out, nil
}

func (e *Engine) connect(ctx context.Context, n metadata.Node) (*pgx.Conn, error) {
	return e.cat.ConnectNode(ctx, n.Host, n.Port)
}

func (e *Engine) dsn(n metadata.Node) string {
	return e.cat.NodeSettings(n.Host, n.Port).String()
}

// Recover settles every fence (prepared transaction shardmover_<moveid>_<epoch>)
// on every node by the recovery rule: the move's decision is settled by a
// read that cannot miss one in flight (metadata.SettleDecision), then the
// fence of a committed decision is committed and every other rolled back.
// Then it settles every decided move still in cleanup (or owing a
// carry-over) that no mover holds, which notices a fence that is missing
// rather than prepared: someone rolled it back after the decision. Its
// settlement re-establishes the fence and records the carry-over as due
// (recoverCommitted). Every fence and move is settled under the move's
// lease, so a live mover's are never touched.
// A node that cannot be reached is skipped with a warning (its fences stay
// until it is back and a later Recover, cleanup or the move itself settles
// them): one node down must not stop every other move. It runs at every
// mover start, `shardmover cleanup` and the daemon's sweep; SettleOrphans
// is its quick part, which every daemon runs every few seconds.
func (e *Engine) Recover(ctx context.Context) error { return e.recover(ctx, 0, false) }

// recover is Recover (quick false, every fence) and SettleOrphans (quick,
// fences prepared olderThan ago, decided moves only where a read shows
// their fence gone).
func (e *Engine) recover(ctx context.Context, olderThan time.Duration, quick bool) error {
	nodes, err := e.nodes(ctx)
	if err != nil {
		return err
	}
	groups := make([]int32, 0, len(nodes))
	for g := range nodes {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i] < groups[j] })
	// One node after another: a move's fences and Citus parts may be on
	// several nodes, and each is settled under the move's lease.
	var errs []error
	for _, g := range groups {
		n := nodes[g]
		if !n.IsActive {
			continue
		}
		err := e.recoverNode(ctx, n, olderThan)
		switch {
		case err == nil:
		case errors.Is(err, metadata.ErrUnreachable):
			if !quick {
				e.log.Warn("node unreachable; its prepared transactions are settled when it is back", zap.String("node", n.Addr()), zap.Error(err))
			}
		default:
			errs = append(errs, fmt.Errorf("recover prepared transactions on %s: %w", n.Addr(), err))
		}
	}
	if err := e.recoverCommitted(ctx, quick); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// recoverNode settles the fences on node n prepared at least olderThan
// ago whose moves no mover holds.
func (e *Engine) recoverNode(ctx context.Context, n metadata.Node, olderThan time.Duration) (err error) {
	conn, err := e.session(ctx, n)
	if err != nil {
		return err
	}
	defer e.release(n, conn, &err)
	gids, err := fencesOlder(ctx, conn, 0, olderThan)
	if err != nil {
		return err
	}
	done := map[int64]bool{}
	for _, gid := range gids {
		id, _, _ := parseFenceGID(gid)
		if done[id] {
			continue
		}
		done[id] = true
		// A live mover holds its move's lease while it prepares and decides:
		// its fences are not ours to settle.
		lease, ok, err := e.cat.TryLease(ctx, id)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		st, err := e.cat.SettleDecision(ctx, id)
		if err == nil {
			_, err = settleFences(ctx, conn, id, st)
		}
		lease.Release(ctx)
		if err != nil {
			return err
		}
		e.log.Info("settled prepared transactions", zap.Int64("move_id", id), zap.Bool("committed", st.Committed), zap.String("node", n.Addr()))
	}
	return nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// invalidf is a refused request: metadata's one invalid-input error type,
// matching metadata.ErrInvalid.
func invalidf(format string, args ...any) error { return metadata.Invalidf(format, args...) }

// Cancel asks a move to stop before its decision; its mover rolls it back.
// When no mover holds the move, Cancel rolls it back itself.
func (e *Engine) Cancel(ctx context.Context, id int64) (metadata.Move, error) {
	m, err := e.cat.RequestCancel(ctx, id)
	if err != nil || m.Terminal() {
		return m, err
	}
	if m.CarriedBy != 0 {
		// A rider leaves its stream; the others go on.
		err = e.cancelRider(ctx, m)
	} else {
		// Nobody running it? Then run it here: the loop sees the request
		// and rolls the move back.
		err = e.Run(ctx, id)
	}
	if errors.Is(err, ErrLeased) {
		e.log.Info("cancel requested; the mover holding the move will roll it back", zap.Int64("move_id", id))
		return e.cat.Move(ctx, id)
	}
	m, merr := e.cat.Move(ctx, id)
	if merr != nil {
		return m, merr
	}
	if p := metadata.Phase(m.Phase); p == metadata.PhaseCancelled || p == metadata.PhaseDone {
		return m, nil
	}
	return m, err
}
