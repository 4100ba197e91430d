package replication

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// firstNonBuiltinOID is PostgreSQL's FirstGenbkiObjectId: types below it are
// built in, have the same OID on every server, and pgoutput sends no Type
// message for them. Values of other types (enums, domains, extension types,
// their arrays) travel with an explicit cast to the type's name instead.
const firstNonBuiltinOID = 10000

const textOID = pgtype.TextOID

// noEqualityTypes are built-in types without a default equality operator
// (or, for box, one that compares areas): a REPLICA IDENTITY FULL lookup
// compares them as text.
var noEqualityTypes = map[uint32]bool{
	pgtype.JSONOID: true, pgtype.JSONArrayOID: true,
	pgtype.XMLOID: true, pgtype.XMLArrayOID: true,
	pgtype.PointOID: true, pgtype.PointArrayOID: true,
	pgtype.LsegOID: true, pgtype.LsegArrayOID: true,
	pgtype.PathOID: true, pgtype.PathArrayOID: true,
	pgtype.BoxOID: true, pgtype.BoxArrayOID: true,
	pgtype.PolygonOID: true, pgtype.PolygonArrayOID: true,
	pgtype.LineOID: true, pgtype.LineArrayOID: true,
	pgtype.CircleOID: true, pgtype.CircleArrayOID: true,
}

// relation is a source table as the last Relation message described it.
// The target table has the same schema-qualified name; columns are matched
// by name.
type relation struct {
	id       uint32
	name     pgx.Identifier
	quoted   string
	identity byte // 'd' default (primary key), 'f' full, 'i' index, 'n' nothing
	cols     []column
	hasKey   bool

	// stmts names the prepared statement of each shape; owned by the
	// applier of the current session.
	stmts map[string]string
	// shapes interns the shapes seen, so that a change of a known shape
	// allocates no string for it.
	shapes map[string]string
}

// intern returns the shape spelled by b, allocated once per relation.
func (r *relation) intern(b []byte) string {
	if s, ok := r.shapes[string(b)]; ok {
		return s
	}
	s := string(b)
	r.shapes[s] = s
	return s
}

type column struct {
	name   string
	quoted string
	typ    uint32 // source type OID
	oid    uint32 // parameter OID sent: typ when built in, else 0 with cast
	cast   string // "::<type>" for non-built-in types, else ""
	key    bool   // part of the replica identity
	textEq bool   // compared as text in REPLICA IDENTITY FULL lookups
}

// decoder parses pgoutput messages and caches Relation and Type messages.
// It does no I/O.
type decoder struct {
	rels  map[uint32]*relation
	types map[uint32]pgx.Identifier
}

func newDecoder() *decoder {
	return &decoder{rels: map[uint32]*relation{}, types: map[uint32]pgx.Identifier{}}
}

// parse decodes one pgoutput message. Relation and Type messages update the
// caches. pglogrepl's decoders index without bounds checks, so a malformed
// message is recovered into a permanent error.
func (d *decoder) parse(data []byte) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, permanent(fmt.Errorf("decode pgoutput message: empty"))
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, permanent(fmt.Errorf("decode pgoutput message %q: malformed: %v", data[0], r))
		}
	}()
	switch data[0] {
	case 'I', 'U', 'D':
		msg, _, err = decodeChange(data, false)
	default:
		msg, err = pglogrepl.Parse(data)
	}
	if err != nil {
		return nil, permanent(fmt.Errorf("decode pgoutput message %q: %w", data[0], err))
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		d.rels[m.RelationID] = d.newRelation(m)
	case *pglogrepl.TypeMessage:
		d.noteType(m)
	}
	return msg, nil
}

// parseV2 decodes one message of pgoutput protocol 2. Messages inside a
// stream block carry the (sub)transaction id, returned as xid; change,
// Relation and Type messages come back as their protocol 1 forms, so the
// rest of the stream handles both protocols alike.
func (d *decoder) parseV2(data []byte, inStream bool) (msg pglogrepl.Message, xid uint32, err error) {
	if len(data) == 0 {
		return nil, 0, permanent(fmt.Errorf("decode pgoutput message: empty"))
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, permanent(fmt.Errorf("decode pgoutput message %q: malformed: %v", data[0], r))
		}
	}()
	switch data[0] {
	case 'I', 'U', 'D':
		msg, xid, err = decodeChange(data, inStream)
		if err != nil {
			return nil, 0, permanent(fmt.Errorf("decode pgoutput message %q: %w", data[0], err))
		}
		return msg, xid, nil
	}
	m, err := pglogrepl.ParseV2(data, inStream)
	if err != nil {
		return nil, 0, permanent(fmt.Errorf("decode pgoutput message %q: %w", data[0], err))
	}
	switch v := m.(type) {
	case *pglogrepl.RelationMessageV2:
		d.rels[v.RelationID] = d.newRelation(&v.RelationMessage)
		return &v.RelationMessage, v.Xid, nil
	case *pglogrepl.TypeMessageV2:
		d.noteType(&v.TypeMessage)
		return &v.TypeMessage, v.Xid, nil
	case *pglogrepl.InsertMessageV2:
		return &v.InsertMessage, v.Xid, nil
	case *pglogrepl.UpdateMessageV2:
		return &v.UpdateMessage, v.Xid, nil
	case *pglogrepl.DeleteMessageV2:
		return &v.DeleteMessage, v.Xid, nil
	case *pglogrepl.TruncateMessageV2:
		return &v.TruncateMessage, v.Xid, nil
	}
	return m, 0, nil
}

