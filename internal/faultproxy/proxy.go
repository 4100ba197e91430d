package faultproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardmover/shardmover/internal/sandbox"
)

const (
	codeSSL      = 80877103
	codeGSSENC   = 80877104
	codeCancel   = 80877102
	maxStartup   = 10000     // the server's own limit for a startup packet
	flushAt      = 64 << 10  // forward pending messages once this much is held
	maxMessage   = 1<<30 + 5 // the server refuses anything longer anyway
	dialTimeout  = 10 * time.Second
	serverBuffer = 32 << 10
)

var errStop = errors.New("faultproxy: connection closed")

// Proxy forwards connections from Addr() to its upstream and injects faults.
type Proxy struct {
	upstream string
	ln       net.Listener
	port     int
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	rule     atomic.Pointer[ruleState]
	faults   atomic.Int64
	nextID   atomic.Uint64

	mu          sync.Mutex
	conns       map[uint64]*conn
	closed      bool
	refuseUntil time.Time
	paused      chan struct{}   // non-nil while paused; closed by Resume
	cutKeys     map[string]bool // cancel keys of sessions the proxy cut
}

// New starts a proxy on a reserved 127.0.0.1 port that forwards to
// upstream ("host:port").
func New(upstream string) (*Proxy, error) {
	port, err := sandbox.ReservePorts(1)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		sandbox.ReleasePorts(port)
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{upstream: upstream, ln: ln, port: port, ctx: ctx, cancel: cancel, conns: map[uint64]*conn{}, cutKeys: map[string]bool{}}
	p.rule.Store(newRuleState(nil))
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the proxy's "127.0.0.1:port".
func (p *Proxy) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// Port returns the proxy's port.
func (p *Proxy) Port() int { return p.port }

// SetRule makes r judge every client message from now on, and gives it a
// fresh Fired channel. A nil r passes everything.
func (p *Proxy) SetRule(r Rule) { p.rule.Store(newRuleState(r)) }

// ClearRule passes everything from now on.
func (p *Proxy) ClearRule() { p.SetRule(nil) }

// Fired returns a channel closed once the current rule's first non-Pass
// action has taken effect.
func (p *Proxy) Fired() <-chan struct{} { return p.rule.Load().fired }

// Faults returns how many non-Pass actions took effect since New.
func (p *Proxy) Faults() int64 { return p.faults.Load() }

// Conns returns the number of open client connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// CutAll closes every current connection, both sides.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	cs := make([]*conn, 0, len(p.conns))
	for _, c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.cut()
	}
}

// Refuse accepts and immediately closes new connections for d.
func (p *Proxy) Refuse(d time.Duration) {
	p.mu.Lock()
	p.refuseUntil = time.Now().Add(d)
	p.mu.Unlock()
}

// Pause holds all traffic in both directions until Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume lets traffic held by Pause flow again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
	p.mu.Unlock()
}

// Close closes the listener and every connection, waits for the proxy's
// goroutines and releases its port.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	sandbox.ReleasePorts(p.port)
	return err
}

// gate waits while the proxy is paused; false when done closed first.
func (p *Proxy) gate(done <-chan struct{}) bool {
	for {
		p.mu.Lock()
		ch := p.paused
		p.mu.Unlock()
		if ch == nil {
			select {
			case <-done:
				return false
			default:
				return true
			}
		}
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		p.mu.Lock()
		if p.closed || time.Now().Before(p.refuseUntil) {
			p.mu.Unlock()
			_ = nc.Close()
			continue
		}
		c := &conn{p: p, id: p.nextID.Add(1), client: nc, done: make(chan struct{})}
		p.conns[c.id] = c
		p.wg.Add(1)
		p.mu.Unlock()
		go c.run()
	}
}

func (p *Proxy) judge(info ConnInfo, m Message) (Action, *ruleState) {
	st := p.rule.Load()
	if st.rule == nil {
		return Pass, st
	}
	return st.rule(info, m), st
}

func (p *Proxy) fired(st *ruleState) {
	p.faults.Add(1)
	st.fire()
}

// conn is one proxied client connection.
type conn struct {
	p      *Proxy
	id     uint64
	client net.Conn
	done   chan struct{} // closed by close

	mu        sync.Mutex
	server    net.Conn
	closeOnce sync.Once

	params   map[string]string
	key      string            // BackendKeyData body; under mu
	stmts    map[string]string // prepared statement name -> SQL
	msgs     int
	dropping bool
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.client.Close()
		c.mu.Lock()
		if c.server != nil {
			_ = c.server.Close()
		}
		c.mu.Unlock()
	})
}

