package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Apply is full duplex: the session's receive loop decodes changes and
// builds units of pipelined statements (applier), and an executor goroutine
// sends each unit to the target in one round trip and checks its results,
// while the receive loop goes on reading the stream. Units are executed in
// the order they were built, and every move of the processed position goes
// through them, so Processed never passes a change that is not durable.

// Pipelining bounds: queued statements are sent in one round trip when
// either is reached (and at every commit).
const (
	maxQueuedStmts = 1000
	maxQueuedBytes = 4 << 20
)

// unitQueue is how many built units may wait for the executor: the receive
// loop blocks (backpressure) beyond it, so memory stays bounded.
const unitQueue = 2

// pgLSNOID is the type OID of pg_lsn (built in, the same on every server;
// pgtype has no constant for it).
const pgLSNOID = 3220

// unit is one round trip to the target.
type unit struct {
	prepares []prepareReq // statements to prepare before the batch runs
	batch    pgconn.Batch
	checks   []check // one per queued command, in order
	// commits: the unit ends a group (popping it from the lag clock).
	commits bool
	// commitTx: after every result of the batch checks out, the executor
	// sends COMMIT. It is never pipelined with the changes: a row count
	// that is wrong is no server error, and the transaction holding it must
	// not commit.
	commitTx bool
	// advance is the processed position once the unit is done (0: none).
	advance pglogrepl.LSN
	// reordered: some changes may not be in source order (see applier).
	reordered bool
	// notify is closed once the unit is done (a hold waits on it).
	notify chan struct{}
}

// reorderedError is a failure of a unit whose changes were regrouped. It
// is never permanent and hides the cause's class on purpose: the session
// replays the same transactions in strict source order, and only a failure
// there is judged.
type reorderedError struct {
	err error
	// rel is the quoted name of the relation whose statement failed on an
	// integrity constraint (SQLSTATE class 23), or "".
	rel string
}

func (e *reorderedError) Error() string {
	return "apply regrouped changes (replaying them in source order): " + e.err.Error()
}

type prepareReq struct {
	name, sql string
	oids      []uint32
	kind      byte
	rel       string
}

// check is what one queued command must return. Its description is built
// only when an error needs it, not for every change.
type check struct {
	label string // a fixed description ("truncate"), or:
	s     *stmt  // the change, or the first change of a row batch of n
	n     int
	keys  [][][]byte // the first rows of a row batch, for the message
	rows  int64      // an UPDATE or DELETE must affect exactly this many rows
}

// what describes the command for an error message: "update of
// public.t with key (id)=(5)".
func (c check) what() string {
	if c.s == nil {
		return c.label
	}
	s := c.s
	if c.n == 0 {
		w := kindName(s.kind) + " of " + s.rel.quoted
		if s.oneRow {
			w += " " + s.keyText()
		}
		return w
	}
	w := kindName(s.kind) + " of " + strconv.Itoa(c.n) + " rows of " + s.rel.quoted
	if s.oneRow {
		var parts []string
		for _, row := range c.keys {
			one := *s
			one.values = row
			parts = append(parts, one.keyText())
		}
		if c.n > len(c.keys) {
			parts = append(parts, "...")
		}
		w += " " + strings.Join(parts, ", ")
	}
	return w
}

// applier builds units on the receive loop's goroutine. It owns no
// connection: prepared statements are named here and prepared by the
// executor before the first unit that uses them.
//
// Batchable changes collect in row batches (see batch.go). Unless strict,
// changes are regrouped within a segment: a stretch of the target
// transaction in which each row (relation and key) has one pending change;
// a second change of a row is folded into the first (see coalesce) or
// starts a new segment. Changes to distinct rows commute, so each row batch
// of a segment may hold changes that were not consecutive, and the row
// batches go out in any order. The one effect order can still have is on
// constraints between rows (a unique column value that moves from one row
// to another): such a unit fails, and the session then replays those
// transactions strictly (see reorderedError): one statement per change in
// the source's exact order, so that any error it meets is the source's own
// and names the row. The failing statement's table, when it broke an
// integrity constraint, is then ordered: only its inserts are regrouped
// from then on (see apply).
type applier struct {
	exec *executor
	cur  unit
	n    int  // queued statements (checks + rows of pending row batches)
	size int  // bytes of queued values
	inTx bool // BEGIN queued, COMMIT not yet

	strict     bool                      // one statement per change, in source order
	rowBatches []*rowBatch               // pending row batches of the segment, oldest first
	byKind     map[rowBatchKey]*rowBatch // the same, by relation and shape
	seen       map[rowKey]rowRef         // rows changed in the segment
	spare      []*rowBatch

	// ordered: relations whose updates and deletes are always applied in
	// source order (Stream.ordered; read only here).
	ordered map[string]bool

	nextStmt  int
	typeNames map[uint32]string // built-in type OID -> SQL name
}

