package replication

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// A walsender writes each message of a backlog with its own send() as soon
// as it is decoded, so a receiver that keeps up finds one or two messages
// per read: a backlog of one-row transactions took about one read system
// call (and one wake-up of the receive goroutine through the poller) per
// transaction, the largest cost of the applier's process.
//
// coalescingReader sits under the source connection's read buffer. After a
// read that returned less than coalesceBelow bytes (the socket was
// drained), it waits coalesceWait before the next one, so that read takes
// in what the walsender wrote meanwhile: measured on a backlog of 20,000
// one-row transactions, 19,098 reads of 319 bytes on average became 513
// reads of 11,876. A read that returns more goes straight on: a receiver
// that falls behind is never slowed down. The wait delays a message by at
// most coalesceWait, far below the status interval (100ms while a WaitFor
// is pending), so lag and cutover are not affected. The walsender keeps
// writing into the socket buffer meanwhile; it has room for far more than
// it writes in a millisecond.
//
// The wait is quiet where the socket is TCP (see quietWait): the Go
// runtime keeps the socket in its poller while the reading goroutine
// sleeps, and every message the walsender sent during the wait woke the
// poller's thread, which found nothing to run and slept again.
type coalescingReader struct {
	r     io.Reader
	small bool // the last read returned little: wait before the next
	// sock is the connection's TCP socket, nil for any other kind: its
	// receive low-water mark is raised during the wait.
	sock syscall.RawConn
}

const (
	coalesceBelow = 32 << 10
	coalesceWait  = time.Millisecond
)

// plainWaits turns quietWait's low-water mark off, for tests and
// benchmarks that compare the two (export_test.go).
var plainWaits atomic.Bool

// readCoalesced makes cfg's connections read through a coalescingReader
// (under a 256 KB buffer: one read should take in as many messages as are
// waiting), with the socket of the connection it dials.
func readCoalesced(cfg *pgconn.Config) {
	var dialed atomic.Pointer[net.TCPConn]
	if dial := cfg.DialFunc; dial != nil {
		cfg.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
			c, err := dial(ctx, network, address)
			if tc, ok := c.(*net.TCPConn); ok {
				dialed.Store(tc)
			}
			return c, err
		}
	}
	// pgconn dials, then builds the frontend of that connection (once
	// per attempt, in that order), so the socket dialed last is this
	// frontend's. A cancel request dials too, but after the frontend was
	// built: Swap leaves nothing for it to be mistaken for.
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		cr := &coalescingReader{r: r}
		if tc := dialed.Swap(nil); tc != nil {
			if rc, err := tc.SyscallConn(); err == nil {
				cr.sock = rc
			}
		}
		return pgproto3.NewFrontend(bufio.NewReaderSize(cr, 256<<10), w)
	}
}

func (c *coalescingReader) Read(p []byte) (int, error) {
	if c.small {
		if err := c.quietWait(); err != nil {
			return 0, err
		}
	}
	n, err := c.r.Read(p)
	c.small = err == nil && n < coalesceBelow
	return n, err
}

// quietWait waits coalesceWait with the socket's receive low-water mark
// (SO_RCVLOWAT) raised to coalesceBelow, and puts it back to 1 before it
// returns: the kernel then reports the socket readable to the poller only
// once coalesceBelow bytes are waiting, so the walsender's messages no
// longer wake the process during the wait (docs/performance.md has the
// measurements). The mark is 1 again before every read, so no read is held
// back by it; if it cannot be put back, the read fails, and the session
// with it, rather than go on with a raised mark.
func (c *coalescingReader) quietWait() error {
	if c.sock == nil || plainWaits.Load() || setRcvLowat(c.sock, coalesceBelow) != nil {
		time.Sleep(coalesceWait)
		return nil
	}
	time.Sleep(coalesceWait)
	if err := setRcvLowat(c.sock, 1); err != nil {
		return fmt.Errorf("put back the replication socket's receive low-water mark: %w", err)
	}
	return nil
}
