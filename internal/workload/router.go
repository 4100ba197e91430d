package workload

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardmover/shardmover/internal/pgerr"
	"github.com/shardmover/shardmover/metadata"
)

// Metadata is what the router needs from metadata.Catalog.
type Metadata interface {
	Snapshot(ctx context.Context, opts metadata.SnapshotOptions) (*metadata.Cluster, error)
	NodeSettings(host string, port int) metadata.ConnSettings
}

// Router sends the workload's statements. On a compat cluster it routes
// them to shard placements itself (docs/design.md section 7); on a Citus
// cluster it sends plain SQL on the distributed tables to the node a client
// is assigned to (the coordinator or a metadata-synced worker), and Citus
// routes. The flavor is the catalog's, read when the router is made.
type Router struct {
	md     Metadata
	flavor metadata.Flavor

	mu       sync.Mutex
	cl       *metadata.Cluster
	pools    map[string]*pgxpool.Pool
	maxConns int32

	refreshes atomic.Int64
	retries   atomic.Int64
}

// NewRouter loads the metadata once and returns a router for the cluster's
// flavor: a compat router routes by the metadata, a Citus router lets Citus
// route. maxConns bounds the connections per node.
func NewRouter(ctx context.Context, md Metadata, maxConns int32) (*Router, error) {
	if maxConns < 1 {
		maxConns = 4
	}
	r := &Router{md: md, pools: map[string]*pgxpool.Pool{}, maxConns: maxConns}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	r.flavor = r.Cluster().Flavor
	return r, nil
}

// Flavor is the flavor of the cluster the router was made for.
func (r *Router) Flavor() metadata.Flavor { return r.flavor }

// citus reports whether Citus routes the statements.
func (r *Router) citus() bool { return r.flavor == metadata.Citus }

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
	// Shard is the shard holding the value as the cached metadata names
	// it. On compat the statement runs on it; on Citus it is for reports
	// only (Citus routes by its own, current metadata).
	Shard metadata.Shard
	// Node is the node the statement is sent to: the shard's placement on
	// compat, the client's entry node on Citus.
	Node metadata.Node
	Pool *pgxpool.Pool
	// Rel is the relation the statement names: the shard table on compat
	// (Shard.Ident()), the distributed table on Citus.
	Rel pgx.Identifier
}

// Coordinator is the entry used by Route and Do on Citus.
const Coordinator = -1

// Entry returns the node client c sends its statements to on Citus: even
// clients use the coordinator, odd clients the metadata-synced workers in
// turn (client 1 the first worker, client 3 the second, ...). Coordinator
// (or a cluster without such a worker) gives the coordinator. On compat
// there is no entry node: statements go where the metadata places the row.
func (r *Router) Entry(c int) (metadata.Node, error) {
	cl := r.Cluster()
	var coord metadata.Node
	var workers []metadata.Node
	found := false
	for _, n := range cl.Nodes {
		if n.Role != "" && n.Role != "primary" || !n.IsActive {
			continue
		}
		switch {
		case n.IsCoordinator():
			coord, found = n, true
		case n.HasMetadata && n.MetadataSynced:
			workers = append(workers, n)
		}
	}
	if !found {
		return metadata.Node{}, fmt.Errorf("the node catalog has no active coordinator (group 0)")
	}
	if c < 0 || c%2 == 0 || len(workers) == 0 {
		return coord, nil
	}
	sort.Slice(workers, func(i, j int) bool { return workers[i].GroupID < workers[j].GroupID })
	return workers[(c/2)%len(workers)], nil
}

// Route finds the shard and node for value v of table. On Citus the node
// is the coordinator; see Entry.
func (r *Router) Route(ctx context.Context, table string, v any) (Target, error) {
	return r.route(ctx, Coordinator, table, v)
}

func (r *Router) route(ctx context.Context, entry int, table string, v any) (Target, error) {
	cl := r.Cluster()
	t, err := cl.Table(table)
	if err != nil {
		return Target{}, err
	}
	sh, err := cl.ShardFor(t, v)
	if err != nil {
		return Target{}, err
	}
	if r.citus() {
		n, err := r.Entry(entry)
		if err != nil {
			return Target{}, err
		}
		pool, err := r.pool(ctx, n)
		if err != nil {
			return Target{}, err
		}
		return Target{Shard: sh, Node: n, Pool: pool, Rel: pgx.Identifier{t.Schema, t.Name}}, nil
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
	return Target{Shard: sh, Node: n, Pool: pool, Rel: sh.Ident()}, nil
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
func IsUndefinedTable(err error) bool { return pgerr.IsUndefinedTable(err) }

// Do runs fn against the placement of value v of table (on Citus: through
// the coordinator). On compat, on undefined_table it refreshes the metadata
// and retries, up to maxAttempts times in all, backing off a little between
// attempts: a cutover renames the old shard before metadata flips, so a
// retry may briefly see the old placement (the routing contract, section 7
// of docs/design.md). On Citus it never retries: Citus routes, and an
// application on Citus sees every error its statement gets, so the
// workload does too.
func (r *Router) Do(ctx context.Context, table string, v any, fn func(ctx context.Context, t Target) error) error {
	return r.do(ctx, Coordinator, table, v, fn)
}

func (r *Router) do(ctx context.Context, entry int, table string, v any, fn func(ctx context.Context, t Target) error) error {
	const maxAttempts = 50
	backoff := 5 * time.Millisecond
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var t Target
		t, err = r.route(ctx, entry, table, v)
		if err != nil {
			return err
		}
		err = fn(ctx, t)
		if r.citus() || !IsUndefinedTable(err) {
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
