package workload

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardmover/shardmover/metadata"
)

// Table names of the GitHub data set.
const (
	UsersTable  = "github_users"
	EventsTable = "github_events"
)

const usersDDL = `CREATE TABLE IF NOT EXISTS github_users (
	user_id bigint PRIMARY KEY,
	login text NOT NULL,
	display_login text,
	url text,
	avatar_url text,
	gravatar_id text,
	created_at timestamp NOT NULL
)`

const eventsDDL = `CREATE TABLE IF NOT EXISTS github_events (
	event_id bigint NOT NULL,
	event_type text NOT NULL,
	event_public boolean NOT NULL,
	repo_id bigint,
	payload jsonb,
	repo jsonb,
	user_id bigint NOT NULL,
	org jsonb,
	created_at timestamp NOT NULL,
	PRIMARY KEY (user_id, event_id)
)`

const eventsIndex = `CREATE INDEX IF NOT EXISTS github_events_event_type ON github_events (event_type)`

// Distributor is the part of metadata.Catalog that Setup needs.
type Distributor interface {
	Pool() *pgxpool.Pool
	Snapshot(ctx context.Context, opts metadata.SnapshotOptions) (*metadata.Cluster, error)
	CreateDistributedTable(ctx context.Context, opts metadata.DistributeOptions) (metadata.Table, error)
}

// Setup creates github_users and github_events on the coordinator and
// distributes them by user_id with the given shard count, colocated. Tables
// already distributed are left as they are. On compat it distributes with
// cat.CreateDistributedTable; on Citus (the flavor of cat's snapshot) with
// Citus's own create_distributed_table (CitusDistribute).
func Setup(ctx context.Context, cat Distributor, shards int) error {
	// Refuse before creating anything when no worker can take shards.
	before, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	if err != nil {
		return err
	}
	if _, err := before.Table(EventsTable); err != nil && !hasShardWorker(before) {
		add := "`shardmover node add host:port`"
		if before.Flavor == metadata.Citus {
			add = "citus_add_node"
		}
		return fmt.Errorf("%w: the cluster has no active worker that may hold shards; add one with %s (or `shardmover sandbox add-node`)", metadata.ErrInvalid, add)
	}
	for _, stmt := range []string{usersDDL, eventsDDL, eventsIndex} {
		if _, err := cat.Pool().Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create github tables on the coordinator: %w", err)
		}
	}
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	if err != nil {
		return err
	}
	for _, spec := range []metadata.DistributeOptions{
		{Table: UsersTable, Column: "user_id", ShardCount: shards, ColocateWith: "none"},
		{Table: EventsTable, Column: "user_id", ColocateWith: UsersTable},
	} {
		if _, err := cl.Table(spec.Table); err == nil {
			continue
		} else if !errors.Is(err, metadata.ErrNotFound) {
			return err
		}
		if cl.Flavor == metadata.Citus {
			err = CitusDistribute(ctx, cat.Pool(), spec)
		} else {
			_, err = cat.CreateDistributedTable(ctx, spec)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// CitusDistribute distributes an existing table with Citus's
// create_distributed_table on the coordinator pool: opts.Table by
// opts.Column, colocated with opts.ColocateWith ("" is Citus's "default",
// "none" a new colocation group), with opts.ShardCount shards when it is
// positive (otherwise Citus's citus.shard_count or the colocated table's).
func CitusDistribute(ctx context.Context, coordinator *pgxpool.Pool, opts metadata.DistributeOptions) error {
	colocate := opts.ColocateWith
	if colocate == "" {
		colocate = "default"
	}
	var err error
	if opts.ShardCount > 0 {
		_, err = coordinator.Exec(ctx, `SELECT create_distributed_table($1::text::regclass, $2, colocate_with := $3, shard_count := $4)`,
			opts.Table, opts.Column, colocate, opts.ShardCount)
	} else {
		_, err = coordinator.Exec(ctx, `SELECT create_distributed_table($1::text::regclass, $2, colocate_with := $3)`,
			opts.Table, opts.Column, colocate)
	}
	if err != nil {
		return fmt.Errorf("create_distributed_table(%s, %s): %w", opts.Table, opts.Column, err)
	}
	return nil
}

func hasShardWorker(cl *metadata.Cluster) bool {
	for _, n := range cl.Nodes {
		if n.IsActive && n.ShouldHaveShards && !n.IsCoordinator() {
			return true
		}
	}
	return false
}
