package replication_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/shardmover/shardmover/replication"
)

const typesDDL = `
CREATE SCHEMA app;
CREATE TYPE app.mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN app.posint AS integer CHECK (VALUE > 0);
CREATE TABLE app."Mixed Types" (
	id bigint PRIMARY KEY,
	i int, n numeric, "select" text, b bytea, flag bool,
	j jsonb, big jsonb,
	ia int[], ta text[], m app.mood, ma app.mood[], d app.posint,
	ts timestamptz, dt date, u uuid, f8 float8, iv interval, js json
);
ALTER TABLE app."Mixed Types" ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE app.bin (LIKE app."Mixed Types" INCLUDING ALL);
ALTER TABLE app.bin DROP COLUMN ma;`

// typesRow inserts rows lo..hi with every column set (a TOASTed big), and
// every third row mostly NULL.
func typesRows(lo, hi int) string {
	return fmt.Sprintf(`
INSERT INTO app."Mixed Types"
SELECT g, g * 7, (g::numeric / 7)::numeric(30, 20), 'text ' || g || E' \t\n quote'' "dq" ünï',
       decode(md5(g::text), 'hex') || '\x0001'::bytea, g %% 2 = 0,
       jsonb_build_object('g', g, 'nested', jsonb_build_array(1, 'two', null, 3.14159265358979323846)),
       jsonb_build_object('blob', (SELECT string_agg(md5(g::text || x::text), '') FROM generate_series(1, 300) x)),
       ARRAY[g, -g, NULL], ARRAY['a', NULL, 'c,d', 'e"f', ''], (ARRAY['sad','ok','happy'])[1 + g %% 3]::app.mood,
       ARRAY['ok', 'happy']::app.mood[], 1 + g,
       '2024-02-29 13:14:15.123456+05:30'::timestamptz + g * interval '1 hour', date '2024-01-01' + g,
       md5(g::text)::uuid, 1.0 / (g + 3), make_interval(days => g, secs => 0.5), '{"k": [1, 2]}'::json
FROM generate_series(%d, %d) g;
UPDATE app."Mixed Types" SET n = NULL, "select" = NULL, b = NULL, j = NULL, ia = NULL, m = NULL, ts = NULL, u = NULL
WHERE id %% 3 = 0 AND id BETWEEN %d AND %d;`, lo, hi, lo, hi)
}

