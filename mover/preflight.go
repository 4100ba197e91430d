package mover

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
)

// Preflight checks a planned move before anything is recorded or created.
// Errors match metadata.ErrInvalid and read as one sentence.
func (e *Engine) Preflight(ctx context.Context, spec metadata.MoveSpec) error {
	nodes, err := e.nodes(ctx)
	if err != nil {
		return err
	}
	src, ok := nodes[spec.SourceGroup]
	if !ok {
		return invalidf("the source node group %d is not registered", spec.SourceGroup)
	}
	dst, ok := nodes[spec.TargetGroup]
	if !ok {
		return invalidf("the target node group %d is not registered", spec.TargetGroup)
	}
	m := metadata.Move{ShardIDs: spec.Group.ShardIDs, ShardTables: spec.ShardTables,
		SourceGroup: spec.SourceGroup, TargetGroup: spec.TargetGroup, ColocationID: spec.Group.ColocationID, ShardIndex: spec.Group.Index}
	if err := e.checkMoveable(ctx, m); err != nil {
		return err
	}
	return e.checkNodes(ctx, m, src, dst, false, nil)
}

// preflight runs every check again at the start of a scheduled move (the
// cluster may have changed since it was planned). Leftovers named after
// this move are dropped (they are this move's own, from a crashed attempt).
func (e *Engine) preflight(ctx context.Context, m metadata.Move, src, dst metadata.Node) error {
	sp := newSplits()
	defer sp.log(e.log.With(zap.Int64("move_id", m.ID)), "preflight timings")
	if err := e.checkMoveable(ctx, m); err != nil {
		return err
	}
	sp.mark("catalog")
	return e.checkNodes(ctx, m, src, dst, true, sp)
}

// checkMoveable checks the catalog side: flavor, nodes, and that every shard
// of the group is placed on the source.
func (e *Engine) checkMoveable(ctx context.Context, m metadata.Move) error {
	if busy, err := e.cat.CitusBusy(ctx); err != nil {
		return err
	} else if busy != "" {
		return invalidf("%s; shardmover does not move shards while Citus does", busy)
	}
	// Only what the move needs of the catalog, not a whole snapshot: the
	// two nodes and the group's placements.
	nodes, err := e.nodes(ctx)
	if err != nil {
		return err
	}
	src, ok := nodes[m.SourceGroup]
	if !ok || !src.IsActive {
		return invalidf("the source node of group %d is not active", m.SourceGroup)
	}
	dst, ok := nodes[m.TargetGroup]
	switch {
	case !ok:
		return invalidf("the target node group %d is not registered", m.TargetGroup)
	case m.SourceGroup == m.TargetGroup:
		return invalidf("source and target are the same node (%s)", src.Addr())
	case !dst.IsActive:
		return invalidf("target %s is not active", dst.Addr())
	case !dst.ShouldHaveShards:
		return invalidf("target %s has shouldhaveshards = false; it may not receive shards", dst.Addr())
	}
	placed, err := e.cat.PlacementGroupsOf(ctx, m.ShardIDs)
	if err != nil {
		return err
	}
	for _, id := range m.ShardIDs {
		groups := placed[id]
		switch {
		case len(groups) == 0:
			return invalidf("shard %d has no placement", id)
		case len(groups) > 1:
			return invalidf("shard %d has placements on groups %v; shardmover moves shards with exactly one placement", id, groups)
		case groups[0] != m.SourceGroup:
			return invalidf("shard %d is on group %d, not on the move's source %s", id, groups[0], src.Addr())
		}
	}
	return nil
}

