package mover

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
)

// slotPrefix starts the name of every slot a move creates
// (metadata.Move.Name: shardmover_<move id>).
const slotPrefix = "shardmover_"

// slotReadTimeout bounds reading one node's slots.
const slotReadTimeout = 5 * time.Second

// RetainedWAL reads, on every active node of nodes, the shardmover_*
// replication slots with the WAL each retains (what the WAL-retention guard
// watches), in node then name order. A node that cannot be read is left out
// with a warning naming it; nodes are read concurrently, each within 5 s.
func RetainedWAL(ctx context.Context, cat ClusterReader, nodes []metadata.Node) ([]metadata.StatusSlot, []string) {
	type result struct {
		slots []metadata.StatusSlot
		warn  string
	}
	results := make([]result, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if !n.IsActive {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots, err := nodeSlots(ctx, cat, n)
			if err != nil {
				results[i].warn = fmt.Sprintf("cannot read the replication slots of node %d (%s): %v", n.ID, n.Addr(), err)
				return
			}
			results[i].slots = slots
		}()
	}
	wg.Wait()
	out := []metadata.StatusSlot{}
	var warnings []string
	for _, r := range results {
		out = append(out, r.slots...)
		if r.warn != "" {
			warnings = append(warnings, r.warn)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].NodeID != out[j].NodeID {
			return out[i].NodeID < out[j].NodeID
		}
		return out[i].Name < out[j].Name
	})
	return out, warnings
}

func nodeSlots(ctx context.Context, cat ClusterReader, n metadata.Node) ([]metadata.StatusSlot, error) {
	ctx, cancel := context.WithTimeout(ctx, slotReadTimeout)
	defer cancel()
	conn, err := cat.ConnectNode(ctx, n.Host, n.Port)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	slots, err := replication.SlotsWithPrefix(ctx, conn, slotPrefix)
	if err != nil {
		return nil, err
	}
	out := make([]metadata.StatusSlot, 0, len(slots))
	for _, s := range slots {
		out = append(out, metadata.StatusSlot{NodeID: n.ID, Addr: n.Addr(), Name: s.Name, MoveID: slotMoveID(s.Name),
			Active: s.Active, RetainedWALBytes: s.Retained, RetainedKnown: s.RetainedKnown, WALStatus: s.WALStatus})
	}
	return out, nil
}

// slotMoveID is the move id in a slot named shardmover_<id> (or
// shardmover_<id>_verify), or 0.
func slotMoveID(name string) int64 {
	// A move's own slot, or the temporary slot its verify makes for a
	// moment before the cutover (shardmover_<id>_verify).
	id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, slotPrefix), "_verify"), 10, 64)
	if err != nil || id <= 0 || !strings.HasPrefix(name, slotPrefix) {
		return 0
	}
	return id
}
