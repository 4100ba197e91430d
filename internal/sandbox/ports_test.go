package sandbox

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReservePortsExcludesOthers(t *testing.T) {
	base, err := ReservePorts(3)
	require.NoError(t, err)
	defer ReleasePorts(base, base+1, base+2)
	assert.GreaterOrEqual(t, base, lowestFreePort)
	assert.Less(t, base+2, ephemeralLow(), "reserved ports must lie below the ephemeral range")

	// Another process opening the same lock file cannot lock it (flock is
	// per open file description, so a second open stands in for it).
	dir, err := portLockDir()
	require.NoError(t, err)
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(base+1)+".lock"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	assert.ErrorIs(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK)

	// This process does not hand the same port out twice.
	for i := 0; i < 50; i++ {
		p, err := ReservePorts(1)
		require.NoError(t, err)
		assert.NotContains(t, []int{base, base + 1, base + 2}, p)
		ReleasePorts(p)
	}

	// Released ports can be locked again.
	ReleasePorts(base + 1)
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
}

// A port grabbed by another program between reservation and server start
// moves the node to a fresh port instead of failing the cluster.
func TestStartMovesOffATakenPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "shardmover-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	c, err := Up(ctx, Config{Dir: dir, Workers: 1})
	require.NoError(t, err)
	defer func() { _ = c.Down(context.Background(), true) }()

	w := c.Nodes[1]
	require.NoError(t, c.StopNode(ctx, w, "fast"))
	l, err := net.Listen("tcp", w.Addr())
	require.NoError(t, err)
	defer l.Close()

	require.NoError(t, c.startNodeAt(ctx, 1))
	moved := c.Nodes[1]
	assert.NotEqual(t, w.Port, moved.Port)
	conn, err := pgx.Connect(ctx, moved.DSN())
	require.NoError(t, err)
	conn.Close(ctx)
	reopened, err := Open(dir, nil)
	require.NoError(t, err)
	assert.Equal(t, moved.Port, reopened.Nodes[1].Port, "the new port is saved")
}
