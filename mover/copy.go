package mover

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
	"go.uber.org/zap"
)

// The phases that build the target: setup (tables, publication, slot),
// copying and indexing (docs/design.md 5).

// connectBoth opens one connection to the source and one to the target.
func (r *run) connectBoth(ctx context.Context) (*pgx.Conn, *pgx.Conn, error) {
	src, err := r.e.connect(ctx, r.source)
	if err != nil {
		return nil, nil, err
	}
	dst, err := r.e.connect(ctx, r.target)
	if err != nil {
		src.Close(ctx)
		return nil, nil, err
	}
	// On Citus the target session builds shard tables as Citus's own
	// shard transfers do (docs/design.md 3).
	if r.citus() {
		if err := metadata.ActAsCitusRebalancer(ctx, dst); err != nil {
			closeBoth(ctx, src, dst)
			return nil, nil, err
		}
	}
	return src, dst, nil
}

func closeBoth(ctx context.Context, conns ...*pgx.Conn) {
	for _, c := range conns {
		c.Close(context.WithoutCancel(ctx))
	}
}

// setup creates the target tables, the publication and the slot with its
// exported snapshot. Anything a crashed earlier attempt left is dropped
// first: every artifact was recorded before it was created.
func (r *run) setup(ctx context.Context, m metadata.Move) error {
	sp := newSplits()
	defer sp.log(r.log, "setup timings")
	if err := r.dropArtifacts(ctx, m, metadata.CleanupAlways, metadata.CleanupOnFailure); err != nil {
		return err
	}
	sp.mark("leftovers")
	// On Citus, reference tables first, as Citus does before a move.
	if err := r.e.cat.EnsureReferenceTables(ctx); err != nil {
		return err
	}
	src, dst, err := r.connectBoth(ctx)
	if err != nil {
		return err
	}
	defer closeBoth(ctx, src, dst)
	sp.mark("connect")
	for _, t := range shardIdents(m) {
		ddl, err := metadata.ReadTableDDL(ctx, src, t)
		if err != nil {
			return err
		}
		sp.mark("read_ddl")
		if err := r.e.cat.AddCleanup(ctx, m.ID, m.TargetGroup, metadata.ObjectTable, metadata.QualifiedName(t), metadata.CleanupOnFailure); err != nil {
			return err
		}
		sp.mark("record")
		if err := metadata.EnsureSchemaLike(ctx, src, dst, t[0]); err != nil {
			return fmt.Errorf("create schema %s on %s: %w", pgx.Identifier{t[0]}.Sanitize(), r.target.Addr(), err)
		}
		// Identity columns are BY DEFAULT until the cutover's FinishStatements.
		if err := metadata.RunDDL(ctx, dst, ddl.CreateStatement(t, "", metadata.MoveTarget)); err != nil {
			return fmt.Errorf("create %s on %s: %w", t.Sanitize(), r.target.Addr(), err)
		}
		// The source's owner and privileges, so that the application reads
		// and writes the moved shard as it did the old one.
		have, err := metadata.ReadTableDDL(ctx, dst, t)
		if err != nil {
			return err
		}
		if err := metadata.RunDDL(ctx, dst, ddl.PrivilegeStatements(t, have)...); err != nil {
			return permanent(fmt.Errorf("give %s on %s the owner (%s) and privileges it has on the source: %w; the mover's role must be a member of the table's owner, and the owner needs CREATE on the schema there (docs/privileges.md)",
				t.Sanitize(), r.target.Addr(), ddl.Owner, err))
		}
	}
	sp.mark("create")
	name := m.Name()
	if err := r.e.cat.AddCleanup(ctx, m.ID, m.SourceGroup, metadata.ObjectPublication, name, metadata.CleanupAlways); err != nil {
		return err
	}
	if err := replication.CreatePublication(ctx, src, name, shardIdents(m)); err != nil {
		return err
	}
	if err := r.e.cat.AddCleanup(ctx, m.ID, m.TargetGroup, metadata.ObjectOrigin, name, metadata.CleanupAlways); err != nil {
		return err
	}
	if err := r.e.cat.AddCleanup(ctx, m.ID, m.SourceGroup, metadata.ObjectSlot, name, metadata.CleanupAlways); err != nil {
		return err
	}
	sp.mark("publication")
	// The copy stage begins with the slot: its snapshot is held open and
	// the slot retains WAL until the copy is done, so a move waits for its
	// turn before creating it.
	if err := r.holdCopySlot(ctx); err != nil {
		return err
	}
	sp.mark("copy_turn")
	snap, err := replication.CreateSlot(ctx, r.e.dsn(r.source), name)
	if err != nil {
		return err
	}
	sp.mark("slot")
	r.snapshot = snap
	r.log.Info("slot created", zap.String("slot", name), zap.Stringer("lsn", snap.ConsistentLSN))
	if err := r.e.cat.SetProgress(ctx, m.ID, 0, 0, snap.ConsistentLSN.String(), ""); err != nil {
		return err
	}
	return r.changePhase(ctx, m, Setup, Copying, stepped, "slot "+name+" at "+snap.ConsistentLSN.String(), "")
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
func (r *run) index(ctx context.Context, m metadata.Move) error {
	if err := r.holdCopySlot(ctx); err != nil {
		return err
	}
	src, dst, err := r.connectBoth(ctx)
	if err != nil {
		return err
	}
	defer closeBoth(ctx, src, dst)
	for _, t := range shardIdents(m) {
		ddl, err := metadata.ReadTableDDL(ctx, src, t)
		if err != nil {
			return err
		}
		// Indexes, NOT VALID constraints and the replica identity, then
		// ANALYZE: each without statement_timeout, one statement at a time.
		if err := metadata.RunDDL(ctx, dst, append(ddl.IndexStatements(t, ""), "ANALYZE "+t.Sanitize())...); err != nil {
			return fmt.Errorf("build indexes of %s on %s: %w", t.Sanitize(), r.target.Addr(), err)
		}
	}
	return r.changePhase(ctx, m, Indexing, CatchingUp, stepped, "indexes built", "")
}
