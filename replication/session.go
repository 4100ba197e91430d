package replication

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"
)

// session is one connection to each side: set up the origin, start
// replication after durable progress, and stream until an error.
func (s *Stream) session(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = permanent(fmt.Errorf("replication stream panic: %v\n%s", r, debug.Stack()))
		}
	}()
	closeCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 5*time.Second)
	}

	// Target: an apply session bound to the replication origin.
	tcfg := s.tgtCfg.Copy()
	withSessionParams(tcfg, s.cfg.Origin)
	tcfg.RuntimeParams["synchronous_commit"] = "on"
	tcfg.RuntimeParams["statement_timeout"] = "0"
	tcfg.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
	// Every UPDATE and DELETE finds its rows through the key's index. A
	// plan made while the target table was small (fresh after the copy,
	// no statistics yet) would otherwise be cached with a sequential scan
	// or hash join and slow down as the table grows.
	tcfg.RuntimeParams["enable_seqscan"] = "off"
	// enable_seqscan = off prices the sequential scan a REPLICA IDENTITY
	// FULL update or delete needs far above jit_above_cost: every such
	// statement was JIT-compiled (about a second each).
	tcfg.RuntimeParams["jit"] = "off"
	tcfg.RuntimeParams["enable_hashjoin"] = "off"
	tcfg.RuntimeParams["enable_mergejoin"] = "off"
	tgt, err := pgconn.ConnectConfig(ctx, tcfg)
	if err != nil {
		return fmt.Errorf("connect to target %s: %w", addr(tcfg), err)
	}
	defer func() { c, cancel := closeCtx(); tgt.Close(c); cancel() }()
	// As PostgreSQL's own subscriber: ordinary triggers and foreign key
	// checks do not fire for replicated changes.
	if _, err := tgt.Exec(ctx, "SET session_replication_role = replica").ReadAll(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("cannot skip target triggers (session_replication_role needs superuser, or GRANT SET ON PARAMETER session_replication_role on PostgreSQL 15+); they will fire", zap.Error(err))
	}
	progress, err := s.setupOrigin(ctx, tgt)
	if err != nil {
		return err
	}
	s.startedFrom(progress)

	// Source: a replication connection, read through a large buffer: a
	// backlog arrives as many small messages, and one read should take in
	// as many as are waiting; a coalescingReader under it waits a moment
	// after a read that drained the socket, so that there are many.
	scfg := s.srcCfg.Copy()
	readCoalesced(scfg)
	src, err := connectReplication(ctx, scfg, s.cfg.Slot)
	if err != nil {
		return err
	}
	defer func() { c, cancel := closeCtx(); src.Close(c); cancel() }()
	confirmed, err := slotConfirmed(ctx, src, s.cfg.Slot)
	if err != nil {
		return err
	}
	if blk, err := walBlockSize(ctx, src); err == nil {
		s.mu.Lock()
		s.walBlock = blk
		s.mu.Unlock()
	}
	types, err := loadTypeNames(ctx, tgt)
	if err != nil {
		return err
	}
	// Protocol 2 streams large transactions while they run (PostgreSQL 14
	// and later); they are spooled to local files until they commit.
	proto2 := serverVersion(ctx, src) >= 140000
	pluginArgs := []string{"proto_version '1'", "publication_names '" + s.cfg.Publication + "'"}
	if proto2 {
		pluginArgs = []string{"proto_version '2'", "streaming 'on'", "publication_names '" + s.cfg.Publication + "'"}
	}
	start := max(progress, s.cfg.StartLSN, confirmed)
	s.advance(start)
	s.mu.Lock()
	s.unapplied = nil // groups of an earlier session are gone
	s.mu.Unlock()
	err = pglogrepl.StartReplication(ctx, src, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: pluginArgs,
	})
	if err != nil {
		err = fmt.Errorf("start replication from slot %q at %s: %w", s.cfg.Slot, start, err)
		if pgCode(err) == "42704" || pgCode(err) == "55000" {
			// The slot or publication is gone, or the slot is invalidated.
			return permanent(err)
		}
		return err
	}
	s.log.Info("replication stream started", zap.Stringer("start_lsn", start), zap.Stringer("origin_lsn", progress))

	xctx, xcancel := context.WithCancel(ctx)
	x := newExecutor(s, tgt)
	go x.run(xctx)
	defer func() { xcancel(); x.close() }()
	ss := &session{s: s, src: src, exec: x, app: newApplier(x, types, s.ordered), dec: newDecoder(), skipBefore: progress,
		proto2: proto2, spools: map[uint32]*spool{}}
	defer ss.closeSpools()
	err = ss.loop(ctx)
	var re *reorderedError
	if errors.As(err, &re) {
		// Every change the failed unit held belongs to a transaction that
		// has begun, so none commits after lastFinal.
		s.strictUntil = max(s.strictUntil, ss.lastFinal, ss.received)
		s.log.Info("regrouped changes failed on the target; applying these transactions in source order", zap.Stringer("until", s.strictUntil), zap.Error(re.err))
		if re.rel != "" && !s.ordered[re.rel] {
			s.ordered[re.rel] = true
			s.log.Info("a constraint between rows of this table failed on regrouped changes; from now on only its inserts are grouped, its updates and deletes applied in source order", zap.String("table", re.rel))
		}
	}
	return err
}

