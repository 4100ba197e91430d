package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ctxtime"
	"github.com/shardmover/shardmover/internal/pgerr"
	"github.com/shardmover/shardmover/internal/pgsql"
	"github.com/shardmover/shardmover/metadata"
)

// A fence is the prepared transaction of one cutover attempt on the source:
// it holds the shard tables locked and renamed until it is settled. Its gid
// names the move and the attempt's cutover epoch, shardmover_<moveid>_<epoch>,
// so a late ROLLBACK PREPARED meant for one attempt can never hit a later
// one. (Before epochs the gid was shardmover_<moveid>.)
//
// The recovery rule, for every fence of a move: once the move's decision is
// settled (metadata.SettleDecision, which cannot miss a decision in flight),
// the fence of the committed epoch is committed and every other one rolled
// back.

// fenceGID is the gid of the fence of move id's attempt under epoch.
func fenceGID(id, epoch int64) string {
	return "shardmover_" + strconv.FormatInt(id, 10) + "_" + strconv.FormatInt(epoch, 10)
}

// parseFenceGID reads a fence's gid; epoch is -1 for the old form.
func parseFenceGID(gid string) (id, epoch int64, ok bool) {
	rest, found := strings.CutPrefix(gid, "shardmover_")
	if !found {
		return 0, 0, false
	}
	idText, epochText, two := strings.Cut(rest, "_")
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id <= 0 {
		return 0, 0, false
	}
	if !two {
		return id, -1, true
	}
	epoch, err = strconv.ParseInt(epochText, 10, 64)
	if err != nil || epoch < 0 {
		return 0, 0, false
	}
	return id, epoch, true
}

// fences lists the fences on conn's node: of move id, or of every move
// (id 0), by move then epoch.
func fences(ctx context.Context, conn *pgx.Conn, id int64) ([]string, error) {
	return fencesOlder(ctx, conn, id, 0)
}

