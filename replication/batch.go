package replication

import (
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
)

// A rowBatch is batchable changes of one relation and one shape (same kind,
// same columns set and compared) within a segment of the target
// transaction (see applier), applied as one statement over unnest()ed
// text arrays (sent in binary):
//
//	INSERT INTO t (a, b) OVERRIDING SYSTEM VALUE SELECT u.p1::"pg_catalog"."int8", u.p2::"pg_catalog"."bpchar" FROM unnest($1::text[], $2::text[]) AS u(p1, p2)
//	UPDATE t AS _t SET b = u.p1::"pg_catalog"."bpchar" FROM unnest($1::text[], $2::text[]) AS u(p1, p2) WHERE _t.a = u.p2::"pg_catalog"."int8"
//	DELETE FROM t AS _t USING unnest($1::text[]) AS u(p1) WHERE _t.a = u.p1::"pg_catalog"."int8"
//
// (b being char(n): the cast names no typmod, the assignment applies b's.)
//
// It is the same as applying the changes one by one because a segment holds
// one pending change per row: UPDATE and DELETE row batches find rows by a
// unique key they do not change, and a second change of a row is folded
// into the first or starts a new segment. Every value still goes through
// its type's input function (the cast from text), so values round-trip
// exactly as with single-row statements. UPDATE and DELETE row batches must
// affect exactly as many rows as they hold.

// Row batch bounds: a row batch is emitted when it reaches either.
const (
	maxRowBatchRows  = 1000
	maxRowBatchBytes = 1 << 20
)

type rowBatch struct {
	first *stmt      // the first change: relation, kind, shape, params
	rows  [][][]byte // the values of each change, in order; nil: coalesced away
	bytes int
	gen   int // bumped when the row batch is emitted and reset
}

func (rb *rowBatch) reset() {
	clear(rb.rows)
	rb.first, rb.rows, rb.bytes = nil, rb.rows[:0], 0
	rb.gen++
}

// compact drops the rows coalesced away.
func (rb *rowBatch) compact() {
	rb.rows = slices.DeleteFunc(rb.rows, func(row [][]byte) bool { return row == nil })
}

// paramOf returns the position of column col among s's parameters, or -1.
func (s *stmt) paramOf(col int) int {
	for i, p := range s.params {
		if p.col == col && !p.where {
			return i
		}
	}
	return -1
}

func (rb *rowBatch) full() bool {
	return len(rb.rows) >= maxRowBatchRows || rb.bytes >= maxRowBatchBytes
}

// add appends s's values. They are s's own: pglogrepl copies tuple data out
// of the receive buffer, so they stay valid after later messages.
func (rb *rowBatch) add(s *stmt) {
	if rb.first == nil {
		rb.first = s
	}
	rb.rows = append(rb.rows, s.values)
	for _, v := range s.values {
		rb.bytes += len(v)
	}
}

// rowKeyBytes identifies the row s changes by its key values,
// length-prefixed so distinct keys never collide: the WHERE values of an
// UPDATE or DELETE, the key columns of an INSERT. It is "" for an INSERT
// into a table without a key (REPLICA IDENTITY FULL), whose updates and
// deletes are never batched.
func (s *stmt) rowKeyBytes() string {
	var b []byte
	for i, p := range s.params {
		if s.kind == 'I' {
			if !s.rel.cols[p.col].key || s.rel.identity == 'f' {
				continue
			}
		} else if !p.where {
			continue
		}
		if s.values[i] == nil {
			b = append(b, 'N')
			continue
		}
		b = strconv.AppendInt(b, int64(len(s.values[i])), 10)
		b = append(b, ':')
		b = append(b, s.values[i]...)
	}
	return string(b)
}

// arrays renders the row batch's values as one text[] per parameter, in the
// binary array format (array_recv): no quoting to write, no escapes to
// parse.
func (rb *rowBatch) arrays() [][]byte {
	n := len(rb.first.params)
	out := make([][]byte, n)
	for p := 0; p < n; p++ {
		size, nulls := 20, int32(0)
		for _, row := range rb.rows {
			size += 4 + len(row[p])
			if row[p] == nil {
				nulls = 1
			}
		}
		b := make([]byte, 0, size)
		b = binary.BigEndian.AppendUint32(b, 1)                    // dimensions
		b = binary.BigEndian.AppendUint32(b, uint32(nulls))        // has NULLs
		b = binary.BigEndian.AppendUint32(b, textOID)              // element type
		b = binary.BigEndian.AppendUint32(b, uint32(len(rb.rows))) // length
		b = binary.BigEndian.AppendUint32(b, 1)                    // lower bound
		for _, row := range rb.rows {
			if row[p] == nil {
				b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) // -1: NULL
				continue
			}
			b = binary.BigEndian.AppendUint32(b, uint32(len(row[p])))
			b = append(b, row[p]...)
		}
		out[p] = b
	}
	return out
}

// binaryFormats returns n parameter formats, all binary.
func binaryFormats(n int) []int16 {
	f := make([]int16, n)
	for i := range f {
		f[i] = 1
	}
	return f
}

// rowBatchSQL renders the multi-row statement for a row batch of s's shape;
// typeName names a built-in type by OID.
func (s *stmt) rowBatchSQL(typeName func(uint32) string) string {
	val := func(i int, c column) string {
		v := "u.p" + strconv.Itoa(i+1)
		if c.cast != "" {
			return v + c.cast
		}
		return v + "::" + typeName(c.oid)
	}
	var from strings.Builder
	from.WriteString("unnest(")
	s.list(&from, ", ", all, func(i int, _ column) string { return "$" + strconv.Itoa(i+1) + "::text[]" })
	from.WriteString(") AS u(")
	s.list(&from, ", ", all, func(i int, _ column) string { return "p" + strconv.Itoa(i+1) })
	from.WriteString(")")
	where := func(b *strings.Builder) {
		b.WriteString(" WHERE ")
		s.list(b, " AND ", compared, func(i int, c column) string { return "_t." + c.quoted + " = " + val(i, c) })
	}
	r := s.rel
	var b strings.Builder
	switch s.kind {
	case 'I':
		b.WriteString("INSERT INTO " + r.quoted + " (")
		s.list(&b, ", ", all, func(i int, c column) string { return c.quoted })
		b.WriteString(") OVERRIDING SYSTEM VALUE SELECT ")
		s.list(&b, ", ", all, val)
		b.WriteString(" FROM " + from.String())
	case 'U':
		b.WriteString("UPDATE " + r.quoted + " AS _t SET ")
		s.list(&b, ", ", assigned, func(i int, c column) string { return c.quoted + " = " + val(i, c) })
		b.WriteString(" FROM " + from.String())
		where(&b)
	case 'D':
		b.WriteString("DELETE FROM " + r.quoted + " AS _t USING " + from.String())
		where(&b)
	}
	return b.String()
}
