package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ctxtime"
)

// The carry-over. A move's decision committed, and then its fence on the
// source was rolled back by someone (a DBA's ROLLBACK PREPARED): until the
// fence was re-established, clients routing by stale metadata wrote to the
// old shards, while the target, already serving, took writes of its own.
// The slot holds what the source took. Replaying it blindly, as the
// applier does, would put a stale client's write over a newer one made on
// the target since the decision. CarryOver replays it only where that
// cannot happen, and otherwise stops naming the rows.
//
// The rule. At the decision source and target were equal (the cutover
// waited for the applier under the source's lock). A row of a carried
// change may be written on the target only if the target's row is still
// as it was at the decision:
//
//   - REPLICA IDENTITY FULL: the change carries the source's whole old row,
//     and its UPDATE or DELETE matches the target's row on every column, so
//     a row changed on the target is simply not found (a conflict).
//   - A key (primary key or identity index): the change carries only the
//     key, so the target row's age tells. Every write of the group's rows
//     on the target after the decision (by the application) has a newer
//     xid than the transaction that created the stream's replication
//     origin there, which ran before the applier's first change and so
//     before the decision; the copy's rows are older. A target row whose
//     xmin precedes the origin's is the decision's; any other row may be
//     newer (or the applier's, written during catch-up: that cannot be
//     told apart, and counts as newer). The one write this misjudges is
//     one by a target transaction that already had an xid when the
//     origin was created and wrote the group's row only after the
//     decision: a transaction open across the move's whole catch-up and
//     cutover. A horizon recorded on the target by the cutover itself
//     (its snapshot's xmin, in the pause) would close that, and would
//     spare the catch-up's rows.
//
// So, per row (relation and key) the source changed after the decision,
// with its first change and its last state known from the slot:
//
//   - the target row is already what the source's last change left (both
//     absent, or every column the slot gave equal as text): nothing to
//     carry, the row's changes are skipped (this is also how an operator
//     settles a conflict: make both sides agree);
//   - the first change is an INSERT: the target must have no row with the
//     key;
//   - the first change is an UPDATE or DELETE: the target must have the
//     row, and its xmin must precede the origin's;
//   - anything else is a conflict.
//
// The rows are checked and locked (SELECT ... FOR UPDATE) and then every
// change is replayed in source order, one statement each, in one target
// transaction that also records the origin's progress: a conflict, or any
// error, leaves the target as it was and the slot untouched (it is only
// peeked), so nothing is overwritten and nothing is lost. A TRUNCATE
// carried over is a conflict (it would discard the target's rows).

// ErrConflict is returned (wrapped in a *ConflictError, also matching
// ErrPermanent) by CarryOver when a change the source took after the
// decision would overwrite a row written on the target since.
var ErrConflict = errors.New("changes the source took after the decision conflict with newer rows on the target")

// Conflict is one row CarryOver would not carry over.
type Conflict struct {
	// Table is the target table, quoted.
	Table string `json:"table"`
	// Key is the row's key as PostgreSQL prints one: (id)=(5).
	Key string `json:"key"`
	// Why says what the target has.
	Why string `json:"why"`
}

func (c Conflict) String() string { return c.Table + " " + c.Key + ": " + c.Why }

// ConflictError lists the conflicting rows (the first maxConflicts of
// Total).
type ConflictError struct {
	Conflicts []Conflict
	Total     int
}

const maxConflicts = 20

func (e *ConflictError) Error() string {
	parts := make([]string, len(e.Conflicts))
	for i, c := range e.Conflicts {
		parts[i] = c.String()
	}
	more := ""
	if e.Total > len(e.Conflicts) {
		more = fmt.Sprintf("; and %d more", e.Total-len(e.Conflicts))
	}
	return fmt.Sprintf("%v: %d row(s), none changed: %s%s", ErrConflict, e.Total, strings.Join(parts, "; "), more)
}

func (e *ConflictError) Unwrap() []error { return []error{ErrConflict, ErrPermanent} }

