package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RetainedWAL returns how many bytes of WAL the slot keeps on the source:
// from its restart_lsn to the current write position. ok is false when the
// slot does not exist (or has never reserved WAL).
func RetainedWAL(ctx context.Context, db DB, slot string) (retained int64, ok bool, err error) {
	if err := ValidateName("slot", slot); err != nil {
		return 0, false, err
	}
	var n *int64
	err = db.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - restart_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read WAL retained by slot %q: %w", slot, err)
	}
	if n == nil {
		return 0, false, nil
	}
	return max(*n, 0), true, nil
}
