package faultproxy

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ConnInfo describes the client connection a message arrived on.
type ConnInfo struct {
	// ID numbers the proxy's connections from 1 in accept order.
	ID uint64
	// Params holds the StartupMessage parameters (user, database,
	// application_name, replication, options, ...). Read only.
	Params map[string]string
	// Messages is the number of typed messages the client sent on this
	// connection before this one.
	Messages int
}

// Param returns a startup parameter, "" when absent.
func (c ConnInfo) Param(name string) string { return c.Params[name] }

// Replication reports whether the connection asked for a walsender
// (replication=true or replication=database).
func (c ConnInfo) Replication() bool {
	switch strings.ToLower(c.Params["replication"]) {
	case "", "false", "off", "no", "0":
		return false
	}
	return true
}

// Message is one typed client->server message.
type Message struct {
	Type byte   // 'Q', 'P', 'B', 'E', 'S', 'd', ...
	Body []byte // after the length word; aliases the proxy's buffer

	bound string // Bind: the text of the statement it binds
}

// Statement returns the SQL the message runs or prepares: SQL() for Query
// and Parse, and for a Bind ('B') the text of the prepared statement it
// binds, as the proxy saw it parsed earlier on the same connection. With
// pgx's default statement cache a statement is parsed once and then only
// bound and executed: match m.Type == 'B' && strings.Contains(
// m.Statement(), ...) to catch each execution.
func (m Message) Statement() string {
	if m.Type == 'B' {
		return m.bound
	}
	return m.SQL()
}

// SQL returns the query text of a Query ('Q') or Parse ('P') message and ""
// for every other type.
func (m Message) SQL() string {
	switch m.Type {
	case 'Q':
		return cstring(m.Body)
	case 'P':
		if i := bytes.IndexByte(m.Body, 0); i >= 0 {
			return cstring(m.Body[i+1:])
		}
	}
	return ""
}

// Contains reports whether SQL() contains s, ignoring case.
func (m Message) Contains(s string) bool {
	q := m.SQL()
	return q != "" && strings.Contains(strings.ToLower(q), strings.ToLower(s))
}

// Is reports whether SQL() is the statement s, ignoring case, surrounding
// space and one trailing semicolon: m.Is("commit") matches "COMMIT;" but
// not "COMMIT PREPARED 'x'".
func (m Message) Is(s string) bool {
	q := m.SQL()
	return q != "" && strings.EqualFold(trimStmt(q), trimStmt(s))
}

func trimStmt(s string) string {
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), ";"))
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Rule decides what happens to each client message. It must be safe for
// concurrent use.
type Rule func(c ConnInfo, m Message) Action

type actionKind int

const (
	kindPass actionKind = iota
	kindDelay
	kindDrop
	kindCut
	kindCutAfterForward
)

// Action is what a Rule does with a message. Compare with ==.
type Action struct {
	kind  actionKind
	delay time.Duration
}

var (
	// Pass forwards the message.
	Pass = Action{kind: kindPass}
	// Drop swallows the message and every later one on the connection
	// (Terminate excepted) and keeps the connection open.
	Drop = Action{kind: kindDrop}
	// Cut closes both sides; the message never reaches the server.
	Cut = Action{kind: kindCut}
	// CutAfterForward forwards the message (with the rest of its
	// extended-protocol pipeline up to Sync), closes the client before any
	// reply reaches it, and lets the server run it and end the session.
	CutAfterForward = Action{kind: kindCutAfterForward}
)

// Delay holds the message and everything after it on its connection for d,
// preserving order.
func Delay(d time.Duration) Action { return Action{kind: kindDelay, delay: d} }

func (a Action) String() string {
	switch a.kind {
	case kindPass:
		return "pass"
	case kindDelay:
		return fmt.Sprintf("delay(%s)", a.delay)
	case kindDrop:
		return "drop"
	case kindCut:
		return "cut"
	case kindCutAfterForward:
		return "cut-after-forward"
	}
	return "unknown"
}

// Once returns a Rule that applies a to the first message match accepts,
// over all connections, and passes everything else.
func Once(match func(ConnInfo, Message) bool, a Action) Rule {
	var done atomic.Bool
	return func(c ConnInfo, m Message) Action {
		if done.Load() || !match(c, m) {
			return Pass
		}
		if done.CompareAndSwap(false, true) {
			return a
		}
		return Pass
	}
}

// CommitOf returns a Rule that applies a to the COMMIT (simple query
// "commit") of the first transaction in which a message accepted by match
// was sent, such as the coordinator's decision transaction: match marks the
// connection, a later ROLLBACK or ABORT unmarks it, and the first COMMIT on
// a marked connection gets a. Everything else passes.
func CommitOf(match func(ConnInfo, Message) bool, a Action) Rule {
	var (
		mu    sync.Mutex
		armed = map[uint64]bool{}
		done  bool
	)
	return func(c ConnInfo, m Message) Action {
		if m.Type != 'Q' && m.Type != 'P' {
			return Pass
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case done:
		case m.Is("commit") || m.Is("end"):
			if armed[c.ID] {
				done = true
				return a
			}
		case m.Is("rollback") || m.Is("abort"):
			delete(armed, c.ID)
		case match(c, m):
			armed[c.ID] = true
		}
		return Pass
	}
}

// ruleState is a rule with its own Fired channel.
type ruleState struct {
	rule  Rule
	fired chan struct{}
	once  sync.Once
}

func newRuleState(r Rule) *ruleState { return &ruleState{rule: r, fired: make(chan struct{})} }

func (s *ruleState) fire() { s.once.Do(func() { close(s.fired) }) }