func (e *ConflictError) add(c Conflict) {
	e.Total++
	if len(e.Conflicts) < maxConflicts {
		e.Conflicts = append(e.Conflicts, c)
	}
}

// CarryOptions configures CarryOver.
type CarryOptions struct {
	// SourceDSN and TargetDSN are libpq connection strings (never logged).
	SourceDSN, TargetDSN string
	// Slot and Publication on the source, Origin on the target: the move's
	// stream's. The origin must exist (its progress says what is applied).
	Slot, Publication, Origin string
	// UpTo: the source transactions that commit before it are carried.
	// The source's WAL must be flushed up to it (the slot is read only as
	// far as WAL is flushed).
	UpTo pglogrepl.LSN
	// Tables maps the names the source's relations may have at a change,
	// quoted and schema-qualified (a shard's own name and its fenced
	// name), to the target table. A change of any other relation is an
	// error.
	Tables map[string]pgx.Identifier
	// LockTimeout bounds each wait for a target row's lock (0: 5s).
	LockTimeout time.Duration
	// Logger receives what was carried; nil means none.
	Logger *zap.Logger
}

// CarryResult says what CarryOver did.
type CarryResult struct {
	// Transactions are the source transactions read (after the origin's
	// progress), Applied the row changes written on the target, Skipped
	// those whose rows the target already had as the source left them.
	Transactions, Applied, Skipped int
}

// carryParams are the settings of both carry-over sessions besides
// sessionParams: values are compared as the text their types' output
// functions give, so both ends render them alike.
var carryParams = map[string]string{"timezone": "UTC", "bytea_output": "hex"}