// setupOrigin creates the origin when missing, binds the session to it and
// returns its durable progress.
func (s *Stream) setupOrigin(ctx context.Context, tgt *pgconn.PgConn) (pglogrepl.LSN, error) {
	name := []byte(s.cfg.Origin)
	run := func(what, sql string) ([][][]byte, error) {
		res := tgt.ExecParams(ctx, sql, [][]byte{name}, []uint32{textOID}, nil, nil).Read()
		if res.Err != nil {
			err := fmt.Errorf("%s %q on target %s: %w", what, s.cfg.Origin, addr(s.tgtCfg), res.Err)
			if pgCode(err) == "42501" {
				return nil, permanent(err)
			}
			return nil, err
		}
		return res.Rows, nil
	}
	if _, err := run("create origin", `SELECT pg_replication_origin_create($1) WHERE NOT EXISTS (SELECT 1 FROM pg_replication_origin WHERE roname = $1)`); err != nil {
		if pgCode(err) != "23505" { // created concurrently
			return 0, err
		}
	}
	// Fails with 55006 while a previous session still holds the origin: the
	// caller retries.
	if _, err := run("bind origin", `SELECT pg_replication_origin_session_setup($1)`); err != nil {
		return 0, err
	}
	rows, err := run("read origin progress", `SELECT pg_replication_origin_progress($1, true)::text`)
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 || rows[0][0] == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(string(rows[0][0]))
}

