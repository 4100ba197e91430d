package replication_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

const swapDDL = `CREATE TABLE %s (
	id int PRIMARY KEY,
	u int NOT NULL,
	rng int4range NOT NULL,
	pad text,
	CONSTRAINT %s_u UNIQUE (u),
	CONSTRAINT %s_rng EXCLUDE USING gist (rng WITH &&)
)`

// swapRows inserts rows lo..hi into table in one statement: u = id and a
// range of its own, so swaps and inserts never collide.
func swapRows(table string, lo, hi int) string {
	return fmt.Sprintf(`INSERT INTO %s SELECT g, g, int4range(g * 10, g * 10 + 5), 'p' || g FROM generate_series(%d, %d) g`, table, lo, hi)
}

// swap exchanges the unique value u and the excluded range rng of rows a
// and b of table in one source transaction, as the mover's matrix test
// does: a takes a temporary value, b takes a's, a takes b's. Regrouped
// (a's two updates folded into one, both rows in one multi-row UPDATE)
// this always conflicts on the target; in source order it never does.
func swap(conn *pgx.Conn, table string, a, b int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	var ua, ub int
	var ra, rb string
	if err := tx.QueryRow(ctx, "SELECT u, rng::text FROM "+table+" WHERE id = $1", a).Scan(&ua, &ra); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, "SELECT u, rng::text FROM "+table+" WHERE id = $1", b).Scan(&ub, &rb); err != nil {
		return err
	}
	for _, s := range [][]any{{a, -ua, "empty"}, {b, ua, ra}, {a, ub, rb}} {
		if _, err := tx.Exec(ctx, "UPDATE "+table+" SET u = $2, rng = $3::text::int4range WHERE id = $1", s...); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// swapLogs reads the fallbacks (their "until") and the session starts
// (their "origin_lsn") in order.
func swapLogs(t *testing.T, logs *observer.ObservedLogs) (fallbacks, origins []pglogrepl.LSN) {
	t.Helper()
	field := func(e observer.LoggedEntry, key string) pglogrepl.LSN {
		v, ok := e.ContextMap()[key]
		require.True(t, ok, "log %q has no %s", e.Message, key)
		lsn, err := pglogrepl.ParseLSN(fmt.Sprint(v))
		require.NoError(t, err)
		return lsn
	}
	for _, e := range logs.All() {
		switch e.Message {
		case "regrouped changes failed on the target; applying these transactions in source order":
			fallbacks = append(fallbacks, field(e, "until"))
		case "replication stream started":
			origins = append(origins, field(e, "origin_lsn"))
		}
	}
	return fallbacks, origins
}

func observed(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	if testing.Verbose() {
		dev, _ := zap.NewDevelopment()
		return zap.New(zapcore.NewTee(core, dev.Core())), logs
	}
	return zap.New(core), logs
}

// TestSwapsKeepProgressAfterReplay: two tables with a UNIQUE column and an
// EXCLUDE range, whose values the source keeps swapping between rows in
// single transactions while other transactions insert. A regrouped swap
// fails on the target and is replayed in source order; that replayed
// stretch must be committed (origin progress past it) before grouping
// resumes, so a later failure cannot throw it away, and a table that had
// such a conflict must not fail again on every later swap.
//
// Phase 1 is a backlog applied with a long BatchDelay, so a group ends only
// where the stream decides to commit: a swap in each table, then one more
// in each. Phase 2 resumes with the default configuration (a new Stream on
// the same origin: exactly once across the restart) under sustained writes
// and waits for Processed to pass the source's position again and again.
func TestSwapsKeepProgressAfterReplay(t *testing.T) {
	e := newEnv(t)
	tables := []string{"sw1", "sw2"}
	for _, tb := range tables {
		e.both(fmt.Sprintf(swapDDL, tb, tb, tb))
		e.exec(e.src, swapRows(tb, 1, 100))
	}
	e.both("CREATE TABLE swtick (id serial PRIMARY KEY)")
	const name = "shardmover_swap"
	start := e.setup(name, []pgx.Identifier{{"public", "sw1"}, {"public", "sw2"}, {"public", "swtick"}}, nil)

	// Phase 1: the backlog. Between swaps, far more changes than the
	// stream reads ahead of a failing round trip (a few units of 1000), so
	// each swap is met on its own.
	next := 1000
	inserts := func(txns int) {
		for i := 0; i < txns; i++ {
			tb := tables[i%2]
			e.exec(e.src, swapRows(tb, next, next+99))
			next += 100
		}
	}
	var beforeFirstSwap pglogrepl.LSN
	for round := 0; round < 4; round++ {
		inserts(80)
		if round == 0 {
			beforeFirstSwap = e.walLSN()
		}
		require.NoError(t, swap(e.src, tables[round%2], 1+round, 50+round))
	}
	inserts(10)

	log1, logs1 := observed(t)
	cfg := e.streamConfig(name, start)
	cfg.Logger = log1
	cfg.BatchDelay = time.Minute
	r := e.run(cfg)
	// With BatchDelay a minute, a group commits once its end reaches a
	// waiter's position: a transaction after lsn makes sure one does.
	lsn := e.walLSN()
	e.exec(e.src, "INSERT INTO swtick DEFAULT VALUES")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	require.NoError(t, r.WaitFor(ctx, lsn), "phase 1: wait for %s", lsn)
	cancel()
	require.NoError(t, r.stop())
	e.assertSame("sw1", "id")
	e.assertSame("sw2", "id")
	fallbacks, origins := swapLogs(t, logs1)
	t.Logf("phase 1: fallbacks until %v; sessions started at origin %v", fallbacks, origins)
	assert.LessOrEqual(t, len(fallbacks), 2,
		"at most one fallback per table: a table whose regrouped changes conflicted between rows must not be regrouped into the same conflict again")
	require.Equal(t, len(fallbacks)+1, len(origins))
	for i := 2; i < len(origins); i++ {
		// Session i started after fallback i-1; session i-1 replayed
		// from fallback i-2 on, which covers the first swap.
		assert.Greater(t, origins[i], beforeFirstSwap,
			"session %d started at origin %s: the stretch replayed in source order after the first fallback was not committed", i, origins[i])
	}

	// Phase 2: sustained writes, default batching.
	log2, logs2 := observed(t)
	cfg = e.streamConfig(name, start)
	cfg.Logger = log2
	r = e.run(cfg)
	wctx, wcancel := context.WithCancel(context.Background())
	writer := e.connect(e.srcDSN)
	var wg sync.WaitGroup
	var swaps int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; wctx.Err() == nil; i++ {
			tb := tables[i%2]
			if i%4 == 3 { // a swap in each table every eight transactions
				if !assert.NoError(t, swap(writer, tables[(i/4)%2], 1+(i/4)%40, 60+(i/4)%40)) {
					return
				}
				swaps++
				continue
			}
			_, err := writer.Exec(context.Background(), swapRows(tb, next, next+4))
			if !assert.NoError(t, err) {
				return
			}
			next += 5
		}
	}()
	deadline := time.Now().Add(6 * time.Second)
	waits := 0
	for time.Now().Before(deadline) {
		lsn := e.walLSN()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := r.WaitFor(ctx, lsn)
		cancel()
		if !assert.NoError(t, err, "phase 2: Processed did not pass %s (at %s)", lsn, r.Processed()) {
			break
		}
		waits++
	}
	wcancel()
	wg.Wait()
	e.catchUp(r)
	require.NoError(t, r.stop())
	e.assertSame("sw1", "id")
	e.assertSame("sw2", "id")
	fallbacks, origins = swapLogs(t, logs2)
	t.Logf("phase 2: %d swaps, %d waits; fallbacks until %v; sessions started at origin %v", swaps, waits, fallbacks, origins)
	assert.Greater(t, swaps, 20)
	assert.LessOrEqual(t, len(fallbacks), 2, "at most one fallback per table")
	for i, o := range origins {
		assert.NotZero(t, o, "session %d started at origin 0/0", i)
	}
	var progress string
	e.scalar(e.tgt, "SELECT pg_replication_origin_progress('"+name+"', true)::text", &progress)
	p, err := pglogrepl.ParseLSN(progress)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, p, beforeFirstSwap)
}

