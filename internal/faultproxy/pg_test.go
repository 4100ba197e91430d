package faultproxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

func viaProxy(p *Proxy, extra string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=5 %s", p.Port(), extra)
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func count(t *testing.T, direct *pgx.Conn, table string) int {
	t.Helper()
	var n int
	require.NoError(t, direct.QueryRow(context.Background(), "select count(*) from "+table).Scan(&n))
	return n
}

func waitFired(t *testing.T, p *Proxy) {
	t.Helper()
	select {
	case <-p.Fired():
	case <-time.After(10 * time.Second):
		t.Fatal("the fault never fired")
	}
}

// TestPostgres runs the proxy against a real server of a sandbox.
func TestPostgres(t *testing.T) {
	node := sandboxtest.New(t, 1).Coordinator()
	direct := connect(t, node.DSN())
	bg := context.Background()

	t.Run("PassThrough", func(t *testing.T) { testPassThrough(t, node, direct) })

	t.Run("DelayCommit", func(t *testing.T) {
		p := startProxy(t, node.Addr())
		_, err := direct.Exec(bg, "create table t_delay (id int); create table t_other (id int)")
		require.NoError(t, err)
		c := connect(t, viaProxy(p, "application_name=mover"))
		// The decision transaction is the one that touches t_delay; an
		// earlier transaction's commit passes.
		p.SetRule(CommitOf(func(_ ConnInfo, m Message) bool { return m.Contains("t_delay") }, Delay(2*time.Second)))
		tx, err := c.Begin(bg)
		require.NoError(t, err)
		_, err = tx.Exec(bg, "insert into t_other values (1)")
		require.NoError(t, err)
		require.NoError(t, tx.Commit(bg))

		tx, err = c.Begin(bg)
		require.NoError(t, err)
		_, err = tx.Exec(bg, "insert into t_delay values (1)")
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = tx.Commit(ctx)
		require.Error(t, err, "the commit times out on the client")
		require.Less(t, time.Since(start), 1500*time.Millisecond)
		waitFired(t, p)
		require.Equal(t, 0, count(t, direct, "t_delay"), "not committed yet")
		require.Eventually(t, func() bool { return count(t, direct, "t_delay") == 1 }, 10*time.Second, 20*time.Millisecond,
			"the delayed COMMIT lands after all")
		landed := time.Since(start)
		require.GreaterOrEqual(t, landed, 1900*time.Millisecond)
		t.Logf("delayed commit landed %s after the client sent it", landed.Round(time.Millisecond))
		require.EqualValues(t, 1, p.Faults())
	})

	t.Run("Drop", func(t *testing.T) {
		p := startProxy(t, node.Addr())
		_, err := direct.Exec(bg, "create table t_drop (id int)")
		require.NoError(t, err)
		c := connect(t, viaProxy(p, ""))
		p.SetRule(Once(func(_ ConnInfo, m Message) bool { return m.Contains("insert into t_drop") }, Drop))
		ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		// Extended protocol: Parse/Bind/Describe/Execute/Sync in one write.
		_, err = c.Exec(ctx, "insert into t_drop values ($1)", pgx.QueryExecModeExec, 1)
		require.Error(t, err)
		require.GreaterOrEqual(t, time.Since(start), 450*time.Millisecond, "the client hangs until its context ends")
		waitFired(t, p)
		// Once the client gave up the server session ends; the insert never ran.
		require.Eventually(t, func() bool { return p.Conns() == 0 }, 10*time.Second, 20*time.Millisecond)
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, direct.QueryRow(bg, "select count(*) from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()").Scan(&n))
			return n == 0
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, 0, count(t, direct, "t_drop"))
	})

	t.Run("Cut", func(t *testing.T) {
		p := startProxy(t, node.Addr())
		_, err := direct.Exec(bg, "create table t_cut (id int)")
		require.NoError(t, err)
		// Simple protocol, then extended (Parse/Bind/Describe/Execute/Sync).
		for _, args := range [][]any{nil, {pgx.QueryExecModeExec, 1}} {
			c := connect(t, viaProxy(p, ""))
			p.SetRule(Once(func(_ ConnInfo, m Message) bool { return m.Contains("insert into t_cut") }, Cut))
			sql := "insert into t_cut values (1)"
			if args != nil {
				sql = "insert into t_cut values ($1)"
			}
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			_, err = c.Exec(ctx, sql, args...)
			cancel()
			require.Error(t, err)
			require.True(t, c.IsClosed())
			waitFired(t, p)
		}
		require.Eventually(t, func() bool { return p.Conns() == 0 }, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, 0, count(t, direct, "t_cut"))
	})

	t.Run("CutAfterForward", func(t *testing.T) {
		p := startProxy(t, node.Addr())
		_, err := direct.Exec(bg, "create table t_caf (id int)")
		require.NoError(t, err)
		// Simple protocol, then extended (Parse/Bind/Describe/Execute/Sync).
		for i, args := range [][]any{nil, {pgx.QueryExecModeExec, 2}} {
			c := connect(t, viaProxy(p, ""))
			p.SetRule(Once(func(_ ConnInfo, m Message) bool { return m.Contains("insert into t_caf") }, CutAfterForward))
			sql := "insert into t_caf values (1)"
			if args != nil {
				sql = "insert into t_caf values ($1)"
			}
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			_, err = c.Exec(ctx, sql, args...)
			cancel()
			require.Error(t, err, "the client never learns the outcome")
			waitFired(t, p)
			require.Eventually(t, func() bool { return count(t, direct, "t_caf") == i+1 }, 10*time.Second, 20*time.Millisecond,
				"the statement ran on the server")
		}
		var ids []int
		rows, err := direct.Query(bg, "select id from t_caf order by id")
		require.NoError(t, err)
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		require.Equal(t, []int{1, 2}, ids)
	})

	t.Run("CachedStatement", func(t *testing.T) {
		// pgx's default mode parses once, then only binds and executes.
		p := startProxy(t, node.Addr())
		_, err := direct.Exec(bg, "create table t_cache (id int)")
		require.NoError(t, err)
		c := connect(t, viaProxy(p, ""))
		_, err = c.Exec(bg, "insert into t_cache values ($1)", 1)
		require.NoError(t, err)
		p.SetRule(Once(func(_ ConnInfo, m Message) bool {
			return m.Type == 'B' && strings.Contains(m.Statement(), "insert into t_cache")
		}, CutAfterForward))
		_, err = c.Exec(bg, "insert into t_cache values ($1)", 2)
		require.Error(t, err)
		waitFired(t, p)
		require.Eventually(t, func() bool { return count(t, direct, "t_cache") == 2 }, 10*time.Second, 20*time.Millisecond)
	})

	t.Run("CutAfterForwardTransaction", func(t *testing.T) {
		// The unknown outcome of a decision: COMMIT forwarded, reply lost.
		p := startProxy(t, node.Addr())
		_, err := direct.Exec(bg, "create table t_cafx (id int)")
		require.NoError(t, err)
		c := connect(t, viaProxy(p, ""))
		p.SetRule(CommitOf(func(_ ConnInfo, m Message) bool { return m.Contains("t_cafx") }, CutAfterForward))
		tx, err := c.Begin(bg)
		require.NoError(t, err)
		_, err = tx.Exec(bg, "insert into t_cafx values ($1)", pgx.QueryExecModeExec, 7)
		require.NoError(t, err)
		require.Error(t, tx.Commit(bg))
		require.Eventually(t, func() bool { return count(t, direct, "t_cafx") == 1 }, 10*time.Second, 20*time.Millisecond)
	})

	t.Run("Refuse", func(t *testing.T) {
		p := startProxy(t, node.Addr())
		start := time.Now()
		p.Refuse(time.Second)
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		_, err := pgx.Connect(ctx, viaProxy(p, ""))
		require.Error(t, err)
		time.Sleep(time.Second - time.Since(start) + 100*time.Millisecond)
		c := connect(t, viaProxy(p, ""))
		require.NoError(t, c.Ping(bg))
	})

	t.Run("PauseResume", func(t *testing.T) {
		p := startProxy(t, node.Addr())
		c := connect(t, viaProxy(p, ""))
		p.Pause()
		done := make(chan int, 1)
		go func() {
			ctx, cancel := context.WithTimeout(bg, 20*time.Second)
			defer cancel()
			var n int
			_ = c.QueryRow(ctx, "select 41 + 1").Scan(&n)
			done <- n
		}()
		select {
		case <-done:
			t.Fatal("a query went through a paused proxy")
		case <-time.After(500 * time.Millisecond):
		}
		p.Resume()
		select {
		case n := <-done:
			require.Equal(t, 42, n)
		case <-time.After(10 * time.Second):
			t.Fatal("the query did not finish after Resume")
		}
	})

	t.Run("CutAll", func(t *testing.T) {
		p := startProxy(t, node.Addr())
		a, b := connect(t, viaProxy(p, "")), connect(t, viaProxy(p, ""))
		require.Equal(t, 2, p.Conns())
		p.CutAll()
		require.Error(t, a.Ping(bg))
		require.Error(t, b.Ping(bg))
		require.NoError(t, connect(t, viaProxy(p, "")).Ping(bg))
	})
}