// slotConfirmed reads the slot's confirmed_flush_lsn over the replication
// connection (simple protocol, no parameters: the name is validated).
func slotConfirmed(ctx context.Context, src *pgconn.PgConn, slot string) (pglogrepl.LSN, error) {
	res, err := src.Exec(ctx, "SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = '"+slot+"'").ReadAll()
	if err != nil {
		return 0, fmt.Errorf("read slot %q: %w", slot, err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 {
		return 0, permanent(fmt.Errorf("slot %q does not exist on the source: create it (CreateSlot) before streaming", slot))
	}
	return pglogrepl.ParseLSN(string(res[0].Rows[0][0]))
}

// serverVersion reads server_version_num over the replication connection;
// 0 when it cannot be read (then protocol 1 is used).
func serverVersion(ctx context.Context, src *pgconn.PgConn) int {
	res, err := src.Exec(ctx, "SHOW server_version_num").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 {
		return 0
	}
	var n int
	if _, err := fmt.Sscan(string(res[0].Rows[0][0]), &n); err != nil {
		return 0
	}
	return n
}

func walBlockSize(ctx context.Context, src *pgconn.PgConn) (uint64, error) {
	res, err := src.Exec(ctx, "SHOW wal_block_size").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 {
		return 0, fmt.Errorf("read wal_block_size: %w", err)
	}
	var n uint64
	_, err = fmt.Sscan(string(res[0].Rows[0][0]), &n)
	return n, err
}

// session is the state of one streaming connection.
type session struct {
	s    *Stream
	src  *pgconn.PgConn
	exec *executor
	app  *applier
	dec  *decoder

	// skipBefore is the origin's durable progress at start: a transaction
	// whose commit record starts before it ends at or before it, so it is
	// already applied.
	skipBefore pglogrepl.LSN

	received   pglogrepl.LSN // highest position received
	now        time.Time     // when the message being handled arrived
	lastStatus time.Time
	deadline   time.Time // the read deadline set on the source connection

	txnOpen bool // between Begin and Commit
	skip    bool // the open transaction is already applied
	// idle: the last receive timed out (the source had nothing to send).
	idle bool

	// The group: source transactions applied in the open target transaction.
	groupTxns  int           // completed source transactions in the group
	groupBytes int           // size of their change messages
	groupStart time.Time     // when the group's first change arrived
	groupEnd   pglogrepl.LSN // end LSN of the last completed transaction
	groupTime  time.Time     // its commit time
	// idleEnd is the highest WAL end from a keepalive that arrived with no
	// source transaction open: every transaction committed before it has
	// been received, so it becomes processed once the group is committed.
	idleEnd pglogrepl.LSN
	// marked is the highest position handed to the executor by mark.
	marked pglogrepl.LSN
	// lastFinal is the commit LSN of the latest transaction begun.
	lastFinal pglogrepl.LSN

	// Protocol 2: inside a stream block, changes of transaction streamXid
	// go to its spool until its Stream Commit (or Abort).
	proto2    bool
	inStream  bool
	streamXid uint32
	spools    map[uint32]*spool
}

func (ss *session) closeSpools() {
	for xid, sp := range ss.spools {
		sp.close()
		delete(ss.spools, xid)
	}
}

func (ss *session) loop(ctx context.Context) error {
	cfg := ss.s.cfg
	conn := ss.src.Conn()
	var woken atomic.Bool
	ss.s.mu.Lock()
	ss.s.wake = func() {
		woken.Store(true)
		_ = conn.SetReadDeadline(time.Now())
	}
	ss.s.mu.Unlock()
	defer func() {
		ss.s.mu.Lock()
		ss.s.wake = nil
		ss.s.mu.Unlock()
	}()
	for {
		if woken.Swap(false) {
			ss.deadline = time.Time{} // the connection's deadline was moved
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-ss.exec.done:
			return ss.exec.err
		default:
		}
		now := time.Now()
		hasWaiters, _ := ss.s.waiters(0)
		if !ss.txnOpen && ss.groupDue(now) {
			if err := ss.commitGroup(ctx); err != nil {
				return err
			}
		}
		// With someone waiting (a cutover's pause, a catch-up), a source
		// gone quiet is asked for its WAL end at once (a status update
		// requesting a reply) rather than at the status cadence; the
		// keepalive that answers ends the group when that covers a
		// waiter's position (handleCopyData), or moves processed past WAL
		// with nothing to apply: the waiter learns within milliseconds that
		// everything before its position is applied. A source still
		// sending a backlog is not quiet, so its groups stay whole.
		if hasWaiters && ss.idle && !ss.txnOpen && now.Sub(ss.lastStatus) >= idlePing {
			if err := ss.sendStatus(true); err != nil {
				return err
			}
		}
		interval := cfg.StatusInterval
		if hasWaiters {
			interval = min(interval, waitStatusInterval)
		}
		if now.Sub(ss.lastStatus) >= interval {
			if err := ss.sendStatus(false); err != nil {
				return err
			}
		}
		deadline := earliest(ss.lastStatus.Add(interval), now.Add(maxReceiveWait))
		if ss.groupTxns > 0 && !ss.txnOpen {
			deadline = earliest(deadline, ss.groupStart.Add(cfg.BatchDelay))
		}
		if hasWaiters && !ss.txnOpen {
			// Notice a quiet source within idleAfter.
			deadline = earliest(deadline, now.Add(idleAfter))
		}
		// A deadline already set and not later than needed only wakes
		// the loop early, which is harmless; setting one costs a system
		// call, too much for every message of a backlog.
		if ss.deadline.IsZero() || !ss.deadline.After(now) || ss.deadline.After(deadline) {
			if err := conn.SetReadDeadline(deadline); err != nil {
				return fmt.Errorf("receive from source: %w", err)
			}
			ss.deadline = deadline
			if woken.Load() {
				// A wake between the top of the loop and here would be
				// overwritten: receive nothing, go round again.
				_ = conn.SetReadDeadline(time.Now())
			}
		}
		msg, err := ss.src.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) {
				ss.idle = true
				continue
			}
			return fmt.Errorf("receive from source: %w", err)
		}
		ss.idle = false
		// One clock read per message: the server clock's local time and
		// the group's age are both taken from it.
		ss.now = time.Now()
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if err := ss.handleCopyData(ctx, m.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return errors.New("replication stream: the source ended the stream")
		}
	}
}