// TestEveryTypeRoundTrips copies and streams a table with every common
// column type through inserts, updates (TOASTed column unchanged and
// changed), key updates, deletes and a truncate; the target equals the
// source row by row after each phase.
func TestEveryTypeRoundTrips(t *testing.T) {
	e := newEnv(t)
	e.both(typesDDL)
	table := pgx.Identifier{"app", "Mixed Types"}
	name := table.Sanitize()
	e.exec(e.src, typesRows(1, 50))
	// The same without the enum array (binary COPY) and with a dropped column.
	const binCols = `id, i, n, "select", b, flag, j, big, ia, ta, m, d, ts, dt, u, f8, iv, js`
	e.exec(e.src, `INSERT INTO app.bin SELECT `+binCols+` FROM `+name)

	start, res := e.setupCopy("shardmover_types", []pgx.Identifier{table, {"app", "bin"}}, nil)
	assert.Equal(t, "text", res.Tables[0].Format, "an array of an enum is not portable in binary")
	assert.Equal(t, "binary", res.Tables[1].Format)
	assert.EqualValues(t, 50, res.Tables[1].Rows)
	// Committed after the snapshot: must come from the stream, once.
	e.exec(e.src, typesRows(51, 60))
	var copied int
	e.scalar(e.tgt, `SELECT count(*) FROM `+name, &copied)
	assert.Equal(t, 50, copied, "the copy holds exactly the snapshot")
	r := e.run(e.streamConfig("shardmover_types", start))
	e.catchUp(r)
	e.assertSame(name, "id")

	for _, sql := range []string{
		// big is unchanged and TOASTed: sent as 'u', must be left alone.
		`UPDATE ` + name + ` SET i = i + 1, "select" = 'changed ' || id WHERE id <= 20`,
		// the TOASTed value itself changes.
		`UPDATE ` + name + ` SET big = jsonb_build_object('blob', repeat(md5(id::text), 200)) WHERE id BETWEEN 15 AND 25`,
		// key updates, with the TOASTed value unchanged.
		`UPDATE ` + name + ` SET id = id + 1000 WHERE id IN (5, 6, 7)`,
		`UPDATE ` + name + ` SET id = id + 1000, big = '{"small": true}' WHERE id = 8`,
		// values to NULL and back.
		`UPDATE ` + name + ` SET n = NULL, ma = NULL, d = NULL WHERE id BETWEEN 30 AND 35`,
		`UPDATE ` + name + ` SET n = 'NaN', f8 = '-Infinity', ta = '{}', iv = '-1 year 2 mons' WHERE id = 36`,
		`DELETE FROM ` + name + ` WHERE id IN (1, 2, 40, 41)`,
		`INSERT INTO ` + name + ` (id) VALUES (5000)`,
		`BEGIN; UPDATE ` + name + ` SET i = 0 WHERE id = 9; DELETE FROM ` + name + ` WHERE id = 10; INSERT INTO ` + name + ` (id, m) VALUES (5001, 'happy'); COMMIT`,
		`UPDATE app.bin SET i = i + 1 WHERE id <= 20`,
		`UPDATE app.bin SET id = -id, d = 99 WHERE id BETWEEN 21 AND 25`,
		`DELETE FROM app.bin WHERE id > 45`,
	} {
		e.exec(e.src, sql)
	}
	e.catchUp(r)
	e.assertSame(name, "id")
	e.assertSame("app.bin", "id")
	var rows int
	e.scalar(e.tgt, `SELECT count(*) FROM `+name+` WHERE length(big::text) > 9000`, &rows)
	assert.Greater(t, rows, 20, "TOASTed values kept on the target")

	e.exec(e.src, `TRUNCATE `+name)
	e.exec(e.src, typesRows(100, 110))
	e.catchUp(r)
	e.assertSame(name, "id")
	require.NoError(t, r.stop())
}

// TestReplicaIdentityFull streams a table without a primary key but with
// REPLICA IDENTITY FULL, duplicate rows and columns without an equality
// operator (json, point).
func TestReplicaIdentityFull(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE nopk (a int, j json, p point, t text); ALTER TABLE nopk REPLICA IDENTITY FULL`)
	e.exec(e.src, `INSERT INTO nopk SELECT g % 5, json_build_object('g', g % 5), point(g % 5, 1), 'row' FROM generate_series(1, 20) g`)
	table := pgx.Identifier{"public", "nopk"}
	start := e.setup("shardmover_full", []pgx.Identifier{table}, nil)
	r := e.run(e.streamConfig("shardmover_full", start))
	for _, sql := range []string{
		`INSERT INTO nopk VALUES (1, '{"g":1}', point(1, 1), 'row'), (NULL, NULL, NULL, NULL)`,
		// one of four identical rows.
		`DELETE FROM nopk WHERE ctid = (SELECT ctid FROM nopk WHERE a = 2 LIMIT 1)`,
		`UPDATE nopk SET t = 'one of the threes' WHERE ctid = (SELECT ctid FROM nopk WHERE a = 3 LIMIT 1)`,
		`UPDATE nopk SET j = '{"changed": [1, 2]}', p = point(9, 9) WHERE a = 4`,
		`UPDATE nopk SET t = 'was null' WHERE a IS NULL`,
	} {
		e.exec(e.src, sql)
	}
	e.catchUp(r)
	e.assertSame("nopk", "x::text")
	require.NoError(t, r.stop())
}

// TestPreflightNamesTableBeforeAnythingIsCreated: a table with neither a
// primary key nor REPLICA IDENTITY FULL fails the preflight with a sentence
// naming it, and the preflight creates nothing.
func TestPreflightNamesTableBeforeAnythingIsCreated(t *testing.T) {
	e := newEnv(t)
	e.exec(e.src, `CREATE TABLE good (id int PRIMARY KEY); CREATE TABLE "Bad Table" (a int); CREATE TABLE idx (a int NOT NULL);
		CREATE UNIQUE INDEX idx_a ON idx (a); ALTER TABLE idx REPLICA IDENTITY USING INDEX idx_a`)
	ctx := context.Background()
	require.NoError(t, replication.CheckReplicaIdentity(ctx, e.src, []pgx.Identifier{{"public", "good"}, {"public", "idx"}}))

	err := replication.CheckReplicaIdentity(ctx, e.src, []pgx.Identifier{{"public", "good"}, {"public", "Bad Table"}})
	require.Error(t, err)
	assert.ErrorIs(t, err, replication.ErrNoReplicaIdentity)
	assert.ErrorIs(t, err, replication.ErrPermanent)
	assert.Contains(t, err.Error(), `"public"."Bad Table" has neither a primary key nor REPLICA IDENTITY FULL`)
	assert.Contains(t, err.Error(), `ALTER TABLE "public"."Bad Table" REPLICA IDENTITY FULL`)

	err = replication.CheckReplicaIdentity(ctx, e.src, []pgx.Identifier{{"public", "missing"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"public"."missing" does not exist`)

	var n int
	e.scalar(e.src, `SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots)`, &n)
	assert.Zero(t, n, "the preflight created nothing")
}

