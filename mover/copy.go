package mover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
	"go.uber.org/zap"
)

// The phases that build the target: setup (tables, publication, slot),
// copying and indexing (docs/design.md 5).

// connectBoth returns one session on the source and one on the target,
// opened at once or reused from the engine's earlier steps; give them back
// with releaseBoth.
func (r *run) connectBoth(ctx context.Context) (*pgx.Conn, *pgx.Conn, error) {
	src, dst, serr, derr := r.e.sessionPair(ctx, r.source, r.target)
	if err := errors.Join(serr, derr); err != nil {
		r.e.release(r.source, src, &err)
		r.e.release(r.target, dst, &err)
		return nil, nil, err
	}
	// On Citus the target session builds shard tables as Citus's own
	// shard transfers do (docs/design.md 3), under the name of Citus's
	// rebalancer until releaseBoth names it back.
	if r.citus() {
		if err := metadata.ActAsCitusRebalancer(ctx, dst); err != nil {
			r.e.release(r.source, src, &err)
			r.e.release(r.target, dst, &err)
			return nil, nil, err
		}
	}
	return src, dst, nil
}

// releaseBoth gives back the sessions of connectBoth: for reuse when the
// step ended without error (*errp nil), closed otherwise. On Citus the
// target session is named back first (RESET application_name, which Citus
// follows: the session is an ordinary client again); one that cannot be is
// closed, never pooled under the rebalancer's name (preflight would take
// it for Citus's own rebalancer at work).
func (r *run) releaseBoth(src, dst *pgx.Conn, errp *error) {
	r.e.release(r.source, src, errp)
	if !r.citus() || dst == nil {
		r.e.release(r.target, dst, errp)
		return
	}
	var err error
	if errp != nil {
		err = *errp
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), sessionCheck)
		_, err = dst.Exec(ctx, "RESET application_name")
		cancel()
	}
	r.e.release(r.target, dst, &err)
}

// setup creates the target tables, the publication and the slot with its
// exported snapshot. Anything a crashed earlier attempt left is dropped
// first: every artifact was recorded before it was created.
func (r *run) setup(ctx context.Context, m metadata.Move) (err error) {
	sp := newSplits()
	defer sp.log(r.log, "setup timings")
	// The catalog side of preflight again: a move resumed after a restart
	// comes back here without preflight, and on Citus, Citus's own mover
	// may have moved the group meanwhile.
	if err := r.e.checkMoveable(ctx, m); err != nil {
		return err
	}
	if err := r.dropArtifacts(ctx, m, metadata.CleanupAlways, metadata.CleanupOnFailure); err != nil {
		return err
	}
	sp.mark("leftovers")
	// On Citus, reference tables first, as Citus does before a move.
	if err := r.e.cat.EnsureReferenceTables(ctx); err != nil {
		return err
	}
	sp.mark("reference_tables")
	// One session on each node (the source's reads the definitions: the
	// engine's most recently used one, whose plans are warm), and a second
	// one on the source below for the publication and the slot.
	src, dst, err := r.connectBoth(ctx)
	if err != nil {
		return err
	}
	defer r.releaseBoth(src, dst, &err)
	sp.mark("connect")
	tables := shardIdents(m)
	name := m.Name()
	// Every cleanup record of the setup is written before anything is
	// created: the target's tables (dropped if the move fails), the
	// publication, the origin and the slot. Meanwhile the source's
	// definitions are read (one batch for the whole group).
	recorded := make(chan struct{})
	var recErr error
	go func() {
		defer close(recorded)
		recErr = r.addCleanups(ctx, m, tables)
	}()
	// The publication and the slot (source) and the target's tables do not
	// depend on each other: both are made at once, and the copy starts
	// when both are there. (The publication comes before the slot: the
	// slot's decoding looks the publication up as of each change.) When
	// the target's side fails, the source's is stopped.
	sctx, stopSource := context.WithCancel(ctx)
	defer stopSource()
	var (
		snap    *replication.Snapshot
		srcErr  error
		srcDur  time.Duration
		srcDone = make(chan struct{})
	)
	go func() {
		defer close(srcDone)
		start := time.Now()
		defer func() { srcDur = time.Since(start) }()
		pubConn, err := r.e.session(sctx, r.source)
		if err != nil {
			srcErr = err
			return
		}
		defer r.e.release(r.source, pubConn, &srcErr)
		<-recorded
		if recErr != nil {
			return
		}
		snap, srcErr = r.createPublicationAndSlot(sctx, pubConn, m.ID, name, tables)
	}()
	tgtStart := time.Now()
	tgtErr := func() error {
		ddls, err := metadata.ReadTablesDDL(ctx, src, tables)
		sp.mark("read_ddl")
		<-recorded
		if err := errors.Join(err, recErr); err != nil {
			return err
		}
		sp.mark("record")
		// Each table's schema on the target, as on the source.
		schemas := map[string]bool{}
		for _, t := range tables {
			if !schemas[t[0]] {
				schemas[t[0]] = true
				if err := metadata.EnsureSchemaLike(ctx, src, dst, t[0]); err != nil {
					return fmt.Errorf("create schema %s on %s: %w", pgx.Identifier{t[0]}.Sanitize(), r.target.Addr(), err)
				}
			}
		}
		sp.mark("schemas")
		// A copy into the target begins: its last free-space measurement
		// no longer holds.
		r.e.disk.forget(r.target.Addr())
		err = r.createTargetTables(ctx, dst, tables, ddls)
		sp.mark("tables")
		return err
	}()
	tgtDur := time.Since(tgtStart)
	if tgtErr != nil {
		stopSource()
	}
	<-srcDone
	sp.mark("source_side_wait")
	sp.fields = append(sp.fields, zap.Duration("source_side", srcDur.Round(time.Millisecond)), zap.Duration("target_side", tgtDur.Round(time.Millisecond)))
	switch {
	case tgtErr != nil:
		_ = snap.Release(ctx) // a slot made meanwhile stays, recorded: the next setup drops it
		return tgtErr
	case recErr != nil:
		return recErr
	case srcErr != nil:
		return srcErr
	}
	r.snapshot = snap
	r.log.Info("slot created", zap.String("slot", name), zap.Stringer("lsn", snap.ConsistentLSN))
	if err := r.e.cat.SetProgress(ctx, m.ID, 0, 0, snap.ConsistentLSN.String(), ""); err != nil {
		return err
	}
	return r.changePhase(ctx, m, Setup, Copying, stepped, "slot "+name+" at "+snap.ConsistentLSN.String(), "")
}

