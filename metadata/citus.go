package metadata

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// What a move on Citus does through Citus's own catalogs and functions
// (docs/design.md 3.1). Citus 13.2 is the reference: its shard transfer
// blocks writes with lock_shard_metadata, flips placements with
// citus_internal_update_placement_metadata on every node that keeps
// metadata, and leaves the old shard to its deferred cleanup
// (pg_dist_cleanup). shardmover does the same from outside, under its own
// journal and two-phase commit.

// MinCitusMajor is the oldest Citus release shardmover moves shards on.
const MinCitusMajor = 12

// citusExclusiveLock is the lock mode number lock_shard_metadata takes for
// ExclusiveLock (PostgreSQL's lockdefs.h), as Citus's own moves pass it.
const citusExclusiveLock = 7

// Citus's advisory lock classes (pg_locks.objsubid) that mark a Citus
// shard move or rebalance in progress (resource_lock.h).
const (
	citusLockRebalanceColocation = 7
	citusLockPlacementColocation = 13
	citusLockShardMove           = 16
)

// Querier is what the Citus helpers need of a session or transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// checkCitusVersion refuses a Citus older than MinCitusMajor.
func checkCitusVersion(ctx context.Context, q Querier) error {
	var v string
	if err := q.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname = 'citus'").Scan(&v); err != nil {
		return fmt.Errorf("read the Citus version: %w", err)
	}
	if !citusSupported(v) {
		return invalidf("the coordinator runs Citus %s; shardmover supports Citus %d and later: upgrade Citus (ALTER EXTENSION citus UPDATE) first", v, MinCitusMajor)
	}
	return nil
}

// citusSupported reports whether extension version v (pg_extension's
// extversion, like "13.2-1") is MinCitusMajor or later.
func citusSupported(v string) bool {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= MinCitusMajor
}

// MetadataNodes are the nodes of nodes that Citus routes queries from
// besides the coordinator: active primary workers with synced metadata,
// by group.
func MetadataNodes(nodes []Node) []Node {
	var out []Node
	for _, n := range nodes {
		if n.IsCoordinator() || !n.IsActive || !n.HasMetadata || !n.MetadataSynced {
			continue
		}
		if n.Role != "" && n.Role != "primary" {
			continue
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GroupID < out[j].GroupID })
	return out
}

// lockTablesSQL takes EXCLUSIVE locks, on the node it runs on and until
// its transaction ends, on the distributed tables the shards $1 belong to
// (as that node's metadata names them), not on their shards: every write to
// those tables entering Citus on that node then waits before it takes its
// snapshot, since the table lock is taken while the statement is parsed.
// Citus's metadata lock (BlockCitusWrites) is taken in the executor,
// after the snapshot, so a write that waited on it alone runs with the
// snapshot it took before: on a move's target, where it runs locally once
// the placements flip, that snapshot may predate the last changes the
// applier committed there, and its UPDATE or DELETE would miss rows the
// source had long acknowledged. It runs on the target, in the transaction
// that then takes the metadata lock, before that lock (in pg_class order:
// two cutovers onto one node lock alike). The lock is local (Citus's
// function, not LOCK TABLE, which Citus sends to every node); it needs the
// privileges LOCK TABLE ... IN EXCLUSIVE MODE needs. Names go to Citus's
// function as values (format's %I), never into SQL text.
const lockTablesSQL = `SELECT pg_catalog.lock_relation_if_exists(format('%I.%I', n.nspname, c.relname), 'EXCLUSIVE')
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE c.oid IN (SELECT logicalrelid FROM pg_catalog.pg_dist_shard WHERE shardid = ANY($1))
	ORDER BY c.oid`

const lockMetadataSQL = "SELECT lock_shard_metadata($1, $2::bigint[])"

// BlockCitusWrites blocks Citus-routed writes to the shard groups of ids
// from the node tx runs on, until tx ends: Citus's router and COPY take
// ShareLock on each shard's metadata lock before they resolve placements,
// so a write waiting here reads the new placement once it gets through
// (citus_custom_scan.c). In one round trip it sets lockTimeout (unless
// empty) for the transaction, locks the distributed tables of ids when
// lockTables (the node is the move's target; see lockTablesSQL), then takes
// their metadata lock (lock_shard_metadata, ExclusiveLock). A cutover calls
// it at the start of its pause on the coordinator first, then on every
// other metadata node, always before the source table lock, so that two
// movers cannot deadlock (docs/design.md 3.1). Any failure aborts tx.
func BlockCitusWrites(ctx context.Context, tx pgx.Tx, ids []int64, lockTimeout string, lockTables bool) error {
	return blockCitusWrites(ctx, tx, ids, lockTimeout, lockTables, false)
}