// TestWaitForOnIdleSource: with nothing to apply, WaitFor(pg_current_wal_lsn())
// returns, also after WAL the publication does not cover and a WAL switch.
func TestWaitForOnIdleSource(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE idle (id int PRIMARY KEY); CREATE TABLE other (id int)`)
	start := e.setup("shardmover_idle", []pgx.Identifier{{"public", "idle"}}, nil)
	cfg := e.streamConfig("shardmover_idle", start)
	cfg.StatusInterval = 10 * time.Second // WaitFor alone must bring keepalives
	r := e.run(cfg)
	wait := func(fn string) {
		t.Helper()
		lsn := e.lsn(fn)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, r.WaitFor(ctx, lsn), "WaitFor(%s = %s)", fn, lsn)
	}
	wait("pg_current_wal_lsn()")
	e.catchUp(r)
	e.exec(e.src, `INSERT INTO other SELECT generate_series(1, 1000)`)
	wait("pg_current_wal_lsn()")
	e.catchUp(r)
	// After a switch the insert position is the next segment's start plus
	// its page header, the walsender's WAL end the segment's start.
	e.exec(e.src, `SELECT pg_switch_wal()`)
	wait("pg_current_wal_insert_lsn()")
	wait("pg_current_wal_lsn()")
	_, d := r.Lag()
	assert.Zero(t, d, "nothing pending")
	require.NoError(t, r.stop())
}

// ledger records the acknowledged state of every row a writer owns.
type ledger struct {
	mu   sync.Mutex
	rows map[int64]string // id -> payload; absent: deleted or never inserted
}

// TestConcurrentWorkloadDuringCopyAndCatchUp: writers insert, update and
// delete (some in multi-statement transactions) before, during and after
// the copy; the target ends equal to the source and to the ledger of
// acknowledged writes.
func TestConcurrentWorkloadDuringCopyAndCatchUp(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE load (id bigint PRIMARY KEY, v bigint NOT NULL, payload text NOT NULL)`)
	const writers, initial = 4, 20000
	e.exec(e.src, `INSERT INTO load SELECT g, 0, 'init-' || g || repeat('x', 80) FROM generate_series(1, $1) g`, initial)
	l := &ledger{rows: map[int64]string{}}
	for id := int64(1); id <= initial; id++ {
		l.rows[id] = fmt.Sprintf("init-%d%s", id, repeatX(80))
	}

	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ops atomic.Int64
	for w := 0; w < writers; w++ {
		conn := e.connect(e.srcDSN)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			writeLoad(ctx, t, conn, w, writers, initial, l, &ops)
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	// The rows of the snapshot, to tell a missing row's history if the
	// stream ever finds the target diverged.
	copied := map[int64]bool{}
	e.beforeCopy = func(snapshot string) {
		verify := e.connect(e.srcDSN)
		tx, err := verify.BeginTx(context.Background(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		require.NoError(t, err)
		defer tx.Rollback(context.Background())
		_, err = tx.Exec(context.Background(), "SET TRANSACTION SNAPSHOT '"+snapshot+"'")
		require.NoError(t, err)
		rows, err := tx.Query(context.Background(), `SELECT id FROM load`)
		require.NoError(t, err)
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			copied[id] = true
		}
		require.NoError(t, rows.Err())
	}
	var calls [][2]int64
	start, res := e.setupCopy("shardmover_load", []pgx.Identifier{{"public", "load"}}, func(o *replication.CopyOptions) {
		o.RangesPerTable, o.MinRangeBytes, o.Workers = 4, 256<<10, 3
		o.BytesPerSecond = 4 << 20 // about a second for this table
		o.Progress = func(done, total int64) { calls = append(calls, [2]int64{done, total}) }
	})
	assert.Equal(t, 4, res.Tables[0].Ranges, "copied as concurrent ctid ranges")
	require.GreaterOrEqual(t, len(calls), 2, "progress reported while copying and at the end")
	for i := 1; i < len(calls); i++ {
		assert.GreaterOrEqual(t, calls[i][0], calls[i-1][0], "progress never goes back")
	}
	assert.Equal(t, [2]int64{res.Bytes, res.Bytes}, calls[len(calls)-1], "the last call says done")
	t.Logf("snapshot of %d rows, slot at %s", len(copied), start)
	cfg := e.streamConfig("shardmover_load", start)
	cfg.Logger = zaptest.NewLogger(t)
	r := e.run(cfg)
	time.Sleep(1500 * time.Millisecond)
	stopLoad()
	wg.Wait()
	require.False(t, t.Failed())
	{
		lsn := e.walLSN()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := r.WaitFor(ctx, lsn)
		cancel()
		if err != nil {
			m := regexp.MustCompile(`\(id\)=\((\d+)\)`).FindStringSubmatch(err.Error())
			if m != nil {
				id, _ := strconv.ParseInt(m[1], 10, 64)
				t.Logf("row %d was in the snapshot: %v", id, copied[id])
			}
			require.NoError(t, err)
		}
	}
	e.assertSame("load", "id")

	got := map[int64]string{}
	rows, err := e.tgt.Query(context.Background(), `SELECT id, payload FROM load`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var p string
		require.NoError(t, rows.Scan(&id, &p))
		got[id] = p
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, len(l.rows), len(got), "rows on target vs ledger")
	for id, p := range l.rows {
		if got[id] != p {
			t.Errorf("row %d: target %q, ledger %q", id, got[id], p)
			break
		}
	}
	t.Logf("%d acknowledged writes", ops.Load())
	assert.Greater(t, ops.Load(), int64(100))
	require.NoError(t, r.stop())
}

func repeatX(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'x'
	}
	return string(b)
}