func (d *decoder) noteType(m *pglogrepl.TypeMessage) {
	// For a domain pgoutput names its base type; an empty namespace is
	// pg_catalog.
	if m.Namespace == "" {
		d.types[m.DataType] = pgx.Identifier{"pg_catalog", m.Name}
	} else {
		d.types[m.DataType] = pgx.Identifier{m.Namespace, m.Name}
	}
}

func (d *decoder) newRelation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{
		id:       m.RelationID,
		name:     pgx.Identifier{m.Namespace, m.RelationName},
		identity: m.ReplicaIdentity,
		stmts:    map[string]string{},
		shapes:   map[string]string{},
	}
	r.quoted = r.name.Sanitize()
	for _, c := range m.Columns {
		col := column{
			name:   c.Name,
			quoted: pgx.Identifier{c.Name}.Sanitize(),
			typ:    c.DataType,
			key:    c.Flags&1 != 0,
			textEq: noEqualityTypes[c.DataType],
		}
		if c.DataType < firstNonBuiltinOID {
			col.oid = c.DataType
		} else if t, ok := d.types[c.DataType]; ok {
			col.cast = "::" + t.Sanitize()
		}
		// A non-built-in type without a Type message (never sent by
		// pgoutput) travels untyped: the server infers the column's type.
		r.cols = append(r.cols, col)
		r.hasKey = r.hasKey || col.key
	}
	return r
}

func (d *decoder) relation(id uint32) (*relation, error) {
	r, ok := d.rels[id]
	if !ok {
		return nil, permanent(fmt.Errorf("decode pgoutput: change for relation %d before its Relation message", id))
	}
	return r, nil
}

// stmt is one statement to apply: a shape (the cache key of its SQL), the
// SQL (built only when the shape is new), and its text parameters.
type stmt struct {
	rel    *relation
	shape  string
	params []param
	values [][]byte
	// oneRow: the statement must affect exactly one row (UPDATE, DELETE).
	oneRow bool
	kind   byte // 'I', 'U', 'D'
	// batchable: consecutive changes of this shape may be applied as one
	// multi-row statement (see rowBatch): every parameter has a type the
	// target can name, and an UPDATE or DELETE finds its row by a unique
	// key that it does not change.
	batchable bool
}

// param names the column a parameter belongs to, and how it is used.
type param struct {
	col   int
	where bool // in the WHERE clause (compared), not assigned
}

func (s *stmt) oids() []uint32 {
	o := make([]uint32, len(s.params))
	for i, p := range s.params {
		c := s.rel.cols[p.col]
		if p.where && s.rel.identity == 'f' && c.textEq {
			o[i] = textOID
		} else {
			o[i] = c.oid
		}
	}
	return o
}

func tupleCols(t *pglogrepl.TupleData, r *relation) ([]*pglogrepl.TupleDataColumn, error) {
	if t == nil {
		return nil, nil
	}
	if len(t.Columns) != len(r.cols) {
		return nil, permanent(fmt.Errorf("decode pgoutput: tuple for %s has %d columns, relation has %d", r.quoted, len(t.Columns), len(r.cols)))
	}
	for _, c := range t.Columns {
		if c.DataType == pglogrepl.TupleDataTypeBinary {
			return nil, permanent(fmt.Errorf("decode pgoutput: binary tuple data for %s (binary mode is not requested)", r.quoted))
		}
	}
	return t.Columns, nil
}

func value(c *pglogrepl.TupleDataColumn) []byte {
	if c.DataType == pglogrepl.TupleDataTypeNull {
		return nil
	}
	if c.Data == nil {
		return []byte{}
	}
	return c.Data
}

