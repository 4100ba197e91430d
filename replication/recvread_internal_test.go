//go:build unix

package replication

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client *net.TCPConn, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	s, ok := <-accepted
	require.True(t, ok, "accept the test connection")
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s
}

func rcvLowat(t *testing.T, rc syscall.RawConn) int {
	t.Helper()
	var v int
	var gerr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	}))
	require.NoError(t, gerr)
	return v
}

// After a small read the reader waits with the socket's low-water mark
// raised far above what arrives; the next read must still return the few
// bytes that came, whether they came during the wait or after it, and the
// mark must be 1 again whenever a read returns.
func TestQuietWaitNeverHoldsBackARead(t *testing.T) {
	c, s := tcpPair(t)
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	r := &coalescingReader{r: c, sock: rc}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 64<<10)

	_, err = s.Write([]byte("first"))
	require.NoError(t, err)
	n, err := r.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "first", string(buf[:n]))
	require.True(t, r.small, "a read of 5 bytes is small: the next one waits")

	for _, delay := range []time.Duration{0, coalesceWait / 2, 20 * coalesceWait} {
		go func() {
			time.Sleep(delay)
			_, _ = s.Write([]byte("tiny"))
		}()
		start := time.Now()
		n, err := r.Read(buf)
		require.NoError(t, err, "a read after a quiet wait, 4 bytes sent %s after it began", delay)
		require.Equal(t, "tiny", string(buf[:n]))
		require.Less(t, time.Since(start), 5*time.Second)
		require.Equal(t, 1, rcvLowat(t, rc), "the low-water mark is 1 again when a read returns")
	}
}

// The mark is raised only while the reader waits: sampled from another
// goroutine while quietWait runs again and again, it is coalesceBelow in
// some samples, and 1 once the waits are over.
func TestQuietWaitRaisesTheMarkDuringTheWait(t *testing.T) {
	c, _ := tcpPair(t)
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	require.Equal(t, 1, rcvLowat(t, rc))
	r := &coalescingReader{r: c, sock: rc}
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 50; i++ {
			if err := r.quietWait(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	raised := 0
	for waiting := true; waiting; {
		select {
		case err := <-done:
			require.NoError(t, err)
			waiting = false
		default:
			if rcvLowat(t, rc) == coalesceBelow {
				raised++
			}
			time.Sleep(coalesceWait / 4)
		}
	}
	require.Positive(t, raised, "no sample saw the raised mark")
	require.Equal(t, 1, rcvLowat(t, rc))

	prev := SetQuietWaits(false)
	defer SetQuietWaits(prev)
	require.NoError(t, r.quietWait())
	require.Equal(t, 1, rcvLowat(t, rc), "off: the mark is left alone")
}
