package mover

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

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
	return e.checkOnSource(ctx, m, src)
}

// checkOnSource checks that every shard of m's group is still placed on
// its source, src, and only there. Run by preflight, and again at the
// start of setup (a resumed move goes back to setup without preflight)
// and before every cutover attempt: on Citus, Citus's own mover may have
// moved the group meanwhile (nothing a client can take makes it wait),
// and then this move must end without touching what Citus built.
func (e *Engine) checkOnSource(ctx context.Context, m metadata.Move, src metadata.Node) error {
	placed, err := e.cat.PlacementGroupsOf(ctx, m.ShardIDs)
	if err != nil {
		return err
	}
	nodes := map[int32]metadata.Node{}
	if e.cat.Flavor() == metadata.Citus {
		if nodes, err = e.nodes(ctx); err != nil {
			return err
		}
	}
	where := func(g int32) string {
		if n, ok := nodes[g]; ok {
			return n.Addr()
		}
		return fmt.Sprintf("node group %d", g)
	}
	for _, id := range m.ShardIDs {
		groups := placed[id]
		switch {
		case len(groups) == 0:
			return invalidf("shard %d has no placement", id)
		case len(groups) > 1:
			return invalidf("shard %d has placements on groups %v; shardmover moves shards with exactly one placement", id, groups)
		case groups[0] != m.SourceGroup && e.cat.Flavor() == metadata.Citus:
			return invalidf("shard %d is now on %s, not on the move's source %s: Citus's own mover (or an operator) moved the group while move %d ran; move %d ends, and shardmover drops nothing a placement points at", id, where(groups[0]), src.Addr(), m.ID, m.ID)
		case groups[0] != m.SourceGroup:
			return invalidf("shard %d is on group %d, not on the move's source %s", id, groups[0], src.Addr())
		}
	}
	return nil
}

// checkNodes checks the servers: settings, free slots and senders, replica
// identity, room, and names that would collide. The source's and the
// target's checks run at once, each on its own session (reused from the
// engine's earlier steps when there is one), and each side's reads are
// batched over the group's tables; the verdicts are then given in a fixed
// order, so a move with several problems is refused for the same one
// every time.
func (e *Engine) checkNodes(ctx context.Context, m metadata.Move, src, dst metadata.Node, own bool, sp *splits) (err error) {
	sc, dc, serr, derr := e.sessionPair(ctx, src, dst)
	defer e.release(src, sc, &err)
	defer e.release(dst, dc, &err)
	if serr != nil {
		return invalidf("cannot reach the source %s: %v", src.Addr(), serr)
	}
	if derr != nil {
		return invalidf("cannot reach the target %s: %v", dst.Addr(), derr)
	}
	sp.mark("connect")

	tables := shardIdents(m)
	var (
		wg       sync.WaitGroup
		sideSrc  sourceChecks
		sideDst  targetChecks
		srcDur   time.Duration
		dstStart = time.Now()
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		sideSrc = e.readSourceChecks(ctx, sc, tables)
		srcDur = time.Since(start)
	}()
	sideDst = e.readTargetChecks(ctx, m, dc, dst.Addr())
	dstDur := time.Since(dstStart)
	wg.Wait()
	if sp != nil {
		sp.fields = append(sp.fields, zap.Duration("source_reads", srcDur.Round(time.Millisecond)),
			zap.Duration("target_reads", dstDur.Round(time.Millisecond)), zap.Bool("disk_reused", sideDst.room.reused))
	}
	sp.mark("reads")

	// The move's slot and its applier's WAL sender; with Verify, a
	// temporary slot (and its sender) for a moment before the cutover.
	need, whyNeed := 1, ""
	if e.cfg.Verify {
		need, whyNeed = 2, " (one more for --verify's temporary slot)"
	}
	if sideSrc.capacityErr != nil {
		return fmt.Errorf("read settings of %s: %w", src.Addr(), sideSrc.capacityErr)
	}
	capacity := sideSrc.capacity
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
	if sideDst.originsErr != nil {
		return fmt.Errorf("read settings of %s: %w", dst.Addr(), sideDst.originsErr)
	}
	if sideDst.originsUsed >= sideDst.originsMax {
		return invalidf("the target %s has no free replication origin (%d of %d used); raise its max_replication_slots", dst.Addr(), sideDst.originsUsed, sideDst.originsMax)
	}
	if e.cat.Flavor() == metadata.Citus {
		if sideDst.citusErr != nil {
			return fmt.Errorf("read extensions of %s: %w", dst.Addr(), sideDst.citusErr)
		}
		if !sideDst.citus {
			return invalidf("the target %s does not have the citus extension; run CREATE EXTENSION citus there and add it with citus_add_node", dst.Addr())
		}
	}
	if sideSrc.identityErr != nil {
		return invalidf("%v", sideSrc.identityErr)
	}
	// Room on the target. Preflight runs before setup, so none of this
	// move's copy is there yet.
	if sideSrc.sizeErr != nil {
		return fmt.Errorf("measure shard group on %s: %w", src.Addr(), sideSrc.sizeErr)
	}
	if e.cfg.DiskFactor >= 0 {
		if sideDst.roomErr != nil {
			return sideDst.roomErr
		}
		if err := e.checkRoom(m, sideSrc.size, sideDst.room, dst.Addr()); err != nil {
			return err
		}
	}
	sp.mark("verdicts")
	// On Citus, an old shard of an earlier move (Citus's or ours) may still
	// wait for Citus's deferred cleanup on the target, holding the names:
	// like Citus before its own moves, run that cleanup now.
	if err := e.cat.CleanupCitusOrphans(ctx); err != nil {
		e.log.Warn("Citus's cleanup of old shards failed; name checks may refuse the move", zap.Error(err))
	}
	sp.mark("citus_cleanup")
	// Names on the target: the shard tables must not exist there, unless
	// they are this move's own copy from an earlier attempt; and the
	// shards' index names must be free in their schema there: an old,
	// fenced copy of a shard (whatever its fenced name) keeps them.
	if sideSrc.indexesErr != nil {
		return sideSrc.indexesErr
	}
	names, err := targetNames(ctx, dc, tables, sideSrc.indexes)
	if err != nil {
		return err
	}
	for i, t := range tables {
		if names[i].exists {
			if !(own && e.ownsTable(ctx, m, t)) {
				return invalidf("table %s already exists on the target %s; drop it or run `shardmover cleanup` if it is left from an earlier move", t.Sanitize(), dst.Addr())
			}
			continue // a table that already exists was handled above
		}
		if names[i].collide != "" {
			return invalidf("the target %s still holds an old copy of %s from an earlier move (index %s); run `shardmover cleanup --keep-old-for 0s` first", dst.Addr(), t.Sanitize(), names[i].collide)
		}
	}
	sp.mark("names")
	if err := checkDependencies(ctx, sc, dc, tables, dst.Addr(), e.cat.Flavor() == metadata.Citus); err != nil {
		return err
	}
	sp.mark("dependencies")
	// Leftovers with this move's name are its own (a crashed attempt): the
	// setup phase drops them through their cleanup records.
	return nil
}

