package metadata_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// TestInstallJournalRefusesNotACluster: the journal is created only in a
// cluster. On a database with neither the citus extension nor the compat
// catalogs, InstallJournal (which every command that records or cleans up
// calls first) is refused with ErrNotCluster, matching ErrInvalid, and
// creates nothing; Install, which makes a compat cluster, still creates
// the catalogs and the journal, and then InstallJournal passes.
func TestInstallJournalRefusesNotACluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := sandboxtest.New(t, 1) // nothing registered: the coordinator is a plain database
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: c.Coordinator().DSN()})
	require.NoError(t, err)
	defer cat.Close()
	ours := func() int {
		var n int
		require.NoError(t, cat.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'shardmover%'`).Scan(&n))
		return n
	}

	err = cat.InstallJournal(ctx)
	require.ErrorIs(t, err, metadata.ErrNotCluster)
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), c.Coordinator().Addr()+" is not a cluster's coordinator")
	assert.Zero(t, ours(), "a refused InstallJournal creates nothing")
	require.ErrorIs(t, cat.RequireCluster(ctx), metadata.ErrNotCluster)
	_, err = cat.Snapshot(ctx, metadata.SnapshotOptions{})
	require.ErrorIs(t, err, metadata.ErrNotCluster)

	require.NoError(t, cat.Install(ctx))
	assert.Equal(t, 2, ours(), "Install makes a compat cluster: shardmover_catalog and the journal")
	require.NoError(t, cat.RequireCluster(ctx))
	require.NoError(t, cat.InstallJournal(ctx))
}