func testPassThrough(t *testing.T, node sandbox.Node, direct *pgx.Conn) {
	bg := context.Background()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	p := startProxy(t, node.Addr())
	var mu sync.Mutex
	params := map[uint64]map[string]string{}
	types := map[byte]int{}
	p.SetRule(func(c ConnInfo, m Message) Action {
		mu.Lock()
		defer mu.Unlock()
		params[c.ID] = c.Params
		types[m.Type]++
		return Pass
	})

	// sslmode=prefer: the server's 'N' to SSLRequest comes back through.
	c := connect(t, viaProxy(p, "application_name=passthrough sslmode=prefer"))
	var n int
	require.NoError(t, c.QueryRow(ctx, "select 1", pgx.QueryExecModeSimpleProtocol).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, c.QueryRow(ctx, "select $1::int + 1", 41).Scan(&n))
	require.Equal(t, 42, n)

	_, err := c.Exec(ctx, "create table t_pass (id int, pad text)")
	require.NoError(t, err)
	tx, err := c.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "insert into t_pass values ($1, 'tx')", -1)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	// A COPY of about 6 MB.
	const rowsN = 60000
	pad := strings.Repeat("p", 100)
	copied, err := c.CopyFrom(ctx, pgx.Identifier{"t_pass"}, []string{"id", "pad"},
		pgx.CopyFromSlice(rowsN, func(i int) ([]any, error) { return []any{i, pad}, nil }))
	require.NoError(t, err)
	require.EqualValues(t, rowsN, copied)
	require.Equal(t, rowsN+1, count(t, direct, "t_pass"))
	var sum int64
	require.NoError(t, c.QueryRow(ctx, "select sum(id) from t_pass where id >= 0").Scan(&sum))
	require.EqualValues(t, int64(rowsN)*(rowsN-1)/2, sum)

	// A logical replication connection.
	rc, err := pgconn.Connect(ctx, viaProxy(p, "replication=database application_name=repl"))
	require.NoError(t, err)
	defer rc.Close(bg)
	sys, err := pglogrepl.IdentifySystem(ctx, rc)
	require.NoError(t, err)
	require.NotEmpty(t, sys.SystemID)
	require.Equal(t, "postgres", sys.DBName)

	mu.Lock()
	defer mu.Unlock()
	var apps []string
	for _, ps := range params {
		apps = append(apps, ps["application_name"])
		if ps["application_name"] == "repl" {
			require.Equal(t, "database", ps["replication"])
			require.True(t, ConnInfo{Params: ps}.Replication())
		}
		require.Equal(t, "postgres", ps["user"])
	}
	require.ElementsMatch(t, []string{"passthrough", "repl"}, apps)
	require.Greater(t, types['d'], 10, "COPY data went through as CopyData messages")
	require.Greater(t, types['P'], 0)
	require.Greater(t, types['Q'], 0)
}
