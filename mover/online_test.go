package mover_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
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

// groupUsers returns n user ids whose github_events shard is in group g,
// with that shard's name.
func groupUsers(t *testing.T, c *cluster, g metadata.ShardGroup, n int) ([]int64, string) {
	t.Helper()
	ctx := context.Background()
	var shard int64
	var users []int64
	for u := int64(2_000_000); len(users) < n; u++ {
		var id int64
		require.NoError(t, c.cat.Pool().QueryRow(ctx, "SELECT get_shard_id_for_distribution_column('github_events', $1::bigint)", u).Scan(&id))
		if slices.Contains(g.ShardIDs, id) {
			shard, users = id, append(users, u)
		}
	}
	var name string
	require.NoError(t, c.cat.Pool().QueryRow(ctx, "SELECT shard_name('github_events'::regclass, $1)", shard).Scan(&name))
	return users, name
}

// serverOf is the sandbox server of a registered node.
func serverOf(t *testing.T, c *cluster, n metadata.Node) sandbox.Node {
	t.Helper()
	for _, s := range c.sb.Nodes {
		if s.Port == n.Port {
			return s
		}
	}
	t.Fatalf("no sandbox server for %s", n.Addr())
	return sandbox.Node{}
}

// connectApp opens a client session on server s named app; simple selects
// the simple query protocol (pgbench -M simple), else statements are
// prepared (pgbench -M prepared).
func connectApp(t *testing.T, s sandbox.Node, app string, simple bool) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(s.DSN())
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = app
	if simple {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestCitusSourceEntryWritesAtCutover: a write that enters Citus on the
// move's source worker while the cutover pauses writes must succeed, on
// the target, once the placements flip. Citus 13 plans such a statement
// against its local shard (citus.enable_local_fast_path_query_optimization)
// and takes the shard table's lock by name while planning, before its
// executor waits on the metadata lock the cutover holds. With the old
// shard renamed inside the fence, the statement found the name gone when
// the fence committed: `relation "public.github_events_102008" does not
// exist`, an error a pgbench client entering on the source saw (and, with
// the fence's EXCLUSIVE table lock, each such statement made the next
// attempt's lock wait out its lock_timeout). Both protocols (pgbench's
// -M simple and -M prepared), each an UPDATE and an INSERT in one
// transaction, as pgbench's script does.
func TestCitusSourceEntryWritesAtCutover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newCitusCluster(t, 4, 50, 400)
	target := c.newNode(t)
	g := citusGroup(t, c, workload.EventsTable, 0)
	source := nodeOfGroup(t, c, g.GroupID)
	users, _ := groupUsers(t, c, g, 2)
	for _, u := range users {
		_, err := c.cat.Pool().Exec(ctx, `INSERT INTO github_events (event_id, event_type, event_public, user_id, created_at, payload)
			VALUES ($1, 'PushEvent', true, $1, now(), '{"rev": 0}')`, u)
		require.NoError(t, err)
	}
	srv := serverOf(t, c, source)
	entries := []*pgx.Conn{connectApp(t, srv, "test_entry", true), connectApp(t, srv, "test_entry", false)}
	watch := connectApp(t, srv, "test_watch", false)

	results := make(chan error, len(entries))
	sent := false
	cfg := testConfig(t)
	cfg.CutoverStep = func(_ int64, step string) error {
		if step != string(mover.CutoverLocked) || sent {
			return nil
		}
		sent = true
		// Writes are paused: each client updates its user's row and
		// inserts another event, entering on the source.
		for i, conn := range entries {
			go func() {
				results <- pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					tag, err := tx.Exec(ctx, `UPDATE github_events SET payload = '{"rev": 1}' WHERE user_id = $1 AND event_id = $1`, users[i])
					if err != nil {
						return err
					}
					if tag.RowsAffected() != 1 {
						return fmt.Errorf("the UPDATE of user %d found %d rows", users[i], tag.RowsAffected())
					}
					_, err = tx.Exec(ctx, `INSERT INTO github_events (event_id, event_type, event_public, user_id, created_at, payload)
						VALUES ($1, 'PushEvent', true, $2, now(), '{"rev": 0}')`, users[i]+1_000_000_000, users[i])
					return err
				})
			}()
		}
		// Both wait for the cutover (on Citus's metadata lock), then it
		// goes on.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting int
			if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = 'test_entry' AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
				return err
			}
			if waiting == len(entries) {
				return nil
			}
			if time.Now().After(deadline) {
				t.Errorf("the writes entering on the source did not wait for the cutover (%d of %d waiting)", waiting, len(entries))
				return nil
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	m := scheduleMove(t, mover.New(cfg, c.cat), g.ShardIDs[0], target)
	require.NoError(t, mover.New(cfg, c.cat).Run(ctx, m.ID))
	assertDone(t, c, m.ID)
	require.True(t, sent, "the cutover ran the writes")
	for range entries {
		select {
		case err := <-results:
			assert.NoError(t, err, "a write entering on the source during the cutover must succeed on the target")
		case <-ctx.Done():
			t.Fatal("the writes entering on the source never finished")
		}
	}
	assert.Zero(t, first(rollbacks(t, c, m.ID)), "the writes waiting on the source must not roll the cutover back")
	for _, u := range users {
		var rev int64
		require.NoError(t, c.cat.Pool().QueryRow(ctx, "SELECT (payload->>'rev')::bigint FROM github_events WHERE user_id = $1 AND event_id = $1", u).Scan(&rev))
		assert.EqualValues(t, 1, rev, "user %d: the UPDATE must be on the placement Citus reads", u)
		var n int
		require.NoError(t, c.cat.Pool().QueryRow(ctx, "SELECT count(*) FROM github_events WHERE user_id = $1 AND event_id = $2", u, u+1_000_000_000).Scan(&n))
		assert.Equal(t, 1, n, "user %d: the INSERT must be on the placement Citus reads", u)
	}
}

