package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/pgsql"
	"github.com/shardmover/shardmover/metadata"
)

// On Citus a cutover also has a part on every node Citus routes queries
// from (docs/design.md 3.1): Citus-routed writes are blocked there with
// Citus's metadata lock, and the node's copy of the placements is flipped
// in a transaction prepared under the fence's gid. The coordinator's part
// is the decision itself; the source's part rides in the fence. The
// recovery rule settles every part like the fence.

// citusPart is one metadata node's part of a Citus cutover attempt.
type citusPart struct {
	node metadata.Node
	conn *pgx.Conn
	tx   pgx.Tx
}

func (r *run) citus() bool { return r.e.cat.Flavor() == metadata.Citus }

// metadataNodes lists the nodes Citus routes queries from besides the
// coordinator, by group.
func (r *run) metadataNodes(ctx context.Context) ([]metadata.Node, error) {
	nodes, err := r.e.nodes(ctx)
	if err != nil {
		return nil, err
	}
	all := make([]metadata.Node, 0, len(nodes))
	for _, n := range nodes {
		all = append(all, n)
	}
	return metadata.MetadataNodes(all), nil
}

// citusCutover is what a Citus cutover attempt adds to a compat one: the
// parts on the metadata nodes other than the source, and whether the
// source keeps metadata too (then its part rides in the fence).
type citusCutover struct {
	parts      []*citusPart
	sourceMeta bool
}

// openCitus opens, before the pause, a session on every metadata node but
// the source, all at once (clean ones of the pool when there are). On
// compat it returns nil.
func (r *run) openCitus(ctx context.Context) (*citusCutover, error) {
	if !r.citus() {
		return nil, nil
	}
	nodes, err := r.metadataNodes(ctx)
	if err != nil {
		return nil, err
	}
	cc := &citusCutover{}
	for _, n := range nodes {
		if n.GroupID == r.source.GroupID {
			cc.sourceMeta = true
			continue
		}
		cc.parts = append(cc.parts, &citusPart{node: n})
	}
	err = eachPart(cc.parts, func(p *citusPart) (err error) {
		p.conn, err = r.e.session(ctx, p.node)
		return err
	})
	if err != nil {
		cc.release(ctx, r.e, &err)
		return nil, err
	}
	return cc, nil
}

// release ends each part's transaction still open (rolled back; a prepared
// part is no longer its session's) and gives its session back to the pool
// when *errp is nil, or closes it.
func (cc *citusCutover) release(ctx context.Context, e *Engine, errp *error) {
	if cc == nil {
		return
	}
	for _, p := range cc.parts {
		if p.conn == nil {
			continue
		}
		var err error
		if p.tx != nil {
			err = p.tx.Rollback(context.WithoutCancel(ctx))
			p.tx = nil
		}
		if err == nil && errp != nil {
			err = *errp
		}
		e.release(p.node, p.conn, &err)
		p.conn = nil
	}
}

// begin opens each part's transaction, before the pause (it
// locks nothing yet), on every part at once.
func (cc *citusCutover) begin(ctx context.Context) error {
	return eachPart(cc.parts, func(p *citusPart) error {
		tx, err := p.conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("begin on %s: %w", p.node.Addr(), err)
		}
		p.tx = tx
		return nil
	})
}

// lockCitusWrites blocks Citus-routed writes to m's shards on every
// metadata node after the coordinator (the decision holds its lock) and
// before the source table lock: on the source inside the fence's
// transaction src, elsewhere in each part's own transaction (opened by
// begin), one round trip each, all nodes at once (each waits for the writes
// already past its lock). Taking the coordinator's first keeps this free of
// deadlocks: Citus's own operations take the coordinator's lock first too,
// and another cutover shares no metadata lock with this one (it moves
// another group); what two cutovers onto one target share, its distributed
// tables, is locked in one statement. On the target, where Citus-routed
// writes run locally once the placements flip, they are held before they
// take their snapshot: its part locks the group's distributed tables before
// the metadata lock (metadata.BlockCitusWrites).
func (r *run) lockCitusWrites(ctx context.Context, m metadata.Move, src pgx.Tx, cc *citusCutover, lockTimeout string) error {
	var srcErr error
	var wg sync.WaitGroup
	if cc.sourceMeta {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The fence's transaction has its lock_timeout already.
			if err := metadata.BlockCitusWrites(ctx, src, m.ShardIDs, "", false); err != nil {
				srcErr = fmt.Errorf("block Citus writes on the source %s: %w", r.source.Addr(), err)
			}
		}()
	}
	err := eachPart(cc.parts, func(p *citusPart) error {
		if err := metadata.BlockCitusWrites(ctx, p.tx, m.ShardIDs, lockTimeout, p.node.GroupID == m.TargetGroup); err != nil {
			return fmt.Errorf("block Citus writes on %s: %w", p.node.Addr(), err)
		}
		return nil
	})
	wg.Wait()
	return errors.Join(srcErr, err)
}

