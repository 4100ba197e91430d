package mover

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/units"
	"github.com/shardmover/shardmover/metadata"
)

// defaultDiskFactor is how many times the shard group's size the target
// must have free: the copy, its WAL, and the indexes built afterwards.
const defaultDiskFactor = 1.5

// freeDiskBytes measures the free space of the filesystem holding the
// target's data directory, where the shard tables go (the default
// tablespace). PostgreSQL has no SQL for it, so it runs df on the server
// through COPY FROM PROGRAM, inside a transaction that is rolled back. ok
// is false, with the reason in err, when the server will not run it
// (COPY FROM PROGRAM needs superuser or pg_execute_server_program).
func freeDiskBytes(ctx context.Context, c *pgx.Conn) (free int64, ok bool, err error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only probe
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE shardmover_df (line text) ON COMMIT DROP"); err != nil {
		return 0, false, err
	}
	// A server process runs in its data directory: "." needs no setting
	// (data_directory is readable only with pg_read_all_settings).
	if _, err := tx.Exec(ctx, "COPY shardmover_df FROM PROGRAM 'df -Pk -- .'"); err != nil {
		return 0, false, err
	}
	rows, err := tx.Query(ctx, "SELECT line FROM shardmover_df")
	if err != nil {
		return 0, false, err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, false, err
	}
	free, err = parseDF(lines)
	return free, err == nil, err
}

// diskReuse is how old a target's free-space measurement may be when a
// preflight uses it again instead of running df once more: the public
// Preflight before a move is recorded and the move's own preflight a
// moment later, or moves one after another into one target.
const diskReuse = 3 * time.Second

// diskCache keeps each target's last free-space measurement, taken while
// no move was copying into it, with the phases of the moves into it at
// that moment. A measurement is reused only for the same node, within
// diskReuse, and only when no move can have copied into the node since
// (reusable): then the disk holds nothing more of ours than it did.
type diskCache struct {
	mu sync.Mutex
	m  map[string]diskReading
}

type diskReading struct {
	free int64
	at   time.Time
	// moves: the unfinished moves into the node when it was measured, by
	// id, with their phase then.
	moves map[int64]Phase
}

func newDiskCache() *diskCache { return &diskCache{m: map[string]diskReading{}} }

// fresh returns the measurement of addr if it is younger than diskReuse
// and no move into the node can have copied since: none copies now (no
// move in setup, copying or indexing); every move now past its copy had
// passed it already then; and every move that had not yet started copying
// then (scheduled, preflight) still has not, and has not ended (it may
// have copied before it did). now are the unfinished moves into the node
// now, with their phases.
func (c *diskCache) fresh(addr string, at time.Time, now map[int64]Phase) (int64, bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[addr]
	if !ok || at.Sub(r.at) >= diskReuse || at.Before(r.at) {
		return 0, false
	}
	for id, p := range now {
		switch {
		case p >= Setup && p <= Indexing:
			return 0, false
		case p <= Preflight:
		default: // past its copy: it must have been then too
			if then, ok := r.moves[id]; !ok || then <= Indexing {
				return 0, false
			}
		}
	}
	for id, then := range r.moves {
		if then <= Preflight {
			if p, ok := now[id]; !ok || p > Preflight {
				return 0, false
			}
		}
	}
	return r.free, true
}

func (c *diskCache) store(addr string, r diskReading) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[addr] = r
}

// forget drops the measurement of addr: a copy into it starts.
func (c *diskCache) forget(addr string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, addr)
}

// parseDF reads the available bytes from POSIX `df -Pk` output: a header,
// then "filesystem 1024-blocks used available capacity mountpoint".
func parseDF(lines []string) (int64, error) {
	if len(lines) < 2 {
		return 0, fmt.Errorf("df printed %d lines", len(lines))
	}
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 6 {
		return 0, fmt.Errorf("df printed %q", lines[len(lines)-1])
	}
	kb, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || kb < 0 {
		return 0, fmt.Errorf("df printed %q", lines[len(lines)-1])
	}
	return kb * 1024, nil
}

// room is what checkRoom judges: the target's free space (ok false when
// the target will not report it) and what other moves into it still have
// to copy.
type room struct {
	free    int64
	ok      bool
	err     error // why free is unknown
	reused  bool  // free is a recent measurement (diskCache)
	pending int64
}

// measureRoom reads, for move m's target (session dc, address dstAddr),
// what other moves into it still have to copy (counting DiskFactor) and
// its free space. The free space is measured with df unless diskCache has
// a measurement of the same node that is still good (diskCache.fresh). A
// measurement taken while no move copies into the node is kept.
func (e *Engine) measureRoom(ctx context.Context, m metadata.Move, dc *pgx.Conn, dstAddr string) (room, error) {
	var r room
	factor := e.cfg.DiskFactor
	others, err := e.cat.Moves(ctx, metadata.MoveFilter{ActiveOnly: true})
	if err != nil {
		return r, err
	}
	into := map[int64]Phase{}
	copying := false
	for _, o := range others {
		if o.TargetGroup != m.TargetGroup {
			continue
		}
		p, err := ParsePhase(string(o.Phase))
		if err != nil {
			p = Indexing // unknown: take it for one that copies
		}
		into[o.ID] = p
		if o.ID == m.ID || o.CarriedBy != 0 {
			continue // a rider's bytes are in its lead's row
		}
		switch p {
		case Setup, Copying, Indexing:
			copying = true
			if left := o.BytesTotal - o.BytesCopied; left > 0 {
				r.pending += int64(math.Ceil(float64(left) * factor))
			}
		}
	}
	at := time.Now()
	if free, ok := e.disk.fresh(dstAddr, at, into); ok {
		r.free, r.ok, r.reused = free, true, true
		return r, nil
	}
	r.free, r.ok, r.err = freeDiskBytes(ctx, dc)
	if r.ok && !copying {
		e.disk.store(dstAddr, diskReading{free: r.free, at: at, moves: into})
	} else {
		e.disk.forget(dstAddr)
	}
	return r, nil
}

// checkRoom refuses a move whose shard group (size bytes) would not fit on
// the target with the configured headroom, counting what other moves into
// the same target still have to copy (the free space already reflects what
// they copied). A target that will not report its free space is logged and
// let through.
func (e *Engine) checkRoom(m metadata.Move, size int64, r room, dstAddr string) error {
	if !r.ok {
		e.log.Warn("cannot measure free disk space on the target; moving without that check",
			zap.String("target", dstAddr), zap.Error(r.err))
		return nil
	}
	free, pending := r.free, r.pending
	need := int64(math.Ceil(float64(size) * e.cfg.DiskFactor))
	g := groupRef{int64(m.ColocationID), int64(m.ShardIndex)}
	switch {
	case free < need+pending && pending > 0:
		return invalidf("the target %s has %s free for its data directory; moving shard group %s (%s) needs about %s, and moves already copying there need %s more; free space there, wait for them, or choose another target",
			dstAddr, units.Bytes(free), g, units.Bytes(size), units.Bytes(need), units.Bytes(pending))
	case free < need:
		return invalidf("the target %s has %s free for its data directory, and moving shard group %s (%s) needs about %s; free space there or choose another target",
			dstAddr, units.Bytes(free), g, units.Bytes(size), units.Bytes(need))
	}
	return nil
}

// groupRef names a shard group as the CLI does: colocation:index.
type groupRef struct{ colocation, index int64 }

func (g groupRef) String() string { return fmt.Sprintf("%d:%d", g.colocation, g.index) }
