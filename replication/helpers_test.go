package replication_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/replication"
)

// env is a source and a target server with a connection to each.
type env struct {
	t              testing.TB
	srcDSN, tgtDSN string
	src, tgt       *pgx.Conn
	// beforeCopy, when set, runs between slot creation and the copy.
	beforeCopy func(snapshot string)
}

func newEnv(t testing.TB) *env {
	t.Helper()
	c := sandboxtest.New(t, 1)
	e := &env{t: t, srcDSN: c.Nodes[0].DSN(), tgtDSN: c.Nodes[1].DSN()}
	e.src = e.connect(e.srcDSN)
	e.tgt = e.connect(e.tgtDSN)
	return e
}

func (e *env) connect(dsn string) *pgx.Conn {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn+" timezone=UTC")
	require.NoError(e.t, err)
	e.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// both runs sql on the source and on the target.
func (e *env) both(sql string) {
	e.t.Helper()
	e.exec(e.src, sql)
	e.exec(e.tgt, sql)
}

func (e *env) exec(conn *pgx.Conn, sql string, args ...any) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := conn.Exec(ctx, sql, args...)
	require.NoError(e.t, err, sql)
}

func (e *env) scalar(conn *pgx.Conn, sql string, dst any) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(e.t, conn.QueryRow(ctx, sql).Scan(dst), sql)
}

// walLSN is the source's WAL insert position: every transaction committed
// so far ends at or before it. (pg_current_wal_lsn() is the write position,
// which trails commits made with synchronous_commit = off.)
func (e *env) walLSN() pglogrepl.LSN {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lsn, err := replication.CurrentLSN(ctx, e.src)
	require.NoError(e.t, err)
	return lsn
}

func (e *env) lsn(fn string) pglogrepl.LSN {
	e.t.Helper()
	var s string
	e.scalar(e.src, "SELECT "+fn+"::text", &s)
	lsn, err := pglogrepl.ParseLSN(s)
	require.NoError(e.t, err)
	return lsn
}

// digest is an ordered text rendering of a table: equal digests mean equal
// rows, value for value.
func (e *env) digest(conn *pgx.Conn, table, order string) string {
	e.t.Helper()
	var d string
	e.scalar(conn, "SELECT count(*) || ':' || coalesce(md5(string_agg(x::text, '|' ORDER BY "+order+")), '') FROM "+table+" x", &d)
	return d
}

func (e *env) assertSame(table, order string) {
	e.t.Helper()
	src, tgt := e.digest(e.src, table, order), e.digest(e.tgt, table, order)
	assert.Equal(e.t, src, tgt, "target differs from source for %s", table)
	assert.NotEqual(e.t, "0:", src, "nothing to compare in %s", table)
}

// setup creates the publication and the slot, copies the tables and
// releases the snapshot; it returns the slot's consistent point.
func (e *env) setup(name string, tables []pgx.Identifier, copyOpts func(*replication.CopyOptions)) pglogrepl.LSN {
	e.t.Helper()
	lsn, _ := e.setupCopy(name, tables, copyOpts)
	return lsn
}

func (e *env) setupCopy(name string, tables []pgx.Identifier, copyOpts func(*replication.CopyOptions)) (pglogrepl.LSN, replication.CopyResult) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(e.t, replication.CheckReplicaIdentity(ctx, e.src, tables))
	require.NoError(e.t, replication.CreatePublication(ctx, e.src, name, tables))
	snap, err := replication.CreateSlot(ctx, e.srcDSN, name)
	require.NoError(e.t, err)
	defer snap.Release(ctx)
	opts := replication.DefaultCopyOptions()
	opts.SourceDSN, opts.TargetDSN, opts.Snapshot, opts.Tables = e.srcDSN, e.tgtDSN, snap.Name, tables
	if copyOpts != nil {
		copyOpts(&opts)
	}
	if e.beforeCopy != nil {
		e.beforeCopy(snap.Name)
	}
	res, err := replication.Copy(ctx, opts)
	require.NoError(e.t, err)
	return snap.ConsistentLSN, res
}

func (e *env) streamConfig(name string, start pglogrepl.LSN) replication.StreamConfig {
	cfg := replication.DefaultStreamConfig()
	cfg.SourceDSN, cfg.TargetDSN = e.srcDSN, e.tgtDSN
	cfg.Slot, cfg.Publication, cfg.Origin = name, name, name
	cfg.StartLSN = start
	if os.Getenv("SHARDMOVER_TEST_LOG") != "" {
		cfg.Logger, _ = zap.NewDevelopment()
	}
	return cfg
}

// running is a Stream whose Run is going in the background.
type running struct {
	*replication.Stream
	cancel context.CancelFunc
	done   chan error
}

func (e *env) run(cfg replication.StreamConfig) *running {
	e.t.Helper()
	s, err := replication.NewStream(cfg)
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Stream: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	e.t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels Run and returns its error (nil when it stopped because of
// the cancel).
func (r *running) stop() error {
	r.cancel()
	err := <-r.done
	r.done <- err // idempotent
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// catchUp waits until the stream has applied everything the source has
// written so far.
func (e *env) catchUp(r *running) {
	e.t.Helper()
	lsn := e.walLSN()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(e.t, r.WaitFor(ctx, lsn), "wait for %s", lsn)
}