// CarryOver carries the source's changes committed before opts.UpTo and
// after the origin's progress to the target, by the rule above. On a
// conflict it changes nothing and returns a *ConflictError naming the
// rows.
func CarryOver(ctx context.Context, opts CarryOptions) (CarryResult, error) {
	var res CarryResult
	for kind, name := range map[string]string{"slot": opts.Slot, "publication": opts.Publication, "origin": opts.Origin} {
		if err := ValidateName(kind, name); err != nil {
			return res, err
		}
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	scfg, err := parseDSN("source", opts.SourceDSN)
	if err != nil {
		return res, err
	}
	tcfg, err := parseDSN("target", opts.TargetDSN)
	if err != nil {
		return res, err
	}
	withSessionParams(scfg, opts.Slot)
	withSessionParams(tcfg, opts.Origin) // DropOrigin ends a session named so
	for k, v := range carryParams {
		scfg.RuntimeParams[k] = v
		tcfg.RuntimeParams[k] = v
	}
	tcfg.RuntimeParams["synchronous_commit"] = "on"
	tcfg.RuntimeParams["statement_timeout"] = "0"
	tcfg.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
	tcfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(opts.LockTimeout.Milliseconds(), 10)
	src, err := pgconn.ConnectConfig(ctx, scfg)
	if err != nil {
		return res, fmt.Errorf("connect to source %s: %w", addr(scfg), err)
	}
	defer closeConn(src)
	tgt, err := pgconn.ConnectConfig(ctx, tcfg)
	if err != nil {
		return res, fmt.Errorf("connect to target %s: %w", addr(tcfg), err)
	}
	defer closeConn(tgt)
	c := &carrier{opts: opts, src: src, tgt: tgt, srcAddr: addr(scfg), tgtAddr: addr(tcfg)}
	return c.run(ctx)
}

func closeConn(c *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// carrier is one CarryOver.
type carrier struct {
	opts             CarryOptions
	src, tgt         *pgconn.PgConn
	srcAddr, tgtAddr string
	// progress is the origin's durable progress: source transactions whose
	// commit record starts before it are applied already. horizon is the
	// xid that created the origin on the target.
	progress pglogrepl.LSN
	horizon  string
}

func (c *carrier) run(ctx context.Context) (CarryResult, error) {
	var res CarryResult
	if _, err := c.tgt.Exec(ctx, "SET session_replication_role = replica").ReadAll(); err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		c.opts.Logger.Warn("cannot skip target triggers during the carry-over (session_replication_role); they will fire", zap.Error(err))
	}
	if err := c.readOrigin(ctx); err != nil {
		return res, err
	}
	plan := newCarryPlan()
	if err := c.peek(ctx, plan.note); err != nil {
		return res, err
	}
	res.Transactions = plan.txns
	if plan.txns == 0 {
		return res, nil
	}
	if err := c.bindOrigin(ctx); err != nil {
		return res, err
	}
	if err := c.exec(ctx, "BEGIN"); err != nil {
		return res, err
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = c.tgt.Exec(context.WithoutCancel(ctx), "ROLLBACK").ReadAll()
		}
	}()
	conflicts := &ConflictError{}
	for _, t := range plan.truncates {
		conflicts.add(Conflict{Table: t, Key: "(all rows)", Why: "the source truncated the table after the decision; carrying that over would discard every row the target took since"})
	}
	if err := c.check(ctx, plan, conflicts); err != nil {
		return res, err
	}
	if conflicts.Total > 0 {
		return res, conflicts
	}
	ap := &carryApply{ctx: ctx, c: c, plan: plan, conflicts: conflicts}
	if err := c.peek(ctx, ap.change); err != nil {
		return res, err
	}
	if conflicts.Total > 0 {
		return res, conflicts
	}
	if ap.txns != plan.txns {
		return res, fmt.Errorf("carry-over: the slot gave %d transactions the first time it was read and %d the second", plan.txns, ap.txns)
	}
	res.Applied, res.Skipped = ap.applied, ap.skipped
	if err := c.tgt.ExecParams(ctx, "SELECT pg_replication_origin_xact_setup($1, $2)",
		[][]byte{[]byte(ap.end.String()), []byte(ap.at.UTC().Format(time.RFC3339Nano))}, []uint32{pgLSNOID, pgtype.TimestamptzOID}, nil, nil).Read().Err; err != nil {
		return res, fmt.Errorf("record the carry-over's progress on target %s: %w", c.tgtAddr, err)
	}
	done, err := c.tgt.Exec(ctx, "COMMIT").ReadAll()
	if err == nil && (len(done) != 1 || done[0].CommandTag.String() != "COMMIT") {
		err = errors.New("the transaction did not commit")
	}
	if err != nil {
		return res, fmt.Errorf("commit the carry-over on target %s: %w", c.tgtAddr, err)
	}
	committed = true
	_, _ = c.tgt.Exec(ctx, "SELECT pg_replication_origin_session_reset()").ReadAll()
	c.opts.Logger.Info("carried over what the source took after the decision", zap.Int("transactions", res.Transactions),
		zap.Int("applied", res.Applied), zap.Int("skipped", res.Skipped), zap.Stringer("through", ap.end))
	return res, nil
}

func (c *carrier) exec(ctx context.Context, sql string) error {
	_, err := c.tgt.Exec(ctx, sql).ReadAll()
	return err
}

// readOrigin reads the origin's progress and the xid that created it.
func (c *carrier) readOrigin(ctx context.Context) error {
	res := c.tgt.ExecParams(ctx, `SELECT coalesce(pg_replication_origin_progress(roname, true), '0/0')::text, xmin::text
		FROM pg_catalog.pg_replication_origin WHERE roname = $1`, [][]byte{[]byte(c.opts.Origin)}, []uint32{textOID}, nil, nil).Read()
	if res.Err != nil {
		return fmt.Errorf("read origin %q on target %s: %w", c.opts.Origin, c.tgtAddr, res.Err)
	}
	if len(res.Rows) != 1 {
		return permanent(fmt.Errorf("the replication origin %q is gone from target %s: what the move applied there cannot be told, so nothing is carried over", c.opts.Origin, c.tgtAddr))
	}
	p, err := pglogrepl.ParseLSN(string(res.Rows[0][0]))
	if err != nil {
		return permanent(fmt.Errorf("read origin %q: %w", c.opts.Origin, err))
	}
	c.progress, c.horizon = p, string(res.Rows[0][1])
	return nil
}

