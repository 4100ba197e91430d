package mover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// TestFenceGoneAfterTheDecisionIsReestablished: the mover dies between the
// committed decision and COMMIT PREPARED, and someone rolls the prepared
// fence back by hand, so the source's shards are back under their own names
// while the placements already point at the target. A stale client then
// writes to the source. The next run must not take the fence as done: it
// renames the source's shards again, carries the write the source took to
// the target before dropping the slot, and finishes the move.
func TestFenceGoneAfterTheDecisionIsReestablished(t *testing.T) {
	fenceRolledBackAfterDecision(t, true, false)
}

// TestCarryOverDueSurvivesADeathAfterTheRefence: as above, and the run that
// re-establishes the fence dies right after it, before its carry-over. The
// source's shards are fenced again, so the run after that finds nothing to
// rename; the journal must still say that the write the source took is
// due on the target.
func TestCarryOverDueSurvivesADeathAfterTheRefence(t *testing.T) {
	fenceRolledBackAfterDecision(t, true, true)
}

// TestFenceGoneBeforeItsCommitIsReestablished: the same, but the mover
// lives on: the fence is rolled back (and the stale write taken) between
// the decision and the mover's own COMMIT PREPARED. That commit finds no
// fence, so the same run's cleanup must settle, re-fence and carry the
// write over, not take the fence it prepared as committed.
func TestFenceGoneBeforeItsCommitIsReestablished(t *testing.T) {
	fenceRolledBackAfterDecision(t, false, false)
}

// fenceRolledBackAfterDecision: die, the mover dies after the decision;
// dieAfterRefence, the next run dies after re-establishing the fence.
func fenceRolledBackAfterDecision(t *testing.T, die, dieAfterRefence bool) {
	c := newCluster(t, 4, 100, 1000)
	target := c.newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shard, sourceGroup := groupShard(t, c, 0)
	src := nodeOfGroup(t, c, sourceGroup)
	conn, err := c.cat.ConnectNode(ctx, src.Host, src.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)

	var users pgx.Identifier
	// rollBackAndWrite rolls the prepared fence back by hand, and a stale
	// client writes to the source's shard, back under its name.
	rollBackAndWrite := func() error {
		rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'")
		if err != nil {
			return err
		}
		gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(gids) != 1 {
			return fmt.Errorf("want one prepared fence, found %v", gids)
		}
		if _, err := conn.Exec(ctx, "ROLLBACK PREPARED '"+gids[0]+"'"); err != nil {
			return err
		}
		_, err = conn.Exec(ctx, "INSERT INTO "+users.Sanitize()+" (user_id, login, created_at) VALUES (987654321, 'stale', now())")
		return err
	}
	var hookErr error
	cfg := testConfig(t)
	cfg.CutoverStep = func(_ int64, step string) error {
		if step != "decided" {
			return nil
		}
		if die {
			return errors.New("die after the decision, before COMMIT PREPARED")
		}
		hookErr = rollBackAndWrite()
		return nil
	}
	m := scheduleMove(t, mover.New(cfg, c.cat), shard, target)
	for _, name := range m.ShardTables {
		id, err := metadata.ParseQualifiedName(name)
		require.NoError(t, err)
		if strings.HasPrefix(id[1], "github_users_") {
			users = id
		}
	}
	require.NotNil(t, users)
	if die {
		require.ErrorIs(t, mover.New(cfg, c.cat).Run(ctx, m.ID), mover.ErrKilled)
		got, err := c.cat.Move(ctx, m.ID)
		require.NoError(t, err)
		require.True(t, got.CutoverCommitted, "the decision committed before the kill")
		require.NoError(t, rollBackAndWrite())
		if dieAfterRefence {
			cfg := testConfig(t)
			cfg.CutoverStep = func(_ int64, step string) error {
				if step == "refenced" {
					return errors.New("die after the re-fence, before the carry-over")
				}
				return nil
			}
			require.ErrorIs(t, mover.New(cfg, c.cat).Run(ctx, m.ID), mover.ErrKilled)
			got, err := c.cat.Move(ctx, m.ID)
			require.NoError(t, err)
			require.True(t, got.CarryOverDue, "the journal says the carry-over is due")
			require.Equal(t, "cleanup", string(got.Phase))
		}
		require.NoError(t, mover.New(testConfig(t), c.cat).Run(ctx, m.ID))
	} else {
		require.NoError(t, mover.New(cfg, c.cat).Run(ctx, m.ID))
		require.NoError(t, hookErr)
	}
	done, err := c.cat.Move(ctx, m.ID)
	require.NoError(t, err)
	assert.Equal(t, "done", string(done.Phase))
	assert.False(t, done.CarryOverDue, "the carry-over was done and its record cleared")
	assertFlipped(t, c, done, target)

	tconn, err := c.cat.ConnectNode(ctx, target.Host, target.Port)
	require.NoError(t, err)
	defer tconn.Close(ctx)
	var login string
	require.NoError(t, tconn.QueryRow(ctx, "SELECT login FROM "+users.Sanitize()+" WHERE user_id = 987654321").Scan(&login),
		"the write the source took after the decision must reach the target")
	assert.Equal(t, "stale", login)
}
