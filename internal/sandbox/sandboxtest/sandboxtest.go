package sandboxtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/metadata"
)

// New starts a coordinator and the given number of workers on free ports and
// registers their shutdown with t.Cleanup.
func New(t testing.TB, workers int) *sandbox.Cluster {
	t.Helper()
	return NewWithSettings(t, workers, nil)
}

// NewWithSettings is New with extra postgresql.conf settings on every node.
func NewWithSettings(t testing.TB, workers int, settings map[string]string) *sandbox.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "shardmover-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := sandbox.Up(ctx, sandbox.Config{Dir: dir, Workers: workers, Settings: settings})
	if err != nil {
		_ = os.RemoveAll(dir)
	}
	require.NoError(t, err, "start sandbox cluster")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Down(ctx, true); err != nil {
			t.Logf("sandbox down: %v", err)
		}
	})
	return c
}

// NewCompat starts a sandbox with the given number of workers, installs the
// compat catalogs and registers every worker. The catalog is closed when
// the test ends.
func NewCompat(t testing.TB, workers int) (*sandbox.Cluster, *metadata.Catalog) {
	t.Helper()
	c := New(t, workers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: c.Coordinator().DSN()})
	require.NoError(t, err)
	t.Cleanup(cat.Close)
	require.NoError(t, c.Register(ctx, cat))
	return c, cat
}