// checkNodes checks the servers: settings, free slots and senders, replica
// identity, and names that would collide.
func (e *Engine) checkNodes(ctx context.Context, m metadata.Move, src, dst metadata.Node, own bool, sp *splits) error {
	sc, err := e.connect(ctx, src)
	if err != nil {
		return invalidf("cannot reach the source %s: %v", src.Addr(), err)
	}
	defer sc.Close(ctx)
	dc, err := e.connect(ctx, dst)
	if err != nil {
		return invalidf("cannot reach the target %s: %v", dst.Addr(), err)
	}
	defer dc.Close(ctx)
	sp.mark("connect")

	// The move's slot and its applier's WAL sender; with Verify, a
	// temporary slot (and its sender) for a moment before the cutover.
	need, whyNeed := 1, ""
	if e.cfg.Verify {
		need, whyNeed = 2, " (one more for --verify's temporary slot)"
	}
	capacity, err := replication.ReadSourceCapacity(ctx, sc)
	if err != nil {
		return fmt.Errorf("read settings of %s: %w", src.Addr(), err)
	}
	switch {
	case capacity.WALLevel != "logical":
		return invalidf("the source %s has wal_level = %s; set wal_level = logical and restart it", src.Addr(), capacity.WALLevel)
	case capacity.MaxPreparedTransactions == 0:
		return invalidf("the source %s has max_prepared_transactions = 0; the cutover needs a prepared transaction: set it above 0 and restart it", src.Addr())
	case capacity.SlotsUsed+need > capacity.SlotsMax:
		return invalidf("the source %s has %d of %d replication slots free and the move needs %d%s; raise max_replication_slots or drop unused slots",
			src.Addr(), max(capacity.SlotsMax-capacity.SlotsUsed, 0), capacity.SlotsMax, need, whyNeed)
	case capacity.SendersUsed+need > capacity.SendersMax:
		return invalidf("the source %s has %d of %d WAL senders free and the move needs %d%s; raise max_wal_senders",
			src.Addr(), max(capacity.SendersMax-capacity.SendersUsed, 0), capacity.SendersMax, need, whyNeed)
	}
	originsMax, originsUsed, err := replication.ReadOriginCapacity(ctx, dc)
	if err != nil {
		return fmt.Errorf("read settings of %s: %w", dst.Addr(), err)
	}
	if originsUsed >= originsMax {
		return invalidf("the target %s has no free replication origin (%d of %d used); raise its max_replication_slots", dst.Addr(), originsUsed, originsMax)
	}
	if e.cat.Flavor() == metadata.Citus {
		var ok bool
		if err := dc.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&ok); err != nil {
			return fmt.Errorf("read extensions of %s: %w", dst.Addr(), err)
		}
		if !ok {
			return invalidf("the target %s does not have the citus extension; run CREATE EXTENSION citus there and add it with citus_add_node", dst.Addr())
		}
	}
	sp.mark("capacity")
	if err := replication.CheckReplicaIdentity(ctx, sc, shardIdents(m)); err != nil {
		return invalidf("%v", err)
	}
	sp.mark("replica_identity")
	{
		// Room on the target. Preflight runs before setup, so none of
		// this move's copy is there yet.
		var size int64
		names := make([]string, 0, len(m.ShardIDs))
		for _, t := range shardIdents(m) {
			names = append(names, t.Sanitize())
		}
		if err := sc.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(to_regclass(n))), 0)::int8 FROM unnest($1::text[]) n`, names).Scan(&size); err != nil {
			return fmt.Errorf("measure shard group on %s: %w", src.Addr(), err)
		}
		sp.mark("size")
		if err := e.checkRoom(ctx, m, size, dc, dst.Addr()); err != nil {
			return err
		}
		sp.mark("room")
	}
	// On Citus, an old shard of an earlier move (Citus's or ours) may still
	// wait for Citus's deferred cleanup on the target, holding the names:
	// like Citus before its own moves, run that cleanup now.
	if err := e.cat.CleanupCitusOrphans(ctx); err != nil {
		e.log.Warn("Citus's cleanup of old shards failed; name checks may refuse the move", zap.Error(err))
	}
	sp.mark("citus_cleanup")
	// Names on the target: the shard tables must not exist there, unless
	// they are this move's own copy from an earlier attempt.
	for _, t := range shardIdents(m) {
		var exists bool
		if err := dc.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.Sanitize()).Scan(&exists); err != nil {
			return err
		}
		if exists && !(own && e.ownsTable(ctx, m, t)) {
			return invalidf("table %s already exists on the target %s; drop it or run `shardmover cleanup` if it is left from an earlier move", t.Sanitize(), dst.Addr())
		}
		// The shard's index names must be free in its schema on the target:
		// an old, fenced copy of it (whatever its fenced name) keeps them.
		// (A table that already exists was handled above.)
		if exists {
			continue
		}
		var indexes []string
		if err := sc.QueryRow(ctx, `SELECT coalesce(array_agg(ic.relname::text), '{}') FROM pg_index i
			JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class tc ON tc.oid = i.indrelid
			JOIN pg_namespace n ON n.oid = tc.relnamespace WHERE n.nspname = $1 AND tc.relname = $2`, t[0], t[1]).Scan(&indexes); err != nil {
			return err
		}
		var collide string
		if err := dc.QueryRow(ctx, `SELECT coalesce(min(c.relname), '') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = ANY($2)`, t[0], indexes).Scan(&collide); err != nil {
			return err
		}
		if collide != "" {
			return invalidf("the target %s still holds an old copy of %s from an earlier move (index %s); run `shardmover cleanup --keep-old-for 0s` first", dst.Addr(), t.Sanitize(), collide)
		}
	}
	sp.mark("names")
	if !own {
		return nil
	}
	// Leftovers with this move's name are its own (a crashed attempt): the
	// setup phase drops them through their cleanup records.
	return nil
}

func (e *Engine) ownsTable(ctx context.Context, m metadata.Move, t pgx.Identifier) bool {
	if m.ID == 0 {
		return false
	}
	recs, err := e.cat.Cleanups(ctx, m.ID)
	if err != nil {
		return false
	}
	for _, r := range recs {
		if r.ObjectType != metadata.ObjectTable || r.NodeGroup != m.TargetGroup {
			continue
		}
		if id, err := metadata.ParseQualifiedName(r.Name); err == nil && slices.Equal(id, t) {
			return true
		}
	}
	return false
}
