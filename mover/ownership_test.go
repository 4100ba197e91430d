package mover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// TestCitusMovesTheGroupFirst: while shardmover moves a group A -> B and
// before its decision, Citus's own citus_move_shard_placement moves the
// same group to the same target (its setup drops our copy on B by name and
// builds its own; its deferred cleanup later drops A's). shardmover's move
// must then end failed with a sentence saying so, and drop nothing a
// placement points at: the rows stay readable through Citus, also after
// Citus's cleanup has dropped the old copy on A. Three ways it happened:
// the move fails by itself at its next cutover, it is cancelled, and it is
// killed mid-copy and resumed after Citus's move. (Each time shardmover's
// failure cleanup dropped B's table by name, Citus's live placement, and
// every row of the shard was gone.)
func TestCitusMovesTheGroupFirst(t *testing.T) {
	ctx := context.Background()
	c := newCitusCluster(t, 8, 100, 1000)
	target := c.newNode(t)
	var total int
	require.NoError(t, c.cat.Pool().QueryRow(ctx, "SELECT count(*) FROM github_events").Scan(&total))
	require.Positive(t, total)

	citusMove := func(t *testing.T, g metadata.ShardGroup) {
		t.Helper()
		source := nodeOfGroup(t, c, g.GroupID)
		_, err := c.cat.Pool().Exec(ctx, "SELECT citus_move_shard_placement($1, $2, $3, $4, $5)",
			g.ShardIDs[0], source.Host, source.Port, target.Host, target.Port)
		require.NoError(t, err, "Citus's own move of the group")
	}
	// check: the move ended failed saying Citus moved the group, the
	// group is where Citus put it, and every row is readable through
	// Citus, before and after Citus's deferred cleanup.
	check := func(t *testing.T, m metadata.Move, g metadata.ShardGroup, wantPhase string) {
		t.Helper()
		got, err := c.cat.Move(ctx, m.ID)
		require.NoError(t, err)
		assert.Equal(t, wantPhase, string(got.Phase), "move %d: %s", m.ID, got.Error)
		if wantPhase == "failed" {
			assert.Contains(t, got.Error, "Citus's own mover", "the move's error says what happened")
		}
		placed, err := c.cat.PlacementGroupsOf(ctx, g.ShardIDs)
		require.NoError(t, err)
		for _, id := range g.ShardIDs {
			assert.Equal(t, []int32{target.GroupID}, placed[id], "shard %d is where Citus put it", id)
		}
		var n int
		require.NoError(t, c.cat.Pool().QueryRow(ctx, "SELECT count(*) FROM github_events").Scan(&n))
		assert.Equal(t, total, n, "every row readable through Citus after shardmover's move ended")
		require.NoError(t, c.cat.CleanupCitusOrphans(ctx))
		require.NoError(t, c.cat.Pool().QueryRow(ctx, "SELECT count(*) FROM github_events").Scan(&n))
		assert.Equal(t, total, n, "every row readable through Citus after Citus's cleanup")
	}

	t.Run("fails by itself", func(t *testing.T) {
		g := citusGroup(t, c, workload.EventsTable, 0)
		cfg := testConfig(t)
		cfg.RetryFor = 10 * time.Second
		moved := false
		cfg.AfterPhase = func(_ int64, p mover.Phase) error {
			if p == mover.Indexing && !moved {
				moved = true
				citusMove(t, g)
			}
			return nil
		}
		m := scheduleMove(t, mover.New(cfg, c.cat), g.ShardIDs[0], target)
		err := mover.New(cfg, c.cat).Run(ctx, m.ID)
		require.Error(t, err)
		require.True(t, moved)
		check(t, m, g, "failed")
	})

	t.Run("cancelled", func(t *testing.T) {
		g := citusGroup(t, c, workload.EventsTable, 1)
		cfg := testConfig(t)
		cfg.RetryFor = 10 * time.Second
		moved := false
		var id int64
		cfg.AfterPhase = func(_ int64, p mover.Phase) error {
			if p == mover.Indexing && !moved {
				moved = true
				citusMove(t, g)
				_, err := c.cat.RequestCancel(ctx, id)
				return err
			}
			return nil
		}
		m := scheduleMove(t, mover.New(cfg, c.cat), g.ShardIDs[0], target)
		id = m.ID
		_ = mover.New(cfg, c.cat).Run(ctx, m.ID)
		require.True(t, moved)
		got, err := c.cat.Move(ctx, m.ID)
		require.NoError(t, err)
		// Cancelled (the request won) or failed (the check saw Citus's
		// move first): either way nothing of Citus's is dropped.
		assert.Contains(t, []string{"cancelled", "failed"}, string(got.Phase))
		check(t, m, g, string(got.Phase))
	})

	t.Run("killed mid-copy, resumed", func(t *testing.T) {
		g := citusGroup(t, c, workload.EventsTable, 2)
		cfg := testConfig(t)
		cfg.RetryFor = 10 * time.Second
		cfg.AfterPhase = func(_ int64, p mover.Phase) error {
			if p == mover.Setup {
				return errors.New("kill") // in copying, as if the process died
			}
			return nil
		}
		m := scheduleMove(t, mover.New(cfg, c.cat), g.ShardIDs[0], target)
		require.ErrorIs(t, mover.New(cfg, c.cat).Run(ctx, m.ID), mover.ErrKilled)
		citusMove(t, g)
		eng := mover.New(testConfig(t), c.cat)
		require.NoError(t, eng.Recover(ctx))
		require.Error(t, eng.Run(ctx, m.ID))
		check(t, m, g, "failed")
	})
}

