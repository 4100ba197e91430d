package replication

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// ErrNoFreeSlot is returned (wrapped) by CreateTemporarySlot when the
// source has no replication slot or WAL sender to spare.
var ErrNoFreeSlot = errors.New("no free replication slot on the source")

// CreateTemporarySlot creates a TEMPORARY logical slot (pgoutput) on the
// source only for the consistent point and the snapshot it exports: a
// transaction that imports the snapshot (ImportSnapshot) sees exactly the
// source transactions whose commit record starts before ConsistentLSN, the
// ones a Stream delivers with a commit LSN (BeginMessage.FinalLSN) below
// it. Nothing ever streams from the slot.
//
// The slot lives as long as the replication connection the Snapshot holds:
// Release closes it, which drops the slot and ends the snapshot's
// importability, so release it as soon as the snapshot is imported. The
// slot needs a free slot (max_replication_slots) and WAL sender
// (max_wal_senders) on the source while it lives; without one the error
// wraps ErrNoFreeSlot. Creating it waits, like CreateSlot, for the
// transactions running on the source to end, so bound ctx.
func CreateTemporarySlot(ctx context.Context, sourceDSN, slot string) (*Snapshot, error) {
	if err := ValidateName("slot", slot); err != nil {
		return nil, err
	}
	cfg, err := parseDSN("source", sourceDSN)
	if err != nil {
		return nil, err
	}
	conn, err := connectReplication(ctx, cfg, slot)
	if err != nil {
		if pgCode(err) == "53300" { // too_many_connections: no WAL sender left
			return nil, fmt.Errorf("%w: %s has no free WAL sender for a temporary slot (raise max_wal_senders): %w", ErrNoFreeSlot, addr(cfg), err)
		}
		return nil, err
	}
	// The name is validated above: replication commands take no parameters.
	res, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, "CREATE_REPLICATION_SLOT "+slot+" TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT"))
	if err != nil {
		conn.Close(context.Background())
		switch pgCode(err) {
		case "53400": // configuration_limit_exceeded: all replication slots are in use
			return nil, fmt.Errorf("%w: every replication slot of %s is in use (max_replication_slots); a temporary slot needs one more: %w", ErrNoFreeSlot, addr(cfg), err)
		case "42710":
			return nil, fmt.Errorf("create temporary slot %q on %s: a slot with this name exists: %w", slot, addr(cfg), err)
		}
		return nil, fmt.Errorf("create temporary slot %q on %s: %w", slot, addr(cfg), err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("create temporary slot %q: parse consistent point %q: %w", slot, res.ConsistentPoint, err)
	}
	if err := validateSnapshot(res.SnapshotName); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return &Snapshot{Slot: slot, Name: res.SnapshotName, ConsistentLSN: lsn, conn: conn}, nil
}

// ImportSnapshot makes the transaction tx (just begun REPEATABLE READ,
// nothing run in it yet) read the exported snapshot name. The connection
// that exported it must still be open and idle.
func ImportSnapshot(ctx context.Context, tx DB, name string) error {
	if err := validateSnapshot(name); err != nil {
		return err
	}
	// The name is validated above (hex digits and dashes).
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+name+"'"); err != nil {
		return fmt.Errorf("import snapshot %s: %w", name, err)
	}
	return nil
}