// TestCitusRolledBackCutoverHoldsNothing: after a cutover attempt rolls
// back, nothing of the move holds a lock or a prepared transaction on any
// node while the mover waits to retry, and writes to the group go on
// through every node. (Each metadata node's part of the attempt, with
// Citus's metadata lock and, on the target, its EXCLUSIVE lock on the
// distributed tables, used to stay open through the backoff, up to 30 s:
// pgbench's slowest transactions were 31 s.) The applier is held by a
// SHARE lock on the target's shard so that the attempts run out of their
// pause; the backoff is long enough to look at every node during it.
func TestCitusRolledBackCutoverHoldsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newCitusCluster(t, 4, 50, 400)
	target := c.newNode(t)
	g := citusGroup(t, c, workload.EventsTable, 1)
	users, shardName := groupUsers(t, c, g, 1)
	_, err := c.cat.Pool().Exec(ctx, `INSERT INTO github_events (event_id, event_type, event_public, user_id, created_at, payload)
		VALUES ($1, 'PushEvent', true, $1, now(), '{"rev": 0}')`, users[0])
	require.NoError(t, err)

	hold := connectApp(t, serverOf(t, c, target), "test_hold", false)
	var holdTx pgx.Tx
	held := false
	cfg := testConfig(t)
	cfg.MaxWritePause = 400 * time.Millisecond
	cfg.CutoverBackoff = 5 * time.Second
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p != mover.CatchingUp || held {
			return nil
		}
		held = true
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
		// A write the applier must apply, held by the lock.
		_, err = c.cat.Pool().Exec(ctx, `UPDATE github_events SET payload = '{"rev": 1}' WHERE user_id = $1 AND event_id = $1`, users[0])
		return err
	}
	m := scheduleMove(t, mover.New(cfg, c.cat), g.ShardIDs[0], target)
	done := make(chan error, 1)
	go func() { done <- mover.New(cfg, c.cat).Run(ctx, m.ID) }()

	// Wait for the first rolled-back attempt.
	require.Eventually(t, func() bool { return first(rollbacks(t, c, m.ID)) > 0 }, time.Minute, 20*time.Millisecond, "the cutover must roll back while the applier is held")
	// The journal records the rollback just before the attempt's sessions
	// are released; give them a moment, well inside the 5 s backoff.
	time.Sleep(300 * time.Millisecond)
	checkedAt := time.Now()

	rev := int64(1)
	for _, s := range c.sb.Nodes {
		conn := connectApp(t, s, "test_check", false)
		var prepared []string
		rows, err := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts")
		require.NoError(t, err)
		prepared, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		assert.Empty(t, prepared, "no prepared transaction on %s during the backoff", s.Addr())
		// Locks held by the mover's sessions that a writer could wait on:
		// Citus's metadata locks (advisory), and table locks above ROW
		// EXCLUSIVE (the applier's own writes take that).
		rows, err = conn.Query(ctx, `SELECT l.locktype || ' ' || l.mode || ' ' || coalesce(l.relation::regclass::text, l.objid::text) || ' by ' || a.application_name
			FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.application_name LIKE 'shardmover%' AND l.granted
			  AND (l.locktype = 'advisory' AND l.objsubid NOT IN (1, 2) OR l.locktype = 'relation' AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', 'RowExclusiveLock'))`)
		require.NoError(t, err)
		held, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		assert.Empty(t, held, "no lock of the mover on %s during the backoff", s.Addr())
		// A write to the group entering on this node goes through at once.
		rev++
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		start := time.Now()
		_, err = conn.Exec(wctx, `UPDATE github_events SET payload = jsonb_build_object('rev', $2::bigint) WHERE user_id = $1 AND event_id = $1`, users[0], rev)
		wcancel()
		assert.NoError(t, err, "a write to the group entering on %s during the backoff", s.Addr())
		assert.Less(t, time.Since(start), time.Second, "a write to the group entering on %s during the backoff", s.Addr())
	}
	assert.Less(t, time.Since(checkedAt), cfg.CutoverBackoff-500*time.Millisecond, "the checks must have run inside the backoff")
	require.NoError(t, holdTx.Rollback(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the move never finished")
	}
	assertDone(t, c, m.ID)
	var got int64
	require.NoError(t, c.cat.Pool().QueryRow(ctx, "SELECT (payload->>'rev')::bigint FROM github_events WHERE user_id = $1 AND event_id = $1", users[0]).Scan(&got))
	assert.Equal(t, rev, got, "the last write of the backoff is the row's value after the move")
}

