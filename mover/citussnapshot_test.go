package mover_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// TestCitusTargetEntryWritesAtCutover: a write that enters Citus on the
// move's target node while the cutover pauses writes runs there, locally,
// once the placements flip. It must find every row the source acknowledged
// before it began, also rows the applier commits on the target only inside
// the pause. Here the applier is held (a SHARE lock on the target's shard
// table) while two rows are inserted through the coordinator; once writes
// are paused an UPDATE of one and a DELETE of the other enter on the
// target and wait, and then the applier is let go. Each must find its row.
// (Citus takes its metadata lock after the statement's snapshot: a write
// that waited on it alone ran with a snapshot older than the applier's
// last commits and found no row: the UPDATE was lost, the deleted row
// stayed.)
//
// The target is a new worker (its part of the cutover locks the tables),
// then the coordinator (the decision does). The groups also hold a shard of
// a table whose schema and name are hostile (the lock names the tables).
func TestCitusTargetEntryWritesAtCutover(t *testing.T) {
	ctx := context.Background()
	c := newCitusCluster(t, 4, 50, 400)
	const hostile = `"we.ird"."Ev""il'); DROP TABLE github_users; --"`
	for _, stmt := range []string{
		`CREATE SCHEMA "we.ird"`,
		`CREATE TABLE ` + hostile + ` (user_id bigint PRIMARY KEY, note char(7) NOT NULL)`,
		`SELECT create_distributed_table($$` + hostile + `$$, 'user_id', colocate_with => 'github_events')`,
		`INSERT INTO ` + hostile + ` SELECT g, 'n' || g FROM generate_series(1, 500) g`,
	} {
		_, err := c.cat.Pool().Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		var rows, octets int
		require.NoError(t, c.cat.Pool().QueryRow(ctx, `SELECT count(*), sum(octet_length(note)) FROM `+hostile).Scan(&rows, &octets))
		assert.Equal(t, 500, rows, "the hostile table's rows after the moves")
		assert.Equal(t, 500*7, octets, "char(7) values keep their padding")
		var users int
		require.NoError(t, c.cat.Pool().QueryRow(ctx, `SELECT count(*) FROM github_users`).Scan(&users))
		assert.Positive(t, users)
	})
	t.Run("worker", func(t *testing.T) {
		targetEntryWrites(t, c, citusGroup(t, c, workload.EventsTable, 0), c.newNode(t))
	})
	t.Run("coordinator", func(t *testing.T) {
		_, err := c.cat.Pool().Exec(ctx, "SELECT citus_set_node_property(nodename, nodeport, 'shouldhaveshards', true) FROM pg_dist_node WHERE groupid = 0")
		require.NoError(t, err)
		nodes, err := c.cat.Nodes(ctx)
		require.NoError(t, err)
		var coordinator metadata.Node
		for _, n := range nodes {
			if n.IsCoordinator() {
				coordinator = n
			}
		}
		targetEntryWrites(t, c, citusGroup(t, c, workload.EventsTable, 1), coordinator)
	})
}

func targetEntryWrites(t *testing.T, c *cluster, g metadata.ShardGroup, target metadata.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	coord := c.cat.Pool()

	// Two users whose events shard is in the group.
	var shard int64
	var users []int64
	for u := int64(1_000_000); len(users) < 2; u++ {
		var id int64
		require.NoError(t, coord.QueryRow(ctx, "SELECT get_shard_id_for_distribution_column('github_events', $1::bigint)", u).Scan(&id))
		if slices.Contains(g.ShardIDs, id) {
			shard, users = id, append(users, u)
		}
	}
	var shardName string
	require.NoError(t, coord.QueryRow(ctx, "SELECT shard_name('github_events'::regclass, $1)", shard).Scan(&shardName))
	var node sandbox.Node
	for _, n := range c.sb.Nodes {
		if n.Port == target.Port {
			node = n
		}
	}
	require.NotZero(t, node.Port, "the target's server")
	connect := func(app string) *pgx.Conn {
		cfg, err := pgx.ParseConfig(node.DSN())
		require.NoError(t, err)
		cfg.RuntimeParams["application_name"] = app
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	hold := connect("test_hold")
	entries := []*pgx.Conn{connect("test_entry"), connect("test_entry")}

	type result struct {
		affected int64
		err      error
	}
	results := make(chan result, 2)
	var holdTx pgx.Tx
	held, sent := false, false
	cfg := testConfig(t)
	cfg.MaxWritePause = time.Minute // the hook below runs inside the pause
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p != mover.CatchingUp || held {
			return nil
		}
		held = true
		// Hold the applier before the rows, then insert them on the source.
		var err error
		if holdTx, err = hold.Begin(ctx); err != nil {
			return err
		}
		if _, err := holdTx.Exec(ctx, "SET LOCAL citus.enable_manual_changes_to_shards = on"); err != nil {
			return err
		}
		if _, err := holdTx.Exec(ctx, "LOCK TABLE "+shardName+" IN SHARE MODE"); err != nil {
			return err
		}
		for _, u := range users {
			if _, err := coord.Exec(ctx, `INSERT INTO github_events (event_id, event_type, event_public, user_id, created_at, payload)
				VALUES ($1, 'PushEvent', true, $1, now(), '{"rev": 0}')`, u); err != nil {
				return err
			}
		}
		return nil
	}
	cfg.CutoverStep = func(_ int64, step string) error {
		if step != string(mover.CutoverLocked) || sent {
			return nil
		}
		sent = true
		// Writes are paused: an UPDATE and a DELETE enter on the target.
		for i, stmt := range []string{
			`UPDATE github_events SET payload = '{"rev": 1}' WHERE user_id = $1 AND event_id = $1`,
			`DELETE FROM github_events WHERE user_id = $1 AND event_id = $1`,
		} {
			go func() {
				tag, err := entries[i].Exec(ctx, stmt, users[i])
				results <- result{tag.RowsAffected(), err}
			}()
		}
		// Both wait for the cutover; then the applier is let go.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting int
			if err := hold.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = 'test_entry' AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
				return err
			}
			if waiting == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the writes entering on the target did not wait for the cutover (%d of 2 waiting)", waiting)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return holdTx.Rollback(ctx)
	}
	m := scheduleMove(t, mover.New(cfg, c.cat), g.ShardIDs[0], target)
	require.NoError(t, mover.New(cfg, c.cat).Run(ctx, m.ID))
	assertDone(t, c, m.ID)
	require.True(t, sent, "the cutover ran the writes")
	for range 2 {
		select {
		case r := <-results:
			require.NoError(t, r.err)
			assert.EqualValues(t, 1, r.affected, "a write entering on the target during the cutover must find the row the source acknowledged before it")
		case <-ctx.Done():
			t.Fatal("the writes entering on the target never finished")
		}
	}
	// Read through the coordinator: the update stands, the deleted row is gone.
	var rev int64
	require.NoError(t, coord.QueryRow(ctx, "SELECT (payload->>'rev')::bigint FROM github_events WHERE user_id = $1 AND event_id = $1", users[0]).Scan(&rev))
	assert.EqualValues(t, 1, rev, "the UPDATE entering on the target must have updated the row")
	var left int
	require.NoError(t, coord.QueryRow(ctx, "SELECT count(*) FROM github_events WHERE user_id = $1 AND event_id = $1", users[1]).Scan(&left))
	assert.Zero(t, left, "the DELETE entering on the target must have deleted the row")
}
