package sandboxtest

import (
	"context"
	"os"
	"syscall"
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
	return start(t, sandbox.Config{Workers: workers, Settings: settings})
}

// memDir is a memory-backed folder the clusters' data may live in, and
// the room it must have left for that.
const (
	memDir  = "/dev/shm"
	memRoom = 4 << 30
)

// parentDir is where a test cluster's directory goes: $SHARDMOVER_TEST_DIR
// when set, else memDir when it is there with room to spare, else the
// system's temporary directory. The tests create and drop thousands of
// files (tables, WAL segments, whole data directories); on a disk file
// system that work was a good part of the servers' time.
func parentDir() string {
	if d := os.Getenv("SHARDMOVER_TEST_DIR"); d != "" {
		return d
	}
	var st syscall.Statfs_t
	if syscall.Statfs(memDir, &st) == nil && int64(st.Bavail)*int64(st.Bsize) >= memRoom {
		return memDir
	}
	return ""
}

func start(t testing.TB, cfg sandbox.Config) *sandbox.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp(parentDir(), "shardmover-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg.Dir = dir
	c, err := sandbox.Up(ctx, cfg)
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

// RequireCitusEnv is the environment variable that makes Citus tests fail
// instead of skipping when Citus is not installed (.ci/run sets it: CI
// installs Citus with make deps, so a skip there would hide a broken install).
const RequireCitusEnv = "SHARDMOVER_REQUIRE_CITUS"

// RequireCitus skips the test, with one sentence saying what to install, when
// the PostgreSQL server cannot load Citus; with SHARDMOVER_REQUIRE_CITUS set
// it fails instead.
func RequireCitus(t testing.TB) {
	t.Helper()
	err := sandbox.CitusAvailable("")
	if err == nil {
		return
	}
	if os.Getenv(RequireCitusEnv) != "" {
		t.Fatalf("%s is set but Citus cannot be used: %v", RequireCitusEnv, err)
	}
	t.Skipf("Citus tests skipped: %v", err)
}

// NewCitus starts a Citus sandbox (a coordinator and the given number of
// workers, every worker added with citus_add_node and metadata synced) and
// opens a catalog on its coordinator, closed when the test ends. It skips or
// fails as RequireCitus does when Citus is not installed.
func NewCitus(t testing.TB, workers int) (*sandbox.Cluster, *metadata.Catalog) {
	t.Helper()
	RequireCitus(t)
	c := start(t, sandbox.Config{Workers: workers, Citus: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: c.Coordinator().DSN()})
	require.NoError(t, err)
	t.Cleanup(cat.Close)
	require.Equal(t, metadata.Citus, cat.Flavor(), "a Citus sandbox's coordinator must be read as the citus flavor")
	return c, cat
}
