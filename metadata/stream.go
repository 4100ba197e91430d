package metadata

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Carry makes lead's stream carry riders (docs/design.md 6.2): each rider
// keeps its row, and from now on its phases follow lead's, and lead's
// decision flips it. Every one of them must be a scheduled move of one
// job between the same two node groups, not yet carried, carrying
// nothing and not asked to cancel; otherwise nothing changes and the
// error (ErrPhaseConflict) says which one is not. The lead's bytes_total
// becomes the stream's (its copy counts every rider's bytes).
func (c *Catalog) Carry(ctx context.Context, lead int64, riders []int64) error {
	if len(riders) == 0 {
		return nil
	}
	ids := append([]int64{lead}, riders...)
	return c.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT "+moveColumns+" FROM shardmover.moves WHERE id = ANY($1) ORDER BY id FOR UPDATE", ids)
		if err != nil {
			return err
		}
		ms, err := pgx.CollectRows(rows, scanMove)
		if err != nil {
			return err
		}
		byID := map[int64]Move{}
		for _, m := range ms {
			byID[m.ID] = m
		}
		l, ok := byID[lead]
		if !ok {
			return fmt.Errorf("%w: there is no move %d", ErrNotFound, lead)
		}
		var total int64
		for _, id := range ids {
			m, ok := byID[id]
			switch {
			case !ok:
				return fmt.Errorf("%w: there is no move %d", ErrNotFound, id)
			case Phase(m.Phase) != PhaseScheduled || m.CancelRequested || m.CarriedBy != 0:
				return fmt.Errorf("%w: move %d (phase %s) cannot join the stream of move %d", ErrPhaseConflict, id, m.Phase, lead)
			case m.JobID != l.JobID || m.SourceGroup != l.SourceGroup || m.TargetGroup != l.TargetGroup:
				return fmt.Errorf("%w: move %d is not of job %d from group %d to %d, as move %d is", ErrPhaseConflict, id, l.JobID, l.SourceGroup, l.TargetGroup, lead)
			}
			total += m.BytesTotal
		}
		var carrying bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM shardmover.moves WHERE carried_by = ANY($1))", ids).Scan(&carrying); err != nil {
			return err
		}
		if carrying {
			return fmt.Errorf("%w: one of moves %v already carries others", ErrPhaseConflict, ids)
		}
		if _, err := tx.Exec(ctx, "UPDATE shardmover.moves SET carried_by = $1, updated_at = now() WHERE id = ANY($2)", lead, riders); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE shardmover.moves SET bytes_total = $2, updated_at = now() WHERE id = $1", lead, total); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO shardmover.move_log (move_id, from_phase, to_phase, message)
			SELECT id, $2, $2, $3 FROM unnest($1::bigint[]) AS id`, riders, PhaseScheduled, fmt.Sprintf("carried by the stream of move %d", lead))
		return err
	})
}

// Stream reads move lead and the unfinished moves its stream carries, the
// lead first, the riders in id order.
func (c *Catalog) Stream(ctx context.Context, lead int64) ([]Move, error) {
	rows, err := c.pool.Query(ctx, "SELECT "+moveColumns+` FROM shardmover.moves
		WHERE id = $1 OR (carried_by = $1 AND phase <> ALL($2)) ORDER BY carried_by NULLS FIRST, id`, lead, terminalPhases())
	if err != nil {
		return nil, err
	}
	ms, err := pgx.CollectRows(rows, scanMove)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 || ms[0].ID != lead {
		return nil, fmt.Errorf("%w: there is no move %d", ErrNotFound, lead)
	}
	return ms, nil
}

// DropRiders takes riders out of lead's stream before its decision, for
// the holder of lead's lease, in one transaction: each ends cancelled
// (with why), and lead, in phase from, goes back to setup when it had
// begun it (its stream is made again without them: the next setup drops
// everything the stream made, theirs included, all recorded under lead).
// It refuses (ErrPhaseConflict) when lead is not in phase from, its
// decision committed, or a rider is not an unfinished move lead carries;
// ErrLeaseLost when the lease is gone.
func (c *Catalog) DropRiders(ctx context.Context, lease *Lease, lead int64, from Phase, riders []int64, why string) error {
	return c.tx(ctx, func(tx pgx.Tx) error {
		if err := lease.checkTx(ctx, tx); err != nil {
			return err
		}
		var phase string
		var committed bool
		if err := tx.QueryRow(ctx, "SELECT phase, cutover_committed FROM shardmover.moves WHERE id = $1 FOR UPDATE", lead).Scan(&phase, &committed); err != nil {
			return fmt.Errorf("lock move %d: %w", lead, err)
		}
		if Phase(phase) != from || committed {
			return fmt.Errorf("%w: move %d is in phase %s (decided: %t), not %s", ErrPhaseConflict, lead, phase, committed, from)
		}
		var dropped []int64
		rows, err := tx.Query(ctx, `WITH out AS (
			UPDATE shardmover.moves SET phase = $3, error = '', updated_at = now()
			WHERE id = ANY($2) AND carried_by = $1 AND phase = $4 AND NOT cutover_committed RETURNING id)
			INSERT INTO shardmover.move_log (move_id, from_phase, to_phase, message) SELECT id, $4, $3, $5 FROM out RETURNING move_id`,
			lead, riders, PhaseCancelled, from, fmt.Sprintf("taken out of the stream of move %d: %s", lead, why))
		if err != nil {
			return err
		}
		if dropped, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		if len(dropped) != len(riders) {
			slices.Sort(dropped)
			return fmt.Errorf("%w: of moves %v only %v ride in the stream of move %d in phase %s", ErrPhaseConflict, riders, dropped, lead, from)
		}
		switch from {
		case PhaseScheduled, PhasePreflight, PhaseSetup:
			return nil // nothing made yet that a new setup would not drop
		}
		tag, err := tx.Exec(ctx, setPhaseSQL, lead, from, PhaseSetup, "", PhasePreflight)
		if err := setPhaseResult(lead, string(from), tag, err); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, logPhaseSQL, lead, from, PhaseSetup, fmt.Sprintf("moves %v left the stream; setting it up again without them", riders)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, setRidersPhaseSQL, ridersPhaseArgs(lead, string(from), string(PhaseSetup), "the stream is set up again", "")...)
		return err
	})
}
