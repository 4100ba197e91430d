package metadata

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// compatDDL creates the compat catalogs with Citus 13's table names, column
// names and types. Every statement is idempotent. Beyond Citus, the compat
// placement table has a unique index on shardid: shardmover keeps one
// placement per shard, and the database enforces it.
var compatDDL = []string{
	`CREATE SCHEMA IF NOT EXISTS shardmover_catalog`,
	`DO $$ BEGIN
		CREATE TYPE shardmover_catalog.noderole AS ENUM ('primary', 'secondary', 'unavailable');
	EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
	`CREATE SEQUENCE IF NOT EXISTS shardmover_catalog.pg_dist_node_nodeid_seq MINVALUE 1 START 1`,
	`CREATE SEQUENCE IF NOT EXISTS shardmover_catalog.pg_dist_groupid_seq MINVALUE 1 START 1`,
	`CREATE SEQUENCE IF NOT EXISTS shardmover_catalog.pg_dist_shardid_seq MINVALUE 102008 START 102008`,
	`CREATE SEQUENCE IF NOT EXISTS shardmover_catalog.pg_dist_placement_placementid_seq MINVALUE 1 START 1`,
	`CREATE SEQUENCE IF NOT EXISTS shardmover_catalog.pg_dist_colocationid_seq MINVALUE 1 START 1`,
	`CREATE TABLE IF NOT EXISTS shardmover_catalog.pg_dist_node (
		nodeid integer NOT NULL DEFAULT nextval('shardmover_catalog.pg_dist_node_nodeid_seq') PRIMARY KEY,
		groupid integer NOT NULL DEFAULT nextval('shardmover_catalog.pg_dist_groupid_seq'),
		nodename text NOT NULL,
		nodeport integer NOT NULL DEFAULT 5432,
		noderack text NOT NULL DEFAULT 'default',
		hasmetadata boolean NOT NULL DEFAULT false,
		isactive boolean NOT NULL DEFAULT true,
		noderole shardmover_catalog.noderole NOT NULL DEFAULT 'primary',
		nodecluster name NOT NULL DEFAULT 'default',
		metadatasynced boolean NOT NULL DEFAULT false,
		shouldhaveshards boolean NOT NULL DEFAULT true,
		UNIQUE (nodename, nodeport, nodecluster)
	)`,
	`CREATE TABLE IF NOT EXISTS shardmover_catalog.pg_dist_partition (
		logicalrelid regclass NOT NULL PRIMARY KEY,
		partmethod "char" NOT NULL,
		partkey text,
		colocationid integer NOT NULL DEFAULT 0,
		repmodel "char" NOT NULL DEFAULT 's',
		autoconverted boolean DEFAULT false
	)`,
	`CREATE TABLE IF NOT EXISTS shardmover_catalog.pg_dist_shard (
		logicalrelid regclass NOT NULL,
		shardid bigint NOT NULL PRIMARY KEY,
		shardstorage "char" NOT NULL,
		shardminvalue text,
		shardmaxvalue text
	)`,
	`CREATE INDEX IF NOT EXISTS pg_dist_shard_logical_relid_index ON shardmover_catalog.pg_dist_shard (logicalrelid)`,
	`CREATE TABLE IF NOT EXISTS shardmover_catalog.pg_dist_placement (
		placementid bigint NOT NULL DEFAULT nextval('shardmover_catalog.pg_dist_placement_placementid_seq') PRIMARY KEY,
		shardid bigint NOT NULL,
		shardstate integer NOT NULL,
		shardlength bigint NOT NULL,
		groupid integer NOT NULL
	)`,
	`CREATE UNIQUE INDEX IF NOT EXISTS pg_dist_placement_one_per_shard ON shardmover_catalog.pg_dist_placement (shardid)`,
	`CREATE INDEX IF NOT EXISTS pg_dist_placement_groupid_index ON shardmover_catalog.pg_dist_placement (groupid)`,
	// Changes to the node catalog are announced on NodeChannel, so a
	// daemon notices an added node at once instead of at its next poll.
	`CREATE OR REPLACE FUNCTION shardmover_catalog.notify_node_change() RETURNS trigger
		LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('` + NodeChannel + `', ''); RETURN NULL; END $$`,
	`CREATE OR REPLACE TRIGGER shardmover_node_change AFTER INSERT OR UPDATE OR DELETE
		ON shardmover_catalog.pg_dist_node FOR EACH STATEMENT EXECUTE FUNCTION shardmover_catalog.notify_node_change()`,
	`CREATE TABLE IF NOT EXISTS shardmover_catalog.pg_dist_colocation (
		colocationid integer NOT NULL PRIMARY KEY,
		shardcount integer NOT NULL,
		replicationfactor integer NOT NULL,
		distributioncolumntype regtype NOT NULL,
		distributioncolumncollation oid NOT NULL
	)`,
}

// Install creates the compat catalogs and the journal (idempotent) and
// registers the coordinator as group 0 with shouldhaveshards = false, as
// Citus's citus_set_coordinator_host does. On a citus cluster it only
// installs the journal.
func (c *Catalog) Install(ctx context.Context) (err error) {
	if c.flavor == Citus {
		return c.InstallJournal(ctx)
	}
	// Installed at this version already (installed.go): the coordinator was
	// registered in the same transaction.
	want := map[string]string{partCompat: compatVersion, partJournal: journalVersion}
	if c.installedAlready(ctx, want) {
		return nil
	}
	defer func() {
		if err == nil {
			c.recordInstalled(ctx, want)
		}
	}()
	cfg := c.pool.Config().ConnConfig
	return c.tx(ctx, func(tx pgx.Tx) error {
		for _, stmt := range append(append([]string(nil), compatDDL...), journalDDL...) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("install catalogs: %w", err)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO shardmover_catalog.pg_dist_node
			(groupid, nodename, nodeport, hasmetadata, isactive, metadatasynced, shouldhaveshards)
			SELECT 0, $1, $2, true, true, true, false
			WHERE NOT EXISTS (SELECT 1 FROM shardmover_catalog.pg_dist_node WHERE groupid = 0)`,
			cfg.Host, int(cfg.Port))
		if err != nil {
			return fmt.Errorf("register coordinator: %w", err)
		}
		return nil
	})
}

