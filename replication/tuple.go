package replication

import (
	"encoding/binary"
	"errors"

	"github.com/jackc/pglogrepl"
)

// decodeChange decodes an Insert, Update or Delete message of pgoutput
// (data[0] is 'I', 'U' or 'D'; inStream: protocol 2's transaction id
// follows the type byte) into pglogrepl's message types, as pglogrepl.Parse
// does, with fewer allocations: pglogrepl allocates every column and copies
// every value byte by byte into its own slice, the largest cost of decoding
// a backlog. Here the message is copied once and the values are slices of
// that copy (capped, so an append never writes into a neighbour), which,
// like pglogrepl's copies, stay valid after later messages are received.
// It returns an error, never panics, on a message that is cut short or has
// an unknown tuple or column kind.
func decodeChange(data []byte, inStream bool) (msg pglogrepl.Message, xid uint32, err error) {
	kind := data[0]
	src := data[1:]
	if inStream {
		if len(src) < 4 {
			return nil, 0, errShortChange
		}
		xid = binary.BigEndian.Uint32(src)
		src = src[4:]
	}
	if len(src) < 5 {
		return nil, 0, errShortChange
	}
	relID := binary.BigEndian.Uint32(src)
	src = append([]byte(nil), src[4:]...)
	switch kind {
	case 'I':
		if src[0] != 'N' {
			return nil, 0, errTupleKind
		}
		m := &pglogrepl.InsertMessage{RelationID: relID}
		if m.Tuple, _, err = decodeTuple(src[1:]); err != nil {
			return nil, 0, err
		}
		m.SetType(pglogrepl.MessageTypeInsert)
		return m, xid, nil
	case 'U':
		m := &pglogrepl.UpdateMessage{RelationID: relID}
		switch src[0] {
		case 'K', 'O':
			m.OldTupleType = src[0]
			if m.OldTuple, src, err = decodeTuple(src[1:]); err != nil {
				return nil, 0, err
			}
			if len(src) == 0 || src[0] != 'N' {
				return nil, 0, errTupleKind
			}
		case 'N':
		default:
			return nil, 0, errTupleKind
		}
		if m.NewTuple, _, err = decodeTuple(src[1:]); err != nil {
			return nil, 0, err
		}
		m.SetType(pglogrepl.MessageTypeUpdate)
		return m, xid, nil
	case 'D':
		m := &pglogrepl.DeleteMessage{RelationID: relID, OldTupleType: src[0]}
		if src[0] != 'K' && src[0] != 'O' {
			return nil, 0, errTupleKind
		}
		if m.OldTuple, _, err = decodeTuple(src[1:]); err != nil {
			return nil, 0, err
		}
		m.SetType(pglogrepl.MessageTypeDelete)
		return m, xid, nil
	}
	return nil, 0, errors.New("not a change message")
}

var (
	errShortChange = errors.New("message cut short")
	errTupleKind   = errors.New("unexpected tuple kind")
)

// decodeTuple decodes one TupleData at the start of b and returns the rest.
// The column structs are allocated together, and the values are slices of b.
func decodeTuple(b []byte) (*pglogrepl.TupleData, []byte, error) {
	if len(b) < 2 {
		return nil, nil, errShortChange
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	cols := make([]pglogrepl.TupleDataColumn, n)
	ptrs := make([]*pglogrepl.TupleDataColumn, n)
	for i := range cols {
		if len(b) < 1 {
			return nil, nil, errShortChange
		}
		c := &cols[i]
		c.DataType = b[0]
		b = b[1:]
		switch c.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(b) < 4 {
				return nil, nil, errShortChange
			}
			l := binary.BigEndian.Uint32(b)
			b = b[4:]
			if uint64(l) > uint64(len(b)) {
				return nil, nil, errShortChange
			}
			c.Length = l
			c.Data = b[:l:l]
			b = b[l:]
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		default:
			return nil, nil, errors.New("unknown tuple column kind")
		}
		ptrs[i] = c
	}
	return &pglogrepl.TupleData{ColumnNum: uint16(n), Columns: ptrs}, b, nil
}