// writeLoad runs one writer until ctx is done. Writer w owns the ids
// congruent to w modulo writers, so its ledger entries are exact.
func writeLoad(ctx context.Context, t *testing.T, conn *pgx.Conn, w, writers, initial int, l *ledger, ops *atomic.Int64) {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	owned := []int64{}
	for id := int64(w + 1); id <= int64(initial); id += int64(writers) {
		owned = append(owned, id)
	}
	next := int64(1_000_000*(w+1)) + 1
	for seq := 0; ctx.Err() == nil; seq++ {
		n := 1
		if seq%5 == 0 {
			n = 3 // a multi-statement transaction
		}
		tx, err := conn.Begin(context.Background())
		if err != nil {
			t.Errorf("writer %d: begin: %v", w, err)
			return
		}
		pending := map[int64]*string{}
		for i := 0; i < n; i++ {
			switch op := rng.IntN(10); {
			case op < 4 || len(owned) == 0:
				p := fmt.Sprintf("w%d-ins-%d", w, next)
				_, err = tx.Exec(context.Background(), `INSERT INTO load VALUES ($1, 0, $2)`, next, p)
				pending[next] = &p
				owned = append(owned, next)
				next++
			case op < 8:
				id := owned[rng.IntN(len(owned))]
				p := fmt.Sprintf("w%d-upd-%d-%d", w, id, seq)
				_, err = tx.Exec(context.Background(), `UPDATE load SET v = v + 1, payload = $2 WHERE id = $1`, id, p)
				pending[id] = &p
			default:
				k := rng.IntN(len(owned))
				id := owned[k]
				owned = append(owned[:k], owned[k+1:]...)
				_, err = tx.Exec(context.Background(), `DELETE FROM load WHERE id = $1`, id)
				pending[id] = nil
			}
			if err != nil {
				t.Errorf("writer %d: %v", w, err)
				return
			}
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Errorf("writer %d: commit: %v", w, err)
			return
		}
		l.mu.Lock()
		for id, p := range pending {
			if p == nil {
				delete(l.rows, id)
			} else {
				l.rows[id] = *p
			}
		}
		l.mu.Unlock()
		ops.Add(int64(n))
	}
}