// TestCitusLongReadDuringMove: a long read of the group on the source
// (here a REPEATABLE READ transaction that read the group through the
// source worker and stays open, as a 60 s report would) neither holds the
// cutover back nor makes other reads wait: the move finishes while it is
// still open, and a short read of the group entering on each node during
// the write pause answers at once. (The fence's rename took ACCESS
// EXCLUSIVE on the old shard: it queued behind the long read, every read
// of the shard queued behind it, and the attempt rolled back and came back
// every few seconds until the reader was gone.)
func TestCitusLongReadDuringMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newCitusCluster(t, 4, 50, 400)
	target := c.newNode(t)
	g := citusGroup(t, c, workload.EventsTable, 2)
	source := nodeOfGroup(t, c, g.GroupID)
	users, _ := groupUsers(t, c, g, 1)
	_, err := c.cat.Pool().Exec(ctx, `INSERT INTO github_events (event_id, event_type, event_public, user_id, created_at, payload)
		VALUES ($1, 'PushEvent', true, $1, now(), '{"rev": 0}')`, users[0])
	require.NoError(t, err)

	long := connectApp(t, serverOf(t, c, source), "test_long_read", false)
	longTx, err := long.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	var before int
	require.NoError(t, longTx.QueryRow(ctx, "SELECT count(*) FROM github_events WHERE user_id = $1", users[0]).Scan(&before))
	require.Equal(t, 1, before)

	var mu sync.Mutex
	var slow []string
	readers := map[string]*pgx.Conn{}
	for _, s := range c.sb.Nodes {
		readers[s.Addr()] = connectApp(t, s, "test_short_read", false)
	}
	read := func(when string) {
		for addr, conn := range readers {
			start := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			var n int
			err := conn.QueryRow(rctx, "SELECT count(*) FROM github_events WHERE user_id = $1", users[0]).Scan(&n)
			rcancel()
			took := time.Since(start)
			mu.Lock()
			if err != nil || took > 100*time.Millisecond || n != 1 {
				slow = append(slow, fmt.Sprintf("%s, entering on %s: %d rows in %s (%v)", when, addr, n, took.Round(time.Millisecond), err))
			}
			mu.Unlock()
		}
	}
	cfg := testConfig(t)
	cfg.CutoverStep = func(_ int64, step string) error {
		if step == string(mover.CutoverLocked) || step == string(mover.CutoverPrepared) {
			read("at " + step)
		}
		return nil
	}
	m := scheduleMove(t, mover.New(cfg, c.cat), g.ShardIDs[0], target)
	start := time.Now()
	require.NoError(t, mover.New(cfg, c.cat).Run(ctx, m.ID))
	assertDone(t, c, m.ID)
	t.Logf("the move took %s with the long read open", time.Since(start).Round(time.Millisecond))
	read("after the move")
	assert.Empty(t, slow, "short reads of the group must answer within 100 ms")
	assert.Zero(t, first(rollbacks(t, c, m.ID)), "the long read must not roll the cutover back")
	// The long read still answers from its snapshot, on the old shard.
	var again int
	require.NoError(t, longTx.QueryRow(ctx, "SELECT count(*) FROM github_events WHERE user_id = $1", users[0]).Scan(&again))
	assert.Equal(t, before, again)
	require.NoError(t, longTx.Commit(ctx))
}

