package mover

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/metadata"
)

// sessionPool keeps the sessions a move's steps opened on the nodes for
// the next step, of this move or the next, instead of opening new ones
// each time (a new session costs a backend start, cold catalog caches and
// a fresh plan for every catalog query; a reused one has them warm). It is
// shared by an engine and its copies (RunJob's runner).
//
// Only clean sessions come back: no transaction open, the step that used
// it ended without error, and nothing changed its session state for good
// (on Citus the target session that acted as Citus's rebalancer is named
// back first, releaseBoth). A session found idle is checked with a round
// trip before it is handed out; one that does not answer is closed and a
// new one opened, so a node restarted in between costs nothing but that
// check. Idle sessions are closed after sessionIdle, and at most
// sessionsPerNode wait per node.
//
// The cutover, the settlement of fences and catch-up take sessions from
// the pool too (their transactions end with the attempt: committed, rolled
// back or prepared, which detaches them from the session) and give them
// back only when the attempt ended without error. The copy opens sessions
// of its own (they hold an exported snapshot for as long as it lasts), and
// the stream's are replication connections.
type sessionPool struct {
	mu   sync.Mutex
	idle map[string][]*idleSession // by node host:port
}

type idleSession struct {
	conn  *pgx.Conn
	timer *time.Timer
}

const (
	// sessionIdle: how long a session waits for its next use.
	sessionIdle = 10 * time.Second
	// sessionsPerNode: idle sessions kept per node.
	sessionsPerNode = 4
	// sessionCheck bounds the round trip that checks an idle session.
	sessionCheck = 2 * time.Second
)

func newSessionPool() *sessionPool { return &sessionPool{idle: map[string][]*idleSession{}} }

// session returns a session on node n: an idle one that answers, or a new
// one. Give it back with release.
func (e *Engine) session(ctx context.Context, n metadata.Node) (*pgx.Conn, error) {
	if p := e.sessions; p != nil {
		for {
			conn := p.take(n.Addr())
			if conn == nil {
				break
			}
			cctx, cancel := context.WithTimeout(ctx, sessionCheck)
			err := conn.Ping(cctx)
			cancel()
			if err == nil {
				return conn, nil
			}
			closeQuietly(conn)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return e.connect(ctx, n)
}

// release gives back a session from session: kept for reuse when used
// without error (*errp nil) and clean, closed otherwise. errp may be nil.
func (e *Engine) release(n metadata.Node, conn *pgx.Conn, errp *error) {
	if conn == nil {
		return
	}
	if e.sessions == nil || (errp != nil && *errp != nil) || conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		closeQuietly(conn)
		return
	}
	e.sessions.put(n.Addr(), conn)
}

// take removes the most recently used idle session of addr, or returns nil.
func (p *sessionPool) take(addr string) *pgx.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[addr]
	if len(list) == 0 {
		return nil
	}
	s := list[len(list)-1]
	p.idle[addr] = list[:len(list)-1]
	s.timer.Stop()
	return s.conn
}

func (p *sessionPool) put(addr string, conn *pgx.Conn) {
	s := &idleSession{conn: conn}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle[addr]) >= sessionsPerNode {
		go closeQuietly(conn)
		return
	}
	s.timer = time.AfterFunc(sessionIdle, func() { p.expire(addr, s) })
	p.idle[addr] = append(p.idle[addr], s)
}

// expire closes s if it is still idle.
func (p *sessionPool) expire(addr string, s *idleSession) {
	p.mu.Lock()
	list := p.idle[addr]
	found := false
	for i, x := range list {
		if x == s {
			p.idle[addr] = append(list[:i:i], list[i+1:]...)
			found = true
			break
		}
	}
	p.mu.Unlock()
	if found {
		closeQuietly(s.conn)
	}
}

// closeQuietly ends a session, waiting at most a second for the server.
func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// sessionPair opens (or reuses) one session on each of two nodes at once.
func (e *Engine) sessionPair(ctx context.Context, a, b metadata.Node) (ac, bc *pgx.Conn, aerr, berr error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		bc, berr = e.session(ctx, b)
	}()
	ac, aerr = e.session(ctx, a)
	<-done
	return ac, bc, aerr, berr
}
