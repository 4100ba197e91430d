package metadata

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// SnapshotOptions tunes Snapshot.
type SnapshotOptions struct {
	// SkipSizes leaves ShardGroup.Bytes at zero instead of measuring on nodes.
	SkipSizes bool
}

// Snapshot reads a consistent view of the catalogs (one REPEATABLE READ
// transaction), then measures shard-group sizes on each node. What could
// not be measured is in the groups' SizeKnown and the warnings;
// MeasuredSnapshot also names the nodes.
func (c *Catalog) Snapshot(ctx context.Context, opts SnapshotOptions) (*Cluster, error) {
	cl, _, err := c.MeasuredSnapshot(ctx, opts)
	return cl, err
}

// Unmeasured is a node a snapshot could not measure: a planner that
// counted on it would guess (its groups' sizes read as 0, and a move to or
// from it could not run).
type Unmeasured struct {
	Node Node
	// Reason says why in a few words, without the connection string:
	// "connection refused", or the server's refusal such as `password
	// authentication failed for user "x" (SQLSTATE 28P01)`.
	Reason string
}

// MeasuredSnapshot is Snapshot, and the nodes it could not measure, in
// node group order (none with SkipSizes). Every active primary node that
// holds shard groups or may hold them (shouldhaveshards, not the
// coordinator) is measured or, where Citus measured its shards, connected
// to once: a node shardmover cannot connect to with its node settings
// (stopped, or refused by --node-conninfo's credentials) is unmeasured
// even when Citus could read its sizes, since no move could run to or
// from it. An inactive node is never unmeasured (its sizes are measured
// when it holds groups, and a failure there is only a warning): nothing
// moves to or from it anyway.
func (c *Catalog) MeasuredSnapshot(ctx context.Context, opts SnapshotOptions) (*Cluster, []Unmeasured, error) {
	if err := c.requireInstalled(ctx); err != nil {
		return nil, nil, err
	}
	cl := &Cluster{Flavor: c.flavor}
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if cl.Nodes, err = readNodes(ctx, tx, c.t("pg_dist_node")); err != nil {
			return err
		}
		if cl.Colocations, err = c.readColocations(ctx, tx); err != nil {
			return err
		}
		if cl.Tables, err = c.readTables(ctx, tx); err != nil {
			return err
		}
		if cl.Shards, err = c.readShards(ctx, tx); err != nil {
			return err
		}
		cl.Placements, err = c.readPlacements(ctx, tx)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read catalogs: %w", err)
	}
	cl.buildGroups()
	if opts.SkipSizes {
		return cl, nil, nil
	}
	return cl, c.measure(ctx, cl), nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func readNodes(ctx context.Context, q querier, table string) ([]Node, error) {
	rows, err := q.Query(ctx, `SELECT nodeid, groupid, nodename, nodeport, noderack, hasmetadata, isactive,
		noderole::text, nodecluster::text, metadatasynced, shouldhaveshards
		FROM `+table+` ORDER BY groupid, nodeid`)
	if err != nil {
		return nil, fmt.Errorf("read pg_dist_node: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Node, error) {
		var n Node
		err := r.Scan(&n.ID, &n.GroupID, &n.Host, &n.Port, &n.Rack, &n.HasMetadata, &n.IsActive,
			&n.Role, &n.Cluster, &n.MetadataSynced, &n.ShouldHaveShards)
		return n, err
	})
}

func (c *Catalog) readColocations(ctx context.Context, q querier) ([]Colocation, error) {
	rows, err := q.Query(ctx, `SELECT colocationid, shardcount, replicationfactor, distributioncolumntype::regtype::text
		FROM `+c.t("pg_dist_colocation")+` ORDER BY colocationid`)
	if err != nil {
		return nil, fmt.Errorf("read pg_dist_colocation: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Colocation, error) {
		var x Colocation
		err := r.Scan(&x.ID, &x.ShardCount, &x.ReplicationFactor, &x.ColumnType)
		return x, err
	})
}

