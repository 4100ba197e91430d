// Package faultproxy is a small fault-injecting TCP proxy that understands
// the client->server half of the PostgreSQL wire protocol. Tests put one in
// front of each PostgreSQL node and point the code under test at Addr() to
// delay, drop or cut a chosen message, cut every connection, refuse new
// connections for a while, or partition (pause) all traffic.
//
// Contract:
//
//   - New(upstream) listens on 127.0.0.1 on a port reserved with
//     sandbox.ReservePorts and forwards every accepted connection to
//     upstream. Close closes the listener and every connection, waits for
//     all of the proxy's goroutines and releases the port.
//
//   - Client->server: the untyped startup packets are understood.
//     SSLRequest and GSSENCRequest are forwarded and the server's one-byte
//     answer is passed back; when the server accepts encryption ('S' or
//     'G') the connection is forwarded as raw bytes from then on and no rule
//     sees it. A CancelRequest or an unknown packet is forwarded raw. The
//     StartupMessage (protocol 3.x) is forwarded and its parameters
//     (user, database, application_name, replication, ...) are recorded in
//     ConnInfo.Params. After it the stream is split into typed messages
//     (1 byte type, int32 length), however the client's writes cut it.
//
//   - Every typed client message except Terminate ('X') is shown to the
//     current Rule, which returns an Action:
//     Pass forwards it (consecutive messages already read are forwarded in
//     one write, so COPY and replication streams stay cheap);
//     Delay(d) forwards earlier messages, then holds this message and
//     everything after it on this connection for d, in order;
//     Drop swallows this message and every later one except Terminate,
//     leaving the TCP connection open, so the client hangs until its own
//     timeout;
//     Cut closes both sides at once: this message never reaches the server;
//     CutAfterForward closes the client side, forwards the message, then
//     half-closes the server side so the server reads it, runs it and ends
//     the session: the server may have executed it, the client never sees
//     a reply. For an extended-protocol message (Parse, Bind, Describe,
//     Execute, Close, Flush) the rest of the client's pipeline up to and
//     including the next Sync is forwarded with it, because only Sync makes
//     an unnamed implicit transaction run and commit.
//     Terminate always passes (unless the connection was cut).
//
//   - Server->client bytes are forwarded raw; only the replies to a
//     StartupMessage, up to the first ReadyForQuery, are split into
//     messages, to learn the session's cancel key (BackendKeyData).
//
//   - A CancelRequest for a session the proxy cut (Cut, CutAfterForward,
//     CutAll) is swallowed: pgx sends one whenever its connection breaks,
//     and it would otherwise race with, and could abort, a statement that
//     CutAfterForward delivered, making the outcome random instead of
//     "ran, and the client does not know". Cancel requests for other
//     sessions (including delayed or dropped ones) are forwarded.
//
//   - Rules run on the connection's own goroutine, possibly on several
//     connections at once: a Rule must be safe for concurrent use.
//     SetRule and ClearRule may be called while traffic flows; each message
//     is judged by the rule current when it was read. Message.Body aliases
//     the proxy's buffer: read it during the call only.
//
//   - Fired returns a channel closed when the current rule (the one set by
//     the last SetRule/ClearRule) first returns an Action other than Pass
//     and that action has taken effect (Delay, Drop: the hold began; Cut:
//     the connection is closed; CutAfterForward: the message was written to
//     the server and the client is closed). Faults counts every such action
//     since New.
//
//   - CutAll closes every current connection (both sides). Refuse(d)
//     accepts and immediately closes new connections for d. Pause holds all
//     traffic in both directions (already open connections stay open, new
//     ones are accepted but get no bytes through) until Resume: a partition
//     without resets.
//
// pgx notes: pgx sends begin, commit, rollback, PREPARE TRANSACTION,
// COMMIT PREPARED and Exec without arguments as simple Query ('Q'); a query
// with arguments in QueryExecModeExec (or pgconn.ExecParams) is one
// Parse/Bind/Describe/Execute/Sync write, so a rule matching its Parse ('P')
// by SQL catches it. In pgx's default QueryExecModeCacheStatement a
// statement is prepared once (Parse/Describe/Sync) and later executed with
// Bind/Execute/Sync that carry no SQL text: a fault on the Parse then hits
// the preparation, not the execution: match the Bind instead, whose
// Message.Statement is the prepared text.
package faultproxy
