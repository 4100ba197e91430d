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
