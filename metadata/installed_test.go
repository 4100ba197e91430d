package metadata_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// TestInstallOnceInstalledTakesNoLock: once the catalogs are installed at
// this version, installing them again (every command does) must not wait
// for the journal's and the catalogs' writers: while another session holds
// the locks a cutover's decision holds (ROW EXCLUSIVE on the journal's
// tables and the placement and node catalogs), Install and InstallJournal
// return at once. Before, ALTER TABLE ... ADD COLUMN IF NOT EXISTS queued
// behind such a writer (and could deadlock with one). A recorded version
// that is not this one installs again and records this one.
func TestInstallOnceInstalledTakesNoLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCompat(t, 1)
	require.NoError(t, cat.Install(ctx))
	writer, err := cat.ConnectNode(ctx, sb.Coordinator().Host, sb.Coordinator().Port)
	require.NoError(t, err)
	defer writer.Close(ctx)
	tx, err := writer.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE shardmover.moves, shardmover.jobs, shardmover.cleanup,
		shardmover_catalog.pg_dist_placement, shardmover_catalog.pg_dist_node IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)

	quick, cancelQuick := context.WithTimeout(ctx, 5*time.Second)
	require.NoError(t, cat.Install(quick), "Install waited for a writer of the catalogs")
	require.NoError(t, cat.InstallJournal(quick), "InstallJournal waited for a writer of the journal")
	cancelQuick()
	require.NoError(t, tx.Rollback(ctx))

	// Another version recorded: the statements run again, and this
	// version is recorded.
	var current string
	require.NoError(t, cat.Pool().QueryRow(ctx, `SELECT version FROM shardmover.installed WHERE part = 'journal'`).Scan(&current))
	_, err = cat.Pool().Exec(ctx, `UPDATE shardmover.installed SET version = 'older' WHERE part = 'journal'`)
	require.NoError(t, err)
	_, err = cat.Pool().Exec(ctx, `ALTER TABLE shardmover.jobs DROP COLUMN leader_epoch`)
	require.NoError(t, err)
	require.NoError(t, cat.InstallJournal(ctx))
	var again string
	require.NoError(t, cat.Pool().QueryRow(ctx, `SELECT version FROM shardmover.installed WHERE part = 'journal'`).Scan(&again))
	require.Equal(t, current, again)
	var has bool
	require.NoError(t, cat.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = 'shardmover.jobs'::regclass AND attname = 'leader_epoch' AND NOT attisdropped)`).Scan(&has))
	require.True(t, has, "the install ran again and added the column back")
}