func (ss *session) handleCopyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return permanent(fmt.Errorf("parse keepalive: %w", err))
		}
		ss.s.noteServer(ka.ServerWALEnd, ka.ServerTime, ss.now)
		if !ss.txnOpen {
			if ss.groupTxns == 0 {
				// Behind any group still executing.
				if ka.ServerWALEnd > ss.marked {
					ss.marked = ka.ServerWALEnd
					if err := ss.app.mark(ctx, ka.ServerWALEnd); err != nil {
						return err
					}
				}
			} else {
				ss.idleEnd = max(ss.idleEnd, ka.ServerWALEnd)
				if _, due := ss.s.waiters(ss.idleEnd); due {
					// Committing the group now covers a waiter's position
					// (processed becomes idleEnd): do not make it wait
					// for BatchDelay.
					if err := ss.commitGroup(ctx); err != nil {
						return err
					}
				}
			}
		}
		if ka.ReplyRequested {
			return ss.sendStatus(false)
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return permanent(fmt.Errorf("parse xlogdata: %w", err))
		}
		ss.s.noteServer(xld.ServerWALEnd, xld.ServerTime, ss.now)
		ss.received = max(ss.received, xld.WALStart)
		return ss.handleMessage(ctx, xld.WALData)
	}
	return nil
}

func (ss *session) handleMessage(ctx context.Context, data []byte) error {
	if !ss.proto2 {
		msg, err := ss.dec.parse(data)
		if err != nil {
			return err
		}
		return ss.handle(ctx, data, msg)
	}
	msg, xid, err := ss.dec.parseV2(data, ss.inStream)
	if err != nil {
		return err
	}
	switch m := msg.(type) {
	case *pglogrepl.StreamStartMessageV2:
		if ss.txnOpen {
			return permanent(errors.New("decode pgoutput: Stream Start inside an open transaction"))
		}
		ss.inStream, ss.streamXid = true, m.Xid
		if ss.spools[m.Xid] == nil {
			if m.FirstSegment != 1 {
				// The walsender streams a transaction from its first
				// change in every session: a later block alone would
				// apply half a transaction.
				return permanent(fmt.Errorf("decode pgoutput: stream of transaction %d starts without its first block", m.Xid))
			}
			sp, err := newSpool()
			if err != nil {
				return err
			}
			ss.spools[m.Xid] = sp
		}
		return nil
	case *pglogrepl.StreamStopMessageV2:
		ss.inStream = false
		return nil
	case *pglogrepl.StreamAbortMessageV2:
		if sp := ss.spools[m.Xid]; sp != nil {
			if m.SubXid == m.Xid || m.SubXid == 0 {
				sp.close()
				delete(ss.spools, m.Xid)
			} else {
				sp.aborted[m.SubXid] = true
			}
		}
		return nil
	case *pglogrepl.StreamCommitMessageV2:
		return ss.streamCommit(ctx, m)
	}
	if ss.inStream {
		switch msg.(type) {
		case *pglogrepl.InsertMessage, *pglogrepl.UpdateMessage, *pglogrepl.DeleteMessage, *pglogrepl.TruncateMessage:
			sp := ss.spools[ss.streamXid]
			if sp == nil {
				return permanent(fmt.Errorf("decode pgoutput: change of streamed transaction %d outside its stream", ss.streamXid))
			}
			return sp.add(xid, data)
		}
		return nil // Relation and Type are cached by the decoder
	}
	return ss.handle(ctx, data, msg)
}

// streamCommit applies a streamed transaction from its spool, as one
// source transaction committed at m.CommitLSN.
func (ss *session) streamCommit(ctx context.Context, m *pglogrepl.StreamCommitMessageV2) error {
	sp := ss.spools[m.Xid]
	delete(ss.spools, m.Xid)
	if sp != nil {
		defer sp.close()
	}
	if err := ss.handle(ctx, nil, &pglogrepl.BeginMessage{FinalLSN: m.CommitLSN, CommitTime: m.CommitTime, Xid: m.Xid}); err != nil {
		return err
	}
	if sp != nil {
		err := sp.replay(func(data []byte) error {
			msg, _, err := ss.dec.parseV2(data, true)
			if err != nil {
				return err
			}
			return ss.handle(ctx, data, msg)
		})
		if err != nil {
			return err
		}
	}
	return ss.handle(ctx, nil, &pglogrepl.CommitMessage{CommitLSN: m.CommitLSN, TransactionEndLSN: m.TransactionEndLSN, CommitTime: m.CommitTime})
}

