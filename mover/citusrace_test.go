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