// insertStmt builds INSERT INTO t (cols) VALUES (...) for the columns the
// tuple carries.
func insertStmt(r *relation, m *pglogrepl.InsertMessage) (*stmt, error) {
	cols, err := tupleCols(m.Tuple, r)
	if err != nil {
		return nil, err
	}
	s := &stmt{rel: r, kind: 'I', params: make([]param, 0, len(cols)), values: make([][]byte, 0, len(cols))}
	var buf [64]byte
	shape := append(buf[:0], 'I')
	for i, c := range cols {
		if c.DataType == pglogrepl.TupleDataTypeToast {
			shape = append(shape, '-')
			continue
		}
		shape = append(shape, 'v')
		s.params = append(s.params, param{col: i})
		s.values = append(s.values, value(c))
	}
	s.shape = r.intern(shape)
	s.batchable = typedParams(s)
	return s, nil
}

// typedParams reports whether every parameter's type can be named in a
// cast: built in (by OID) or carried by a Type message.
func typedParams(s *stmt) bool {
	for _, p := range s.params {
		if c := s.rel.cols[p.col]; c.oid == 0 && c.cast == "" {
			return false
		}
	}
	return true
}

// whereFrom appends the row-identifying parameters: the key columns (or, for
// REPLICA IDENTITY FULL, every column the old tuple carries) taken from key.
func whereFrom(s *stmt, shape []byte, key []*pglogrepl.TupleDataColumn) ([]byte, error) {
	r := s.rel
	full := r.identity == 'f'
	n := 0
	for i, c := range key {
		col := r.cols[i]
		use := col.key && c.DataType != pglogrepl.TupleDataTypeToast
		if full {
			use = c.DataType != pglogrepl.TupleDataTypeToast
		}
		if !use {
			shape = append(shape, '-')
			continue
		}
		if !full && c.DataType == pglogrepl.TupleDataTypeNull {
			return nil, permanent(fmt.Errorf("replica identity column %s of %s is NULL", col.quoted, r.quoted))
		}
		shape = append(shape, 'w')
		s.params = append(s.params, param{col: i, where: true})
		s.values = append(s.values, value(c))
		n++
	}
	if n == 0 {
		return nil, permanent(fmt.Errorf("cannot identify the row of %s to change: the source sent no replica identity values (a table needs a primary key or REPLICA IDENTITY FULL)", r.quoted))
	}
	return shape, nil
}

// updateStmt builds an UPDATE of the columns the new tuple carries (an
// unchanged TOASTed value, kind 'u', is left alone; an unchanged key is not
// reassigned), located by the old key when the key changed ('K'), by the
// old row for REPLICA IDENTITY FULL ('O'), else by the new tuple's key. It
// returns nil when there is nothing to assign.
func updateStmt(r *relation, m *pglogrepl.UpdateMessage) (*stmt, error) {
	newCols, err := tupleCols(m.NewTuple, r)
	if err != nil {
		return nil, err
	}
	oldCols, err := tupleCols(m.OldTuple, r)
	if err != nil {
		return nil, err
	}
	if !r.hasKey {
		return nil, permanent(fmt.Errorf("cannot apply an update to %s: it has no replica identity on the source", r.quoted))
	}
	s := &stmt{rel: r, kind: 'U', oneRow: true, params: make([]param, 0, 2*len(newCols)), values: make([][]byte, 0, 2*len(newCols))}
	var buf [128]byte
	shape := append(buf[:0], 'U')
	keyChanged := oldCols != nil
	for i, c := range newCols {
		skip := c.DataType == pglogrepl.TupleDataTypeToast ||
			(r.cols[i].key && !keyChanged && r.identity != 'f')
		if skip {
			shape = append(shape, '-')
			continue
		}
		shape = append(shape, 's')
		s.params = append(s.params, param{col: i})
		s.values = append(s.values, value(c))
	}
	if len(s.params) == 0 {
		return nil, nil
	}
	key := oldCols
	if key == nil {
		key = newCols
	}
	shape, err = whereFrom(s, shape, key)
	if err != nil {
		return nil, err
	}
	s.shape = r.intern(shape)
	s.batchable = !keyChanged && r.identity != 'f' && typedParams(s)
	return s, nil
}

// deleteStmt builds a DELETE of the row the old key (or old row) names.
func deleteStmt(r *relation, m *pglogrepl.DeleteMessage) (*stmt, error) {
	oldCols, err := tupleCols(m.OldTuple, r)
	if err != nil {
		return nil, err
	}
	if oldCols == nil || !r.hasKey {
		return nil, permanent(fmt.Errorf("cannot apply a delete to %s: it has no replica identity on the source", r.quoted))
	}
	s := &stmt{rel: r, kind: 'D', oneRow: true}
	var buf [64]byte
	shape, err := whereFrom(s, append(buf[:0], 'D'), oldCols)
	if err != nil {
		return nil, err
	}
	s.shape = r.intern(shape)
	s.batchable = r.identity != 'f' && typedParams(s)
	return s, nil
}