// prepareCitusParts flips the placements in every part and prepares it
// under gid. The source's own flip is done in the fence (before it is
// prepared) by the caller.
// The nodes' parts run at once (each on its own session): they are inside
// the write pause.
func (r *run) prepareCitusParts(ctx context.Context, m metadata.Move, parts []*citusPart, gid string) error {
	return eachPart(parts, func(p *citusPart) error {
		if err := metadata.UpdatePlacements(ctx, p.tx, m.ShardIDs, m.SourceGroup, m.TargetGroup); err != nil {
			return fmt.Errorf("flip placements on %s: %w", p.node.Addr(), err)
		}
		if _, err := pgsql.ExecOne(ctx, p.conn, "PREPARE TRANSACTION "+quoteLiteral(gid)); err != nil {
			return fmt.Errorf("prepare the placement flip on %s: %w", p.node.Addr(), err)
		}
		p.tx = nil // prepared: no longer this session's
		return nil
	})
}

// commitCitusParts commits every prepared part after the decision, at
// once, and reports whether each was found prepared and committed. A
// failure leaves it to the cleanup phase's settlement.
func (r *run) commitCitusParts(ctx context.Context, parts []*citusPart, gid string) bool {
	err := eachPart(parts, func(p *citusPart) error {
		found, err := settlePrepared(ctx, p.conn, gid, true)
		if err != nil {
			r.log.Warn("committing the placement flip on a metadata node failed; the cleanup phase settles it",
				zap.String("node", p.node.Addr()), zap.Error(err))
			return err
		}
		if !found {
			return errors.New("part not found prepared")
		}
		return nil
	})
	return err == nil
}

// eachPart runs fn for every part concurrently and returns the first
// error (all of them have ended by then).
func eachPart(parts []*citusPart, fn func(*citusPart) error) error {
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(p)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// settleCitusParts applies a settled decision to move m's parts on every
// metadata node but the source; after a committed decision it also makes
// each node's placements agree with it (a part someone rolled back is
// redone). A node that cannot be reached is left to Recover, which settles
// its parts when it is back.
func (r *run) settleCitusParts(ctx context.Context, m metadata.Move, st metadata.Settlement) error {
	if !r.citus() {
		return nil
	}
	nodes, err := r.metadataNodes(ctx)
	if err != nil {
		return err
	}
	// Every node at once: each part is settled on its own by the same rule.
	errs := make([]error, len(nodes))
	stale := make([]bool, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n.GroupID == r.source.GroupID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			stale[i], err = r.settleCitusPart(ctx, m, st, n)
			if errors.Is(err, metadata.ErrUnreachable) {
				r.log.Warn("a metadata node is unreachable; its part of the cutover is settled when it is back", zap.String("node", n.Addr()), zap.Error(err))
				return
			}
			if err != nil {
				errs[i] = fmt.Errorf("settle the cutover on %s: %w", n.Addr(), err)
			}
		}()
	}
	wg.Wait()
	if slices.Contains(stale, true) {
		r.carryOverDue = true
	}
	return errors.Join(errs...)
}

// settleCitusPart settles move m's part on metadata node n; after a
// committed decision it also points n's placements of the group at the
// target when they still name the source (someone rolled its part back).
// Then writes entering on n may have gone to the old shards, which keep
// their names on Citus: the carry-over is recorded as due (stale) before
// the placements change, so cleanup brings those writes to the target.
func (r *run) settleCitusPart(ctx context.Context, m metadata.Move, st metadata.Settlement, n metadata.Node) (stale bool, err error) {
	conn, err := r.e.session(ctx, n)
	if err != nil {
		return false, err
	}
	defer r.e.release(n, conn, &err)
	if _, err := settleFences(ctx, conn, m.ID, st); err != nil {
		return false, err
	}
	if !st.Committed {
		return false, nil
	}
	if stale, err = metadata.PlacedOnNode(ctx, conn, m.ShardIDs, m.SourceGroup); err != nil || !stale {
		return false, err
	}
	if err := r.e.cat.SetCarryOverDue(ctx, r.lease, m.ID, true); err != nil {
		return false, err
	}
	changed, err := metadata.SyncPlacements(ctx, conn, m.ShardIDs, m.SourceGroup, m.TargetGroup)
	if err != nil {
		return true, err
	}
	r.log.Error("a metadata node still placed the moved shards on the source after the decision; pointed them at the target, and what the old shards took meanwhile is carried over",
		zap.String("node", n.Addr()), zap.Int("shards", changed))
	return true, nil
}

// syncSourcePlacements does for the source what settleCitusPart does for
// the other metadata nodes, once its fence is settled after a committed
// decision.
func (r *run) syncSourcePlacements(ctx context.Context, m metadata.Move, src *pgx.Conn) error {
	if !r.citus() || !r.sourceHasMetadata(ctx) {
		return nil
	}
	changed, err := metadata.SyncPlacements(ctx, src, m.ShardIDs, m.SourceGroup, m.TargetGroup)
	if changed > 0 {
		r.log.Error("the source still placed the moved shards on itself after the decision; pointed them at the target", zap.Int("shards", changed))
	}
	return err
}

func (r *run) sourceHasMetadata(ctx context.Context) bool {
	nodes, err := r.metadataNodes(ctx)
	if err != nil {
		return true
	}
	for _, n := range nodes {
		if n.GroupID == r.source.GroupID {
			return true
		}
	}
	return false
}