// blockCitusWrites is BlockCitusWrites; with resetTimeout the transaction's
// lock_timeout goes back to the session's afterwards (the decision's later
// statements wait as long as they must).
func blockCitusWrites(ctx context.Context, tx pgx.Tx, ids []int64, lockTimeout string, lockTables, resetTimeout bool) error {
	b := &pgx.Batch{}
	if lockTimeout != "" {
		b.Queue("SELECT set_config('lock_timeout', $1, true)", lockTimeout)
	}
	if lockTables {
		b.Queue(lockTablesSQL, ids)
	}
	b.Queue(lockMetadataSQL, citusExclusiveLock, ids)
	if resetTimeout && lockTimeout != "" {
		b.Queue("SET LOCAL lock_timeout TO DEFAULT")
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("block Citus writes to shards %v: %w", ids, err)
	}
	return nil
}

// queueAsCitusRebalancer queues on b the statement sql run with the
// session named as Citus's rebalancer (application_name "citus_rebalancer
// gpid=<gpid>"), the only kind of session Citus lets change placements
// through its internal functions, and named back to restore afterwards.
// Both names are local to the transaction b runs in (a failure aborts it,
// which restores the name too).
func queueAsCitusRebalancer(b *pgx.Batch, restore, sql string, args ...any) {
	b.Queue(nameAsRebalancerSQL)
	b.Queue(sql, args...)
	b.Queue(nameBackSQL, restore)
}

const (
	nameAsRebalancerSQL = "SELECT set_config('application_name', 'citus_rebalancer gpid=' || citus_backend_gpid(), true)"
	nameBackSQL         = "SELECT set_config('application_name', $1, true)"
	updatePlacementsSQL = "SELECT pg_catalog.citus_internal_update_placement_metadata(x, $2, $3) FROM unnest($1::bigint[]) x"
	// citusCleanupSQL records, in the decision's transaction, that Citus's
	// deferred cleanup drops an old (fenced) shard on a group: a
	// pg_dist_cleanup row of object type 1 (shard placement) and policy 2
	// (deferred on success) under an operation id of Citus's sequence that
	// no running operation holds, so Citus's maintenance daemon (or
	// citus_cleanup_orphaned_resources()) drops it.
	citusCleanupSQL = `INSERT INTO pg_catalog.pg_dist_cleanup (record_id, operation_id, object_type, object_name, node_group_id, policy_type)
		VALUES (nextval('pg_catalog.pg_dist_cleanup_recordid_seq'), nextval('pg_catalog.pg_dist_operationid_seq'), 1, $1, $2, 2)`
)

// ActAsCitusRebalancer names the session q runs on as Citus's rebalancer
// for the rest of the session. Citus creates the shard tables of a move
// target from such a session; from an ordinary one it refuses a table in a
// distributed schema (schema-based sharding), taking it for a new tenant
// table created on a worker.
func ActAsCitusRebalancer(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, "SELECT set_config('application_name', 'citus_rebalancer gpid=' || citus_backend_gpid(), false)"); err != nil {
		return fmt.Errorf("name the session as Citus's rebalancer: %w", err)
	}
	return nil
}

// UpdatePlacements points the placements of ids from group src to group
// dst in the Citus metadata of the node tx runs on, inside tx (Citus's
// citus_internal_update_placement_metadata, which also invalidates Citus's
// caches when the transaction commits), in one round trip whatever the
// group's size. Every shard must be placed on src there; otherwise nothing
// changes and an error says so.
func UpdatePlacements(ctx context.Context, tx pgx.Tx, ids []int64, src, dst int32) error {
	b := &pgx.Batch{}
	queueAsCitusRebalancer(b, "shardmover", updatePlacementsSQL, ids, src, dst)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("point shards %v from group %d to group %d: %w", ids, src, dst, err)
	}
	return nil
}