// TestDeferrableConstraintSwappedInOneStatement: a DEFERRABLE (initially
// immediate) UNIQUE or EXCLUDE constraint lets the source swap values
// between rows in one statement, checked at its end. The target gets the
// swap as one change per row, applied one statement each for a REPLICA
// IDENTITY FULL table (and in any replay in source order), as one
// multi-row statement for a keyed table. Either must stream: the apply
// session runs with session_replication_role = replica, under which the
// recheck of a deferrable constraint (a trigger) does not fire, as for
// PostgreSQL's own subscriber. The rows end as the source committed them.
func TestDeferrableConstraintSwappedInOneStatement(t *testing.T) {
	e := newEnv(t)
	for _, tb := range []string{"dfk", "dff"} {
		e.both(`CREATE TABLE ` + tb + ` (id int PRIMARY KEY, u int NOT NULL, rng int4range NOT NULL, pad text,
			CONSTRAINT ` + tb + `_u UNIQUE (u) DEFERRABLE,
			CONSTRAINT ` + tb + `_rng EXCLUDE USING gist (rng WITH &&) DEFERRABLE)`)
		e.exec(e.src, swapRows(tb, 1, 10))
	}
	e.both(`ALTER TABLE dff REPLICA IDENTITY FULL`)
	const name = "shardmover_deferrable"
	start := e.setup(name, []pgx.Identifier{{"public", "dfk"}, {"public", "dff"}}, nil)
	r := e.run(e.streamConfig(name, start))
	for _, tb := range []string{"dfk", "dff"} {
		e.exec(e.src, `UPDATE `+tb+` SET u = CASE id WHEN 1 THEN 2 ELSE 1 END,
			rng = CASE id WHEN 1 THEN int4range(20, 25) ELSE int4range(10, 15) END WHERE id IN (1, 2)`)
		e.exec(e.src, `BEGIN; UPDATE `+tb+` SET u = u + 100 WHERE id = 3; UPDATE `+tb+` SET u = CASE id WHEN 4 THEN 5 ELSE 4 END WHERE id IN (4, 5); COMMIT`)
	}
	lsn := e.walLSN()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, r.WaitFor(ctx, lsn))
	e.assertSame("dfk", "id")
	e.assertSame("dff", "id")
	require.NoError(t, r.stop())
}