// checkDependencies refuses a move whose tables use, on the source, what
// the target lacks: a trigger's function, a role named by a privilege or
// a policy, a table a foreign key references outside the group. Citus
// propagates functions and roles, and references from a group can only
// be to reference tables, which a move copies to its target before its
// tables (EnsureReferenceTables): so on Citus (citus) references are not
// looked for. On compat each node has its own, and without this the move
// failed in setup, having created the tables.
func checkDependencies(ctx context.Context, sc, dc *pgx.Conn, tables []pgx.Identifier, dstAddr string, citus bool) error {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Sanitize()
	}
	var funcs, roles, refs []string
	err := sc.QueryRow(ctx, `WITH t AS (SELECT pg_catalog.to_regclass(n) AS oid FROM unnest($1::text[]) n)
		SELECT
			ARRAY(SELECT DISTINCT pg_catalog.format('%I.%I(%s)', pn.nspname, p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid))
				FROM t JOIN pg_catalog.pg_trigger tg ON tg.tgrelid = t.oid AND NOT tg.tgisinternal
				JOIN pg_catalog.pg_proc p ON p.oid = tg.tgfoid JOIN pg_catalog.pg_namespace pn ON pn.oid = p.pronamespace ORDER BY 1),
			ARRAY(SELECT DISTINCT r.rolname::text FROM t JOIN pg_catalog.pg_class c ON c.oid = t.oid
				CROSS JOIN LATERAL (SELECT x.grantee FROM pg_catalog.aclexplode(coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner))) x
					UNION SELECT c.relowner
					UNION SELECT unnest(p.polroles) FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid) g(oid)
				JOIN pg_catalog.pg_roles r ON r.oid = g.oid ORDER BY 1),
			ARRAY(SELECT DISTINCT pg_catalog.format('%I.%I', rn.nspname, rc.relname)
				FROM t JOIN pg_catalog.pg_constraint k ON k.conrelid = t.oid AND k.contype = 'f'
				JOIN pg_catalog.pg_class rc ON rc.oid = k.confrelid JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace
				WHERE k.confrelid NOT IN (SELECT oid FROM t WHERE oid IS NOT NULL) AND NOT $2 ORDER BY 1)`, names, citus).Scan(&funcs, &roles, &refs)
	if err != nil {
		return fmt.Errorf("read what the group's tables use on the source: %w", err)
	}
	var missing []string
	err = dc.QueryRow(ctx, `SELECT ARRAY(
			SELECT 'the trigger function ' || f FROM unnest($1::text[]) f WHERE pg_catalog.to_regprocedure(f) IS NULL
			UNION ALL SELECT 'the role ' || pg_catalog.quote_ident(r) FROM unnest($2::text[]) r WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r)
			UNION ALL SELECT 'the table ' || x || ', which a foreign key references' FROM unnest($3::text[]) x WHERE pg_catalog.to_regclass(x) IS NULL)`,
		funcs, roles, refs).Scan(&missing)
	if err != nil {
		return fmt.Errorf("look on the target %s for what the group's tables use: %w", dstAddr, err)
	}
	if len(missing) > 0 {
		return invalidf("the target %s lacks %s, which the group's tables use on the source: create it there first", dstAddr, strings.Join(missing, ", "))
	}
	return nil
}

