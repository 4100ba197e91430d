package metadata_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// TestMoveLeaseKey: a move's lease is the two-int4 advisory lock (0x534d,
// id), objsubid 2 in pg_locks, apart from the other lock classes; a move id
// that does not fit in int32 is refused instead of narrowed (ids 2^32 apart
// would otherwise share one lock), and takes no lock.
func TestMoveLeaseKey(t *testing.T) {
	ctx := context.Background()
	_, cat := sandboxtest.NewCompat(t, 1)
	pool := cat.Pool()

	moveLocks := func() (n int) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = 21325`).Scan(&n))
		return n
	}

	const id = 7
	lease, ok, err := cat.TryLease(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	defer lease.Release(ctx)
	assert.Equal(t, int64(id), lease.MoveID)
	require.NoError(t, lease.Held(ctx))
	var held bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid = 21325 AND objid = $1 AND objsubid = 2)`, uint32(id)).Scan(&held))
	assert.True(t, held, "move %d's lease is (0x534d, %d) in the two-int4 form", id, id)

	_, ok, err = cat.TryLease(ctx, id)
	require.NoError(t, err)
	assert.False(t, ok, "one lease per move")

	// The id 2^32 above, or the one that narrows to it, is refused: it
	// would have taken the same lock.
	for _, big := range []int64{id + 1<<32, id - 1<<32, math.MaxInt32 + 1, math.MinInt32 - 1, math.MaxInt64} {
		l, ok, err := cat.TryLease(ctx, big)
		require.ErrorIs(t, err, metadata.ErrInvalid, "move id %d", big)
		assert.Contains(t, err.Error(), "32-bit")
		assert.False(t, ok)
		assert.Nil(t, l)
	}
	assert.Equal(t, 1, moveLocks(), "a refused id takes no lock")

	// The largest id that fits has its own lock.
	top, ok, err := cat.TryLease(ctx, math.MaxInt32)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, top.Held(ctx))
	assert.Equal(t, int64(math.MaxInt32), top.MoveID)
	assert.Equal(t, 2, moveLocks())
	top.Release(ctx)

	// Other classes with the same second key are other locks.
	reb, ok, err := cat.TryLock(ctx, metadata.LockRebalance, id)
	require.NoError(t, err)
	require.True(t, ok, "the rebalance class is not the move class")
	reb.Release(ctx)

	// A dead lease of any id holds nothing.
	require.ErrorIs(t, metadata.DeadLease(id+1<<32).Held(ctx), metadata.ErrLeaseLost)
	require.ErrorIs(t, metadata.DeadLease(id).Held(ctx), metadata.ErrLeaseLost)
}
