package mover_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// TestRolledBackFenceStaleAndFreshWriter is issue 31's second case, on
// compat. The mover dies after the decision, before COMMIT PREPARED; a
// client with stale routing has an UPDATE queued behind the fence; a DBA
// rolls the fence back, and the stale UPDATE lands on the old shard (as
// does a second stale UPDATE, of a row nobody else touches).
//
//  1. `shardmover cleanup` must notice the missing fence and re-establish
//     it (recording the carry-over as due), not wait for the move to be
//     resumed.
//  2. A fresh client then updates the first row on the target. Resuming
//     the move must not put the stale value over the fresh one: the
//     carry-over stops, naming the row, carries nothing, keeps the slot,
//     and the move stays in cleanup with the error recorded.
//  3. The operator settles the row by making the source's fenced copy
//     agree with the target; the next resume carries the other stale
//     write over and finishes.
//
// Without the cleanup (the move resumed directly), the resume's own
// settlement re-fences, and the carry-over must stop all the same.
func TestRolledBackFenceStaleAndFreshWriter(t *testing.T) {
	t.Run("cleanup first", func(t *testing.T) { staleAndFreshWriter(t, true) })
	t.Run("resumed directly", func(t *testing.T) { staleAndFreshWriter(t, false) })
}

func staleAndFreshWriter(t *testing.T, cleanupFirst bool) {
	c := newCluster(t, 4, 100, 1000)
	target := c.newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	shard, sourceGroup := groupShard(t, c, 0)
	src := nodeOfGroup(t, c, sourceGroup)
	conn, err := c.cat.ConnectNode(ctx, src.Host, src.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)

	cfg := testConfig(t)
	cfg.CutoverStep = func(_ int64, step string) error {
		if step == "decided" {
			return errors.New("die after the decision, before COMMIT PREPARED")
		}
		return nil
	}
	m := scheduleMove(t, mover.New(cfg, c.cat), shard, target)
	var users pgx.Identifier
	for _, name := range m.ShardTables {
		id, err := metadata.ParseQualifiedName(name)
		require.NoError(t, err)
		if strings.HasPrefix(id[1], "github_users_") {
			users = id
		}
	}
	require.NotNil(t, users)
	// Two rows the load wrote, which nothing touches during the move.
	rows, err := conn.Query(ctx, "SELECT user_id FROM "+users.Sanitize()+" ORDER BY user_id LIMIT 2")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 2)
	contested, staleOnly := ids[0], ids[1]

	require.ErrorIs(t, mover.New(cfg, c.cat).Run(ctx, m.ID), mover.ErrKilled)
	got, err := c.cat.Move(ctx, m.ID)
	require.NoError(t, err)
	require.True(t, got.CutoverCommitted, "the decision committed before the kill")

	// The stale client's UPDATE waits behind the fence's lock...
	stale, err := c.cat.ConnectNode(ctx, src.Host, src.Port)
	require.NoError(t, err)
	defer stale.Close(ctx)
	queued := make(chan error, 1)
	go func() {
		_, err := stale.Exec(ctx, "UPDATE "+users.Sanitize()+" SET login = 'stale' WHERE user_id = $1", contested)
		queued <- err
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-queued:
		t.Fatalf("the stale UPDATE did not wait for the fence: %v", err)
	default:
	}
	// ...until a DBA rolls the fence back: it is acknowledged on the old
	// shard, as is a second stale UPDATE.
	var gid string
	require.NoError(t, conn.QueryRow(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'").Scan(&gid))
	_, err = conn.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
	require.NoError(t, err)
	require.NoError(t, <-queued, "the stale UPDATE is acknowledged on the old shard")
	_, err = stale.Exec(ctx, "UPDATE "+users.Sanitize()+" SET login = 'stale only' WHERE user_id = $1", staleOnly)
	require.NoError(t, err)

	// 1. cleanup notices the missing fence.
	if cleanupFirst {
		_, err = mover.New(testConfig(t), c.cat).Sweep(ctx, mover.SweepOptions{KeepOldFor: 10 * time.Minute})
		require.NoError(t, err)
		got, err = c.cat.Move(ctx, m.ID)
		require.NoError(t, err)
		assert.True(t, got.CarryOverDue, "cleanup records the carry-over as due")
		var open bool
		require.NoError(t, conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", users.Sanitize()).Scan(&open))
		require.False(t, open, "`shardmover cleanup` must re-establish the fence of a committed decision")
	}

	// 2. A fresh client updates the contested row on the target.
	tconn, err := c.cat.ConnectNode(ctx, target.Host, target.Port)
	require.NoError(t, err)
	defer tconn.Close(ctx)
	_, err = tconn.Exec(ctx, "UPDATE "+users.Sanitize()+" SET login = 'fresh' WHERE user_id = $1", contested)
	require.NoError(t, err)
	login := func(id int64) string {
		var s string
		require.NoError(t, tconn.QueryRow(ctx, "SELECT login FROM "+users.Sanitize()+" WHERE user_id = $1", id).Scan(&s))
		return s
	}

	err = mover.New(testConfig(t), c.cat).Run(ctx, m.ID)
	require.Error(t, err, "the stale UPDATE must not be carried over the fresh one")
	t.Logf("the resumed move stops: %v", err)
	key := "(user_id)=(" + strconv.FormatInt(contested, 10) + ")"
	assert.Contains(t, err.Error(), key, "the error names the conflicting row")
	assert.NotContains(t, err.Error(), "(user_id)="+strconv.FormatInt(staleOnly, 10)+")", "a row only the source changed is no conflict")
	assert.Equal(t, "fresh", login(contested), "the fresh write survives")
	assert.NotEqual(t, "stale only", login(staleOnly), "a stopped carry-over carries nothing")
	got, err = c.cat.Move(ctx, m.ID)
	require.NoError(t, err)
	assert.Equal(t, "cleanup", string(got.Phase))
	assert.True(t, got.CarryOverDue)
	assert.Contains(t, got.Error, key, "the move records the conflict")
	var slots int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", m.Name()).Scan(&slots))
	assert.Equal(t, 1, slots, "the slot is kept")

	// 3. The operator keeps the target's value: the source's fenced copy
	// is made to agree, and the move finishes.
	fenced := pgx.Identifier{users[0], metadata.FencedName(users[1], m.ID)}
	_, err = conn.Exec(ctx, "UPDATE "+fenced.Sanitize()+" SET login = 'fresh' WHERE user_id = $1", contested)
	require.NoError(t, err)
	require.NoError(t, mover.New(testConfig(t), c.cat).Run(ctx, m.ID))
	done, err := c.cat.Move(ctx, m.ID)
	require.NoError(t, err)
	assert.Equal(t, "done", string(done.Phase))
	assert.False(t, done.CarryOverDue)
	assert.Empty(t, done.Error)
	assertFlipped(t, c, done, target)
	assert.Equal(t, "fresh", login(contested))
	assert.Equal(t, "stale only", login(staleOnly), "the source's write nobody contested reaches the target")
}