type rowBatchKey struct {
	rel   *relation
	shape string
}

type rowKey struct {
	rel *relation
	key string
}

// rowRef locates a row's pending change: row i of row batch rb, while rb
// still has the generation gen (a row batch that is emitted and reused
// moves on).
type rowRef struct {
	rb  *rowBatch
	gen int
	i   int
}

func newApplier(x *executor, typeNames map[uint32]string, ordered map[string]bool) *applier {
	return &applier{exec: x, typeNames: typeNames, ordered: ordered, byKind: map[rowBatchKey]*rowBatch{}, seen: map[rowKey]rowRef{}}
}

func (a *applier) queueSQL(sql string, values [][]byte, oids []uint32, c check) {
	a.cur.batch.ExecParams(sql, values, oids, nil, nil)
	a.cur.checks = append(a.cur.checks, c)
	a.n++
}

func (a *applier) begin() {
	if !a.inTx {
		a.queueSQL("BEGIN", nil, nil, check{})
		a.inTx = true
	}
}

// setStrict switches order-preserving mode on or off for the changes that
// follow; pending regrouped row batches go out first.
func (a *applier) setStrict(strict bool) {
	if strict && !a.strict {
		a.emitRowBatches()
	}
	a.strict = strict
}

// apply queues one row change.
func (a *applier) apply(ctx context.Context, s *stmt) error {
	a.begin()
	for _, v := range s.values {
		a.size += len(v)
	}
	// A relation with a constraint between rows that failed regrouped: its
	// inserts still go in row batches, but every other change of it ends
	// the segment and goes out alone, so inserts are reordered only among
	// inserts with no other change of that relation in between. Such
	// inserts do not conflict in any order: each one satisfied the
	// constraints against the rows already there, the earlier inserts
	// included, and a pairwise constraint holds for the set whatever the
	// order it is built in.
	if !s.batchable || a.strict || (s.kind != 'I' && a.ordered[s.rel.quoted]) {
		a.emitRowBatches()
		a.queueStmt(s)
	} else {
		a.addToRowBatch(s)
	}
	if a.n >= maxQueuedStmts || a.size >= maxQueuedBytes {
		return a.flush(ctx)
	}
	return nil
}

func (a *applier) addToRowBatch(s *stmt) {
	rk := rowKey{rel: s.rel, key: s.rowKeyBytes()}
	if rk.key != "" {
		if ref, again := a.seen[rk]; again && ref.gen == ref.rb.gen {
			switch a.coalesce(ref, s, rk) {
			case merged:
				a.cur.reordered = true
				return
			case conflict:
				a.emitRowBatches() // a new segment
			}
		}
	}
	k := rowBatchKey{rel: s.rel, shape: s.shape}
	rb := a.byKind[k]
	if rb != nil && rb.full() {
		a.emitRowBatch(rb)
		rb = nil
	}
	if rb == nil {
		if n := len(a.spare); n > 0 {
			rb, a.spare = a.spare[n-1], a.spare[:n-1]
		} else {
			rb = &rowBatch{}
		}
		a.rowBatches = append(a.rowBatches, rb)
		a.byKind[k] = rb
	}
	rb.add(s)
	if rk.key != "" {
		a.seen[rk] = rowRef{rb: rb, gen: rb.gen, i: len(rb.rows) - 1}
	}
	a.n++
	a.cur.reordered = true
}