// handle applies one decoded message outside a stream block.
func (ss *session) handle(ctx context.Context, data []byte, msg pglogrepl.Message) error {
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		if ss.txnOpen {
			return permanent(errors.New("decode pgoutput: Begin inside an open transaction"))
		}
		if err := ss.holdBefore(ctx, m.FinalLSN); err != nil {
			return err
		}
		strict := m.FinalLSN <= ss.s.strictUntil
		// A due group is committed before the next transaction starts. So
		// is the stretch replayed in source order, at its end: were the
		// transactions regrouped after it in the same target transaction,
		// a failure of theirs would roll the replay back with them, and
		// a session that keeps failing that way would never record any
		// progress (the origin stuck at where the first failure left it).
		if ss.groupDue(ss.now) || (ss.app.strict && !strict) {
			if err := ss.commitGroup(ctx); err != nil {
				return err
			}
		}
		ss.txnOpen = true
		ss.skip = m.FinalLSN < ss.skipBefore
		ss.lastFinal = max(ss.lastFinal, m.FinalLSN)
		ss.app.setStrict(strict)
		if !ss.skip && ss.groupTxns == 0 {
			ss.groupStart = time.Now()
			ss.s.pushOldest(m.CommitTime)
		}
	case *pglogrepl.CommitMessage:
		if !ss.txnOpen {
			return permanent(errors.New("decode pgoutput: Commit without Begin"))
		}
		ss.txnOpen = false
		if ss.skip {
			ss.skip = false
			return nil
		}
		ss.groupTxns++
		ss.groupEnd, ss.groupTime = m.TransactionEndLSN, m.CommitTime
		_, waited := ss.s.waiters(ss.groupEnd)
		if waited || ss.groupDue(ss.now) {
			return ss.commitGroup(ctx)
		}
	case *pglogrepl.InsertMessage:
		return ss.change(ctx, data, m.RelationID, func(r *relation) (*stmt, error) { return insertStmt(r, m) })
	case *pglogrepl.UpdateMessage:
		return ss.change(ctx, data, m.RelationID, func(r *relation) (*stmt, error) { return updateStmt(r, m) })
	case *pglogrepl.DeleteMessage:
		return ss.change(ctx, data, m.RelationID, func(r *relation) (*stmt, error) { return deleteStmt(r, m) })
	case *pglogrepl.TruncateMessage:
		if ss.skip {
			return nil
		}
		if !ss.txnOpen {
			return permanent(errors.New("decode pgoutput: Truncate outside a transaction"))
		}
		sql, err := truncateSQL(ss.dec, m)
		if err != nil {
			return err
		}
		ss.groupBytes += len(data)
		ss.app.truncate(sql)
		return nil
	}
	// Relation and Type are cached by the decoder; Origin and logical
	// decoding messages carry nothing to apply.
	return nil
}

func (ss *session) change(ctx context.Context, data []byte, relID uint32, build func(*relation) (*stmt, error)) error {
	if ss.skip {
		return nil
	}
	if !ss.txnOpen {
		return permanent(errors.New("decode pgoutput: change outside a transaction"))
	}
	r, err := ss.dec.relation(relID)
	if err != nil {
		return err
	}
	st, err := build(r)
	if err != nil || st == nil {
		return err
	}
	ss.groupBytes += len(data)
	return ss.app.apply(ctx, st)
}

func (ss *session) groupDue(now time.Time) bool {
	return ss.groupTxns > 0 && (ss.groupBytes >= ss.s.cfg.BatchBytes || now.Sub(ss.groupStart) >= ss.s.cfg.BatchDelay)
}

// commitGroup commits the target transaction holding the group (with the
// origin's progress) and advances processed. A group of empty transactions
// commits nothing: there is nothing to make durable.
func (ss *session) commitGroup(ctx context.Context) error {
	if ss.groupTxns == 0 {
		return nil
	}
	if err := ss.app.commit(ctx, ss.groupEnd, ss.groupTime, max(ss.groupEnd, ss.idleEnd)); err != nil {
		return err
	}
	ss.groupTxns, ss.groupBytes = 0, 0
	return nil
}

// sendStatus reports the received position as written and the processed
// position as flushed and applied: the source may discard WAL only up to
// what is durable on the target.
func (ss *session) sendStatus(reply bool) error {
	flushed := ss.s.Processed()
	written := max(ss.received, flushed)
	if flushed == 0 {
		// pglogrepl reads a zero flush position as "the write position":
		// with nothing durable yet, report nothing written either.
		written = 0
	}
	ss.lastStatus = time.Now()
	if err := pglogrepl.SendStandbyStatusUpdate(context.Background(), ss.src, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: written, WALFlushPosition: flushed, WALApplyPosition: flushed,
		ClientTime: ss.lastStatus, ReplyRequested: reply,
	}); err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	return nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
