package faultproxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startProxy starts a proxy that is closed when the test ends, after which
// no goroutine of the proxy may remain.
func startProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		requireNoProxyGoroutines(t)
	})
	return p
}

// requireNoProxyGoroutines fails when a goroutine runs code of the proxy
// (a method of Proxy or conn) after Close.
func requireNoProxyGoroutines(t *testing.T) {
	t.Helper()
	var leaked []string
	for i := 0; i < 50; i++ {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaked = leaked[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "internal/faultproxy.(*Proxy)") || strings.Contains(g, "internal/faultproxy.(*conn)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("goroutines left after Close:\n%s", strings.Join(leaked, "\n\n"))
}

func startupPacket(params ...string) []byte {
	var body []byte
	body = binary.BigEndian.AppendUint32(body, 196608)
	for _, s := range params {
		body = append(append(body, s...), 0)
	}
	body = append(body, 0)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body)+4)), body...)
}

func typed(t byte, body []byte) []byte {
	b := []byte{t}
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)+4))
	return append(b, body...)
}

func cstr(s ...string) []byte {
	var b []byte
	for _, x := range s {
		b = append(append(b, x...), 0)
	}
	return b
}

// TestFraming checks, against a fake server, that the client's stream is
// split into the right messages however it is written, that SSLRequest gets
// the server's answer, and that forwarded bytes are unchanged.
func TestFraming(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		sc, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer sc.Close()
		ssl := make([]byte, 8)
		if _, err := io.ReadFull(sc, ssl); err != nil {
			got <- nil
			return
		}
		_, _ = sc.Write([]byte{'N'})
		rest, _ := io.ReadAll(sc) // until the proxy half-closes
		got <- rest
	}()

	p := startProxy(t, ln.Addr().String())
	var mu sync.Mutex
	var seen []string
	var infos []ConnInfo
	p.SetRule(func(c ConnInfo, m Message) Action {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, string(m.Type)+":"+m.Statement())
		infos = append(infos, c)
		return Pass
	})

	cc, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	ssl := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), codeSSL)
	_, err = cc.Write(ssl)
	require.NoError(t, err)
	ans := make([]byte, 1)
	_, err = io.ReadFull(cc, ans)
	require.NoError(t, err)
	require.Equal(t, byte('N'), ans[0])

	var stream []byte
	stream = append(stream, startupPacket("user", "u1", "database", "db1", "application_name", "app1", "replication", "database")...)
	stream = append(stream, typed('Q', cstr("select 1"))...)
	stream = append(stream, typed('P', cstr("", "insert into t values ($1)"))...)
	stream = append(stream, typed('P', append(cstr("", "select 2"), 0, 0))...)
	stream = append(stream, typed('B', cstr("", ""))...)
	stream = append(stream, typed('S', nil)...)
	big := bytes.Repeat([]byte("x"), 200000)
	stream = append(stream, typed('d', big)...)
	stream = append(stream, typed('c', nil)...)
	stream = append(stream, typed('X', nil)...)
	// Byte by byte for the first 100 bytes, then uneven chunks.
	for i := 0; i < len(stream); {
		n := 1
		if i >= 100 {
			n = 7777
		}
		if i+n > len(stream) {
			n = len(stream) - i
		}
		_, err := cc.Write(stream[i : i+n])
		require.NoError(t, err)
		i += n
	}
	require.NoError(t, cc.(*net.TCPConn).CloseWrite())
	select {
	case b := <-got:
		require.Equal(t, stream, b, "the server receives the client's bytes unchanged")
	case <-time.After(10 * time.Second):
		t.Fatal("fake server got nothing")
	}
	_ = cc.Close()

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"Q:select 1", "P:insert into t values ($1)", "P:select 2", "B:select 2", "S:", "d:", "c:"}, seen)
	for i, c := range infos {
		require.Equal(t, i, c.Messages)
		require.Equal(t, "app1", c.Param("application_name"))
		require.Equal(t, "db1", c.Param("database"))
		require.True(t, c.Replication())
	}
}

func TestMessageHelpers(t *testing.T) {
	q := Message{Type: 'Q', Body: cstr("COMMIT;")}
	require.True(t, q.Is("commit"))
	require.True(t, q.Contains("Comm"))
	require.False(t, Message{Type: 'Q', Body: cstr("COMMIT PREPARED 'x'")}.Is("commit"))
	parse := Message{Type: 'P', Body: append(cstr("s1", "UPDATE pg_dist_placement SET x = $1"), 0, 0)}
	require.Equal(t, "UPDATE pg_dist_placement SET x = $1", parse.SQL())
	require.True(t, parse.Contains("pg_dist_placement"))
	require.Equal(t, "", Message{Type: 'B', Body: cstr("", "s1")}.SQL())
	require.False(t, Message{Type: 'd', Body: []byte("commit")}.Contains("commit"))

	r := Once(func(_ ConnInfo, m Message) bool { return m.Is("commit") }, Cut)
	require.Equal(t, Pass, r(ConnInfo{}, Message{Type: 'Q', Body: cstr("begin")}))
	require.Equal(t, Cut, r(ConnInfo{}, q))
	require.Equal(t, Pass, r(ConnInfo{}, q))

	c := CommitOf(func(_ ConnInfo, m Message) bool { return m.Contains("pg_dist_placement") }, Delay(time.Second))
	one, two := ConnInfo{ID: 1}, ConnInfo{ID: 2}
	require.Equal(t, Pass, c(one, parse))
	require.Equal(t, Pass, c(two, q), "another connection's commit")
	require.Equal(t, Pass, c(one, Message{Type: 'Q', Body: cstr("rollback")}))
	require.Equal(t, Pass, c(one, q), "rolled back: unmarked")
	require.Equal(t, Pass, c(one, parse))
	require.Equal(t, Delay(time.Second), c(one, q))
	require.Equal(t, Pass, c(one, parse))
	require.Equal(t, Pass, c(one, q), "fires once")
}
