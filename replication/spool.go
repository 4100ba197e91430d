package replication

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// spool keeps the changes of one streamed (large, in-progress) source
// transaction until its Stream Commit or Stream Abort: pgoutput protocol 2
// sends such a transaction in blocks while it runs. The changes go to a
// temporary file, never all in memory; each record is the (sub)transaction
// id and the raw pgoutput message. A rolled-back savepoint arrives as a
// Stream Abort naming its subtransaction, whose records are then skipped.
type spool struct {
	f       *os.File
	w       *bufio.Writer
	aborted map[uint32]bool
	records int
}

func newSpool() (*spool, error) {
	f, err := os.CreateTemp("", "shardmover-stream-*.spool")
	if err != nil {
		return nil, fmt.Errorf("spool a streamed transaction: %w", err)
	}
	return &spool{f: f, w: bufio.NewWriterSize(f, 256<<10), aborted: map[uint32]bool{}}, nil
}

// add appends one change of (sub)transaction xid; data is copied.
func (sp *spool) add(xid uint32, data []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], xid)
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(data)))
	if _, err := sp.w.Write(hdr[:]); err != nil {
		return fmt.Errorf("spool a streamed transaction: %w", err)
	}
	if _, err := sp.w.Write(data); err != nil {
		return fmt.Errorf("spool a streamed transaction: %w", err)
	}
	sp.records++
	return nil
}

// replay calls fn for every change not in an aborted subtransaction, in
// the order they were added.
func (sp *spool) replay(fn func(data []byte) error) error {
	if err := sp.w.Flush(); err != nil {
		return fmt.Errorf("spool a streamed transaction: %w", err)
	}
	if _, err := sp.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("read a spooled transaction: %w", err)
	}
	r := bufio.NewReaderSize(sp.f, 256<<10)
	var hdr [8]byte
	var buf []byte
	for i := 0; i < sp.records; i++ {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("read a spooled transaction: %w", err)
		}
		n := binary.BigEndian.Uint32(hdr[4:])
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("read a spooled transaction: %w", err)
		}
		if sp.aborted[binary.BigEndian.Uint32(hdr[:4])] {
			continue
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
	return nil
}

// close removes the file.
func (sp *spool) close() {
	_ = sp.f.Close()
	_ = os.Remove(sp.f.Name())
}