// TestKillApplierTwentyTimes cancels Run at random points twenty times while
// changes flow, each time resuming with a new Stream on the same origin. A
// sequence-numbered insert-only table (no unique key on the target) proves
// that no change was applied twice or skipped; a counter table proves the
// same for updates.
func TestKillApplierTwentyTimes(t *testing.T) {
	e := newEnv(t)
	e.exec(e.src, `CREATE TABLE seq (n bigint PRIMARY KEY, at timestamptz DEFAULT now())`)
	e.exec(e.tgt, `CREATE TABLE seq (n bigint, at timestamptz)`)
	e.both(`CREATE TABLE counters (id int PRIMARY KEY, c bigint NOT NULL)`)
	e.exec(e.src, `INSERT INTO counters SELECT g, 0 FROM generate_series(1, 10) g`)
	const name = "shardmover_kill"
	start := e.setup(name, []pgx.Identifier{{"public", "seq"}, {"public", "counters"}}, nil)

	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var lastSeq atomic.Int64
	seqConn, ctrConn := e.connect(e.srcDSN), e.connect(e.srcDSN)
	wg.Add(2)
	go func() { // 1 to 5 rows per transaction
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for n := int64(1); ctx.Err() == nil; {
			k := int64(1 + rng.IntN(5))
			if _, err := seqConn.Exec(context.Background(), `INSERT INTO seq (n) SELECT generate_series($1::bigint, $2::bigint)`, n, n+k-1); err != nil {
				t.Errorf("insert seq: %v", err)
				return
			}
			n += k
			lastSeq.Store(n - 1)
		}
	}()
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(3, 4))
		for ctx.Err() == nil {
			if _, err := ctrConn.Exec(context.Background(), `UPDATE counters SET c = c + 1 WHERE id = $1`, 1+rng.IntN(10)); err != nil {
				t.Errorf("update counters: %v", err)
				return
			}
		}
	}()

	rng := rand.New(rand.NewPCG(5, 6))
	cfg := e.streamConfig(name, start)
	for i := 0; i < 20; i++ {
		cfg.BatchDelay = time.Duration(1+rng.IntN(80)) * time.Millisecond
		r := e.run(cfg)
		time.Sleep(time.Duration(20+rng.IntN(250)) * time.Millisecond)
		require.NoError(t, r.stop(), "run %d", i)
	}
	stopLoad()
	wg.Wait()
	require.False(t, t.Failed())
	r := e.run(cfg)
	e.catchUp(r)

	var count, distinct, maxN int64
	require.NoError(t, e.tgt.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT n), coalesce(max(n), 0) FROM seq`).Scan(&count, &distinct, &maxN))
	assert.Equal(t, lastSeq.Load(), maxN, "no gap at the end")
	assert.Equal(t, maxN, count, "no gap and no duplicate")
	assert.Equal(t, count, distinct, "no duplicate")
	assert.Greater(t, count, int64(100))
	e.assertSame("seq", "n")
	e.assertSame("counters", "id")
	require.NoError(t, r.stop())
	applied, err := replication.OriginProgress(context.Background(), e.tgt, name)
	require.NoError(t, err)
	assert.Greater(t, applied, start, "the origin records durable progress")
	assert.LessOrEqual(t, applied, r.Processed())
}

// TestCleanupIsIdempotent drops the slot while a stream holds it, then the
// publication and the origin, each twice.
func TestCleanupIsIdempotent(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE c (id int PRIMARY KEY)`)
	const name = "shardmover_clean"
	start := e.setup(name, []pgx.Identifier{{"public", "c"}}, nil)
	r := e.run(e.streamConfig(name, start))
	e.catchUp(r)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		require.NoError(t, replication.DropSlot(ctx, e.src, name))
		require.NoError(t, replication.DropPublication(ctx, e.src, name))
	}
	// Without its slot the stream fails permanently instead of retrying.
	select {
	case err := <-r.done:
		r.done <- err
		assert.ErrorIs(t, err, replication.ErrPermanent)
	case <-time.After(time.Minute):
		t.Fatal("stream kept running without its slot")
	}
	for i := 0; i < 2; i++ {
		require.NoError(t, replication.DropOrigin(ctx, e.tgt, name))
	}
	var n int
	e.scalar(e.src, `SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots)`, &n)
	assert.Zero(t, n)
	e.scalar(e.tgt, `SELECT count(*) FROM pg_replication_origin`, &n)
	assert.Zero(t, n)
}

