package mover

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
)

// SweepOptions tunes Sweep.
type SweepOptions struct {
	// KeepOldFor is the grace period of fenced old shards.
	KeepOldFor time.Duration
	// DryRun lists what would be dropped and drops nothing.
	DryRun bool
}

// SweepItem is one artifact Sweep dropped (or would drop, or kept).
type SweepItem struct {
	Node string `json:"node"`
	// Object is a metadata.ObjectKind, or "node" for a node that could not
	// be searched.
	Object string `json:"object"`
	Name   string `json:"name"`
	Why    string `json:"why"`
}

// SweepReport says what Sweep did.
type SweepReport struct {
	Dropped []SweepItem `json:"dropped"`
	Kept    []SweepItem `json:"kept"`
}

// Sweep is `shardmover cleanup`: it settles prepared transactions by the
// recovery rule, drops the old shards of finished moves once their grace
// period is over, drops what failed or crashed moves left behind, and finds
// orphans: shardmover_* slots, publications and origins that no unfinished
// move owns. Artifacts of unfinished moves are never touched.
func (e *Engine) Sweep(ctx context.Context, opts SweepOptions) (SweepReport, error) {
	var rep SweepReport
	if !opts.DryRun {
		if err := e.Recover(ctx); err != nil {
			return rep, err
		}
	}
	if err := e.cat.InstallJournal(ctx); err != nil {
		return rep, err
	}
	nodes, err := e.nodes(ctx)
	if err != nil {
		return rep, err
	}
	moves, err := e.cat.Moves(ctx, metadata.MoveFilter{})
	if err != nil {
		return rep, err
	}
	byID := map[int64]metadata.Move{}
	for _, m := range moves {
		byID[m.ID] = m
	}
	if e.sweepRead != nil {
		e.sweepRead()
	}
	// A move may start while the sweep runs: its journal row and cleanup
	// records are written before its artifacts are created, so an
	// artifact or record whose move this early read does not know (or
	// knows as finished) is judged by the journal as it is now, read just
	// before the drop. Any doubt keeps it.
	live := func(id int64) bool {
		if m, ok := byID[id]; ok && !m.Terminal() {
			return true
		}
		m, err := e.cat.Move(ctx, id)
		switch {
		case errors.Is(err, metadata.ErrNotFound):
			return false
		case err != nil:
			e.log.Warn("cleanup cannot read a move's row; it keeps the move's artifacts", zap.Int64("move_id", id), zap.Error(err))
			return true
		}
		byID[id] = m
		return !m.Terminal()
	}

	recs, err := e.cat.Cleanups(ctx, 0)
	if err != nil {
		return rep, err
	}
	conns := e.newNodeConns()
	defer conns.close(ctx)
	for _, rec := range recs {
		n, ok := nodes[rec.NodeGroup]
		item := SweepItem{Object: string(rec.ObjectType), Name: rec.Name}
		if rec.ObjectType == metadata.ObjectTable {
			item.Name = metadata.DisplayQualifiedName(rec.Name)
		}
		if ok {
			item.Node = n.Addr()
		}
		switch {
		case rec.MoveID != nil && live(*rec.MoveID):
			continue // its move is unfinished: the move owns it
		case !ok:
			item.Why = "its node group is no longer registered"
			rep.Kept = append(rep.Kept, item)
			continue
		case rec.Policy == metadata.CleanupDeferred && time.Since(rec.CreatedAt) < opts.KeepOldFor:
			item.Why = fmt.Sprintf("old shard kept until %s", rec.CreatedAt.Add(opts.KeepOldFor).Format(time.RFC3339))
			rep.Kept = append(rep.Kept, item)
			continue
		case rec.Policy == metadata.CleanupDeferred:
			item.Why = "old shard past its grace period"
		default:
			item.Why = "left by a finished move"
		}
		if !opts.DryRun {
			if err := e.dropOne(ctx, conns, n, rec); err != nil {
				if errors.Is(err, metadata.ErrUnreachable) {
					item.Why = "its node is unreachable; run cleanup again when it is back"
					rep.Kept = append(rep.Kept, item)
					e.log.Warn("node unreachable; cleanup keeps its record", zap.String("node", n.Addr()), zap.String("object", string(rec.ObjectType)), zap.String("name", rec.Name))
					continue
				}
				return rep, err
			}
			if err := e.cat.RemoveCleanup(ctx, rec.ID); err != nil {
				return rep, err
			}
		}
		rep.Dropped = append(rep.Dropped, item)
	}

	groups := make([]int32, 0, len(nodes))
	for g := range nodes {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i] < groups[j] })
	for _, g := range groups {
		n := nodes[g]
		if !n.IsActive {
			continue
		}
		items, err := e.orphans(ctx, n, live)
		if errors.Is(err, metadata.ErrUnreachable) {
			rep.Kept = append(rep.Kept, SweepItem{Node: n.Addr(), Object: "node", Why: "unreachable: not searched for orphans; run cleanup again when it is back"})
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("look for orphans on %s: %w", n.Addr(), err)
		}
		for _, it := range items {
			if !opts.DryRun {
				rec := metadata.CleanupRecord{ObjectType: metadata.ObjectKind(it.Object), Name: it.Name, NodeGroup: g}
				if err := e.dropOne(ctx, conns, n, rec); err != nil {
					return rep, err
				}
			}
			rep.Dropped = append(rep.Dropped, it)
		}
	}
	return rep, nil
}

// orphans lists shardmover_<id> slots, publications and origins on a node
// whose move is unknown or finished.
func (e *Engine) orphans(ctx context.Context, n metadata.Node, live func(int64) bool) ([]SweepItem, error) {
	conn, err := e.connect(ctx, n)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	objs, err := replication.ArtifactsWithPrefix(ctx, conn, "shardmover")
	if err != nil {
		return nil, err
	}
	var out []SweepItem
	for _, o := range objs {
		var id int64
		if _, err := fmt.Sscanf(o.Name, "shardmover_%d", &id); err != nil {
			continue
		}
		if live(id) {
			continue
		}
		out = append(out, SweepItem{Node: n.Addr(), Object: o.Kind, Name: o.Name, Why: "orphan: no unfinished move owns it"})
	}
	return out, nil
}