// cut closes the connection as a fault: a CancelRequest the client sends
// for its session afterwards is swallowed, so it cannot change what the
// server does with what it already received.
func (c *conn) cut() {
	c.markCut()
	c.close()
}

func (c *conn) markCut() {
	c.mu.Lock()
	key := c.key
	c.mu.Unlock()
	if key != "" {
		c.p.mu.Lock()
		c.p.cutKeys[key] = true
		c.p.mu.Unlock()
	}
}

func (c *conn) run() {
	defer c.p.wg.Done()
	defer func() {
		c.close()
		c.p.mu.Lock()
		delete(c.p.conns, c.id)
		c.p.mu.Unlock()
	}()
	d := net.Dialer{Timeout: dialTimeout}
	sc, err := d.DialContext(c.p.ctx, "tcp", c.p.upstream)
	if err != nil {
		return
	}
	c.mu.Lock()
	c.server = sc
	c.mu.Unlock()
	select {
	case <-c.done: // closed while dialing
		_ = sc.Close()
		return
	default:
	}
	br := bufio.NewReaderSize(c.client, flushAt)
	typed, err := c.startup(br, sc)
	if err != nil {
		return
	}
	s2c := make(chan struct{})
	go func() {
		defer close(s2c)
		c.serverToClient(sc, typed)
	}()
	if typed {
		c.clientToServer(br, sc)
	} else {
		c.raw(br, sc)
	}
	<-s2c
}

// write forwards b to the server once the proxy is not paused.
func (c *conn) write(sc net.Conn, b []byte) bool {
	if len(b) == 0 {
		return true
	}
	if !c.p.gate(c.done) {
		return false
	}
	_, err := sc.Write(b)
	return err == nil
}

// startup handles the untyped packets; typed reports whether a
// StartupMessage was forwarded and typed messages follow.
func (c *conn) startup(br *bufio.Reader, sc net.Conn) (typed bool, err error) {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return false, err
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 || n > maxStartup {
			return false, fmt.Errorf("faultproxy: bad startup packet length %d", n)
		}
		pkt := make([]byte, n)
		copy(pkt, hdr[:])
		if _, err := io.ReadFull(br, pkt[8:]); err != nil {
			return false, err
		}
		code := binary.BigEndian.Uint32(hdr[4:])
		if code == codeCancel {
			c.p.mu.Lock()
			swallow := c.p.cutKeys[string(pkt[8:])]
			c.p.mu.Unlock()
			if swallow {
				return false, errStop
			}
		}
		if !c.write(sc, pkt) {
			return false, errStop
		}
		switch {
		case code == codeSSL || code == codeGSSENC:
			var ans [1]byte
			if _, err := io.ReadFull(sc, ans[:]); err != nil {
				return false, err
			}
			if !c.p.gate(c.done) {
				return false, errStop
			}
			if _, err := c.client.Write(ans[:]); err != nil {
				return false, err
			}
			if ans[0] != 'N' {
				return false, nil // encrypted from here: raw bytes
			}
		case code>>16 == 3:
			c.params = parseParams(pkt[8:])
			return true, nil
		default: // CancelRequest or unknown
			return false, nil
		}
	}
}

func parseParams(b []byte) map[string]string {
	m := map[string]string{}
	for {
		k := cstring(b)
		if k == "" || len(k)+1 > len(b) {
			return m
		}
		b = b[len(k)+1:]
		v := cstring(b)
		m[k] = v
		if len(v)+1 > len(b) {
			return m
		}
		b = b[len(v)+1:]
	}
}

// raw forwards client bytes without parsing.
func (c *conn) raw(br *bufio.Reader, sc net.Conn) {
	buf := make([]byte, serverBuffer)
	for {
		n, err := br.Read(buf)
		if n > 0 && !c.write(sc, buf[:n]) {
			c.close()
			return
		}
		if err != nil {
			halfClose(sc)
			return
		}
	}
}

func halfClose(sc net.Conn) {
	if tc, ok := sc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = sc.Close()
	}
}

// serverToClient forwards server bytes. After a StartupMessage it reads the
// server's typed messages up to the first ReadyForQuery to learn the
// session's cancel key, then copies raw. When the client is gone it keeps
// reading (and discarding) until the server ends the session, so the server
// never meets a reset before it has read what was forwarded.
func (c *conn) serverToClient(sc net.Conn, typed bool) {
	defer c.close()
	br := bufio.NewReaderSize(sc, serverBuffer)
	clientGone := false
	send := func(b []byte) bool {
		if clientGone || len(b) == 0 {
			return true
		}
		if !c.p.gate(c.done) {
			return false
		}
		if _, err := c.client.Write(b); err != nil {
			clientGone = true
		}
		return true
	}
	for typed {
		var hdr [5]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		if n < 4 || n > maxStartup {
			if !send(hdr[:]) { // not a startup reply we know: copy raw
				return
			}
			break
		}
		msg := make([]byte, 1+n)
		copy(msg, hdr[:])
		if _, err := io.ReadFull(br, msg[5:]); err != nil {
			return
		}
		if msg[0] == 'K' {
			c.mu.Lock()
			c.key = string(msg[5:])
			c.mu.Unlock()
		}
		if !send(msg) {
			return
		}
		if msg[0] == 'Z' {
			break
		}
	}
	buf := make([]byte, serverBuffer)
	for {
		n, err := br.Read(buf)
		if !send(buf[:n]) || err != nil {
			return
		}
	}
}

