package workload

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/jackc/pgx/v5"
)

// LoadOptions describes a bulk load.
type LoadOptions struct {
	Seed   uint64
	Users  int64
	Events int64
	// ChunkRows is how many rows are generated, routed and copied at a time.
	ChunkRows int
	// Progress, when set, is called after every chunk.
	Progress func(table string, done, total int64)
}

// DefaultLoadOptions loads a small data set.
func DefaultLoadOptions() LoadOptions {
	return LoadOptions{Seed: 1, Users: 1000, Events: 10000, ChunkRows: 20000}
}

// LoadResult counts what was loaded.
type LoadResult struct {
	Users, Events int64
}

type chunk struct {
	table string
	rows  []routedRow
	done  int64
}

type routedRow struct {
	userID int64
	values []any
}

// Load generates users and events and copies them in with binary COPY.
// On compat it copies straight into the shard tables where the metadata
// places them (one stream per shard and chunk); on Citus it copies each
// chunk into the distributed table through the coordinator, which routes
// the rows. The same seed gives the same rows on both flavors. Generation
// runs ahead of copying by one chunk.
func Load(ctx context.Context, r *Router, opts LoadOptions) (LoadResult, error) {
	if opts.ChunkRows <= 0 {
		opts.ChunkRows = DefaultLoadOptions().ChunkRows
	}
	if opts.Users < 1 {
		return LoadResult{}, fmt.Errorf("--users must be at least 1, got %d", opts.Users)
	}
	if opts.Events < 0 {
		return LoadResult{}, fmt.Errorf("--events must not be negative, got %d", opts.Events)
	}
	g := NewGenerator(opts.Seed, opts.Users)
	chunks := make(chan chunk, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(chunks)
		emit := func(c chunk) bool {
			select {
			case chunks <- c:
				return true
			case <-ctx.Done():
				return false
			}
		}
		var rows []routedRow
		for id := int64(1); id <= opts.Users; id++ {
			u := g.User(id)
			rows = append(rows, routedRow{id, u.Values()})
			if len(rows) == opts.ChunkRows || id == opts.Users {
				if !emit(chunk{UsersTable, rows, id}) {
					return
				}
				rows = nil
			}
		}
		for id := int64(1); id <= opts.Events; id++ {
			e := g.Event(id)
			rows = append(rows, routedRow{e.UserID, e.Values()})
			if len(rows) == opts.ChunkRows || id == opts.Events {
				if !emit(chunk{EventsTable, rows, id}) {
					return
				}
				rows = nil
			}
		}
	}()
	var res LoadResult
	for c := range chunks {
		if err := copyChunk(ctx, r, c); err != nil {
			return res, err
		}
		total := opts.Users
		if c.table == UsersTable {
			res.Users = c.done
		} else {
			res.Events = c.done
			total = opts.Events
		}
		if opts.Progress != nil {
			opts.Progress(c.table, c.done, total)
		}
	}
	return res, ctx.Err()
}

func copyChunk(ctx context.Context, r *Router, c chunk) error {
	if r.citus() {
		return copyThroughCitus(ctx, r, c)
	}
	type bucket struct {
		t    Target
		rows [][]any
	}
	buckets := map[int64]*bucket{}
	for _, row := range c.rows {
		t, err := r.Route(ctx, c.table, row.userID)
		if err != nil {
			return err
		}
		b, ok := buckets[t.Shard.ID]
		if !ok {
			b = &bucket{t: t}
			buckets[t.Shard.ID] = b
		}
		b.rows = append(b.rows, row.values)
	}
	ids := make([]int64, 0, len(buckets))
	for id := range buckets {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	cols := columnsOf(c.table)
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	sem := make(chan struct{}, 4)
	for _, id := range ids {
		b := buckets[id]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := b.t.Pool.CopyFrom(ctx, b.t.Shard.Ident(), cols, pgx.CopyFromRows(b.rows))
			if err != nil {
				errs <- fmt.Errorf("copy into %s on %s: %w", b.t.Shard.Name(), b.t.Node.Addr(), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func columnsOf(table string) []string {
	if table == EventsTable {
		return EventColumns
	}
	return UserColumns
}

// copyThroughCitus copies a chunk into the distributed table through the
// coordinator.
func copyThroughCitus(ctx context.Context, r *Router, c chunk) error {
	t, err := r.Cluster().Table(c.table)
	if err != nil {
		return err
	}
	coord, err := r.Entry(Coordinator)
	if err != nil {
		return err
	}
	pool, err := r.pool(ctx, coord)
	if err != nil {
		return err
	}
	rows := make([][]any, len(c.rows))
	for i, row := range c.rows {
		rows[i] = row.values
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{t.Schema, t.Name}, columnsOf(c.table), pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("copy into %s through the Citus coordinator %s: %w", t.DisplayName(), coord.Addr(), err)
	}
	return nil
}