// SyncPlacements makes the Citus metadata of the node conn is on agree
// with a committed decision: every shard of ids still placed on group src
// there is pointed at dst, in one transaction. It repairs a node whose
// prepared part of the decision was lost; changed is how many it pointed.
func SyncPlacements(ctx context.Context, conn *pgx.Conn, ids []int64, src, dst int32) (changed int, err error) {
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT shardid FROM pg_catalog.pg_dist_placement
			WHERE shardid = ANY($1) AND groupid = $2 ORDER BY shardid`, ids, src)
		if err != nil {
			return err
		}
		stale, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(stale) == 0 {
			return err
		}
		changed = len(stale)
		return UpdatePlacements(ctx, tx, stale, src, dst)
	})
	if err != nil {
		return 0, fmt.Errorf("sync the placements of shards %v: %w", ids, err)
	}
	return changed, nil
}

// NodePlacements reads the placements (shard -> group) as the Citus
// metadata of the node conn is on has them: what a check that every node
// agrees after a move compares.
func NodePlacements(ctx context.Context, conn *pgx.Conn) (map[int64]int32, error) {
	rows, err := conn.Query(ctx, `SELECT shardid, groupid FROM pg_catalog.pg_dist_placement`)
	if err != nil {
		return nil, fmt.Errorf("read the node's placements: %w", err)
	}
	out := map[int64]int32{}
	var id int64
	var g int32
	_, err = pgx.ForEachRow(rows, []any{&id, &g}, func() error { out[id] = g; return nil })
	return out, err
}

// PlacedOnNode reports whether the Citus metadata of the node conn is on
// still places any of shards on group: after a move's committed decision,
// that the node's part of the flip was rolled back. It reads only those
// shards' rows (a settlement runs it before every cutover attempt).
func PlacedOnNode(ctx context.Context, conn *pgx.Conn, shards []int64, group int32) (bool, error) {
	var placed bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_placement WHERE shardid = ANY($1) AND groupid = $2)`, shards, group).Scan(&placed)
	if err != nil {
		return false, fmt.Errorf("read the node's placements of shards %v: %w", shards, err)
	}
	return placed, nil
}

// CitusBusy says what Citus itself is doing that a move must not race: a
// rebalance job scheduled or running, or a shard move, copy or rebalance
// of some colocation group holding one of Citus's move locks. It returns
// "" when Citus is idle. Citus offers no lock a client can take to make
// its own moves wait for ours, so this is checked before each move and
// again before each cutover. Locks held by shardmover's own coordinator
// sessions (application_name shardmover) do not count: a move's setup
// copying reference tables with replicate_reference_tables() holds one of
// them while the next move of the job runs its preflight.
func (c *Catalog) CitusBusy(ctx context.Context) (string, error) {
	if c.flavor != Citus {
		return "", nil
	}
	var job int64
	var state string
	err := c.pool.QueryRow(ctx, `SELECT job_id, state::text FROM pg_catalog.pg_dist_background_job
		WHERE state::text IN ('scheduled', 'running', 'cancelling', 'failing') ORDER BY job_id LIMIT 1`).Scan(&job, &state)
	switch {
	case err == nil:
		return fmt.Sprintf("Citus background job %d is %s (a rebalance started with citus_rebalance_start); wait for it with SELECT citus_rebalance_wait() or stop it with SELECT citus_rebalance_stop()", job, state), nil
	case !errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("read Citus's background jobs: %w", err)
	}
	var pid int32
	var class int32
	var key int64
	err = c.pool.QueryRow(ctx, `SELECT pid, objsubid::int, (classid::int8 << 32) | objid::int8 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND objsubid IN ($1, $2, $3)
		AND pid NOT IN (SELECT a.pid FROM pg_catalog.pg_stat_activity a WHERE a.application_name = 'shardmover')
		ORDER BY pid LIMIT 1`,
		citusLockRebalanceColocation, citusLockPlacementColocation, citusLockShardMove).Scan(&pid, &class, &key)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read Citus's move locks: %w", err)
	}
	what := map[int32]string{
		citusLockRebalanceColocation: "a Citus rebalance of colocation group",
		citusLockPlacementColocation: "a Citus shard move or copy in colocation group",
		citusLockShardMove:           "a Citus move of shard",
	}[class]
	return fmt.Sprintf("%s %d is running (backend pid %d); wait for it to finish", what, key, pid), nil
}

