package mover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// TestSessionReuse: a session given back clean is handed out again; one
// given back after an error or inside a transaction is closed instead;
// one whose server side died meanwhile is replaced by a new one; an idle
// one expires.
func TestSessionReuse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, cat := sandboxtest.NewCompat(t, 1)
	e := New(DefaultConfig(), cat)
	nodes, err := e.nodes(ctx)
	require.NoError(t, err)
	n := nodes[0]
	for _, x := range nodes {
		if x.GroupID != 0 {
			n = x
		}
	}

	a, err := e.session(ctx, n)
	require.NoError(t, err)
	e.release(n, a, nil)
	b, err := e.session(ctx, n)
	require.NoError(t, err)
	assert.Same(t, a, b, "a clean session is reused")

	failed := errors.New("step failed")
	e.release(n, b, &failed)
	assert.True(t, b.IsClosed(), "a session that served a failed step is closed")
	c, err := e.session(ctx, n)
	require.NoError(t, err)
	assert.NotSame(t, b, c)

	_, err = c.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	e.release(n, c, nil)
	assert.True(t, c.IsClosed(), "a session inside a transaction is closed")

	d, err := e.session(ctx, n)
	require.NoError(t, err)
	var pid int32
	require.NoError(t, d.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	e.release(n, d, nil)
	killer, err := e.connect(ctx, n)
	require.NoError(t, err)
	defer killer.Close(ctx)
	_, err = killer.Exec(ctx, "SELECT pg_terminate_backend($1, 5000)", pid)
	require.NoError(t, err)
	f, err := e.session(ctx, n)
	require.NoError(t, err)
	assert.NotSame(t, d, f, "a session whose backend died is not handed out")
	var one int
	require.NoError(t, f.QueryRow(ctx, "SELECT 1").Scan(&one))

	e.release(n, f, nil)
	e.sessions.mu.Lock()
	idle := e.sessions.idle[n.Addr()]
	require.Len(t, idle, 1)
	s := idle[0]
	e.sessions.mu.Unlock()
	e.sessions.expire(n.Addr(), s)
	assert.True(t, f.IsClosed(), "an idle session expires")
	assert.Nil(t, e.sessions.take(n.Addr()))

	for range sessionsPerNode + 2 {
		g, err := e.connect(ctx, n)
		require.NoError(t, err)
		e.release(n, g, nil)
	}
	e.sessions.mu.Lock()
	assert.Len(t, e.sessions.idle[n.Addr()], sessionsPerNode, "at most sessionsPerNode wait per node")
	e.sessions.mu.Unlock()
}