// createTargetTables creates the group's tables on the target (session
// dst) from the source's definitions, then gives them the source's owner
// and privileges, so that the application reads and writes the moved
// shards as it did the old ones.
func (r *run) createTargetTables(ctx context.Context, dst *pgx.Conn, tables []pgx.Identifier, ddls []metadata.TableDDL) error {
	for i, t := range tables {
		// Identity columns are BY DEFAULT until the cutover's FinishStatements.
		if err := metadata.RunDDL(ctx, dst, ddls[i].CreateStatement(t, "", metadata.MoveTarget)); err != nil {
			return fmt.Errorf("create %s on %s: %w", t.Sanitize(), r.target.Addr(), err)
		}
	}
	// Statistics, comments, policies and triggers (disabled) before the
	// data, once every table of the group exists; the rest of what makes
	// them the same tables comes at the cutover (metadata/objects.go).
	for i, t := range tables {
		stmts, err := ddls[i].ObjectStatements(t, t)
		if err != nil {
			return permanent(err)
		}
		if err := metadata.RunDDL(ctx, dst, stmts...); err != nil {
			return fmt.Errorf("create the statistics, policies and triggers of %s on %s: %w", t.Sanitize(), r.target.Addr(), err)
		}
	}
	haves, err := metadata.ReadTablesPrivileges(ctx, dst, tables)
	if err != nil {
		return err
	}
	for i, t := range tables {
		if err := metadata.RunDDL(ctx, dst, ddls[i].PrivilegeStatements(t, haves[i])...); err != nil {
			return permanent(fmt.Errorf("give %s on %s the owner (%s) and privileges it has on the source: %w; the mover's role must be a member of the table's owner, and the owner needs CREATE on the schema there (docs/privileges.md)",
				t.Sanitize(), r.target.Addr(), ddls[i].Owner, err))
		}
	}
	return nil
}

// createPublicationAndSlot creates the publication on the source (session
// src), waits for the move's turn to copy, and creates the slot with its
// exported snapshot.
func (r *run) createPublicationAndSlot(ctx context.Context, src *pgx.Conn, id int64, name string, tables []pgx.Identifier) (*replication.Snapshot, error) {
	if err := replication.CreatePublication(ctx, src, name, tables); err != nil {
		return nil, err
	}
	// The copy stage begins with the slot: its snapshot is held open and
	// the slot retains WAL until the copy is done, so a move waits for its
	// turn before creating it.
	if err := r.holdCopySlot(ctx); err != nil {
		return nil, err
	}
	// Each table's storage and column count, read before the slot's
	// snapshot: a rewrite after this read (ALTER TABLE ... TYPE, VACUUM
	// FULL) gives the table another relfilenode, and a column dropped and
	// added again under its name another attnum (relnatts grows), which
	// the cutover sees (compareDefinitions). One between this read and the
	// snapshot fails the move as well, which is the safe side.
	nodes, err := sourceFilenodes(ctx, src, tables)
	if err != nil {
		return nil, err
	}
	if err := r.e.cat.SetSourceFilenodes(ctx, id, nodes); err != nil {
		return nil, err
	}
	return replication.CreateSlot(ctx, r.e.dsn(r.source), name)
}