// TestSweepSparesAMoveStartedMeanwhile: `shardmover cleanup` (and the
// daemon's sweep, every minute) reads the journal, then looks for
// shardmover_<id> artifacts no unfinished move owns. A move created after
// that read, with its slot and publication already made, must keep them:
// the sweep judges every artifact by the journal as it is just before the
// drop. (It judged by its first read, took the new move's slot,
// publication and cleanup records for orphans, and the move failed with
// `slot "shardmover_4" does not exist`.)
func TestSweepSparesAMoveStartedMeanwhile(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 4, 50, 400)
	target := c.newNode(t)
	shard, group := groupShard(t, c, 0)
	source := nodeOfGroup(t, c, group)

	var m metadata.Move
	sweeper := mover.New(testConfig(t), c.cat)
	mover.SetSweepRead(sweeper, func() {
		// A move starts now and stops in copying, its artifacts made.
		cfg := testConfig(t)
		cfg.AfterPhase = func(_ int64, p mover.Phase) error {
			if p == mover.Setup {
				return errors.New("kill")
			}
			return nil
		}
		m = scheduleMove(t, mover.New(cfg, c.cat), shard, target)
		require.ErrorIs(t, mover.New(cfg, c.cat).Run(ctx, m.ID), mover.ErrKilled)
	})
	rep, err := sweeper.Sweep(ctx, mover.SweepOptions{})
	require.NoError(t, err)
	require.NotZero(t, m.ID, "the move started during the sweep")
	for _, it := range rep.Dropped {
		assert.NotContains(t, it.Name, m.Name(), "the sweep dropped %s %s of move %d, which was running (%s)", it.Object, it.Name, m.ID, it.Why)
	}
	conn, err := c.cat.ConnectNode(ctx, source.Host, source.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var slots int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", m.Name()).Scan(&slots))
	assert.Equal(t, 1, slots, "the move's slot survives the sweep")
	recs, err := c.cat.Cleanups(ctx, m.ID)
	require.NoError(t, err)
	assert.NotEmpty(t, recs, "the move's cleanup records survive the sweep")

	// The move resumes and finishes.
	require.NoError(t, mover.New(testConfig(t), c.cat).Run(ctx, m.ID))
	assertDone(t, c, m.ID)
}

// TestCitusPartRolledBackCarriesItsWrites: after a committed decision a
// bystander metadata node's part (its flip of the placements, prepared)
// is rolled back by someone before the mover commits it. Writes entering
// on that node are then routed to the old shard on the source, which on
// Citus keeps its name. The next settlement must point that node's
// placements at the target and carry what the old shard took over to the
// target. (It re-pointed the placements and recorded nothing: the write,
// acknowledged, was lost.)
func TestCitusPartRolledBackCarriesItsWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newCitusCluster(t, 4, 50, 200)
	target := c.newNode(t)
	g := citusGroup(t, c, workload.EventsTable, 0)
	users, _ := groupUsers(t, c, g, 1)
	nodes, err := c.cat.Nodes(ctx)
	require.NoError(t, err)
	var bystander metadata.Node
	for _, n := range metadata.MetadataNodes(nodes) {
		if n.GroupID != g.GroupID && n.GroupID != target.GroupID && !n.IsCoordinator() {
			bystander = n
		}
	}
	require.NotZero(t, bystander.Port, "a metadata worker that is neither source nor target")

	cfg := testConfig(t)
	cfg.CutoverStep = func(_ int64, step string) error {
		if step == string(mover.CutoverDecided) {
			return errors.New("kill")
		}
		return nil
	}
	m := scheduleMove(t, mover.New(cfg, c.cat), g.ShardIDs[0], target)
	require.ErrorIs(t, mover.New(cfg, c.cat).Run(ctx, m.ID), mover.ErrKilled)

	// Someone rolls the bystander's part back; a write enters there.
	by := connectApp(t, serverOf(t, c, bystander), "test_bystander", false)
	var gid string
	require.NoError(t, by.QueryRow(ctx, `SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'shardmover\_%'`).Scan(&gid))
	_, err = by.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
	require.NoError(t, err)
	_, err = by.Exec(ctx, `INSERT INTO github_events (event_id, event_type, event_public, user_id, created_at, payload)
		VALUES ($1, 'PushEvent', true, $1, now(), '{"rev": 7}')`, users[0])
	require.NoError(t, err, "the write entering on the bystander is acknowledged")

	eng := mover.New(testConfig(t), c.cat)
	require.NoError(t, eng.Recover(ctx))
	require.NoError(t, eng.Run(ctx, m.ID))
	assertDone(t, c, m.ID)
	var rev int64
	require.NoError(t, c.cat.Pool().QueryRow(ctx, "SELECT (payload->>'rev')::bigint FROM github_events WHERE user_id = $1 AND event_id = $1", users[0]).Scan(&rev),
		"the write acknowledged through the bystander must be on the placement Citus reads")
	assert.EqualValues(t, 7, rev)
	var placed int32
	require.NoError(t, by.QueryRow(ctx, "SELECT groupid FROM pg_dist_placement WHERE shardid = $1", g.ShardIDs[0]).Scan(&placed))
	assert.Equal(t, target.GroupID, placed, "the bystander routes to the target again")
}