// TestBadNamesAreRejected: names interpolated into replication commands are
// validated before anything connects.
func TestBadNamesAreRejected(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []string{"", "Upper", "a-b", "x; DROP TABLE t", `q"uote`, "sp ace", string(make([]byte, 64))} {
		t.Run(fmt.Sprintf("%q", bad), func(t *testing.T) {
			assert.ErrorIs(t, replication.ValidateName("slot", bad), replication.ErrBadName)
			_, err := replication.CreateSlot(ctx, "host=127.0.0.1 port=1", bad)
			assert.ErrorIs(t, err, replication.ErrBadName)
			assert.ErrorIs(t, replication.CreatePublication(ctx, nil, bad, []pgx.Identifier{{"t"}}), replication.ErrBadName)
			assert.ErrorIs(t, replication.DropSlot(ctx, nil, bad), replication.ErrBadName)
			assert.ErrorIs(t, replication.DropPublication(ctx, nil, bad), replication.ErrBadName)
			assert.ErrorIs(t, replication.DropOrigin(ctx, nil, bad), replication.ErrBadName)
			cfg := replication.DefaultStreamConfig()
			cfg.SourceDSN, cfg.TargetDSN = "host=127.0.0.1", "host=127.0.0.1"
			cfg.Slot, cfg.Publication, cfg.Origin = "ok", "ok", bad
			_, err = replication.NewStream(cfg)
			assert.ErrorIs(t, err, replication.ErrBadName)
		})
	}
	for _, good := range []string{"shardmover_42", "a", "0_9"} {
		assert.NoError(t, replication.ValidateName("slot", good))
	}
	_, err := replication.Copy(ctx, replication.CopyOptions{Snapshot: "x'; DROP TABLE t; --", Tables: []pgx.Identifier{{"t"}}})
	assert.ErrorIs(t, err, replication.ErrBadName)

	// A DSN is never echoed in an error.
	cfg := replication.DefaultStreamConfig()
	cfg.SourceDSN, cfg.TargetDSN = "host=h password=s3cret port=notaport", "host=h"
	cfg.Slot, cfg.Publication, cfg.Origin = "ok", "ok", "ok"
	_, err = replication.NewStream(cfg)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cret")
	assert.False(t, errors.Is(err, replication.ErrBadName))
}