// sql renders the statement's SQL. It depends only on the relation and the
// shape, so it is built once per shape and prepared.
func (s *stmt) sql() string {
	r := s.rel
	ph := func(i int) string {
		p := s.params[i]
		c := r.cols[p.col]
		n := "$" + strconv.Itoa(i+1)
		if p.where && r.identity == 'f' && c.textEq {
			return n
		}
		return n + c.cast
	}
	var b strings.Builder
	switch s.kind {
	case 'I':
		b.WriteString("INSERT INTO " + r.quoted + " (")
		s.list(&b, ", ", all, func(i int, c column) string { return c.quoted })
		// The source's values, an identity column's too (a no-op without
		// one; needed when the target's is GENERATED ALWAYS).
		b.WriteString(") OVERRIDING SYSTEM VALUE VALUES (")
		s.list(&b, ", ", all, func(i int, c column) string { return ph(i) })
		b.WriteString(")")
		return b.String()
	case 'U':
		b.WriteString("UPDATE " + r.quoted + " SET ")
		s.list(&b, ", ", assigned, func(i int, c column) string { return c.quoted + " = " + ph(i) })
	case 'D':
		b.WriteString("DELETE FROM " + r.quoted)
	}
	b.WriteString(" WHERE ")
	if r.identity == 'f' {
		// Exactly one row, even when the table holds duplicates.
		b.WriteString("ctid = (SELECT ctid FROM " + r.quoted + " WHERE ")
	}
	s.list(&b, " AND ", compared, func(i int, c column) string {
		switch {
		case r.identity != 'f':
			return c.quoted + " = " + ph(i)
		case c.textEq:
			return c.quoted + "::text IS NOT DISTINCT FROM " + ph(i)
		default:
			// Equal is not enough: 5.0 = 5.00, yet they are two rows. The
			// binary image (record_image_eq, the function of the record
			// image operator *=; NULL fields equal) is what tells them
			// apart; the plain comparison stays for an index to find the
			// candidates. (Written as an operator between two ROW(...),
			// the parser would compare the fields with *= one by one,
			// which no type has.)
			return c.quoted + " IS NOT DISTINCT FROM " + ph(i) + " AND pg_catalog.record_image_eq(ROW(" + c.quoted + "), ROW(" + ph(i) + "))"
		}
	})
	if r.identity == 'f' {
		b.WriteString(" LIMIT 1)")
	}
	return b.String()
}

// Parameter filters for list.
func all(param) bool        { return true }
func assigned(p param) bool { return !p.where }
func compared(p param) bool { return p.where }

// list writes render(i, column) for each parameter i that keep accepts,
// separated by sep.
func (s *stmt) list(b *strings.Builder, sep string, keep func(param) bool, render func(i int, c column) string) {
	n := 0
	for i, p := range s.params {
		if !keep(p) {
			continue
		}
		if n > 0 {
			b.WriteString(sep)
		}
		b.WriteString(render(i, s.rel.cols[p.col]))
		n++
	}
}

// truncateSQL renders TRUNCATE ONLY of the relations, as the source did it
// (RESTART IDENTITY when asked; CASCADE is not propagated, as in PostgreSQL's
// own subscriber: the tables it would reach are in the stream if published).
func truncateSQL(d *decoder, m *pglogrepl.TruncateMessage) (string, error) {
	names := make([]string, 0, len(m.RelationIDs))
	for _, id := range m.RelationIDs {
		r, err := d.relation(id)
		if err != nil {
			return "", err
		}
		names = append(names, r.quoted)
	}
	sql := "TRUNCATE ONLY " + strings.Join(names, ", ")
	if m.Option&pglogrepl.TruncateOptionRestartIdentity != 0 {
		sql += " RESTART IDENTITY"
	}
	return sql, nil
}

// keyText renders the row-identifying values for an error message, like
// PostgreSQL's own "Key (id)=(5)", each value cut to 64 bytes.
func (s *stmt) keyText() string {
	var names, vals []string
	for i, p := range s.params {
		if !p.where {
			continue
		}
		names = append(names, s.rel.cols[p.col].name)
		v := "NULL"
		if s.values[i] != nil {
			v = string(s.values[i])
			if len(v) > 64 {
				v = v[:64] + "..."
			}
		}
		vals = append(vals, v)
	}
	return "with key (" + strings.Join(names, ", ") + ")=(" + strings.Join(vals, ", ") + ")"
}