// coalesce folds change s into the pending change of the same row, which
// the target transaction has not applied yet; only the row's final state
// is ever visible there:
//
//	INSERT then UPDATE   the INSERT, with the updated columns' new values
//	UPDATE then UPDATE   the later UPDATE, when both set the same columns
//	INSERT then DELETE   nothing
//	UPDATE then DELETE   the DELETE (which still must find the row)
//
// Anything else (a DELETE then an INSERT, updates of different columns)
// is a conflict: the segment ends and s starts the next one.
func (a *applier) coalesce(ref rowRef, s *stmt, rk rowKey) coalesced {
	prev := ref.rb.first
	row := ref.rb.rows[ref.i]
	switch {
	case prev.kind == 'I' && s.kind == 'U':
		vals := slices.Clone(row)
		for j, p := range s.params {
			if p.where {
				continue
			}
			at := prev.paramOf(p.col)
			if at < 0 {
				return conflict
			}
			vals[at] = s.values[j]
		}
		ref.rb.rows[ref.i] = vals
		return merged
	case prev.kind == 'U' && s.kind == 'U' && prev.shape == s.shape:
		ref.rb.rows[ref.i] = s.values
		return merged
	case prev.kind == 'I' && s.kind == 'D':
		ref.rb.rows[ref.i] = nil
		delete(a.seen, rk)
		return merged
	case prev.kind == 'U' && s.kind == 'D':
		ref.rb.rows[ref.i] = nil
		delete(a.seen, rk)
		return replaced
	}
	return conflict
}

// coalesced is what coalesce did with a change.
type coalesced int

const (
	conflict coalesced = iota // not foldable: end the segment
	merged                    // folded in: nothing more to queue
	replaced                  // the pending change is gone: queue s as new
)

// emitRowBatches queues every pending row batch and starts a new segment.
func (a *applier) emitRowBatches() {
	for len(a.rowBatches) > 0 {
		a.emitRowBatch(a.rowBatches[0])
	}
	clear(a.seen)
}

// stmtName returns the prepared statement for key, asking the executor to
// prepare it first when it is new.
func (a *applier) stmtName(s *stmt, key string, sql func() string, oids []uint32) string {
	if name, ok := s.rel.stmts[key]; ok {
		return name
	}
	a.nextStmt++
	name := "shardmover_apply_" + strconv.Itoa(a.nextStmt)
	a.cur.prepares = append(a.cur.prepares, prepareReq{name: name, sql: sql(), oids: oids, kind: s.kind, rel: s.rel.quoted})
	s.rel.stmts[key] = name
	return name
}

// queueStmt queues one single-row statement.
func (a *applier) queueStmt(s *stmt) {
	name := a.stmtName(s, s.shape, s.sql, s.oids())
	a.cur.batch.ExecPrepared(name, s.values, nil, nil)
	c := check{s: s}
	if s.oneRow {
		c.rows = 1
	}
	a.cur.checks = append(a.cur.checks, c)
	a.n++
}

// emitRowBatch queues row batch rb and forgets it: one change as its
// single-row statement, more as one multi-row statement.
func (a *applier) emitRowBatch(rb *rowBatch) {
	for i, x := range a.rowBatches {
		if x == rb {
			a.rowBatches = append(a.rowBatches[:i], a.rowBatches[i+1:]...)
			break
		}
	}
	s := rb.first
	delete(a.byKind, rowBatchKey{rel: s.rel, shape: s.shape})
	defer func() {
		rb.reset()
		a.spare = append(a.spare, rb)
	}()
	a.n -= len(rb.rows)
	rb.compact() // drop the rows coalesced away
	switch len(rb.rows) {
	case 0:
		return
	case 1:
		one := *s
		one.values = rb.rows[0]
		a.queueStmt(&one)
		return
	}
	for _, p := range s.params {
		if c := s.rel.cols[p.col]; c.cast == "" && a.typeNames[c.oid] == "" {
			// A type the target cannot name: one statement per change.
			for _, row := range rb.rows {
				one := *s
				one.values = row
				a.queueStmt(&one)
			}
			return
		}
	}
	name := a.stmtName(s, "rowBatch:"+s.shape, func() string {
		return s.rowBatchSQL(func(oid uint32) string { return a.typeNames[oid] })
	}, nil)
	a.cur.batch.ExecPrepared(name, rb.arrays(), binaryFormats(len(s.params)), nil)
	// The row batch's rows are reused once it is emitted: keep the first few.
	c := check{s: s, n: len(rb.rows), keys: slices.Clone(rb.rows[:min(len(rb.rows), 5)])}
	if s.oneRow {
		c.rows = int64(len(rb.rows))
	}
	a.cur.checks = append(a.cur.checks, c)
	a.n++
}

