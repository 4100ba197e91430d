package pgsql

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Conn is anything that reaches one server session: *pgx.Conn, or a
// transaction's connection (tx.Conn()).
type Conn interface {
	PgConn() *pgconn.PgConn
}

var _ Conn = (*pgx.Conn)(nil)

// ExecOne runs one statement through the extended protocol and returns its
// command tag. Text holding more than one statement is refused by the
// server and nothing runs.
func ExecOne(ctx context.Context, c Conn, sql string) (pgconn.CommandTag, error) {
	res := c.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Read()
	return res.CommandTag, res.Err
}

// ExecEach runs sqls in one round trip, each as ExecOne runs it (its own
// Parse, so each text is refused whole if it holds a second statement),
// in order; the server skips the rest after the first that fails. It
// returns the index of the failed statement with its error (-1 and nil
// when all ran). Inside a transaction the failure aborts it; outside one,
// the statements before it have run. With no statements nothing is sent.
func ExecEach(ctx context.Context, c Conn, sqls []string) (int, error) {
	if len(sqls) == 0 {
		return -1, nil // nothing to send
	}
	b := &pgconn.Batch{}
	for _, sql := range sqls {
		b.ExecParams(sql, nil, nil, nil, nil)
	}
	res, err := c.PgConn().ExecBatch(ctx, b).ReadAll()
	if err != nil {
		failed := len(res)
		for i, r := range res {
			if r.Err != nil {
				failed = i
				break
			}
		}
		return min(failed, len(sqls)-1), err
	}
	return -1, nil
}
