package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardmover/shardmover/metadata"
)

// Metadata is what the router needs from metadata.Catalog.
type Metadata interface {
	Snapshot(ctx context.Context, opts metadata.SnapshotOptions) (*metadata.Cluster, error)
	NodeSettings(host string, port int) metadata.ConnSettings
}

// Router routes statements to shard placements (docs/design.md section 7).
type Router struct {
	md Metadata

	mu       sync.Mutex
	cl       *metadata.Cluster
	pools    map[string]*pgxpool.Pool
	maxConns int32

	refreshes atomic.Int64
	retries   atomic.Int64
}

// NewRouter loads the metadata once and returns a router. maxConns bounds
// the connections per node.
func NewRouter(ctx context.Context, md Metadata, maxConns int32) (*Router, error) {
	if maxConns < 1 {
		maxConns = 4
	}
	r := &Router{md: md, pools: map[string]*pgxpool.Pool{}, maxConns: maxConns}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Refresh reloads the metadata snapshot.
func (r *Router) Refresh(ctx context.Context) error {
	cl, err := r.md.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.cl = cl
	r.mu.Unlock()
	r.refreshes.Add(1)
	return nil
}

// Cluster returns the cached snapshot.
func (r *Router) Cluster() *metadata.Cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cl
}

// Stats reports how often the router refreshed and retried.
func (r *Router) Stats() (refreshes, retries int64) { return r.refreshes.Load(), r.retries.Load() }

// Close closes every node pool.
func (r *Router) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pools {
		p.Close()
	}
	r.pools = map[string]*pgxpool.Pool{}
}

// Target is where one statement goes.
type Target struct {
	Shard metadata.Shard
	Node  metadata.Node
	Pool  *pgxpool.Pool
}

// Route finds the shard and node for value v of table.
func (r *Router) Route(ctx context.Context, table string, v any) (Target, error) {
	cl := r.Cluster()
	t, err := cl.Table(table)
	if err != nil {
		return Target{}, err
	}
	sh, err := cl.ShardFor(t, v)
	if err != nil {
		return Target{}, err
	}
	p, ok := cl.PlacementOf(sh.ID)
	if !ok {
		return Target{}, fmt.Errorf("shard %d has no placement", sh.ID)
	}
	n, ok := cl.NodeByGroup(p.GroupID)
	if !ok {
		return Target{}, fmt.Errorf("shard %d is placed on group %d, which has no node", sh.ID, p.GroupID)
	}
	pool, err := r.pool(ctx, n)
	if err != nil {
		return Target{}, err
	}
	return Target{Shard: sh, Node: n, Pool: pool}, nil
}

func (r *Router) pool(ctx context.Context, n metadata.Node) (*pgxpool.Pool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pools[n.Addr()]; ok {
		return p, nil
	}
	cfg, err := pgxpool.ParseConfig(r.md.NodeSettings(n.Host, n.Port).String())
	if err != nil {
		return nil, fmt.Errorf("node %s: bad connection settings", n.Addr())
	}
	cfg.MaxConns = r.maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = "shardmover-workload"
	// No cached prepared statements: every statement resolves shard names
	// afresh, which the routing contract relies on.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", n.Addr(), err)
	}
	r.pools[n.Addr()] = p
	return p, nil
}

// IsUndefinedTable reports SQLSTATE 42P01.
func IsUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// Do runs fn against the placement of value v of table. On undefined_table
// it refreshes the metadata and retries, up to maxAttempts times in all,
// backing off a little between attempts: a cutover renames the old shard
// before metadata flips, so a retry may briefly see the old placement.
func (r *Router) Do(ctx context.Context, table string, v any, fn func(ctx context.Context, t Target) error) error {
	const maxAttempts = 50
	backoff := 5 * time.Millisecond
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var t Target
		t, err = r.Route(ctx, table, v)
		if err != nil {
			return err
		}
		err = fn(ctx, t)
		if !IsUndefinedTable(err) {
			return err
		}
		r.retries.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		if backoff < 200*time.Millisecond {
			backoff *= 2
		}
		if rerr := r.Refresh(ctx); rerr != nil {
			return rerr
		}
	}
	return fmt.Errorf("shard for %s still missing after %d metadata refreshes: %w", table, maxAttempts, err)
}