// truncate queues a TRUNCATE.
func (a *applier) truncate(sql string) {
	a.emitRowBatches()
	a.begin()
	a.queueSQL(sql, nil, nil, check{label: "truncate"})
}

// commit queues the origin's progress (the end LSN and commit time of the
// last source transaction covered) and COMMIT, and hands the unit to the
// executor; once it is done, processed moves to advance. The apply session
// runs with synchronous_commit = on, so the group is durable then. With no
// open target transaction (a group of empty transactions) only the position
// moves, still in order behind earlier units.
func (a *applier) commit(ctx context.Context, end pglogrepl.LSN, commitTime time.Time, advance pglogrepl.LSN) error {
	if a.inTx {
		a.emitRowBatches()
		a.queueSQL("SELECT pg_replication_origin_xact_setup($1, $2)",
			[][]byte{[]byte(end.String()), []byte(commitTime.UTC().Format(time.RFC3339Nano))},
			[]uint32{pgLSNOID, pgtype.TimestamptzOID},
			check{label: "origin progress"})
		a.cur.commitTx = true
		a.inTx = false
	}
	a.cur.commits = true
	a.cur.advance = advance
	return a.send(ctx)
}

// mark moves processed to lsn once every unit built so far is done.
func (a *applier) mark(ctx context.Context, lsn pglogrepl.LSN) error {
	a.cur.advance = max(a.cur.advance, lsn)
	return a.send(ctx)
}

// flush hands the queued statements to the executor.
func (a *applier) flush(ctx context.Context) error {
	a.emitRowBatches()
	if len(a.cur.checks) == 0 && len(a.cur.prepares) == 0 {
		return nil
	}
	return a.send(ctx)
}

func (a *applier) send(ctx context.Context) error {
	u := a.cur
	a.cur, a.n, a.size = unit{}, 0, 0
	return a.exec.submit(ctx, u)
}

// executor runs units on the target connection, one at a time, in order.
type executor struct {
	s    *Stream
	conn *pgconn.PgConn
	in   chan unit
	done chan struct{} // closed when run returns
	err  error         // why run returned; read after done
	// failedRel is the relation whose statement failed on an integrity
	// constraint, if one did.
	failedRel string
}

func newExecutor(s *Stream, conn *pgconn.PgConn) *executor {
	return &executor{s: s, conn: conn, in: make(chan unit, unitQueue), done: make(chan struct{})}
}

