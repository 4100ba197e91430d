package replication

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query returning rows: a *pgx.Conn, a *pgxpool.Pool or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Slot is one replication slot of a server and the WAL it keeps there.
type Slot struct {
	Name string
	// Active is true while a walsender streams from the slot.
	Active bool
	// Retained is how many bytes of WAL the slot keeps on the server, from
	// its restart_lsn to the current write position (what RetainedWAL
	// reads); RetainedKnown is false when the slot reserves no WAL (no
	// restart_lsn yet, or its WAL was removed).
	Retained      int64
	RetainedKnown bool
	// WALStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost (the slot can no longer be used).
	WALStatus string
}

// SlotsWithPrefix lists the slots of the connection's database whose names
// start with prefix (the mover's are shardmover_<move id>), in name order,
// with the WAL each retains. prefix follows the slot name rules
// (ValidateName).
func SlotsWithPrefix(ctx context.Context, db Querier, prefix string) ([]Slot, error) {
	if err := ValidateName("slot prefix", prefix); err != nil {
		return nil, err
	}
	like := strings.ReplaceAll(prefix, "_", `\_`) + "%"
	rows, err := db.Query(ctx, `
		SELECT slot_name::text, active, (pg_current_wal_lsn() - restart_lsn)::bigint, coalesce(wal_status, '')
		FROM pg_replication_slots
		WHERE slot_name LIKE $1 AND database = current_database()
		ORDER BY slot_name`, like)
	if err != nil {
		return nil, fmt.Errorf("list the replication slots named %s*: %w", prefix, err)
	}
	slots, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Slot, error) {
		var s Slot
		var retained *int64
		if err := row.Scan(&s.Name, &s.Active, &retained, &s.WALStatus); err != nil {
			return s, err
		}
		if retained != nil {
			s.Retained, s.RetainedKnown = max(*retained, 0), true
		}
		return s, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the replication slots named %s*: %w", prefix, err)
	}
	return slots, nil
}