// sourceFilenodes reads each table's relfilenode and relnatts (the
// number of columns it ever had, dropped ones included), two entries a
// table in order, through q (a session, or the cutover's transaction).
func sourceFilenodes(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, tables []pgx.Identifier) ([]int64, error) {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Sanitize()
	}
	var nodes []int64
	err := q.QueryRow(ctx, `SELECT coalesce(array_agg(x.v ORDER BY u.i, x.k), '{}')
		FROM unnest($1::text[]) WITH ORDINALITY AS u(name, i) JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(u.name)
		CROSS JOIN LATERAL (VALUES (1, c.relfilenode::int8), (2, c.relnatts::int8)) AS x(k, v)`, names).Scan(&nodes)
	if err != nil {
		return nil, fmt.Errorf("read the storage of %s on the source: %w", strings.Join(names, ", "), err)
	}
	if len(nodes) != 2*len(tables) {
		return nil, fmt.Errorf("read the storage of %s on the source: %d of %d tables found", strings.Join(names, ", "), len(nodes)/2, len(tables))
	}
	return nodes, nil
}

// addCleanups records, before setup creates anything, every artifact it
// will create: each table on the target (policy on_failure), the
// publication and the slot on the source, the origin on the target
// (always). The records are written at once; each is its own coordinator
// transaction, as before, so a record never depends on another.
func (r *run) addCleanups(ctx context.Context, m metadata.Move, tables []pgx.Identifier) error {
	type rec struct {
		group  int32
		kind   metadata.ObjectKind
		name   string
		policy string
	}
	recs := make([]rec, 0, len(tables)+3)
	for _, t := range tables {
		recs = append(recs, rec{m.TargetGroup, metadata.ObjectTable, metadata.QualifiedName(t), metadata.CleanupOnFailure})
	}
	recs = append(recs,
		rec{m.SourceGroup, metadata.ObjectPublication, m.Name(), metadata.CleanupAlways},
		rec{m.TargetGroup, metadata.ObjectOrigin, m.Name(), metadata.CleanupAlways},
		rec{m.SourceGroup, metadata.ObjectSlot, m.Name(), metadata.CleanupAlways})
	errs := make([]error, len(recs))
	var wg sync.WaitGroup
	for i, c := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.e.cat.AddCleanup(ctx, m.ID, c.group, c.kind, c.name, c.policy)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// copy copies every table from the exported snapshot.
func (r *run) copy(ctx context.Context, m metadata.Move) error {
	if err := r.holdCopySlot(ctx); err != nil {
		return err
	}
	last := time.Now()
	res, err := replication.Copy(ctx, replication.CopyOptions{
		SourceDSN:      r.e.dsn(r.source),
		TargetDSN:      r.e.dsn(r.target),
		Snapshot:       r.snapshot.Name,
		Tables:         shardIdents(m),
		Workers:        r.e.cfg.CopyWorkers,
		RangesPerTable: r.e.cfg.RangesPerTable,
		Adaptive:       true,
		BytesPerSecond: r.e.cfg.BytesPerSecond,
		Limiter:        r.e.copyLimiter,
		Progress: func(done, total int64) {
			r.progress(Progress{MoveID: m.ID, Phase: Copying, BytesDone: done, BytesTotal: total})
			if time.Since(last) > time.Second {
				last = time.Now()
				_ = r.e.cat.SetProgress(ctx, m.ID, done, total, "", "")
			}
		},
		Logger: r.log,
	})
	_ = r.snapshot.Release(ctx)
	r.snapshot = nil
	if err != nil {
		return err
	}
	if err := r.e.cat.SetProgress(ctx, m.ID, res.Bytes, res.Bytes, "", ""); err != nil {
		return err
	}
	return r.changePhase(ctx, m, Copying, Indexing, stepped, fmt.Sprintf("%d rows, %d bytes, %d streams", res.Rows, res.Bytes, res.Streams), "")
}

// index builds secondary indexes (and other constraints the source has) on
// the target and analyzes the tables.
func (r *run) index(ctx context.Context, m metadata.Move) (err error) {
	sp := newSplits()
	defer sp.log(r.log, "indexing timings")
	if err := r.holdCopySlot(ctx); err != nil {
		return err
	}
	src, dst, err := r.connectBoth(ctx)
	if err != nil {
		return err
	}
	defer r.releaseBoth(src, dst, &err)
	sp.mark("connect")
	tables := shardIdents(m)
	ddls, err := metadata.ReadTablesDDL(ctx, src, tables)
	if err != nil {
		return err
	}
	sp.mark("read_ddl")
	for i, t := range tables {
		// Indexes, NOT VALID constraints and the replica identity: each
		// without statement_timeout, one statement at a time.
		if err := metadata.RunDDL(ctx, dst, ddls[i].IndexStatements(t, "")...); err != nil {
			return fmt.Errorf("build indexes of %s on %s: %w", t.Sanitize(), r.target.Addr(), err)
		}
	}
	sp.mark("indexes")
	// Then ANALYZE, every table of the group in one statement.
	list := make([]string, len(tables))
	for i, t := range tables {
		list[i] = t.Sanitize()
	}
	if err := metadata.RunDDL(ctx, dst, "ANALYZE "+strings.Join(list, ", ")); err != nil {
		return fmt.Errorf("analyze %s on %s: %w", strings.Join(list, ", "), r.target.Addr(), err)
	}
	sp.mark("analyze")
	return r.changePhase(ctx, m, Indexing, CatchingUp, stepped, "indexes built", "")
}
