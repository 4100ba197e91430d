package mover_test

import (
	"context"
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

// verifiedMessage is the journal's message on the move's step from
// catching_up to cutover.
func verifiedMessage(t *testing.T, c *cluster, id int64) string {
	t.Helper()
	hist, err := c.cat.MoveHistory(context.Background(), id)
	require.NoError(t, err)
	var msgs []string
	for _, h := range hist {
		if h.From == "catching_up" && h.To == "cutover" {
			msgs = append(msgs, h.Message)
		}
	}
	return strings.Join(msgs, " | ")
}

// TestMoveVerifiedUnderWorkload: moves with Verify (one throttled) while
// the workload writes to their groups succeed, the journal says each group
// verified equal at a source position, and the ledger checks out.
func TestMoveVerifiedUnderWorkload(t *testing.T) {
	c := newCluster(t, 4, 200, 4000)
	target := c.newNode(t)
	bg := startWorkload(c, 6, 200, 0)
	time.Sleep(300 * time.Millisecond)
	for i, rate := range []int64{0, 2 << 20} {
		shard, _ := groupShard(t, c, i)
		cfg := testConfig(t)
		cfg.Verify, cfg.VerifyBytesPerSecond = true, rate
		eng := mover.New(cfg, c.cat)
		m := scheduleMove(t, eng, shard, target)
		start := time.Now()
		require.NoError(t, eng.Run(context.Background(), m.ID))
		done, err := c.cat.Move(context.Background(), m.ID)
		require.NoError(t, err)
		assert.Equal(t, "done", string(done.Phase))
		msg := verifiedMessage(t, c, m.ID)
		assert.Regexp(t, `verified equal at [0-9A-F]+/[0-9A-F]+ \(2 tables, [1-9][0-9]* rows`, msg)
		t.Logf("move %d (verify throttle %d B/s) took %s: %s", m.ID, rate, time.Since(start).Round(time.Millisecond), msg)
	}
	time.Sleep(300 * time.Millisecond)
	verify(t, c, bg.stop(t))
}

// TestMoveVerifyFindsTampering: a row changed, deleted or added on the
// target's copy behind the applier's back (after indexing, before
// catch-up) fails the move before its cutover with a sentence naming the
// table and the key; the group keeps serving on its source, the target's
// tables are dropped, nothing of the move (temporary slot included) is
// left, and the ledger checks out.
func TestMoveVerifyFindsTampering(t *testing.T) {
	c := newCluster(t, 4, 200, 4000)
	target := c.newNode(t)
	bg := startWorkload(c, 4, 200, 0)
	cases := []struct {
		name string
		// sql runs on the target's github_users shard table (%s), which
		// the workload never writes; it returns the key it tampered with.
		sql  string
		what string
	}{
		{"changed", `UPDATE %s SET login = 'tampered' WHERE user_id = (SELECT min(user_id) FROM %s) RETURNING user_id`, "changed on the target"},
		{"deleted", `DELETE FROM %s WHERE user_id = (SELECT max(user_id) FROM %s) RETURNING user_id`, "missing on the target"},
		{"added", `INSERT INTO %s (user_id, login, created_at) VALUES (-424242, 'intruder', now()) RETURNING user_id`, "only on the target"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shard, source := groupShard(t, c, i)
			var key int64
			var users pgx.Identifier
			cfg := testConfig(t)
			cfg.Verify = true
			cfg.AfterPhase = func(id int64, p mover.Phase) error {
				if p != mover.Indexing {
					return nil
				}
				ctx := context.Background()
				m, err := c.cat.Move(ctx, id)
				if err != nil {
					return err
				}
				for _, name := range m.ShardTables {
					if strings.Contains(name, "github_users") {
						users, err = metadata.ParseQualifiedName(name)
						if err != nil {
							return err
						}
					}
				}
				conn, err := c.cat.ConnectNode(ctx, target.Host, target.Port)
				if err != nil {
					return err
				}
				defer conn.Close(ctx)
				return conn.QueryRow(ctx, strings.ReplaceAll(tc.sql, "%s", users.Sanitize())).Scan(&key)
			}
			eng := mover.New(cfg, c.cat)
			m := scheduleMove(t, eng, shard, target)
			err := eng.Run(context.Background(), m.ID)
			require.Error(t, err)
			t.Log(err)
			got, gerr := c.cat.Move(context.Background(), m.ID)
			require.NoError(t, gerr)
			assert.Equal(t, "failed", string(got.Phase))
			assert.False(t, got.CutoverCommitted)
			for _, want := range []string{"verify before cutover refused the cutover", metadata.DisplayQualifiedName(metadata.QualifiedName(users)) + " differs",
				"(" + strconv.FormatInt(key, 10) + ") " + tc.what, "rows with checksum"} {
				assert.Contains(t, got.Error, want)
			}
			assert.NotContains(t, got.Error, "\n")
			_, group := groupShard(t, c, i)
			assert.Equal(t, source, group, "a failed move leaves the group on its source")
			conn, cerr := c.cat.ConnectNode(context.Background(), target.Host, target.Port)
			require.NoError(t, cerr)
			defer conn.Close(context.Background())
			var left bool
			require.NoError(t, conn.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", users.Sanitize()).Scan(&left))
			assert.False(t, left, "the failed move's target table is dropped")
		})
	}
	verify(t, c, bg.stop(t)) // includes: no slot, publication, origin or prepared transaction left
}