// movable is the SQL condition on pg_dist_partition row p that keeps the
// tables whose shards form movable shard groups. On Citus these are hash-
// distributed tables and single-shard distributed tables (the tables of a
// distributed schema, or create_distributed_table with a NULL column: no
// partkey, a colocation group of their own kind), as in the citus_shards
// view's citus_table_type; reference tables (repmodel 't', a placement on
// every node), citus-local tables (colocation 0, on the coordinator),
// append- and range-distributed tables and tables owned by an extension
// never move and are left out of the snapshot. Compat has hash tables only.
func (c *Catalog) movable(p string) string {
	// A partitioned table's shard group holds the parent's shard and every
	// partition's, which move together or not at all; shardmover does not
	// move them yet. A table of another access method than heap (Citus's
	// columnar refuses every INSERT while it is published, and takes no
	// UPDATE at all) cannot be moved by logical replication. So every group
	// of a colocation that has either stays out (WhyNotMovable says why).
	unpartitioned := `NOT EXISTS (SELECT 1 FROM ` + c.t("pg_dist_partition") + ` p2 JOIN pg_catalog.pg_class c2 ON c2.oid = p2.logicalrelid
			WHERE (p2.logicalrelid = ` + p + `.logicalrelid OR (` + p + `.colocationid <> 0 AND p2.colocationid = ` + p + `.colocationid))
			  AND (c2.relkind = 'p' OR c2.relispartition
				OR (c2.relam <> 0 AND c2.relam <> (SELECT a.oid FROM pg_catalog.pg_am a WHERE a.amname = 'heap'))))`
	if c.flavor != Citus {
		return unpartitioned
	}
	return `(` + p + `.partmethod = 'h' OR (` + p + `.partmethod = 'n' AND ` + p + `.repmodel <> 't' AND ` + p + `.colocationid <> 0))
		AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = ` + p + `.logicalrelid
			AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')
		AND ` + unpartitioned
}

// movableShards is a WHERE clause keeping the rows of pg_dist_shard s whose
// table is movable (empty on compat).
func (c *Catalog) movableShards(s string) string {
	if c.flavor != Citus {
		return ""
	}
	return `WHERE EXISTS (SELECT 1 FROM ` + c.t("pg_dist_partition") + ` p WHERE p.logicalrelid = ` + s + `.logicalrelid AND ` + c.movable("p") + `)`
}

