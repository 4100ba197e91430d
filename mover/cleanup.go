package mover

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
)

// cleanup finishes a decided move: the fence is committed (again, in case a
// crash came between the decision and COMMIT PREPARED), the applier stops,
// and the slot, publication and origin are dropped. The old shards stay,
// recorded for a deferred drop.
func (r *run) cleanup(ctx context.Context, m metadata.Move) error {
	src, err := r.e.connect(ctx, r.source)
	if err != nil {
		return err
	}
	defer src.Close(ctx)
	if err := settlePrepared(ctx, src, m.Name(), true); err != nil {
		return fmt.Errorf("commit fence: %w", err)
	}
	r.stopStream()
	if err := r.dropArtifacts(ctx, m, metadata.CleanupAlways); err != nil {
		return err
	}
	if err := r.transition(ctx, m, Cleanup, Done, "replication artifacts dropped"); err != nil {
		return err
	}
	r.progress(Progress{MoveID: m.ID, Phase: Done, BytesDone: m.BytesTotal, BytesTotal: m.BytesTotal})
	return nil
}

// fail ends a move that has not reached its decision: everything it created
// is dropped and the source serves as before.
func (r *run) fail(ctx context.Context, m metadata.Move, p Phase, cause error) error {
	r.log.Error("move failed", zap.String("phase", p.String()), zap.Error(cause))
	if err := r.abort(ctx, m, p, Failed, cause.Error()); err != nil && !errors.Is(err, errAborted) {
		return fmt.Errorf("%w (and cleaning up after it failed: %v; `shardmover cleanup` finishes it)", cause, err)
	}
	return cause
}

var errAborted = errors.New("move aborted")

// abort rolls a move back before its decision and records the end phase.
func (r *run) abort(ctx context.Context, m metadata.Move, p Phase, end Phase, why string) error {
	if m.CutoverCommitted {
		return fmt.Errorf("move %d is past its decision; it cannot be %s", m.ID, end)
	}
	ctx = context.WithoutCancel(ctx)
	r.stopStream()
	if r.snapshot != nil {
		_ = r.snapshot.Release(ctx)
		r.snapshot = nil
	}
	if r.source.ID != 0 {
		if src, err := r.e.connect(ctx, r.source); err == nil {
			err := settlePrepared(ctx, src, m.Name(), false)
			src.Close(ctx)
			if err != nil {
				return err
			}
		}
	}
	if err := r.dropArtifacts(ctx, m, metadata.CleanupAlways, metadata.CleanupOnFailure); err != nil {
		return err
	}
	errText := ""
	if end == Failed {
		errText = why
	}
	if err := r.e.cat.SetPhase(ctx, m.ID, p.String(), end.String(), why, errText); err != nil {
		return err
	}
	r.log.Info("phase changed", zap.String("from", p.String()), zap.String("phase", end.String()), zap.String("why", why))
	if end == Cancelled {
		return fmt.Errorf("%w: move %d cancelled", errAborted, m.ID)
	}
	return nil
}

// dropArtifacts drops every recorded artifact of the move with one of the
// policies, and forgets each record once its artifact is gone.
func (r *run) dropArtifacts(ctx context.Context, m metadata.Move, policies ...string) error {
	recs, err := r.e.cat.Cleanups(ctx, m.ID)
	if err != nil {
		return err
	}
	nodes, err := r.e.nodes(ctx)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, p := range policies {
		want[p] = true
	}
	// Slots before publications (a walsender may hold the slot), prepared
	// transactions before tables (they lock them).
	order := map[string]int{"prepared": 0, "slot": 1, "publication": 2, "origin": 3, "table": 4}
	for pass := 0; pass <= 4; pass++ {
		for _, rec := range recs {
			if !want[rec.Policy] || order[rec.ObjectType] != pass {
				continue
			}
			n, ok := nodes[rec.NodeGroup]
			if !ok {
				continue
			}
			if err := r.e.dropOne(ctx, n, rec); err != nil {
				return err
			}
			if err := r.e.cat.RemoveCleanup(ctx, rec.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropOne drops one recorded artifact; a missing artifact is not an error.
func (e *Engine) dropOne(ctx context.Context, n metadata.Node, rec metadata.CleanupRecord) error {
	conn, err := e.connect(ctx, n)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	switch rec.ObjectType {
	case "slot":
		err = replication.DropSlot(ctx, conn, rec.Name)
	case "publication":
		err = replication.DropPublication(ctx, conn, rec.Name)
	case "origin":
		err = replication.DropOrigin(ctx, conn, rec.Name)
	case "prepared":
		committed := false
		if rec.MoveID != nil {
			if m, merr := e.cat.Move(ctx, *rec.MoveID); merr == nil {
				committed = m.CutoverCommitted
			}
		}
		err = settlePrepared(ctx, conn, rec.Name, committed)
	case "table":
		schema, name, _ := strings.Cut(rec.Name, ".")
		_, err = conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{schema, name}.Sanitize())
	default:
		return fmt.Errorf("unknown cleanup object type %q", rec.ObjectType)
	}
	if err != nil {
		return fmt.Errorf("drop %s %s on %s: %w", rec.ObjectType, rec.Name, n.Addr(), err)
	}
	e.log.Info("dropped", zap.String("object", rec.ObjectType), zap.String("name", rec.Name), zap.String("node", n.Addr()))
	return nil
}
