package replication

import (
	"context"
	"errors"
	"fmt"
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
	return createExportingSlot(ctx, sourceDSN, slot, true)
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
