package scheduler

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ctxtime"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// slotsEvery is how often every daemon reads the WAL retained by the
// shardmover_* slots of the cluster's nodes: every 5 polls, between 1 s
// and 15 s (it opens a connection to each node).
func (d *Daemon) slotsEvery() time.Duration {
	return min(max(5*d.cfg.Poll, time.Second), 15*time.Second)
}

// slotsLoop reads, whether or not this daemon leads, the shardmover_*
// replication slots of every active node with the WAL each retains, for
// /status and the shardmover_slot_retained_wal_bytes gauge.
func (d *Daemon) slotsLoop(ctx context.Context) {
	var lastWarn time.Time
	for {
		nodes, err := d.cat.Nodes(ctx)
		if err == nil {
			slots, warns := mover.RetainedWAL(ctx, d.cat, nodes)
			if ctx.Err() != nil {
				return
			}
			d.metrics.setSlots(slots)
			d.mu.Lock()
			d.slots, d.slotWarnings, d.slotsAt = slots, warns, time.Now()
			d.mu.Unlock()
			if len(warns) > 0 && time.Since(lastWarn) >= time.Minute {
				lastWarn = time.Now()
				d.log.Warn("cannot read the replication slots of every node; their retained WAL is not reported", zap.Strings("warnings", warns))
			}
		}
		if err := ctxtime.Sleep(ctx, d.slotsEvery()); err != nil {
			return
		}
	}
}

// slotsStatus is the replication_slots part of /status.
type slotsStatus struct {
	ReadAt   time.Time             `json:"read_at"`
	Slots    []metadata.StatusSlot `json:"slots"`
	Warnings []string              `json:"warnings,omitempty"`
}