// sourceChecks is what preflight reads on the source, each part with its
// own error (judged in checkNodes' order).
type sourceChecks struct {
	capacity    replication.SourceCapacity
	capacityErr error
	identityErr error
	size        int64
	sizeErr     error
	indexes     [][]string // index names of each table
	indexesErr  error
}

// readSourceChecks reads, on the source session sc, the replication
// settings, every table's replica identity, the group's size and each
// table's index names.
func (e *Engine) readSourceChecks(ctx context.Context, sc *pgx.Conn, tables []pgx.Identifier) sourceChecks {
	var r sourceChecks
	r.capacity, r.capacityErr = replication.ReadSourceCapacity(ctx, sc)
	if r.capacityErr != nil {
		return r // the session is unusable or the server refuses: say so first
	}
	r.identityErr = replication.CheckReplicaIdentity(ctx, sc, tables)
	names := make([]string, len(tables))
	schemas := make([]string, len(tables))
	rels := make([]string, len(tables))
	for i, t := range tables {
		names[i], schemas[i], rels[i] = t.Sanitize(), t[0], t[1]
	}
	r.sizeErr = sc.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(to_regclass(n))), 0)::int8 FROM unnest($1::text[]) n`, names).Scan(&r.size)
	r.indexes = make([][]string, len(tables))
	rows, err := sc.Query(ctx, `SELECT u.i::int, ic.relname::text
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(s, r, i)
		JOIN pg_namespace n ON n.nspname = u.s
		JOIN pg_class tc ON tc.relnamespace = n.oid AND tc.relname = u.r
		JOIN pg_index i ON i.indrelid = tc.oid
		JOIN pg_class ic ON ic.oid = i.indexrelid
		ORDER BY 1, 2`, schemas, rels)
	if err != nil {
		r.indexesErr = err
		return r
	}
	var pos int32
	var name string
	_, err = pgx.ForEachRow(rows, []any{&pos, &name}, func() error {
		if pos < 1 || int(pos) > len(tables) {
			return fmt.Errorf("index query returned table position %d of %d", pos, len(tables))
		}
		r.indexes[pos-1] = append(r.indexes[pos-1], name)
		return nil
	})
	r.indexesErr = err
	return r
}

// targetChecks is what preflight reads on the target.
type targetChecks struct {
	originsMax, originsUsed int
	originsErr              error
	citus                   bool
	citusErr                error
	room                    room
	roomErr                 error
}

// readTargetChecks reads, on the target session dc, its replication
// origins, whether it has the citus extension (on Citus), and the room
// for the move (measureRoom).
func (e *Engine) readTargetChecks(ctx context.Context, m metadata.Move, dc *pgx.Conn, dstAddr string) targetChecks {
	var r targetChecks
	r.originsMax, r.originsUsed, r.originsErr = replication.ReadOriginCapacity(ctx, dc)
	if r.originsErr != nil {
		return r
	}
	if e.cat.Flavor() == metadata.Citus {
		r.citusErr = dc.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&r.citus)
	}
	if e.cfg.DiskFactor >= 0 {
		r.room, r.roomErr = e.measureRoom(ctx, m, dc, dstAddr)
	}
	return r
}

// targetName says whether a shard table exists on the target and, if not,
// the first of its index names already taken in its schema there.
type targetName struct {
	exists  bool
	collide string
}

// targetNames reads targetName for every table in one query.
func targetNames(ctx context.Context, dc *pgx.Conn, tables []pgx.Identifier, indexes [][]string) ([]targetName, error) {
	quoted := make([]string, len(tables))
	schemas := make([]string, len(tables))
	var ixPos []int32
	var ixNames []string
	for i, t := range tables {
		quoted[i], schemas[i] = t.Sanitize(), t[0]
		for _, name := range indexes[i] {
			ixPos = append(ixPos, int32(i+1))
			ixNames = append(ixNames, name)
		}
	}
	rows, err := dc.Query(ctx, `SELECT u.i::int, to_regclass(u.q) IS NOT NULL,
			coalesce((SELECT min(c.relname)::text FROM unnest($3::int[], $4::text[]) AS x(i, name)
				JOIN pg_namespace n ON n.nspname = u.s
				JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = x.name
				WHERE x.i = u.i), '')
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(q, s, i)
		ORDER BY 1`, quoted, schemas, ixPos, ixNames)
	if err != nil {
		return nil, err
	}
	out := make([]targetName, len(tables))
	var pos int32
	var n targetName
	if _, err := pgx.ForEachRow(rows, []any{&pos, &n.exists, &n.collide}, func() error {
		if pos < 1 || int(pos) > len(tables) {
			return fmt.Errorf("name query returned table position %d of %d", pos, len(tables))
		}
		out[pos-1] = n
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
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