// bindOrigin binds the target session to the origin, waiting a moment for
// a previous applier's session that is still exiting.
func (c *carrier) bindOrigin(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := c.tgt.ExecParams(ctx, "SELECT pg_replication_origin_session_setup($1)", [][]byte{[]byte(c.opts.Origin)}, []uint32{textOID}, nil, nil).Read().Err
		if err == nil {
			return nil
		}
		if pgCode(err) != "55006" || attempt >= 50 {
			return fmt.Errorf("bind origin %q on target %s: %w", c.opts.Origin, c.tgtAddr, err)
		}
		if err := ctxtime.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// carriedChange is one decoded change of a carried transaction.
type carriedChange struct {
	kind     byte // 'I', 'U', 'D', 'T' (truncate), 'C' (commit)
	rel      *relation
	old, new []*pglogrepl.TupleDataColumn
	st       *stmt  // the statement that applies it; nil: nothing to assign
	tables   string // 'T': the relations
	end      pglogrepl.LSN
	at       time.Time
}

// peek decodes the slot's transactions committing before UpTo without
// consuming them, and hands fn each change of those the origin has not
// applied, then their commit. A walsender still holding the slot (an
// applier exiting) is waited for a moment.
func (c *carrier) peek(ctx context.Context, fn func(carriedChange) error) error {
	for attempt := 0; ; attempt++ {
		err := c.peekOnce(ctx, fn)
		if err == nil || pgCode(err) != "55006" || attempt >= 50 {
			return err
		}
		if err := ctxtime.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func (c *carrier) peekOnce(ctx context.Context, fn func(carriedChange) error) error {
	rr := c.src.ExecParams(ctx, `SELECT data FROM pg_catalog.pg_logical_slot_peek_binary_changes($1, $2::pg_lsn, NULL,
		'proto_version', '1', 'publication_names', $3)`,
		[][]byte{[]byte(c.opts.Slot), []byte(c.opts.UpTo.String()), []byte(c.opts.Publication)}, []uint32{textOID, textOID, textOID}, nil, []int16{1})
	d := newDecoder()
	skip := false
	var ferr error
	for rr.NextRow() && ferr == nil {
		ferr = c.handle(d, rr.Values()[0], &skip, fn)
	}
	if _, err := rr.Close(); err != nil {
		return fmt.Errorf("read slot %q on source %s: %w", c.opts.Slot, c.srcAddr, err)
	}
	return ferr
}

// handle decodes one message of the slot; skip says whether the open
// transaction is one the origin has applied already.
func (c *carrier) handle(d *decoder, raw []byte, skip *bool, fn func(carriedChange) error) error {
	data := bytes.Clone(raw) // the row's buffer is reused; changes are kept
	msg, err := d.parse(data)
	if err != nil {
		return err
	}
	change := func(relID uint32, ch carriedChange, build func(*relation) (*stmt, error)) error {
		if *skip {
			return nil
		}
		r, err := d.relation(relID)
		if err != nil {
			return err
		}
		ch.rel = r
		if ch.st, err = build(r); err != nil {
			return err
		}
		return fn(ch)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		r := d.rels[m.RelationID]
		t, ok := c.opts.Tables[r.quoted]
		if !ok {
			return permanent(fmt.Errorf("the slot holds a change of %s, which is none of the move's tables", r.quoted))
		}
		r.name, r.quoted = t, t.Sanitize()
	case *pglogrepl.BeginMessage:
		*skip = m.FinalLSN < c.progress
	case *pglogrepl.CommitMessage:
		if *skip {
			return nil
		}
		return fn(carriedChange{kind: 'C', end: m.TransactionEndLSN, at: m.CommitTime})
	case *pglogrepl.InsertMessage:
		return change(m.RelationID, carriedChange{kind: 'I', new: columnsOf(m.Tuple)}, func(r *relation) (*stmt, error) { return insertStmt(r, m) })
	case *pglogrepl.UpdateMessage:
		return change(m.RelationID, carriedChange{kind: 'U', old: columnsOf(m.OldTuple), new: columnsOf(m.NewTuple)}, func(r *relation) (*stmt, error) { return updateStmt(r, m) })
	case *pglogrepl.DeleteMessage:
		return change(m.RelationID, carriedChange{kind: 'D', old: columnsOf(m.OldTuple)}, func(r *relation) (*stmt, error) { return deleteStmt(r, m) })
	case *pglogrepl.TruncateMessage:
		if *skip {
			return nil
		}
		sql, err := truncateSQL(d, m)
		if err != nil {
			return err
		}
		return fn(carriedChange{kind: 'T', tables: strings.TrimPrefix(sql, "TRUNCATE ONLY ")})
	}
	return nil
}

func columnsOf(t *pglogrepl.TupleData) []*pglogrepl.TupleDataColumn {
	if t == nil {
		return nil
	}
	return t.Columns
}

// rowState is what the carried changes do to one row (a relation with a
// key, and one key value) of the target.
type rowState struct {
	rel *relation
	key [][]byte // the key columns' values, in column order
	// existed: at the decision the row existed (the first change was an
	// UPDATE or DELETE), else it did not (an INSERT).
	existed bool
	// present and final are the row after the last change; known says
	// which of final's columns the slot gave (an unchanged TOASTed value
	// it does not).
	present bool
	final   [][]byte
	known   []bool
	// partners are the rows a key-changing UPDATE moved this one to or
	// from: all of them are carried, or none.
	partners []string
	skip     bool
	conflict bool
}

// carryPlan is the first read of the slot: each row's state, in order.
type carryPlan struct {
	rows      map[string]*rowState
	order     []string
	truncates []string
	txns      int
}

func newCarryPlan() *carryPlan { return &carryPlan{rows: map[string]*rowState{}} }

// rowKeyOf returns the map key and the key values of the row tuple cols
// holds, for a relation with a key; ok is false for REPLICA IDENTITY FULL
// (no key: such changes are checked by their own WHERE) and for a key
// value the slot did not give.
func rowKeyOf(r *relation, cols []*pglogrepl.TupleDataColumn) (mk string, key [][]byte, ok bool) {
	if r.identity == 'f' || len(cols) != len(r.cols) {
		return "", nil, false
	}
	b := []byte(r.quoted)
	for i, c := range r.cols {
		if !c.key {
			continue
		}
		col := cols[i]
		if col.DataType == pglogrepl.TupleDataTypeToast || col.DataType == pglogrepl.TupleDataTypeNull {
			return "", nil, false
		}
		v := value(col)
		key = append(key, v)
		b = append(b, 0)
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
	}
	return string(b), key, len(key) > 0
}

// row returns the state of row mk, making it with existed when new.
func (p *carryPlan) row(mk string, r *relation, key [][]byte, existed bool) *rowState {
	s, ok := p.rows[mk]
	if !ok {
		s = &rowState{rel: r, key: key, existed: existed, present: existed, final: make([][]byte, len(r.cols)), known: make([]bool, len(r.cols))}
		p.rows[mk] = s
		p.order = append(p.order, mk)
	}
	return s
}

// set records the columns a tuple gives as the row's values.
func (s *rowState) set(cols []*pglogrepl.TupleDataColumn, replace bool) {
	s.present = true
	for i, c := range cols {
		if c.DataType == pglogrepl.TupleDataTypeToast {
			if replace {
				s.known[i] = false
			}
			continue
		}
		s.final[i], s.known[i] = value(c), true
	}
}

func (p *carryPlan) note(ch carriedChange) error {
	switch ch.kind {
	case 'C':
		p.txns++
		return nil
	case 'T':
		p.truncates = append(p.truncates, ch.tables)
		return nil
	}
	r := ch.rel
	switch ch.kind {
	case 'I':
		mk, key, ok := rowKeyOf(r, ch.new)
		if ok {
			p.row(mk, r, key, false).set(ch.new, true)
		}
	case 'D':
		mk, key, ok := rowKeyOf(r, ch.old)
		if ok {
			s := p.row(mk, r, key, true)
			s.present = false
		}
	case 'U':
		newMK, newKey, ok := rowKeyOf(r, ch.new)
		if !ok {
			return nil
		}
		oldMK, oldKey := newMK, newKey
		if ch.old != nil {
			if oldMK, oldKey, ok = rowKeyOf(r, ch.old); !ok {
				return nil
			}
		}
		if oldMK == newMK {
			p.row(newMK, r, newKey, true).set(ch.new, false)
			return nil
		}
		from := p.row(oldMK, r, oldKey, true)
		from.present = false
		to := p.row(newMK, r, newKey, false)
		to.set(ch.new, true)
		from.partners = append(from.partners, newMK)
		to.partners = append(to.partners, oldMK)
	}
	return nil
}

// check locks and reads each row the plan changes on the target, and
// decides: skip it (the target has it as the source left it), carry it,
// or a conflict.
func (c *carrier) check(ctx context.Context, p *carryPlan, conflicts *ConflictError) error {
	for _, mk := range p.order {
		s := p.rows[mk]
		r := s.rel
		var sql strings.Builder
		sql.WriteString("SELECT pg_catalog.age(xmin) > pg_catalog.age($1::text::xid)")
		for _, col := range r.cols {
			sql.WriteString(", " + col.quoted)
		}
		sql.WriteString(" FROM " + r.quoted + " WHERE ")
		vals := [][]byte{[]byte(c.horizon)}
		oids := []uint32{textOID}
		n := 0
		for _, col := range r.cols {
			if !col.key {
				continue
			}
			if n > 0 {
				sql.WriteString(" AND ")
			}
			sql.WriteString(col.quoted + " = $" + strconv.Itoa(len(vals)+1) + col.cast)
			vals = append(vals, s.key[n])
			oids = append(oids, col.oid)
			n++
		}
		sql.WriteString(" FOR UPDATE")
		res := c.tgt.ExecParams(ctx, sql.String(), vals, oids, nil, nil).Read()
		if res.Err != nil {
			return fmt.Errorf("read %s %s on target %s: %w", r.quoted, keyText(r, s.key), c.tgtAddr, res.Err)
		}
		if len(res.Rows) > 1 {
			return permanent(fmt.Errorf("%s has %d rows with %s on target %s", r.quoted, len(res.Rows), keyText(r, s.key), c.tgtAddr))
		}
		var why string
		switch {
		case len(res.Rows) == 0 && !s.present:
			s.skip = true
		case len(res.Rows) == 1 && s.present && sameRow(s, res.Rows[0][1:]):
			s.skip = true
		case !s.existed && len(res.Rows) == 1:
			why = "the target has a row with this key, written there since the decision, where the source inserted one"
		case s.existed && len(res.Rows) == 0:
			why = "the target deleted the row since the decision, and the source changed it"
		case s.existed && string(res.Rows[0][0]) != "t":
			why = "the target's row was written after the stream began (it may be newer than the decision), and the source changed it"
		}
		if why != "" {
			s.conflict = true
			conflicts.add(Conflict{Table: r.quoted, Key: keyText(r, s.key), Why: why})
		}
	}
	// A key-changing UPDATE is carried whole or not at all.
	for _, mk := range p.order {
		s := p.rows[mk]
		for _, other := range s.partners {
			o := p.rows[other]
			if s.conflict || o.conflict || s.skip == o.skip {
				continue
			}
			s.conflict, o.conflict = true, true
			conflicts.add(Conflict{Table: s.rel.quoted, Key: keyText(s.rel, s.key) + " -> " + keyText(o.rel, o.key),
				Why: "the source changed the row's key after the decision, and the target has only one side of that"})
		}
	}
	return nil
}

// sameRow: every column the plan knows of the row's last state equals the
// target's row, compared as the text of the type's output function (NULL
// only equals NULL).
func sameRow(s *rowState, got [][]byte) bool {
	if len(got) != len(s.final) {
		return false
	}
	for i := range s.final {
		if !s.known[i] {
			continue
		}
		a, b := s.final[i], got[i]
		if (a == nil) != (b == nil) || !bytes.Equal(a, b) {
			return false
		}
	}
	return true
}

// keyText renders a key like PostgreSQL: (id)=(5), each value cut to 64
// bytes.
func keyText(r *relation, key [][]byte) string {
	var names, vals []string
	n := 0
	for _, c := range r.cols {
		if !c.key || n >= len(key) {
			continue
		}
		names = append(names, c.name)
		v := string(key[n])
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		vals = append(vals, v)
		n++
	}
	return "(" + strings.Join(names, ", ") + ")=(" + strings.Join(vals, ", ") + ")"
}

// carryApply is the second read of the slot: each change replayed in
// source order, but those of rows the check skipped.
type carryApply struct {
	ctx              context.Context
	c                *carrier
	plan             *carryPlan
	conflicts        *ConflictError
	txns             int
	applied, skipped int
	end              pglogrepl.LSN
	at               time.Time
}

func (a *carryApply) change(ch carriedChange) error {
	switch ch.kind {
	case 'C':
		a.txns++
		a.end, a.at = ch.end, ch.at
		return nil
	case 'T':
		return nil // a conflict already
	}
	r := ch.rel
	if r.identity != 'f' {
		tuple := ch.new
		if ch.kind == 'D' || (ch.kind == 'U' && ch.old != nil) {
			tuple = ch.old
		}
		mk, _, ok := rowKeyOf(r, tuple)
		if !ok {
			return permanent(fmt.Errorf("a change of %s carried over has no key value the target can find its row by", r.quoted))
		}
		if s := a.plan.rows[mk]; s != nil && s.skip {
			a.skipped++
			return nil
		}
	}
	if ch.st == nil {
		return nil // nothing to assign
	}
	s := ch.st
	res := a.c.tgt.ExecParams(a.ctx, s.sql(), s.values, s.oids(), nil, nil).Read()
	if res.Err != nil {
		if pgCode(res.Err) == "23505" && s.kind == 'I' {
			a.conflicts.add(Conflict{Table: r.quoted, Key: strings.TrimPrefix(s.rowKeyText(), "with key "), Why: "a row with this key was inserted on the target while the carry-over ran"})
			return permanent(a.conflicts)
		}
		return fmt.Errorf("carry %s of %s %s over to target %s: %w%s", kindName(s.kind), r.quoted, s.rowKeyText(), a.c.tgtAddr, res.Err, schemaHint(res.Err))
	}
	if s.oneRow && res.CommandTag.RowsAffected() != 1 {
		// With REPLICA IDENTITY FULL the target's row must equal the
		// source's old row: it was changed on the target. (A row with a
		// key was checked and locked: it is found.)
		a.conflicts.add(Conflict{Table: r.quoted, Key: strings.TrimPrefix(s.keyText(), "with key "), Why: "the target's row is no longer what the source had before its change (changed on the target since the decision)"})
		return nil
	}
	a.applied++
	return nil
}

// rowKeyText names a statement's row for a message: its WHERE values, or
// an INSERT's key columns.
func (s *stmt) rowKeyText() string {
	if s.kind != 'I' {
		return s.keyText()
	}
	var names, vals []string
	for i, p := range s.params {
		if c := s.rel.cols[p.col]; c.key && s.rel.identity != 'f' {
			names = append(names, c.name)
			vals = append(vals, string(s.values[i]))
		}
	}
	return "with key (" + strings.Join(names, ", ") + ")=(" + strings.Join(vals, ", ") + ")"
}