// submit queues u, waiting while the queue is full. It returns the
// executor's error once it has stopped.
func (x *executor) submit(ctx context.Context, u unit) error {
	select {
	case x.in <- u:
		return nil
	case <-x.done:
		return x.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops the executor after the queued units and waits for it.
func (x *executor) close() {
	close(x.in)
	<-x.done
}

func (x *executor) run(ctx context.Context) {
	defer close(x.done)
	for u := range x.in {
		if err := x.do(ctx, &u); err != nil {
			if u.reordered {
				err = &reorderedError{err: err, rel: x.failedRel}
			}
			x.err = err
			// Drain so a blocked submit sees done rather than a full queue.
			go func() {
				for range x.in {
				}
			}()
			return
		}
	}
}

// do runs one unit and checks each result.
func (x *executor) do(ctx context.Context, u *unit) error {
	for _, p := range u.prepares {
		if _, err := x.conn.Prepare(ctx, p.name, p.sql, p.oids); err != nil {
			err = fmt.Errorf("prepare %s statement for %s on the target: %w%s", kindName(p.kind), p.rel, err, schemaHint(err))
			if pgCode(err) != "" && isPermanent(err) {
				return permanent(err)
			}
			return err
		}
	}
	if len(u.checks) > 0 {
		results, err := x.conn.ExecBatch(ctx, &u.batch).ReadAll()
		for i, r := range results {
			if i >= len(u.checks) {
				break
			}
			c := u.checks[i]
			if r.Err != nil {
				return x.failed(c, r.Err)
			}
			if c.rows > 0 && r.CommandTag.RowsAffected() != c.rows {
				return permanent(fmt.Errorf("%w: %s found %d rows on the target, want %d", ErrDiverged, c.what(), r.CommandTag.RowsAffected(), c.rows))
			}
		}
		if err != nil {
			// A server error ends the batch's results: the results read
			// are those of the commands before the one that failed.
			if i := len(results); pgCode(err) != "" && i < len(u.checks) {
				return x.failed(u.checks[i], err)
			}
			return fmt.Errorf("apply on the target: %w", err)
		}
		if len(results) != len(u.checks) {
			return fmt.Errorf("apply on the target: %d results for %d commands", len(results), len(u.checks))
		}
	}
	if u.commitTx {
		res, err := x.conn.Exec(ctx, "COMMIT").ReadAll()
		if err != nil {
			return fmt.Errorf("commit on the target: %w", err)
		}
		if len(res) != 1 || res[0].CommandTag.String() != "COMMIT" {
			return errors.New("commit on the target: the transaction did not commit")
		}
	}
	if u.advance != 0 {
		x.s.advance(u.advance)
	}
	if u.commits {
		x.s.popOldest()
	}
	if u.notify != nil {
		close(u.notify)
	}
	return nil
}

// failed describes the server error err of the command c checks, and
// notes the relation when it is an integrity constraint's (class 23).
func (x *executor) failed(c check, err error) error {
	if code := pgCode(err); c.s != nil && len(code) == 5 && code[:2] == "23" {
		x.failedRel = c.s.rel.quoted
	}
	werr := fmt.Errorf("apply %s on the target: %w%s", c.what(), err, schemaHint(err))
	if isPermanent(err) {
		return permanent(werr)
	}
	return werr
}

// loadTypeNames reads the names by which the multi-row statements cast
// values of built-in types (which have the same OIDs on every server): the
// catalog name, schema-qualified and quoted, e.g. "pg_catalog"."bpchar".
// Such a name carries no typmod, so the cast keeps the value whole and the
// column's own typmod is applied by the assignment (or comparison), as for
// the single-row statements' typed parameters. format_type(oid, NULL)
// would not do: its "character" and "bit" are char(1) and bit(1).
func loadTypeNames(ctx context.Context, conn *pgconn.PgConn) (map[uint32]string, error) {
	res := conn.ExecParams(ctx, `SELECT t.oid::int8::text, n.nspname, t.typname
		FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid < $1::oid`,
		[][]byte{[]byte(strconv.Itoa(firstNonBuiltinOID))}, []uint32{textOID}, nil, nil).Read()
	if res.Err != nil {
		return nil, fmt.Errorf("read type names on the target: %w", res.Err)
	}
	names := make(map[uint32]string, len(res.Rows))
	for _, row := range res.Rows {
		oid, err := strconv.ParseUint(string(row[0]), 10, 32)
		if err != nil {
			return nil, errors.New("read type names on the target: bad oid")
		}
		names[uint32(oid)] = pgx.Identifier{string(row[1]), string(row[2])}.Sanitize()
	}
	return names, nil
}

// schemaHint explains errors that mean the table's definition differs
// between source and target: DDL is not part of logical replication.
func schemaHint(err error) string {
	switch pgCode(err) {
	case "42703", "42P01", "42804", "22P02":
		// undefined column or table, datatype mismatch, or a value the
		// target's column type does not accept.
		return "; the table's definition differs between source and target (a schema change made during the move is not replicated): let the move fail and move the group again"
	}
	return ""
}

func kindName(k byte) string {
	switch k {
	case 'I':
		return "insert"
	case 'U':
		return "update"
	case 'D':
		return "delete"
	}
	return "change"
}