// TestPreflightRefusesADeferrablePrimaryKey: PostgreSQL never uses a
// deferrable key as the replica identity, so a table whose only key is a
// DEFERRABLE primary key (REPLICA IDENTITY DEFAULT) cannot have its
// updates and deletes published: once the move's publication exists,
// every UPDATE of it fails. The preflight refuses it with a sentence
// (it passed, and the application's updates failed for the whole move);
// with REPLICA IDENTITY FULL it is accepted.
func TestPreflightRefusesADeferrablePrimaryKey(t *testing.T) {
	e := newEnv(t)
	e.exec(e.src, `CREATE TABLE deferred (id int PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE, v int);
		INSERT INTO deferred VALUES (1, 1);
		CREATE TABLE deferred_full (id int PRIMARY KEY DEFERRABLE, v int);
		ALTER TABLE deferred_full REPLICA IDENTITY FULL`)
	ctx := context.Background()
	err := replication.CheckReplicaIdentity(ctx, e.src, []pgx.Identifier{{"public", "deferred"}})
	require.Error(t, err)
	assert.ErrorIs(t, err, replication.ErrNoReplicaIdentity)
	assert.ErrorIs(t, err, replication.ErrPermanent)
	assert.Contains(t, err.Error(), `the primary key of table "public"."deferred" is DEFERRABLE`)
	require.NoError(t, replication.CheckReplicaIdentity(ctx, e.src, []pgx.Identifier{{"public", "deferred_full"}}))

	// Why: published, the table takes no UPDATE.
	e.exec(e.src, `CREATE PUBLICATION deferred_pub FOR TABLE deferred`)
	_, uerr := e.src.Exec(ctx, `UPDATE deferred SET v = 2 WHERE id = 1`)
	require.Error(t, uerr, "PostgreSQL refuses updates of a published table whose only key is deferrable")
	assert.Contains(t, uerr.Error(), "replica identity")
}

// TestReplicaIdentityFullMatchesTheExactRow: with REPLICA IDENTITY FULL,
// rows that are equal under = but not the same value (5.0 and 5.00, 0 and
// -0 as float) are different rows: an UPDATE or DELETE of one on the
// source must change that one on the target, never the other. (The
// lookup compared with =, and the UPDATE of 5.00 changed the row 5.0.)
func TestReplicaIdentityFullMatchesTheExactRow(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE exact (n numeric, f float8, tag text); ALTER TABLE exact REPLICA IDENTITY FULL`)
	// Pairs equal in every column under =, told apart only by the value's
	// exact form.
	e.exec(e.src, `INSERT INTO exact VALUES (5.0, 0, 'a'), (5.00, 0, 'a'), (7, 0::float8, 'c'), (7, '-0'::float8, 'c')`)
	table := pgx.Identifier{"public", "exact"}
	start := e.setup("shardmover_exact", []pgx.Identifier{table}, nil)
	r := e.run(e.streamConfig("shardmover_exact", start))
	for _, sql := range []string{
		// The second row's tag, found by its exact value on the source.
		`UPDATE exact SET tag = 'b' WHERE n::text = '5.00'`,
		`DELETE FROM exact WHERE f::text = '-0'`,
	} {
		e.exec(e.src, sql)
	}
	e.catchUp(r)
	var got string
	e.scalar(e.tgt, `SELECT string_agg(n::text || '/' || f::text || '/' || tag, ' ' ORDER BY tag) FROM exact`, &got)
	assert.Equal(t, "5.0/0/a 5.00/0/b 7/0/c", got, "each change reached the row it was made to")
	require.NoError(t, r.stop())
}