// fullyBuffered reports whether the next whole typed message is in br.
func fullyBuffered(br *bufio.Reader) bool {
	if br.Buffered() < 5 {
		return false
	}
	h, _ := br.Peek(5)
	return br.Buffered() >= 1+int(binary.BigEndian.Uint32(h[1:]))
}

// isExtended reports the extended-protocol messages that only run at Sync.
func isExtended(t byte) bool {
	switch t {
	case 'P', 'B', 'D', 'E', 'C', 'H':
		return true
	}
	return false
}

// track remembers parsed statements and names a Bind's statement text.
func (c *conn) track(m *Message) {
	switch m.Type {
	case 'P':
		if c.stmts == nil {
			c.stmts = map[string]string{}
		}
		c.stmts[cstring(m.Body)] = m.SQL()
	case 'B':
		if i := bytes.IndexByte(m.Body, 0); i >= 0 {
			m.bound = c.stmts[cstring(m.Body[i+1:])]
		}
	case 'C':
		if len(m.Body) > 0 && m.Body[0] == 'S' {
			delete(c.stmts, cstring(m.Body[1:]))
		}
	}
}

// clientToServer splits the client's stream into typed messages, judges
// each and forwards it. Messages already read are batched into one write.
func (c *conn) clientToServer(br *bufio.Reader, sc net.Conn) {
	var pending []byte
	flush := func() bool {
		ok := c.write(sc, pending)
		pending = pending[:0]
		return ok
	}
	// next reads one message onto pending and returns its start. Unless
	// hold is set, what pending holds is forwarded first when the next
	// message is not already read, so nothing waits on the client.
	next := func(hold bool) (int, error) {
		if !hold && len(pending) > 0 && !fullyBuffered(br) && !flush() {
			return 0, errStop
		}
		start := len(pending)
		var hdr [5]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return start, err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		if n < 4 || n > maxMessage {
			return start, fmt.Errorf("faultproxy: bad message length %d", n)
		}
		pending = append(pending, hdr[:]...)
		pending = slices.Grow(pending, n-4)[:start+1+n]
		if _, err := io.ReadFull(br, pending[start+5:]); err != nil {
			return start, err
		}
		c.msgs++
		return start, nil
	}
	for {
		start, err := next(false)
		if err != nil {
			if errors.Is(err, errStop) {
				c.close()
				return
			}
			// The client is gone: what it sent still reaches the server,
			// then the server sees EOF and ends the session.
			pending = pending[:start]
			if !c.dropping && !flush() {
				c.close()
				return
			}
			halfClose(sc)
			return
		}
		m := Message{Type: pending[start], Body: pending[start+5 : len(pending) : len(pending)]}
		if m.Type == 'X' {
			continue
		}
		if c.dropping {
			pending = pending[:start]
			continue
		}
		c.track(&m)
		a, st := c.p.judge(ConnInfo{ID: c.id, Params: c.params, Messages: c.msgs - 1}, m)
		switch a.kind {
		case kindPass:
			if len(pending) >= flushAt && !flush() {
				c.close()
				return
			}
		case kindDelay:
			if !c.write(sc, pending[:start]) {
				c.close()
				return
			}
			pending = pending[:copy(pending, pending[start:])]
			c.p.fired(st)
			t := time.NewTimer(a.delay)
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return
			}
		case kindDrop:
			pending = pending[:start]
			if !flush() {
				c.close()
				return
			}
			c.dropping = true
			c.p.fired(st)
		case kindCut:
			pending = pending[:start]
			flush()
			c.cut()
			c.p.fired(st)
			return
		case kindCutAfterForward:
			for t := m.Type; isExtended(t); {
				s, err := next(true)
				if err != nil {
					c.close()
					return
				}
				t = pending[s]
			}
			c.markCut()
			_ = c.client.Close() // no reply can reach the client now
			if !flush() {
				c.close()
				return
			}
			halfClose(sc)
			c.p.fired(st)
			return
		}
	}
}
