package mover

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/units"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
)

// The WAL-retention guard: while a move is before its decision, its slot
// keeps every WAL segment on the source from the slot's restart_lsn on. An
// applier that stalls (a lock on the target, a slow target) would let that
// grow until the source's disk fills, so past a limit the move fails, and
// failing drops the slot.
const (
	// defaultMaxRetainedWAL is Config.MaxRetainedWAL's default, 10 GB.
	defaultMaxRetainedWAL int64 = 10e9
	// defaultMaxRetainedWALFraction is Config.MaxRetainedWALFraction's
	// default: never more than half of the source's free disk.
	defaultMaxRetainedWALFraction = 0.5
	// guardEvery is how often the guard reads the slot's retained WAL;
	// guardDiskEvery how often it measures the source's free disk.
	guardEvery     = 2 * time.Second
	guardDiskEvery = 30 * time.Second
)

// retainedWALLimit is the most WAL a move's slot may retain: maxBytes
// (none when <= 0), and at most fraction of the source's free disk when
// fraction > 0 and the free disk was measured (freeOK). ok is false when
// there is no limit; byDisk says the disk fraction is the tighter bound.
func retainedWALLimit(maxBytes int64, fraction float64, free int64, freeOK bool) (limit int64, ok, byDisk bool) {
	if maxBytes > 0 {
		limit, ok = maxBytes, true
	}
	if fraction > 0 && freeOK {
		d := int64(math.Floor(float64(max(free, 0)) * fraction))
		if !ok || d < limit {
			limit, ok, byDisk = d, true, true
		}
	}
	return limit, ok, byDisk
}

// walLimitError is the guard's verdict on a move.
type walLimitError struct {
	moveID   int64
	source   string
	retained int64
	limit    int64
	byDisk   bool
	free     int64
	fraction float64
}

func (e *walLimitError) Error() string {
	why := "--max-retained-wal"
	if e.byDisk {
		why = fmt.Sprintf("%g of the %s free on its disk", e.fraction, units.Bytes(e.free))
	}
	return fmt.Sprintf("move %d retained %s of WAL on %s, more than the limit %s (%s): it was stopped and its slot dropped so the source's disk is safe; find why its applier fell behind (a lock or a slow disk on the target) and move again, or raise --max-retained-wal",
		e.moveID, units.Bytes(e.retained), e.source, units.Bytes(e.limit), why)
}

// guarded runs the step of phase p, watching the WAL the move's slot
// retains while the move is before its decision (setup to catching_up).
// When the guard trips it stops the step and returns its verdict, a
// permanent error, which the loop turns into a failed move.
func (r *run) guarded(ctx context.Context, m metadata.Move, p Phase) error {
	cfg := r.e.cfg
	if p < Setup || p >= Cutover || m.CutoverCommitted || (cfg.MaxRetainedWAL <= 0 && cfg.MaxRetainedWALFraction <= 0) {
		return r.step(ctx, m, p)
	}
	gctx, stop := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.watchWAL(gctx, stop, m)
	}()
	err := r.step(gctx, m, p)
	stop(nil)
	<-done
	var verdict *walLimitError
	if err == nil || !errors.As(context.Cause(gctx), &verdict) {
		return err
	}
	// The step may have moved the move on just as the guard tripped (a
	// transition to cutover committed): then the loop re-reads it, and
	// the guard, which never acts from cutover on, lets it be.
	cur, rerr := r.e.cat.Move(context.WithoutCancel(ctx), m.ID)
	if rerr != nil {
		return err
	}
	if cp, _ := ParsePhase(string(cur.Phase)); cp != p {
		return err
	}
	return permanent(verdict)
}

// watchWAL reads the slot's retained WAL every guardEvery until ctx ends,
// and stops the step (cancelling ctx with a *walLimitError) past the limit.
// Errors reading it are logged and tried again: the guard never fails a
// move by itself failing.
func (r *run) watchWAL(ctx context.Context, stop context.CancelCauseFunc, m metadata.Move) {
	cfg := r.e.cfg
	tick := time.NewTicker(guardEvery)
	defer tick.Stop()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	measureDisk := cfg.MaxRetainedWALFraction > 0
	var free int64
	var freeOK bool
	var measured time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if conn == nil {
			c, err := r.e.connect(ctx, r.source)
			if err != nil {
				r.log.Debug("WAL guard: cannot connect to the source", zap.Error(err))
				continue
			}
			conn = c
		}
		retained, ok, err := replication.RetainedWAL(ctx, conn, m.Name())
		if err != nil {
			if ctx.Err() == nil {
				r.log.Debug("WAL guard: cannot read the slot", zap.Error(err))
			}
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
			continue
		}
		if !ok {
			continue // no slot (yet): nothing retained
		}
		if measureDisk && time.Since(measured) > guardDiskEvery {
			f, fok, ferr := freeDiskBytes(ctx, conn)
			if ctx.Err() != nil {
				return
			}
			if !fok {
				// Not measurable (COPY FROM PROGRAM needs superuser or
				// pg_execute_server_program): the byte limit alone.
				r.log.Warn("WAL guard: cannot measure free disk space on the source; limiting retained WAL by --max-retained-wal only",
					zap.String("source", r.source.Addr()), zap.Error(ferr))
				measureDisk, freeOK = false, false
			} else {
				free, freeOK, measured = f, true, time.Now()
			}
		}
		limit, limited, byDisk := retainedWALLimit(cfg.MaxRetainedWAL, cfg.MaxRetainedWALFraction, free, freeOK)
		if limited && retained > limit {
			r.log.Error("WAL guard: slot retains too much WAL; stopping the move",
				zap.String("slot", m.Name()), zap.Int64("retained", retained), zap.Int64("limit", limit))
			stop(&walLimitError{moveID: m.ID, source: r.source.Addr(), retained: retained, limit: limit,
				byDisk: byDisk, free: free, fraction: cfg.MaxRetainedWALFraction})
			return
		}
	}
}
