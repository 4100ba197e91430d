package replication

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// Pipelining bounds: queued statements are sent in one round trip when
// either is reached (and at every commit).
const (
	maxQueuedStmts = 1000
	maxQueuedBytes = 4 << 20
)

// applier owns the target connection of one session. It queues statements
// into a pgx pipeline (pgconn.Batch), opens the target transaction lazily,
// and commits it together with the replication origin's progress.
type applier struct {
	conn *pgconn.PgConn

	batch  pgconn.Batch
	checks []check // one per queued command, in order
	bytes  int
	inTxn  bool // BEGIN queued or sent, COMMIT not yet

	nextStmt int
}

type check struct {
	what   string // for error messages: "update of public.t"
	oneRow bool
	commit bool
}

func newApplier(conn *pgconn.PgConn) *applier {
	return &applier{conn: conn}
}

func (a *applier) queueSQL(sql string, values [][]byte, oids []uint32, c check) {
	a.batch.ExecParams(sql, values, oids, nil, nil)
	a.checks = append(a.checks, c)
	a.bytes += len(sql)
}

func (a *applier) begin() {
	if !a.inTxn {
		a.queueSQL("BEGIN", nil, nil, check{})
		a.inTxn = true
	}
}

// apply queues one row change, preparing its statement on first use of its
// shape.
func (a *applier) apply(ctx context.Context, s *stmt) error {
	sd, ok := s.rel.stmts[s.shape]
	if !ok {
		a.nextStmt++
		name := "shardmover_apply_" + strconv.Itoa(a.nextStmt)
		var err error
		sd, err = a.conn.Prepare(ctx, name, s.sql(), s.oids())
		if err != nil {
			err = fmt.Errorf("prepare %s statement for %s on the target: %w", kindName(s.kind), s.rel.quoted, err)
			if pgCode(err) != "" && isPermanent(err) {
				return permanent(err)
			}
			return err
		}
		s.rel.stmts[s.shape] = sd
	}
	a.begin()
	a.batch.ExecStatement(sd, s.values, nil, nil)
	c := check{what: kindName(s.kind) + " of " + s.rel.quoted, oneRow: s.oneRow}
	if s.oneRow {
		c.what += " " + s.keyText()
	}
	a.checks = append(a.checks, c)
	for _, v := range s.values {
		a.bytes += len(v)
	}
	if len(a.checks) >= maxQueuedStmts || a.bytes >= maxQueuedBytes {
		return a.flush(ctx)
	}
	return nil
}

// truncate queues a TRUNCATE.
func (a *applier) truncate(ctx context.Context, sql string) error {
	a.begin()
	a.queueSQL(sql, nil, nil, check{what: "truncate"})
	return nil
}

// commit queues the origin's progress (the end LSN and commit time of the
// last source transaction covered) and COMMIT, sends everything and checks
// the outcome. Afterwards end is durable on the target: the apply session
// runs with synchronous_commit = on.
func (a *applier) commit(ctx context.Context, end pglogrepl.LSN, commitTime time.Time) error {
	if !a.inTxn {
		return nil
	}
	a.queueSQL("SELECT pg_replication_origin_xact_setup($1, $2)",
		[][]byte{[]byte(end.String()), []byte(commitTime.UTC().Format(time.RFC3339Nano))},
		[]uint32{3220, 1184}, // pg_lsn, timestamptz
		check{what: "origin progress"})
	a.queueSQL("COMMIT", nil, nil, check{what: "commit", commit: true})
	a.inTxn = false
	return a.flush(ctx)
}

// flush sends the queued commands in one round trip and checks each result.
func (a *applier) flush(ctx context.Context) error {
	if len(a.checks) == 0 {
		return nil
	}
	checks := a.checks
	results, err := a.conn.ExecBatch(ctx, &a.batch).ReadAll()
	a.batch = pgconn.Batch{}
	a.checks = a.checks[:0]
	a.bytes = 0
	for i, r := range results {
		if i >= len(checks) {
			break
		}
		c := checks[i]
		if r.Err != nil {
			err := fmt.Errorf("apply %s on the target: %w", c.what, r.Err)
			if isPermanent(r.Err) {
				return permanent(err)
			}
			return err
		}
		if c.oneRow && r.CommandTag.RowsAffected() != 1 {
			return permanent(fmt.Errorf("%w: %s found %d rows on the target, want 1", ErrDiverged, c.what, r.CommandTag.RowsAffected()))
		}
		if c.commit && r.CommandTag.String() != "COMMIT" {
			return fmt.Errorf("apply on the target: transaction ended with %s", r.CommandTag.String())
		}
	}
	if err != nil {
		return fmt.Errorf("apply on the target: %w", err)
	}
	if len(results) != len(checks) {
		return fmt.Errorf("apply on the target: %d results for %d commands", len(results), len(checks))
	}
	return nil
}

func kindName(k byte) string {
	switch k {
	case 'I':
		return "insert"
	case 'U':
		return "update"
	case 'D':
		return "delete"
	}
	return "change"
}
