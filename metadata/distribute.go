package metadata

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/internal/pgsql"
)

// DistributeOptions describes a create_distributed_table call.
type DistributeOptions struct {
	// Table is "name" or "schema.name"; it must exist on the coordinator and be empty.
	Table string
	// Column is the distribution column.
	Column string
	// ShardCount is the number of shards (Citus's default is 32). Zero with
	// ColocateWith takes the other table's count.
	ShardCount int
	// ColocateWith is "" (colocate with an existing group of the same shard
	// count and column type, as Citus's 'default' does), "none" (a new
	// group), or the name of a distributed table.
	ColocateWith string
}

// CreateDistributedTable distributes an existing, empty coordinator table by
// hash on one column, like Citus's create_distributed_table: shard ids from
// pg_dist_shardid_seq (102008 upward), ranges per HashRanges, placements
// round-robin over active workers with shouldhaveshards (or following the
// colocated table's placements), shard tables <table>_<shardid> created on
// the workers with the table's columns, defaults, constraints and indexes.
func (c *Catalog) CreateDistributedTable(ctx context.Context, opts DistributeOptions) (Table, error) {
	if c.flavor == Citus {
		return Table{}, invalidf("this is a Citus cluster; distribute tables with SELECT create_distributed_table('%s', '%s')", opts.Table, opts.Column)
	}
	if err := c.requireInstalled(ctx); err != nil {
		return Table{}, err
	}
	schema, rel := splitName(opts.Table)
	qualified := pgx.Identifier{schema, rel}.Sanitize()
	display := opts.Table

	// Checks: nothing is created until every one passes.
	var exists bool
	if err := c.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", qualified).Scan(&exists); err != nil {
		return Table{}, err
	}
	if !exists {
		return Table{}, invalidf("table %s does not exist on the coordinator; create it there first (it stays as the empty parent of its shards)", display)
	}
	cl, err := c.Snapshot(ctx, SnapshotOptions{SkipSizes: true})
	if err != nil {
		return Table{}, err
	}
	if _, err := cl.Table(schema + "." + rel); err == nil {
		return Table{}, invalidf("table %s is already distributed", display)
	}
	var attnum int
	var typ uint32
	var typmod int32
	var coll uint32
	var typName string
	err = c.pool.QueryRow(ctx, `SELECT attnum, atttypid, atttypmod, attcollation, format_type(atttypid, NULL)
		FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2 AND attnum > 0 AND NOT attisdropped`,
		qualified, opts.Column).Scan(&attnum, &typ, &typmod, &coll, &typName)
	if errors.Is(err, pgx.ErrNoRows) {
		return Table{}, invalidf("table %s has no column %q to distribute on", display, opts.Column)
	}
	if err != nil {
		return Table{}, err
	}
	if _, err := HashValue(typName, sampleOf(typName)); err != nil {
		return Table{}, err
	}
	var hasRows bool
	if err := c.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+qualified+")").Scan(&hasRows); err != nil {
		return Table{}, err
	}
	if hasRows {
		return Table{}, invalidf("table %s on the coordinator is not empty; distribute it while empty, then load through shardmover", display)
	}
	var hasKey bool
	if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p')
		OR (SELECT relreplident = 'f' FROM pg_class WHERE oid = $1::regclass)`, qualified).Scan(&hasKey); err != nil {
		return Table{}, err
	}
	if !hasKey {
		return Table{}, invalidf("table %s has no primary key; add one (or set REPLICA IDENTITY FULL) so its shards can be moved online", display)
	}

	// Colocation.
	colocID := int32(0)
	var follow *Table
	switch strings.ToLower(opts.ColocateWith) {
	case "none":
	case "", "default":
		for _, t := range cl.Tables {
			if t.ColumnType == typName && (opts.ShardCount == 0 || t.ShardCount == opts.ShardCount) {
				tt := t
				follow = &tt
				break
			}
		}
	default:
		t, err := cl.Table(opts.ColocateWith)
		if err != nil {
			return Table{}, invalidf("--colocate-with %s is not a distributed table", opts.ColocateWith)
		}
		if t.ColumnType != typName {
			return Table{}, invalidf("cannot colocate %s with %s: distribution column types differ (%s vs %s)", display, t.DisplayName(), typName, t.ColumnType)
		}
		if opts.ShardCount != 0 && opts.ShardCount != t.ShardCount {
			return Table{}, invalidf("cannot colocate %s with %s: it has %d shards, not %d; omit --shards", display, t.DisplayName(), t.ShardCount, opts.ShardCount)
		}
		follow = &t
	}
	shardCount := opts.ShardCount
	if follow != nil {
		colocID = follow.ColocationID
		shardCount = follow.ShardCount
	}
	if shardCount == 0 {
		shardCount = 32
	}
	ranges, err := HashRanges(shardCount)
	if err != nil {
		return Table{}, err
	}

	// Placement per shard index.
	groupFor := make([]int32, shardCount)
	if follow != nil {
		for _, s := range cl.TableShards(*follow) {
			p, ok := cl.PlacementOf(s.ID)
			if !ok {
				return Table{}, fmt.Errorf("shard %d of %s has no placement; the catalog is inconsistent", s.ID, follow.DisplayName())
			}
			groupFor[s.Index] = p.GroupID
		}
	} else {
		var workers []Node
		for _, n := range cl.Nodes {
			if n.IsActive && n.ShouldHaveShards && !n.IsCoordinator() && n.Role == "primary" {
				workers = append(workers, n)
			}
		}
		if len(workers) == 0 {
			return Table{}, invalidf("no active worker may hold shards; add one with `shardmover node add host:port`")
		}
		sort.Slice(workers, func(i, j int) bool {
			if workers[i].Host != workers[j].Host {
				return workers[i].Host < workers[j].Host
			}
			return workers[i].Port < workers[j].Port
		})
		for i := range groupFor {
			groupFor[i] = workers[i%len(workers)].GroupID
		}
	}

	ddl, err := ReadTableDDL(ctx, c.pool, pgx.Identifier{schema, rel})
	if err != nil {
		return Table{}, err
	}

	// Reserve shard ids, then create shard tables on workers, then write the
	// catalog in one transaction. If the catalog write fails the shard tables
	// are dropped again.
	ids := make([]int64, shardCount)
	for i := range ids {
		if err := c.pool.QueryRow(ctx, "SELECT nextval('shardmover_catalog.pg_dist_shardid_seq')").Scan(&ids[i]); err != nil {
			return Table{}, err
		}
	}
	created := map[int32][]pgx.Identifier{}
	dropCreated := func() {
		for gid, idents := range created {
			n, ok := cl.NodeByGroup(gid)
			if !ok {
				continue
			}
			conn, err := c.ConnectNode(ctx, n.Host, n.Port)
			if err != nil {
				continue
			}
			for _, id := range idents {
				_, _ = pgsql.ExecOne(ctx, conn, "DROP TABLE IF EXISTS "+id.Sanitize())
			}
			conn.Close(ctx)
		}
	}
	byGroup := map[int32][]int{}
	var gids []int32
	for i, g := range groupFor {
		if _, ok := byGroup[g]; !ok {
			gids = append(gids, g)
		}
		byGroup[g] = append(byGroup[g], i)
	}
	for _, gid := range gids {
		n, ok := cl.NodeByGroup(gid)
		if !ok {
			dropCreated()
			return Table{}, fmt.Errorf("node group %d has no node", gid)
		}
		if err := c.createShardTables(ctx, n, schema, rel, ddl, ids, byGroup[gid], created); err != nil {
			dropCreated()
			return Table{}, err
		}
	}
	err = c.tx(ctx, func(tx pgx.Tx) error {
		if colocID == 0 {
			if err := tx.QueryRow(ctx, "SELECT nextval('shardmover_catalog.pg_dist_colocationid_seq')").Scan(&colocID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO shardmover_catalog.pg_dist_colocation
				(colocationid, shardcount, replicationfactor, distributioncolumntype, distributioncolumncollation)
				VALUES ($1, $2, 1, $3::oid::regtype, $4)`, colocID, shardCount, typ, coll); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO shardmover_catalog.pg_dist_partition
			(logicalrelid, partmethod, partkey, colocationid, repmodel, autoconverted)
			VALUES ($1::regclass, 'h', $2, $3, 's', false)`, qualified, partkeyVar(attnum, typ, typmod, coll), colocID); err != nil {
			return err
		}
		for i, id := range ids {
			if _, err := tx.Exec(ctx, `INSERT INTO shardmover_catalog.pg_dist_shard
				(logicalrelid, shardid, shardstorage, shardminvalue, shardmaxvalue)
				VALUES ($1::regclass, $2, 't', $3, $4)`, qualified, id,
				strconv.Itoa(int(ranges[i].Min)), strconv.Itoa(int(ranges[i].Max))); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO shardmover_catalog.pg_dist_placement
				(shardid, shardstate, shardlength, groupid) VALUES ($1, 1, 0, $2)`, id, groupFor[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		dropCreated()
		return Table{}, fmt.Errorf("write catalogs for %s: %w", display, err)
	}
	return Table{Schema: schema, Name: rel, Method: "h", Column: opts.Column, ColumnAttNum: attnum,
		ColumnType: typName, ColumnTypeID: typ, ColocationID: colocID, ShardCount: shardCount}, nil
}

func (c *Catalog) createShardTables(ctx context.Context, n Node, schema, rel string, ddl TableDDL, ids []int64, idx []int, created map[int32][]pgx.Identifier) error {
	conn, err := c.ConnectNode(ctx, n.Host, n.Port)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := RunDDL(ctx, conn, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema on %s: %w", n.Addr(), err)
	}
	for _, i := range idx {
		id := strconv.FormatInt(ids[i], 10)
		target := pgx.Identifier{schema, rel + "_" + id}
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2)`, target[0], target[1]).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return invalidf("shard table %s already exists on %s; drop it or check the catalogs", target.Sanitize(), n.Addr())
		}
		created[n.GroupID] = append(created[n.GroupID], target)
		stmts := append([]string{ddl.CreateStatement(target, id, NewShard)}, ddl.IndexStatements(target, id)...)
		if err := RunDDL(ctx, conn, stmts...); err != nil {
			return fmt.Errorf("create shard %s on %s: %w", target.Sanitize(), n.Addr(), err)
		}
	}
	return nil
}

func sampleOf(typName string) any {
	switch typName {
	case "smallint":
		return int16(0)
	case "integer":
		return int32(0)
	case "bigint":
		return int64(0)
	}
	return ""
}