func (c *Catalog) readTables(ctx context.Context, q querier) ([]Table, error) {
	rows, err := q.Query(ctx, `SELECT n.nspname, cl.relname, p.partmethod::text, coalesce(p.partkey, ''), p.colocationid,
			(SELECT count(*) FROM `+c.t("pg_dist_shard")+` s WHERE s.logicalrelid = p.logicalrelid)
		FROM `+c.t("pg_dist_partition")+` p
		JOIN pg_class cl ON cl.oid = p.logicalrelid
		JOIN pg_namespace n ON n.oid = cl.relnamespace
		WHERE `+c.movable("p")+`
		ORDER BY n.nspname, cl.relname`)
	if err != nil {
		return nil, fmt.Errorf("read pg_dist_partition: %w", err)
	}
	type raw struct {
		Table
		partkey string
	}
	raws, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (raw, error) {
		var x raw
		err := r.Scan(&x.Schema, &x.Name, &x.Method, &x.partkey, &x.ColocationID, &x.ShardCount)
		return x, err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Table, 0, len(raws))
	for _, x := range raws {
		t := x.Table
		if x.partkey != "" {
			attnum, err := ParsePartkey(x.partkey)
			if err != nil {
				return nil, err
			}
			t.ColumnAttNum = attnum
			rows, err := q.Query(ctx, `SELECT a.attname, format_type(a.atttypid, NULL), a.atttypid
				FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum = $2`, t.QualifiedName(), attnum)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				if err := rows.Scan(&t.Column, &t.ColumnType, &t.ColumnTypeID); err != nil {
					rows.Close()
					return nil, err
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
		out = append(out, t)
	}
	return out, nil
}

func (c *Catalog) readShards(ctx context.Context, q querier) ([]Shard, error) {
	rows, err := q.Query(ctx, `SELECT n.nspname, cl.relname, s.shardid, coalesce(s.shardminvalue, ''), coalesce(s.shardmaxvalue, '')
		FROM `+c.t("pg_dist_shard")+` s
		JOIN pg_class cl ON cl.oid = s.logicalrelid
		JOIN pg_namespace n ON n.oid = cl.relnamespace
		`+c.movableShards("s")+`
		ORDER BY n.nspname, cl.relname, s.shardminvalue::bigint NULLS FIRST, s.shardid`)
	if err != nil {
		return nil, fmt.Errorf("read pg_dist_shard: %w", err)
	}
	var out []Shard
	prev := ""
	idx := 0
	for rows.Next() {
		var s Shard
		var lo, hi string
		if err := rows.Scan(&s.Schema, &s.Table, &s.ID, &lo, &hi); err != nil {
			rows.Close()
			return nil, err
		}
		key := s.Schema + "." + s.Table
		if key != prev {
			prev, idx = key, 0
		}
		s.Index = idx
		idx++
		if lo != "" {
			a, err1 := strconv.ParseInt(lo, 10, 32)
			b, err2 := strconv.ParseInt(hi, 10, 32)
			if err1 != nil || err2 != nil {
				rows.Close()
				return nil, fmt.Errorf("shard %d has a range that is not int32: [%s, %s]", s.ID, lo, hi)
			}
			s.Min, s.Max = int32(a), int32(b)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func (c *Catalog) readPlacements(ctx context.Context, q querier) ([]Placement, error) {
	where := ""
	if c.flavor == Citus {
		where = `WHERE pl.shardid IN (SELECT s.shardid FROM ` + c.t("pg_dist_shard") + ` s ` + c.movableShards("s") + `)`
	}
	rows, err := q.Query(ctx, `SELECT pl.placementid, pl.shardid, pl.shardstate, pl.shardlength, pl.groupid
		FROM `+c.t("pg_dist_placement")+` pl `+where+`
		ORDER BY pl.shardid, pl.placementid`)
	if err != nil {
		return nil, fmt.Errorf("read pg_dist_placement: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Placement, error) {
		var p Placement
		err := r.Scan(&p.ID, &p.ShardID, &p.State, &p.Length, &p.GroupID)
		return p, err
	})
}

// buildGroups derives shard groups: shard index i of every table of a
// colocation group, placed where index i of the first table is.
func (cl *Cluster) buildGroups() {
	placement := make(map[int64]int32, len(cl.Placements))
	for _, p := range cl.Placements {
		placement[p.ShardID] = p.GroupID
	}
	nodeOfGroup := make(map[int32]int32, len(cl.Nodes))
	for _, n := range cl.Nodes {
		if n.Role == "primary" || n.Role == "" {
			nodeOfGroup[n.GroupID] = n.ID
		}
	}
	type key struct {
		coloc int32
		index int
	}
	groups := map[key]*ShardGroup{}
	var keys []key
	tables := append([]Table(nil), cl.Tables...)
	sort.Slice(tables, func(i, j int) bool {
		if tables[i].ColocationID != tables[j].ColocationID {
			return tables[i].ColocationID < tables[j].ColocationID
		}
		return tables[i].DisplayName() < tables[j].DisplayName()
	})
	for _, t := range tables {
		for _, s := range cl.TableShards(t) {
			k := key{t.ColocationID, s.Index}
			g, ok := groups[k]
			if !ok {
				g = &ShardGroup{ColocationID: t.ColocationID, Index: s.Index, GroupID: placement[s.ID]}
				g.NodeID = nodeOfGroup[g.GroupID]
				groups[k] = g
				keys = append(keys, k)
			}
			g.ShardIDs = append(g.ShardIDs, s.ID)
			g.Tables = append(g.Tables, t.DisplayName())
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].coloc != keys[j].coloc {
			return keys[i].coloc < keys[j].coloc
		}
		return keys[i].index < keys[j].index
	})
	cl.Groups = cl.Groups[:0]
	for _, k := range keys {
		cl.Groups = append(cl.Groups, *groups[k])
	}
}

// measure fills ShardGroup.Bytes with pg_total_relation_size of every shard
// of the group, measured on the node holding it, and returns the nodes it
// could not measure (see MeasuredSnapshot). A node that cannot be reached
// leaves its groups with SizeKnown = false and adds a warning. On Citus the
// sizes are Citus's own (citus_shard_sizes() on the coordinator, what
// citus_shards shows and Citus's rebalancer weighs). That function skips a
// worker it cannot reach with no more than a WARNING, so a group with a
// shard missing from its answer is measured on its node as on compat, as
// is every group when the call fails.
func (c *Catalog) measure(ctx context.Context, cl *Cluster) []Unmeasured {
	contacted := map[int32]bool{} // node groups shardmover connected to
	var out []Unmeasured
	fail := func(node Node, warning string, err error) {
		cl.Warnings = append(cl.Warnings, fmt.Sprintf(warning, node.Addr(), err))
		if node.IsActive {
			out = append(out, Unmeasured{Node: node, Reason: failureReason(err)})
		}
		contacted[node.GroupID] = true
	}
	if c.flavor == Citus {
		sizes, err := c.citusShardSizes(ctx)
		if err != nil {
			c.log.Debug("citus_shard_sizes() failed; measuring each node", zap.Error(err))
		}
		for i := range cl.Groups {
			g := &cl.Groups[i]
			var bytes int64
			known := err == nil
			for _, id := range g.ShardIDs {
				size, ok := sizes[id]
				known = known && ok
				bytes += size
			}
			if known {
				g.Bytes, g.SizeKnown = bytes, true
			}
		}
	}
	shardByID := make(map[int64]Shard, len(cl.Shards))
	for _, s := range cl.Shards {
		shardByID[s.ID] = s
	}
	byGroup := map[int32][]int{}
	var nodeGroups []int32
	for i, g := range cl.Groups {
		if g.SizeKnown {
			continue
		}
		if _, ok := byGroup[g.GroupID]; !ok {
			nodeGroups = append(nodeGroups, g.GroupID)
		}
		byGroup[g.GroupID] = append(byGroup[g.GroupID], i)
	}
	sort.Slice(nodeGroups, func(i, j int) bool { return nodeGroups[i] < nodeGroups[j] })
	for _, gid := range nodeGroups {
		node, ok := cl.NodeByGroup(gid)
		if !ok {
			cl.Warnings = append(cl.Warnings, fmt.Sprintf("placements name node group %d, which has no node", gid))
			continue
		}
		sizes, err := c.shardSizes(ctx, node, byGroup[gid], cl, shardByID)
		if err != nil {
			fail(node, "sizes on %s unknown: %v", err)
			continue
		}
		contacted[gid] = true
		for _, i := range byGroup[gid] {
			g := &cl.Groups[i]
			g.Bytes = 0
			for _, id := range g.ShardIDs {
				g.Bytes += sizes[id]
			}
			g.SizeKnown = true
		}
	}
	// Every other node a plan may move groups to or from: connected to
	// once, so that a plan never counts on a node no move could reach.
	holds := map[int32]bool{}
	for _, g := range cl.Groups {
		holds[g.GroupID] = true
	}
	for _, n := range cl.Nodes {
		planned := holds[n.GroupID] || (n.ShouldHaveShards && !n.IsCoordinator())
		if contacted[n.GroupID] || !planned || !n.IsActive || (n.Role != "primary" && n.Role != "") {
			continue
		}
		contacted[n.GroupID] = true
		conn, err := c.ConnectNode(ctx, n.Host, n.Port)
		if err != nil {
			fail(n, "%s could not be measured: %v", err)
			continue
		}
		_ = conn.Close(ctx)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Node.GroupID < out[j].Node.GroupID })
	return out
}

// citusShardSizes reads citus_shard_sizes(), keeping the largest size of
// each shard as the citus_shards view does.
func (c *Catalog) citusShardSizes(ctx context.Context) (map[int64]int64, error) {
	rows, err := c.pool.Query(ctx, `SELECT shard_id::bigint, max(size)::bigint FROM pg_catalog.citus_shard_sizes() GROUP BY shard_id`)
	if err != nil {
		return nil, err
	}
	out := map[int64]int64{}
	for rows.Next() {
		var id, size int64
		if err := rows.Scan(&id, &size); err != nil {
			rows.Close()
			return nil, err
		}
		out[id] = size
	}
	return out, rows.Err()
}

func (c *Catalog) shardSizes(ctx context.Context, node Node, idx []int, cl *Cluster, shardByID map[int64]Shard) (map[int64]int64, error) {
	conn, err := c.ConnectNode(ctx, node.Host, node.Port)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	var ids []int64
	var names []string
	for _, i := range idx {
		for _, id := range cl.Groups[i].ShardIDs {
			ids = append(ids, id)
			names = append(names, shardByID[id].Ident().Sanitize())
		}
	}
	rows, err := conn.Query(ctx, `SELECT u.id, coalesce(pg_total_relation_size(to_regclass(u.name)), 0)
		FROM unnest($1::bigint[], $2::text[]) AS u(id, name)`, ids, names)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]int64, len(ids))
	for rows.Next() {
		var id, size int64
		if err := rows.Scan(&id, &size); err != nil {
			rows.Close()
			return nil, err
		}
		out[id] = size
	}
	return out, rows.Err()
}

// PlacementGroupsOf reads, from the coordinator's catalog, the node group
// each of ids is placed on (a shard without a placement is left out): what
// a move's preflight needs of the catalog, without a whole snapshot.
func (c *Catalog) PlacementGroupsOf(ctx context.Context, ids []int64) (map[int64][]int32, error) {
	rows, err := c.pool.Query(ctx, `SELECT shardid, groupid FROM `+c.t("pg_dist_placement")+` WHERE shardid = ANY($1) ORDER BY shardid, groupid`, ids)
	if err != nil {
		return nil, fmt.Errorf("read the placements of shards %v: %w", ids, err)
	}
	out := map[int64][]int32{}
	var id int64
	var g int32
	_, err = pgx.ForEachRow(rows, []any{&id, &g}, func() error { out[id] = append(out[id], g); return nil })
	if err != nil {
		return nil, fmt.Errorf("read the placements of shards %v: %w", ids, err)
	}
	return out, nil
}
