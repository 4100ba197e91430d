package replication

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The kinds of replication object a move creates, as Artifact.Kind names
// them.
const (
	KindSlot        = "slot"
	KindPublication = "publication"
	KindOrigin      = "origin"
)

// Artifact is one replication object on a server: a slot (of the
// connection's database), a publication or a replication origin.
type Artifact struct {
	Kind string // KindSlot, KindPublication or KindOrigin
	Name string
}

// ArtifactsWithPrefix lists the slots, publications and origins whose
// names start with prefix followed by an underscore (the mover's are
// shardmover_<move id>), by kind then name. prefix follows the name rules
// (ValidateName).
func ArtifactsWithPrefix(ctx context.Context, db Querier, prefix string) ([]Artifact, error) {
	if err := ValidateName("artifact prefix", prefix); err != nil {
		return nil, err
	}
	like := prefix + `\_%`
	rows, err := db.Query(ctx, `
		SELECT $1::text, slot_name::text FROM pg_replication_slots WHERE slot_name LIKE $4 AND database = current_database()
		UNION ALL SELECT $2::text, pubname::text FROM pg_publication WHERE pubname LIKE $4
		UNION ALL SELECT $3::text, roname FROM pg_replication_origin WHERE roname LIKE $4
		ORDER BY 1, 2`, KindSlot, KindPublication, KindOrigin, like)
	if err != nil {
		return nil, fmt.Errorf("list replication objects: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Artifact])
}

// SourceCapacity is what a server needs to be a move's source: logical
// WAL, prepared transactions for the cutover's fence, and a free slot and
// WAL sender.
type SourceCapacity struct {
	WALLevel                string
	MaxPreparedTransactions int
	SlotsMax, SlotsUsed     int
	SendersMax, SendersUsed int
}

// ReadSourceCapacity reads a would-be source's settings and what of them
// is in use.
func ReadSourceCapacity(ctx context.Context, db DB) (SourceCapacity, error) {
	var c SourceCapacity
	err := db.QueryRow(ctx, `SELECT current_setting('wal_level'),
		current_setting('max_prepared_transactions')::int,
		current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots),
		current_setting('max_wal_senders')::int, (SELECT count(*) FROM pg_stat_replication)`).Scan(
		&c.WALLevel, &c.MaxPreparedTransactions, &c.SlotsMax, &c.SlotsUsed, &c.SendersMax, &c.SendersUsed)
	if err != nil {
		return c, fmt.Errorf("read replication settings: %w", err)
	}
	return c, nil
}

// ReadOriginCapacity reads how many replication origins a would-be target
// may have (max_replication_slots) and has.
func ReadOriginCapacity(ctx context.Context, db DB) (max, used int, err error) {
	if err := db.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_origin)`).Scan(&max, &used); err != nil {
		return 0, 0, fmt.Errorf("read replication origins: %w", err)
	}
	return max, used, nil
}