// Installed reports whether the catalogs exist. It reads pg_class, which
// every role may: whether the role may use the catalogs is another matter,
// answered where they are read.
func (c *Catalog) Installed(ctx context.Context) (bool, error) {
	if c.flavor == Citus {
		return true, nil
	}
	var ok bool
	err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'pg_dist_node')`, compatSchema).Scan(&ok)
	return ok, err
}

// ErrNotCluster marks a database that is not a cluster's coordinator: it
// has neither the citus extension nor shardmover's compat catalogs. Such
// an error also matches ErrInvalid (nothing was changed).
var ErrNotCluster = errors.New("not a cluster")

type notClusterError struct{ msg string }

func (e *notClusterError) Error() string { return e.msg }
func (e *notClusterError) Is(target error) bool {
	return target == ErrNotCluster || target == ErrInvalid
}

// RequireCluster refuses, with ErrNotCluster and one sentence, a database
// that is not a cluster's coordinator: neither Citus (the extension) nor
// compat (shardmover_catalog installed). Every command but the ones that
// make a compat cluster (Install, through AddNode) checks it before it
// creates anything, so pointing shardmover at the wrong database creates
// nothing there.
func (c *Catalog) RequireCluster(ctx context.Context) error { return c.requireInstalled(ctx) }

// requireInstalled turns a missing catalog into one clear sentence.
func (c *Catalog) requireInstalled(ctx context.Context) error {
	ok, err := c.Installed(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return &notClusterError{msg: fmt.Sprintf("%s is not a cluster's coordinator: it has no citus extension and no shardmover catalogs (schema %s); point --coordinator at a coordinator, or make this database a compat coordinator by registering a worker with `shardmover node add host:port`", c.CoordinatorAddr(), compatSchema)}
	}
	return nil
}

// partkeyVar renders a distribution column as Citus stores it in
// pg_dist_partition.partkey: a serialized Var node.
func partkeyVar(attnum int, typ uint32, typmod int32, collation uint32) string {
	return "{VAR :varno 1 :varattno " + strconv.Itoa(attnum) +
		" :vartype " + strconv.FormatUint(uint64(typ), 10) +
		" :vartypmod " + strconv.Itoa(int(typmod)) +
		" :varcollid " + strconv.FormatUint(uint64(collation), 10) +
		" :varnullingrels (b) :varlevelsup 0 :varnosyn 1 :varattnosyn " + strconv.Itoa(attnum) +
		" :location -1}"
}

// ParsePartkey reads the column number from a serialized Var node.
func ParsePartkey(s string) (int, error) {
	const key = ":varattno "
	i := strings.Index(s, key)
	if i < 0 {
		return 0, fmt.Errorf("partkey %q has no :varattno", s)
	}
	j := i + len(key)
	k := j
	for k < len(s) && (s[k] == '-' || (s[k] >= '0' && s[k] <= '9')) {
		k++
	}
	n, err := strconv.Atoi(s[j:k])
	if err != nil {
		return 0, fmt.Errorf("partkey %q: bad :varattno: %w", s, err)
	}
	return n, nil
}
