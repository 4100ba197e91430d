package replication

import (
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

// tupleBytes encodes a TupleData: kinds[i] is 'n', 'u', 't' or 'b'.
func tupleBytes(kinds string, vals ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(kinds)))
	for i := range kinds {
		b = append(b, kinds[i])
		if kinds[i] == 't' || kinds[i] == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(vals[i])))
			b = append(b, vals[i]...)
		}
	}
	return b
}

func changeBytes(kind byte, xid uint32, inStream bool, parts ...[]byte) []byte {
	b := []byte{kind}
	if inStream {
		b = binary.BigEndian.AppendUint32(b, xid)
	}
	b = binary.BigEndian.AppendUint32(b, 16384)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// TestDecodeChangeMatchesPglogrepl: decodeChange gives what pglogrepl's
// parsers give for every change message form, in and out of a stream, and
// errors (never panics) on every truncation of them.
func TestDecodeChangeMatchesPglogrepl(t *testing.T) {
	newT := tupleBytes("tntub", "1", "", "", "", "\x00\x01")
	oldT := tupleBytes("tt", "1", "")
	for _, inStream := range []bool{false, true} {
		msgs := [][]byte{
			changeBytes('I', 7, inStream, []byte{'N'}, newT),
			changeBytes('U', 7, inStream, []byte{'N'}, newT),
			changeBytes('U', 7, inStream, []byte{'K'}, oldT, []byte{'N'}, newT),
			changeBytes('U', 7, inStream, []byte{'O'}, oldT, []byte{'N'}, newT),
			changeBytes('D', 7, inStream, []byte{'K'}, oldT),
			changeBytes('D', 7, inStream, []byte{'O'}, newT),
		}
		for _, data := range msgs {
			got, xid, err := decodeChange(data, inStream)
			require.NoError(t, err, "%q", data)
			want, err := pglogrepl.ParseV2(data, inStream)
			require.NoError(t, err)
			switch w := want.(type) {
			case *pglogrepl.InsertMessageV2:
				require.Equal(t, w.Xid, xid)
				require.Equal(t, &w.InsertMessage, got)
			case *pglogrepl.UpdateMessageV2:
				require.Equal(t, w.Xid, xid)
				require.Equal(t, &w.UpdateMessage, got)
			case *pglogrepl.DeleteMessageV2:
				require.Equal(t, w.Xid, xid)
				require.Equal(t, &w.DeleteMessage, got)
			default:
				t.Fatalf("%T", want)
			}
			require.Equal(t, got.Type(), want.Type())
			// Every cut is an error, not a panic.
			for n := 1; n < len(data); n++ {
				_, _, err := decodeChange(data[:n], inStream)
				require.Error(t, err, "%q cut at %d", data, n)
			}
		}
	}
	// Values are copies: changing the message afterwards changes nothing.
	data := changeBytes('I', 0, false, []byte{'N'}, tupleBytes("t", "abc"))
	m, _, err := decodeChange(data, false)
	require.NoError(t, err)
	data[len(data)-1] = 'X'
	require.Equal(t, "abc", string(m.(*pglogrepl.InsertMessage).Tuple.Columns[0].Data))
	// Random bytes never panic.
	rnd := rand.New(rand.NewSource(1))
	for i := 0; i < 20000; i++ {
		b := make([]byte, 1+rnd.Intn(40))
		rnd.Read(b)
		b[0] = "IUD"[rnd.Intn(3)]
		if rnd.Intn(2) == 0 && len(b) > 6 {
			b[5] = "NKO"[rnd.Intn(3)]
		}
		_, _, _ = decodeChange(b, rnd.Intn(2) == 0)
	}
}