// first is the first of two values.
func first[A, B any](a A, _ B) A { return a }

// TestCompatLongReadBoundsTheFence: on compat the fence must rename the
// old shard (clients route themselves and need the 42P01 to re-route), and
// the rename waits for the reads in flight with every later read queued
// behind it. A long read of the source's shard (a transaction that read it
// and stays open) must cost the other reads no more than a moment per
// attempt: while it is open, short reads of the shard keep answering
// within the fence's bounded lock wait, the attempts roll back, and once
// the long read ends the move finishes.
func TestCompatLongReadBoundsTheFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newCluster(t, 4, 50, 400)
	target := c.newNode(t)
	shard, group := groupShard(t, c, 0)
	source := serverOf(t, c, nodeOfGroup(t, c, group))
	cfg := testConfig(t)
	cfg.CutoverBackoff = 200 * time.Millisecond
	cfg.CutoverMaxBackoff = 400 * time.Millisecond
	m := scheduleMove(t, mover.New(cfg, c.cat), shard, target)
	table := m.ShardTables[0]
	ident, err := metadata.ParseQualifiedName(table)
	require.NoError(t, err)

	long := connectApp(t, source, "test_long_read", false)
	longTx, err := long.Begin(ctx)
	require.NoError(t, err)
	var rows int
	require.NoError(t, longTx.QueryRow(ctx, "SELECT count(*) FROM "+ident.Sanitize()).Scan(&rows))

	done := make(chan error, 1)
	go func() { done <- mover.New(cfg, c.cat).Run(ctx, m.ID) }()
	short := connectApp(t, source, "test_short_read", false)
	var slowest time.Duration
	reads := 0
	for first(rollbacks(t, c, m.ID)) < 3 {
		start := time.Now()
		var n int
		require.NoError(t, short.QueryRow(ctx, "SELECT count(*) FROM "+ident.Sanitize()).Scan(&n), "a short read while the long one is open")
		slowest = max(slowest, time.Since(start))
		reads++
		select {
		case err := <-done:
			t.Fatalf("the move ended while the long read held the old shard: %v", err)
		case <-ctx.Done():
			t.Fatal("the cutover never rolled back while the long read was open")
		default:
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d short reads during the rolled-back attempts, slowest %s", reads, slowest.Round(time.Millisecond))
	assert.Less(t, slowest, 300*time.Millisecond, "a short read queued behind the fence's rename must wait at most about its bounded lock wait (100 ms)")
	require.NoError(t, longTx.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the move never finished after the long read ended")
	}
	assertDone(t, c, m.ID)
}
