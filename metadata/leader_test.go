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

func fakeSpecs(colocation int32, n int) []metadata.MoveSpec {
	var out []metadata.MoveSpec
	for i := 0; i < n; i++ {
		out = append(out, metadata.MoveSpec{
			Group:       metadata.ShardGroup{ColocationID: colocation, Index: i, ShardIDs: []int64{int64(colocation)*100 + int64(i)}},
			ShardTables: []string{"public.t"}, SourceGroup: 1, TargetGroup: 2,
		})
	}
	return out
}

// TestLeaderFencing: a leader's epoch is bumped by each new term; job
// creation, adoption and the nodes-seen record are refused with
// ErrNotLeader once the leader's lock session is gone (even before anyone
// else leads) or a newer epoch exists; a new leader adopts the old term's
// unfinished jobs and settles the state of jobs whose moves all ended.
func TestLeaderFencing(t *testing.T) {
	ctx := context.Background()
	_, cat := sandboxtest.NewCompat(t, 1)

	rec, ok, err := cat.CurrentLeader(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "no daemon has led yet: %+v", rec)
	phases, err := cat.MovesByPhase(ctx)
	require.NoError(t, err)
	assert.Empty(t, phases)

	lease1, ok, err := cat.TryLeaderLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	term1, err := cat.TakeLeadership(ctx, lease1, "daemon one", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(1), term1.Epoch)
	require.NoError(t, cat.CheckLeadership(ctx, term1))
	rec, ok, err = cat.CurrentLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, metadata.LeaderRecord{Epoch: 1, Holder: "daemon one", PID: int32(term1.PID()), Since: rec.Since, Held: true}, rec)
	_, ok, err = cat.TryLeaderLock(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "one leader lock")

	job1, moves, err := cat.CreateLeaderJob(ctx, term1, "rebalance", "", fakeSpecs(9001, 3))
	require.NoError(t, err)
	require.Len(t, moves, 3)
	epochOf := func(id int64) int64 {
		var e int64
		require.NoError(t, cat.Pool().QueryRow(ctx, "SELECT leader_epoch FROM shardmover.jobs WHERE id = $1", id).Scan(&e))
		return e
	}
	assert.Equal(t, int64(1), epochOf(job1.ID))
	_, _, err = cat.CreateLeaderJob(ctx, term1, "rebalance", "", fakeSpecs(9001, 1))
	require.ErrorIs(t, err, metadata.ErrGroupBusy, "a held group still refuses the whole job")
	require.NoError(t, cat.SetPhase(ctx, moves[0].ID, "scheduled", "done", "test", ""))
	phases, err = cat.MovesByPhase(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"scheduled": 2, "done": 1}, phases)
	_, ok, err = cat.NodesSeen(ctx)
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, cat.RecordNodesSeen(ctx, term1, []int32{3, 2}))
	seen, ok, err := cat.NodesSeen(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, []int32{2, 3}, seen)

	// The coordinator ends the leader's lock session: the leader is fenced
	// at once, before anyone else leads.
	_, err = cat.Pool().Exec(ctx, "SELECT pg_terminate_backend($1, 5000)", int32(term1.PID()))
	require.NoError(t, err)
	err = cat.CheckLeadership(ctx, term1)
	require.ErrorIs(t, err, metadata.ErrNotLeader)
	_, _, err = cat.CreateLeaderJob(ctx, term1, "rebalance", "", fakeSpecs(9002, 1))
	require.ErrorIs(t, err, metadata.ErrNotLeader)
	_, err = cat.AdoptJobs(ctx, term1, false, "rebalance")
	require.ErrorIs(t, err, metadata.ErrNotLeader)
	require.ErrorIs(t, cat.RecordNodesSeen(ctx, term1, []int32{2}), metadata.ErrNotLeader)
	require.ErrorIs(t, cat.VerifyLeadership(ctx, term1), metadata.ErrNotLeader)
	require.ErrorIs(t, cat.FinishLeaderJob(ctx, term1, job1.ID, "paused", ""), metadata.ErrNotLeader,
		"a lost term cannot record its job's state")

	var lease2 *metadata.Lease
	require.Eventually(t, func() bool {
		l, ok, err := cat.TryLeaderLock(ctx)
		lease2 = l
		return err == nil && ok
	}, 10*time.Second, 50*time.Millisecond, "the lock is free once the old session is gone")
	term2, err := cat.TakeLeadership(ctx, lease2, "daemon two", 0)
	require.NoError(t, err)
	defer term2.Release(ctx)
	assert.Equal(t, int64(2), term2.Epoch)
	_, _, err = cat.CreateLeaderJob(ctx, term1, "rebalance", "", fakeSpecs(9002, 1))
	require.ErrorIs(t, err, metadata.ErrNotLeader, "a stale epoch is refused")

	// A job whose moves all ended while its state still says running is
	// settled; the unfinished one is adopted.
	job2, moves2, err := cat.CreateLeaderJob(ctx, term2, "drain", "", fakeSpecs(9003, 1))
	require.NoError(t, err)
	require.NoError(t, cat.SetPhase(ctx, moves2[0].ID, "scheduled", "failed", "test", "boom"))
	adopted, err := cat.AdoptJobs(ctx, term2, false, "rebalance", "drain")
	require.NoError(t, err)
	require.Len(t, adopted, 1)
	assert.Equal(t, job1.ID, adopted[0].ID)
	assert.Equal(t, "running", string(adopted[0].State))
	assert.Equal(t, int64(2), epochOf(job1.ID))
	j2, err := cat.Job(ctx, job2.ID)
	require.NoError(t, err)
	assert.Equal(t, "failed", string(j2.State))
	assert.NotNil(t, j2.FinishedAt)
	own, err := cat.AdoptJobs(ctx, term2, true, "rebalance")
	require.NoError(t, err)
	assert.Len(t, own, 1)
	require.NoError(t, cat.VerifyLeadership(ctx, term2))
	require.NoError(t, cat.FinishLeaderJob(ctx, term2, job1.ID, "paused", ""), "the term that adopted the job records its state")
	require.ErrorIs(t, cat.FinishLeaderJob(ctx, term2, 424242, "done", ""), metadata.ErrNotLeader, "a job the term does not own")

	// An epoch bumped underneath (another leader recorded itself) fences
	// the holder even though its session still holds the lock.
	_, err = cat.Pool().Exec(ctx, "UPDATE shardmover.leader SET epoch = epoch + 1")
	require.NoError(t, err)
	err = cat.CheckLeadership(ctx, term2)
	require.ErrorIs(t, err, metadata.ErrNotLeader)
	assert.Contains(t, err.Error(), "superseded")
	_, err = cat.AdoptJobs(ctx, term2, true, "rebalance")
	require.ErrorIs(t, err, metadata.ErrNotLeader)
}

// TestLeaderLeaseExpires: a leader that stops checking its lock (as one
// cut off from the coordinator does) loses it after its time to live,
// though no connection broke: the coordinator ends the idle lock session,
// and another daemon can lead.
func TestLeaderLeaseExpires(t *testing.T) {
	ctx := context.Background()
	_, cat := sandboxtest.NewCompat(t, 1)
	lease, ok, err := cat.TryLeaderLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	term, err := cat.TakeLeadership(ctx, lease, "silent", 500*time.Millisecond)
	require.NoError(t, err)
	defer term.Release(ctx)
	// Checking in time keeps the lease.
	for i := 0; i < 4; i++ {
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, cat.CheckLeadership(ctx, term))
	}
	var next *metadata.Lease
	start := time.Now()
	require.Eventually(t, func() bool {
		l, ok, err := cat.TryLeaderLock(ctx)
		next = l
		return err == nil && ok
	}, 10*time.Second, 100*time.Millisecond, "the silent leader's lock expires")
	defer next.Release(ctx)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	require.ErrorIs(t, cat.CheckLeadership(ctx, term), metadata.ErrNotLeader)
}