// EnsureReferenceTables copies Citus reference tables to every node that
// lacks them (replicate_reference_tables()), as Citus does before any
// shard move: a node that holds distributed shards must hold every
// reference table, or Citus refuses queries that join them. It does
// nothing when no node lacks one, and nothing on compat.
func (c *Catalog) EnsureReferenceTables(ctx context.Context) error {
	if c.flavor != Citus {
		return nil
	}
	var missing bool
	if err := c.pool.QueryRow(ctx, `SELECT EXISTS (
			SELECT 1 FROM pg_catalog.pg_dist_partition p JOIN pg_catalog.pg_dist_shard s ON s.logicalrelid = p.logicalrelid
			CROSS JOIN pg_catalog.pg_dist_node n
			WHERE p.repmodel = 't' AND p.partmethod = 'n' AND n.isactive AND n.noderole = 'primary'
			AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_placement pl WHERE pl.shardid = s.shardid AND pl.groupid = n.groupid))`).
		Scan(&missing); err != nil {
		return fmt.Errorf("check Citus reference tables: %w", err)
	}
	if !missing {
		return nil
	}
	// Small reference tables are copied with their writes blocked for the
	// copy (a moment, like a cutover's pause); Citus's default for a table
	// with a replica identity is a logical replication of its own, whose
	// fixed cost (a slot, a subscription, its catch-up) was seconds even
	// for a few rows. Larger ones keep that online copy.
	mode := "auto"
	var bytes int64
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_catalog.citus_total_relation_size(p.logicalrelid)), 0)::int8
			FROM pg_catalog.pg_dist_partition p WHERE p.repmodel = 't' AND p.partmethod = 'n'`).Scan(&bytes); err == nil && bytes <= smallReferenceTables {
		mode = "block_writes"
	}
	ctx2, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	// The mode as a literal, not a parameter cast to its type: the type
	// lives in schema citus, on which a least-privileged role has no USAGE.
	if _, err := c.pool.Exec(ctx2, "SELECT pg_catalog.replicate_reference_tables(shard_transfer_mode := '"+mode+"')"); err != nil {
		return fmt.Errorf("copy Citus reference tables to the nodes that lack them (replicate_reference_tables(%s)): %w", mode, err)
	}
	return nil
}

// smallReferenceTables is the most reference-table data (in all) that
// EnsureReferenceTables copies with their writes blocked.
const smallReferenceTables = 16 << 20

// WhyNotMovable explains why shard id is in no movable shard group, or
// returns "" when the catalog does not know it either.
func (c *Catalog) WhyNotMovable(ctx context.Context, id int64) (string, error) {
	var table, partitioned, otherAM, am string
	var method, repmodel string
	var colocation int32
	colocated := `FROM ` + c.t("pg_dist_partition") + ` p2 JOIN pg_catalog.pg_class c2 ON c2.oid = p2.logicalrelid
				WHERE (p2.logicalrelid = p.logicalrelid OR (p.colocationid <> 0 AND p2.colocationid = p.colocationid))`
	err := c.pool.QueryRow(ctx, `SELECT s.logicalrelid::regclass::text, p.partmethod::text, p.repmodel::text, p.colocationid,
			coalesce((SELECT p2.logicalrelid::regclass::text `+colocated+`
				  AND (c2.relkind = 'p' OR c2.relispartition) ORDER BY c2.relkind <> 'p', p2.logicalrelid LIMIT 1), ''),
			coalesce((SELECT p2.logicalrelid::regclass::text || ' ' || a.amname `+strings.Replace(colocated, "WHERE", "JOIN pg_catalog.pg_am a ON a.oid = c2.relam WHERE", 1)+`
				  AND a.amname <> 'heap' ORDER BY p2.logicalrelid LIMIT 1), '')
		FROM `+c.t("pg_dist_shard")+` s JOIN `+c.t("pg_dist_partition")+` p ON p.logicalrelid = s.logicalrelid
		WHERE s.shardid = $1`, id).Scan(&table, &method, &repmodel, &colocation, &partitioned, &otherAM)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil
	case err != nil:
		return "", err
	}
	otherAM, am, _ = strings.Cut(otherAM, " ")
	switch {
	case otherAM != "":
		return fmt.Sprintf("shard %d belongs to %s, whose shard groups hold the shards of %s, a table of the %s access method, which cannot be moved by logical replication (columnar refuses inserts while it is published): move this group with citus_move_shard_placement(..., shard_transfer_mode := 'block_writes')", id, table, otherAM, am), nil
	case partitioned != "":
		return fmt.Sprintf("shard %d belongs to %s, whose shard groups hold the shards of the partitioned table %s (a parent and its partitions move together), and shardmover does not move partitioned tables yet: move this group with citus_move_shard_placement", id, table, partitioned), nil
	case repmodel == "t":
		return fmt.Sprintf("shard %d belongs to the reference table %s, which has a copy on every node and is never moved", id, table), nil
	case colocation == 0 && method == "n":
		return fmt.Sprintf("shard %d belongs to the Citus local table %s, which stays on the coordinator", id, table), nil
	case method == "a" || method == "r":
		return fmt.Sprintf("shard %d belongs to %s, an append- or range-distributed table, which shardmover does not move", id, table), nil
	}
	return fmt.Sprintf("shard %d belongs to %s, which is not moved (it belongs to an extension)", id, table), nil
}

// citusDeferredDrops reads the shard placements Citus's deferred cleanup
// will drop (pg_dist_cleanup, object type 1) as deferred cleanup records,
// so that verify counts a move's old shard waiting there as kept. Nothing
// on compat.
func (c *Catalog) citusDeferredDrops(ctx context.Context) ([]CleanupRecord, error) {
	if c.flavor != Citus {
		return nil, nil
	}
	rows, err := c.pool.Query(ctx, `SELECT record_id, node_group_id, object_name FROM pg_catalog.pg_dist_cleanup
		WHERE object_type = 1 ORDER BY record_id`)
	if err != nil {
		return nil, fmt.Errorf("read Citus's cleanup records: %w", err)
	}
	var out []CleanupRecord
	var id int64
	var group int32
	var name string
	_, err = pgx.ForEachRow(rows, []any{&id, &group, &name}, func() error {
		out = append(out, CleanupRecord{ID: id, NodeGroup: group, ObjectType: ObjectTable, Name: name, Policy: CleanupDeferred})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read Citus's cleanup records: %w", err)
	}
	return out, nil
}

// CitusCleanupPending lists the shard names Citus's cleanup still has to
// drop (pg_dist_cleanup), for tests and verify.
func (c *Catalog) CitusCleanupPending(ctx context.Context) ([]string, error) {
	if c.flavor != Citus {
		return nil, nil
	}
	rows, err := c.pool.Query(ctx, "SELECT object_name FROM pg_catalog.pg_dist_cleanup ORDER BY record_id")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// CleanupCitusOrphans runs Citus's own deferred cleanup now
// (citus_cleanup_orphaned_resources()) instead of waiting for its
// maintenance daemon.
func (c *Catalog) CleanupCitusOrphans(ctx context.Context) error {
	if c.flavor != Citus {
		return nil
	}
	var pending bool
	if err := c.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_cleanup)").Scan(&pending); err != nil || !pending {
		return err
	}
	if _, err := c.pool.Exec(ctx, "CALL pg_catalog.citus_cleanup_orphaned_resources()"); err != nil {
		return fmt.Errorf("run Citus's cleanup: %w", err)
	}
	return nil
}

// CitusStrategy is a row of Citus's rebalance strategy catalog
// (pg_dist_rebalance_strategy), with its functions as schema-qualified
// names, and the by_disk_size base cost the cluster is set to.
type CitusStrategy struct {
	Name                 string
	Cost                 pgx.Identifier // (shardid bigint) -> real
	Capacity             pgx.Identifier // (nodeid int) -> real
	Allowed              pgx.Identifier // (shardid bigint, nodeid int) -> boolean
	Threshold            float64
	MinimumThreshold     float64
	ImprovementThreshold float64
	// BaseCost is citus.rebalancer_by_disk_size_base_cost in bytes.
	BaseCost int64
}

// Citus's built-in strategy functions, which the planner computes itself.
var (
	CitusCostOne         = pgx.Identifier{"pg_catalog", "citus_shard_cost_1"}
	CitusCostDiskSize    = pgx.Identifier{"pg_catalog", "citus_shard_cost_by_disk_size"}
	CitusCapacityOne     = pgx.Identifier{"pg_catalog", "citus_node_capacity_1"}
	CitusAllowedAlways   = pgx.Identifier{"pg_catalog", "citus_shard_allowed_on_node_true"}
	defaultCitusBaseCost = int64(100 << 20)
)

// CitusDefaultStrategy reads Citus's default rebalance strategy (the row
// with default_strategy), or nil on compat.
func (c *Catalog) CitusDefaultStrategy(ctx context.Context) (*CitusStrategy, error) {
	if c.flavor != Citus {
		return nil, nil
	}
	fn := func(col string) string {
		return `(SELECT ARRAY[n.nspname::text, p.proname::text] FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = s.` + col + `)`
	}
	var s CitusStrategy
	var cost, capacity, allowed []string
	err := c.pool.QueryRow(ctx, `SELECT s.name::text, `+fn("shard_cost_function")+`, `+fn("node_capacity_function")+`, `+
		fn("shard_allowed_on_node_function")+`, s.default_threshold, s.minimum_threshold, coalesce(s.improvement_threshold, 0)
		FROM pg_catalog.pg_dist_rebalance_strategy s WHERE s.default_strategy`).
		Scan(&s.Name, &cost, &capacity, &allowed, &s.Threshold, &s.MinimumThreshold, &s.ImprovementThreshold)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, invalidf("Citus has no default rebalance strategy; set one with SELECT citus_set_default_rebalance_strategy('by_disk_size')")
	}
	if err != nil {
		return nil, fmt.Errorf("read Citus's default rebalance strategy: %w", err)
	}
	s.Cost, s.Capacity, s.Allowed = cost, capacity, allowed
	s.BaseCost = defaultCitusBaseCost
	var base string
	if err := c.pool.QueryRow(ctx, "SELECT coalesce((SELECT setting FROM pg_settings WHERE name = 'citus.rebalancer_by_disk_size_base_cost'), '')").Scan(&base); err == nil && base != "" {
		if n, err := strconv.ParseInt(base, 10, 64); err == nil && n >= 0 {
			s.BaseCost = n
		}
	}
	return &s, nil
}

// CitusShardCosts calls the strategy's cost function for each of shards
// (each a shard group's first shard: Citus's cost of a shard covers its
// colocated shards).
func (c *Catalog) CitusShardCosts(ctx context.Context, s *CitusStrategy, shards []int64) (map[int64]float64, error) {
	rows, err := c.pool.Query(ctx, "SELECT x, "+s.Cost.Sanitize()+"(x)::float8 FROM unnest($1::bigint[]) x", shards)
	if err != nil {
		return nil, fmt.Errorf("call the cost function %s of Citus strategy %s: %w", s.Cost.Sanitize(), s.Name, err)
	}
	out := map[int64]float64{}
	var id int64
	var v float64
	_, err = pgx.ForEachRow(rows, []any{&id, &v}, func() error { out[id] = v; return nil })
	return out, err
}

// CitusNodeCapacities calls the strategy's capacity function for each node.
func (c *Catalog) CitusNodeCapacities(ctx context.Context, s *CitusStrategy, nodes []int32) (map[int32]float64, error) {
	rows, err := c.pool.Query(ctx, "SELECT x, "+s.Capacity.Sanitize()+"(x)::float8 FROM unnest($1::int[]) x", nodes)
	if err != nil {
		return nil, fmt.Errorf("call the capacity function %s of Citus strategy %s: %w", s.Capacity.Sanitize(), s.Name, err)
	}
	out := map[int32]float64{}
	var id int32
	var v float64
	_, err = pgx.ForEachRow(rows, []any{&id, &v}, func() error { out[id] = v; return nil })
	return out, err
}

// CitusDisallowed calls the strategy's allowed-on-node function for every
// pair of shards and nodes and returns the pairs it refuses.
func (c *Catalog) CitusDisallowed(ctx context.Context, s *CitusStrategy, shards []int64, nodes []int32) (map[[2]int64]bool, error) {
	rows, err := c.pool.Query(ctx, "SELECT x, y FROM unnest($1::bigint[]) x CROSS JOIN unnest($2::int[]) y WHERE NOT "+
		s.Allowed.Sanitize()+"(x, y)", shards, nodes)
	if err != nil {
		return nil, fmt.Errorf("call the allowed-on-node function %s of Citus strategy %s: %w", s.Allowed.Sanitize(), s.Name, err)
	}
	out := map[[2]int64]bool{}
	var x int64
	var y int32
	_, err = pgx.ForEachRow(rows, []any{&x, &y}, func() error { out[[2]int64{x, int64(y)}] = true; return nil })
	return out, err
}
