package workload_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
)

func TestGeneratorIsDeterministic(t *testing.T) {
	a, b := workload.NewGenerator(42, 100), workload.NewGenerator(42, 100)
	for i := int64(1); i <= 200; i++ {
		ea, eb := a.Event(i), b.Event(i)
		require.Equal(t, ea, eb)
		assert.GreaterOrEqual(t, len(ea.Payload), 400, "payload of event %d", i)
		assert.LessOrEqual(t, len(ea.Payload), 2600, "payload of event %d", i)
	}
	assert.Equal(t, a.User(7), b.User(7))
	c := workload.NewGenerator(43, 100)
	assert.NotEqual(t, a.Event(1000).Payload, c.Event(1000).Payload)

	// Skew: the 1% most active users produce a large share of events.
	g := workload.NewGenerator(1, 10000)
	counts := map[int64]int{}
	for i := 0; i < 20000; i++ {
		counts[g.NextUserID()]++
	}
	top := 0
	for id := int64(1); id <= 100; id++ {
		top += counts[id]
	}
	assert.Greater(t, top, 20000/3, "the top 1%% of users should produce over a third of events")
}

func TestLoadRoutesRowsToTheirShards(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, cat := sandboxtest.NewCompat(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, 8))
	r, err := workload.NewRouter(ctx, cat, 4)
	require.NoError(t, err)
	defer r.Close()
	res, err := workload.Load(ctx, r, workload.LoadOptions{Seed: 3, Users: 300, Events: 3000, ChunkRows: 700})
	require.NoError(t, err)
	assert.Equal(t, workload.LoadResult{Users: 300, Events: 3000}, res)

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{})
	require.NoError(t, err)
	var users, events int64
	for _, tbl := range cl.Tables {
		for _, sh := range cl.TableShards(tbl) {
			p, _ := cl.PlacementOf(sh.ID)
			n, _ := cl.NodeByGroup(p.GroupID)
			conn, err := cat.ConnectNode(ctx, n.Host, n.Port)
			require.NoError(t, err)
			var wrong, total int64
			require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FILTER (WHERE hashint8(user_id) NOT BETWEEN $1 AND $2), count(*) FROM "+
				sh.Ident().Sanitize(), sh.Min, sh.Max).Scan(&wrong, &total))
			conn.Close(ctx)
			assert.Zero(t, wrong, "rows outside the hash range of %s", sh.Name())
			if tbl.Name == workload.UsersTable {
				users += total
			} else {
				events += total
			}
		}
	}
	assert.Equal(t, int64(300), users)
	assert.Equal(t, int64(3000), events)
	for _, g := range cl.Groups {
		assert.Positive(t, g.Bytes)
	}
}

func TestWorkloadLedgerAndChecker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, cat := sandboxtest.NewCompat(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, 4))
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	defer r.Close()

	opts := workload.DefaultRunOptions()
	opts.Duration = 3 * time.Second
	opts.Clients = 4
	opts.Users = 200
	res, err := workload.Run(ctx, r, opts)
	require.NoError(t, err)
	assert.Positive(t, res.Ledger.Inserts)
	assert.Positive(t, res.Ledger.Updates)
	assert.Positive(t, res.Ledger.Deletes)
	assert.Empty(t, res.Errors, "no errors without moves")

	v, err := workload.Check(ctx, r, res.Ledger)
	require.NoError(t, err)
	require.True(t, v.OK(), "violations: %v", v.Violations)
	assert.Equal(t, res.Ledger.Acknowledged(), v.Acknowledged)
	next, err := workload.NextRunID(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, uint8(1), next, "the run after run 0")

	// Corrupt one live row's value, delete another, resurrect a deleted
	// one: the checker must see all three.
	var live []workload.Key
	var gone workload.Key
	for k, s := range res.Ledger.Rows() {
		if s.Present && !s.InDoubt {
			live = append(live, k)
		} else if !s.Present && !s.InDoubt {
			gone = k
		}
	}
	require.GreaterOrEqual(t, len(live), 2)
	require.NotZero(t, gone.EventID)
	corrupt := func(k workload.Key, tmpl string) {
		require.NoError(t, r.Do(ctx, workload.EventsTable, k.UserID, func(ctx context.Context, tg workload.Target) error {
			_, err := tg.Pool.Exec(ctx, replaceTable(tmpl, tg.Rel.Sanitize()), k.UserID, k.EventID)
			return err
		}))
	}
	corrupt(live[0], "UPDATE {} SET payload = jsonb_set(payload, '{rev}', '999999') WHERE user_id = $1 AND event_id = $2")
	corrupt(live[1], "DELETE FROM {} WHERE user_id = $1 AND event_id = $2")
	corrupt(gone, "INSERT INTO {} (event_id, event_type, event_public, user_id, created_at, payload) VALUES ($2, 'PushEvent', true, $1, now(), '{}')")
	v, err = workload.Check(ctx, r, res.Ledger)
	require.NoError(t, err)
	assert.False(t, v.OK())
	assert.Equal(t, 1, v.WrongValue, v.Violations)
	assert.Equal(t, 1, v.Lost, v.Violations)
	assert.Equal(t, 1, v.Resurrected, v.Violations)
}

func replaceTable(tmpl, table string) string { return strings.Replace(tmpl, "{}", table, 1) }