// fencesOlder is fences, leaving out those prepared less than age ago.
func fencesOlder(ctx context.Context, conn *pgx.Conn, id int64, age time.Duration) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT gid FROM pg_prepared_xacts
		WHERE starts_with(gid, 'shardmover_') AND database = current_database()
		AND prepared <= now() - $1::bigint * interval '1 millisecond'`, age.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	var out []string
	for _, g := range gids {
		if gid, _, ok := parseFenceGID(g); ok && (id == 0 || gid == id) {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, ea, _ := parseFenceGID(out[i])
		b, eb, _ := parseFenceGID(out[j])
		if a != b {
			return a < b
		}
		return ea < eb
	})
	return out, nil
}

// settleFences applies a settled decision to move id's fences on conn's
// node: the fence of the committed epoch is committed, every other one
// rolled back. committedFound says whether the committed fence was there.
func settleFences(ctx context.Context, conn *pgx.Conn, id int64, st metadata.Settlement) (committedFound bool, err error) {
	gids, err := fences(ctx, conn, id)
	if err != nil {
		return false, err
	}
	for _, gid := range gids {
		_, epoch, _ := parseFenceGID(gid)
		commit := st.Committed && (epoch == st.Epoch || epoch < 0)
		found, err := settlePrepared(ctx, conn, gid, commit)
		if err != nil {
			return committedFound, err
		}
		committedFound = committedFound || (commit && found)
	}
	return committedFound, nil
}

// settlePrepared commits or rolls back one prepared transaction; found is
// false when it did not exist (any more).
func settlePrepared(ctx context.Context, conn *pgx.Conn, gid string, commit bool) (found bool, err error) {
	verb := "ROLLBACK PREPARED "
	if commit {
		verb = "COMMIT PREPARED "
	}
	_, err = pgsql.ExecOne(ctx, conn, verb+quoteLiteral(gid))
	if pgerr.IsUndefinedObject(err) { // no such prepared transaction
		return false, nil
	}
	return err == nil, err
}

// settleGrace bounds how long a mover keeps trying to settle a fence after
// it was asked to stop: a stopped mover leaves the rest to the recovery of
// the next one.
const settleGrace = 30 * time.Second

// settle settles move m's cutover decision and then its fences on the
// source to match, retrying the coordinator and the source with backoff:
// while a fence may exist the mover does not walk away. It gives up only
// when ctx ends (and a grace period after, for a cutover in progress), and
// then says that the source stays fenced until recovery settles it.
//
// Once the decision is settled, a source that cannot be reached ends the
// retrying: its fence is durable there and holds nothing anyone can reach,
// and whoever resumes the move (or cleanup) settles it when the source is
// back. The coordinator, by contrast, is retried: the source the fence
// locks may be serving reads that wait on it.
//
// After a committed decision whose fence is gone (rolled back by someone),
// the fence is re-established: the source tables are renamed again. The
// carry-over of what the source took meanwhile is recorded as due in the
// journal (moves.carry_over_due) before the rename, and in r.carryOverDue;
// cleanup does it before dropping the slot, then clears the record.
func (r *run) settle(ctx context.Context, m metadata.Move) (st metadata.Settlement, err error) {
	wait := 200 * time.Millisecond
	var stopAt time.Time
	for {
		var decided bool
		st, decided, err = r.settleOnce(context.WithoutCancel(ctx), m)
		if err == nil {
			return st, nil
		}
		// A fault hook's kill, and a lost lease (only the holder may record
		// a carry-over): the run's loop stops, or takes the lease again and
		// settles anew; retrying here would not.
		if errors.Is(err, ErrKilled) || errors.Is(err, metadata.ErrLeaseLost) {
			return st, err
		}
		if decided && errors.Is(err, metadata.ErrUnreachable) {
			return st, fmt.Errorf("the cutover decision of move %d is settled (committed: %t), but its source cannot be reached to settle the fence there; resuming the move or `shardmover cleanup` does once it is back: %w", m.ID, st.Committed, err)
		}
		if ctx.Err() != nil {
			if stopAt.IsZero() {
				stopAt = time.Now().Add(settleGrace)
			}
			if time.Now().After(stopAt) {
				return st, fmt.Errorf("the cutover decision of move %d is not settled (%w); its source shards may stay fenced (reads and writes wait) until `shardmover cleanup` or the next mover settles it", m.ID, err)
			}
		}
		r.log.Warn("settling the cutover decision, retrying", zap.Error(err), zap.Duration("retry_in", wait))
		sleepCtx := ctx
		if ctx.Err() != nil {
			sleepCtx = context.Background()
		}
		_ = ctxtime.Sleep(sleepCtx, wait)
		wait = min(2*wait, 5*time.Second)
	}
}

// settleOnce makes one attempt; decided reports that the decision itself
// was settled, whatever happened on the source after. A re-fence is
// recorded (r.carryOverDue, moves.carry_over_due) before it is made, so an
// attempt that fails after it leaves the carry-over due.
func (r *run) settleOnce(ctx context.Context, m metadata.Move) (st metadata.Settlement, decided bool, err error) {
	st, err = r.e.cat.SettleDecision(ctx, m.ID)
	if err != nil {
		return st, false, err
	}
	// A clean session of the pool will do: settling holds nothing past
	// its own statements (a failed one closes the session, see release).
	src, err := r.e.session(ctx, r.source)
	if err != nil {
		return st, true, err
	}
	defer r.e.release(r.source, src, &err)
	found, err := settleFences(ctx, src, m.ID, st)
	if err != nil {
		return st, true, err
	}
	if st.Committed && !found && r.citus() {
		// On Citus the fence renames nothing: with it gone, the source's
		// own placements may have routed writes to the old shards until
		// syncSourcePlacements below points them at the target again. The
		// slot still holds what they wrote: cleanup carries it over. A
		// fence committed earlier flipped those placements, so a source
		// still placing the group on itself is what tells a fence rolled
		// back from one simply settled before (this settlement runs at
		// every recovery, and must not record a carry-over each time).
		stale, err := r.sourcePlacesOnItself(ctx, m, src)
		if err != nil {
			return st, true, err
		}
		if stale {
			if err := r.e.cat.SetCarryOverDue(ctx, r.lease, m.ID, true); err != nil {
				return st, true, err
			}
			r.carryOverDue = true
			r.log.Error("the fence of a committed cutover was gone on the source; its placements are pointed at the target again and what the old shards took meanwhile is carried over", zap.Strings("tables", m.ShardTables))
		}
	}
	if st.Committed && !found && !r.citus() {
		open, err := unfenced(ctx, src, m)
		if err != nil {
			return st, true, err
		}
		if len(open) > 0 {
			// The source took writes the target may not have: the journal
			// says so before anything is renamed, so that a mover dying
			// after the re-fence still leaves the carry-over due (the
			// next settlement finds the fence in place and would not).
			if err := r.e.cat.SetCarryOverDue(ctx, r.lease, m.ID, true); err != nil {
				return st, true, err
			}
			r.carryOverDue = true
			if err := refence(ctx, src, m, open); err != nil {
				return st, true, err
			}
			r.log.Error("the fence of a committed cutover was gone; re-established it", zap.Strings("tables", m.ShardTables))
			if err := r.cutoverHook("refenced"); err != nil {
				return st, true, err
			}
		}
	}
	if st.Committed {
		if err := r.syncSourcePlacements(ctx, m, src); err != nil {
			return st, true, err
		}
	}
	// On Citus, the parts on the other metadata nodes.
	if err := r.settleCitusParts(ctx, m, st); err != nil {
		return st, true, err
	}
	return st, true, nil
}

// unfenced lists move m's old shards on the source still under their own
// names after a committed decision (their fence was rolled back).
func unfenced(ctx context.Context, src *pgx.Conn, m metadata.Move) ([]pgx.Identifier, error) {
	var open []pgx.Identifier
	for _, t := range shardIdents(m) {
		var exists bool
		if err := src.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.Sanitize()).Scan(&exists); err != nil {
			return nil, err
		}
		if exists {
			open = append(open, t)
		}
	}
	return open, nil
}

// refenceLockWait bounds how long the re-fence waits for the lock of an
// old shard: the reads and writes that come after it queue behind it. Past
// it the settlement fails and is tried again (the mover's backoff, the
// next recovery).
const refenceLockWait = 2 * time.Second

// refence gives the old shards open their fenced names again, under
// ACCESS EXCLUSIVE, in one transaction.
func refence(ctx context.Context, src *pgx.Conn, m metadata.Move, open []pgx.Identifier) error {
	tx, err := src.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", refenceLockWait.Milliseconds())); err != nil {
		return fmt.Errorf("re-fence: %w", err)
	}
	for _, t := range open {
		if _, err := pgsql.ExecOne(ctx, tx.Conn(), "LOCK TABLE "+t.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return fmt.Errorf("re-fence %s: %w", t.Sanitize(), err)
		}
		if _, err := pgsql.ExecOne(ctx, tx.Conn(), "ALTER TABLE "+t.Sanitize()+" RENAME TO "+pgx.Identifier{movedName(t[1], m.ID)}.Sanitize()); err != nil {
			return fmt.Errorf("re-fence %s: %w", t.Sanitize(), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("re-fence: %w", err)
	}
	return nil
}

// recoverCommitted settles every committed move that no mover holds and
// that is still in cleanup or owes a carry-over (docs/design.md 5.1, "Who
// settles"): its settlement re-establishes a fence someone rolled back
// (recording the carry-over as due first), so stale clients stop writing
// to the old shards now, not when the move is next resumed; the move's
// own cleanup carries over what they wrote. A move a mover holds is left
// to it. With quick, only moves whose old shards are found back under
// their own names on a compat source are settled (a read, no lease, for
// every other move: cheap enough for every few seconds).
func (e *Engine) recoverCommitted(ctx context.Context, quick bool) error {
	if quick && e.cat.Flavor() == metadata.Citus {
		return nil // the fence renames nothing there: nothing to see cheaply
	}
	moves, err := e.cat.Moves(ctx, metadata.MoveFilter{ActiveOnly: true})
	if err != nil {
		return err
	}
	var nodes map[int32]metadata.Node
	var errs []error
	for _, m := range moves {
		if m.CarriedBy != 0 || !m.CutoverCommitted || (m.Phase != metadata.PhaseCleanup && !m.CarryOverDue) {
			continue
		}
		if quick {
			if nodes == nil {
				if nodes, err = e.nodes(ctx); err != nil {
					return err
				}
			}
			open, err := e.unfencedOn(ctx, nodes, m)
			if err != nil {
				errs = append(errs, fmt.Errorf("look for the fence of move %d: %w", m.ID, err))
				continue
			}
			if !open {
				continue
			}
		}
		err := e.settleCommitted(ctx, m.ID)
		switch {
		case err == nil:
		case errors.Is(err, metadata.ErrUnreachable):
			if !quick {
				e.log.Warn("a node of a decided move is unreachable; its fence is checked again when it is back", zap.Int64("move_id", m.ID), zap.Error(err))
			}
		case quick:
			errs = append(errs, fmt.Errorf("settle the fence of move %d: %w", m.ID, err))
		default:
			// One decided move that cannot be settled now must not keep
			// every job from starting (RunJob recovers first): its own
			// run meets the same error and reports it.
			e.log.Warn("could not settle the fence of a decided move; its own run, or the next recovery, tries again", zap.Int64("move_id", m.ID), zap.Error(err))
		}
	}
	return errors.Join(errs...)
}

// unfencedOn reports whether any of move m's stream's old shards is back
// under its own name on its (compat) source.
func (e *Engine) unfencedOn(ctx context.Context, nodes map[int32]metadata.Node, m metadata.Move) (bool, error) {
	src, ok := nodes[m.SourceGroup]
	if !ok || !src.IsActive {
		return false, nil
	}
	ms, err := e.cat.Stream(ctx, m.ID)
	if err != nil {
		return false, err
	}
	view := ms[0]
	view.ShardTables = slices.Clone(view.ShardTables)
	for _, x := range ms[1:] {
		view.ShardTables = append(view.ShardTables, x.ShardTables...)
	}
	conn, err := e.session(ctx, src)
	if err != nil {
		if errors.Is(err, metadata.ErrUnreachable) {
			return false, nil
		}
		return false, err
	}
	defer e.release(src, conn, &err)
	open, err := unfenced(ctx, conn, view)
	return len(open) > 0, err
}

// settleCommitted takes move id's lease (when no mover holds it) and
// settles its decision and fences once, as its own run would: for a
// committed decision whose fence is gone, the fence is re-established and
// the carry-over recorded as due.
func (e *Engine) settleCommitted(ctx context.Context, id int64) error {
	lease, ok, err := e.cat.TryLease(ctx, id)
	if err != nil || !ok {
		return err
	}
	r := &run{e: e, id: id, lease: lease, log: e.log.With(zap.Int64("move_id", id)), cutoverBackoff: e.cfg.CutoverBackoff}
	defer func() { r.lease.Release(context.WithoutCancel(ctx)) }()
	defer r.close()
	view, err := r.readStream(ctx)
	if err != nil {
		return err
	}
	if view.Terminal() || !view.CutoverCommitted {
		return nil
	}
	if err := r.resolveNodes(ctx, view); err != nil {
		return err
	}
	if _, _, err := r.settleOnce(ctx, view); err != nil {
		return err
	}
	if r.carryOverDue {
		r.log.Info("recovery re-established the fence of a decided move; its cleanup carries over what the source took meanwhile (resume its job)")
	}
	return nil
}

// OrphanAge is how old a fence must be before SettleOrphans looks at it:
// a live cutover holds its fence for at most its write pause (2 s by
// default), and its mover holds the move's lease all along anyway.
const OrphanAge = 3 * time.Second

// SettleOrphans is the quick part of Recover, cheap enough to run every
// few seconds (every daemon does, docs/design.md 9): on every active node
// it settles, by the recovery rule, each fence prepared more than
// olderThan ago whose move no mover holds (a mover that died between
// PREPARE and its decision leaves the source's shards locked: on compat
// even reads wait), and on compat it re-establishes the fence of a decided
// move whose old shards are back under their own names. A node that
// cannot be reached is skipped.
func (e *Engine) SettleOrphans(ctx context.Context, olderThan time.Duration) error {
	return e.recover(ctx, olderThan, true)
}

// sourcePlacesOnItself reports whether the source's own Citus metadata
// still places a shard of move m's group on the source (its fence, which
// flips them there, was rolled back). A source without metadata routes
// nothing.
func (r *run) sourcePlacesOnItself(ctx context.Context, m metadata.Move, src *pgx.Conn) (bool, error) {
	if !r.sourceHasMetadata(ctx) {
		return false, nil
	}
	return metadata.PlacedOnNode(ctx, src, m.ShardIDs, m.SourceGroup)
}
