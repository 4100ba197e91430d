package pgbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Script is pgbench's TPC-B-like transaction reduced to the two
// distributed tables: the account's UPDATE and the history's INSERT go to
// the same shard group (both distributed by aid), so every transaction
// touches exactly one group, the one a move may be cutting over.
const Script = `\set aid random(1, 100000 * :scale)
\set bid random(1, 1 * :scale)
\set tid random(1, 10 * :scale)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
`

// ScriptFile is the name WriteScript gives the script.
const ScriptFile = "tpcb-distributed.sql"

// WriteScript writes Script into dir and returns its path, for -f.
func WriteScript(dir string) (string, error) {
	path := filepath.Join(dir, ScriptFile)
	if err := os.WriteFile(path, []byte(Script), 0o644); err != nil {
		return "", fmt.Errorf("write pgbench script: %w", err)
	}
	return path, nil
}

// AccountsPerScale is how many accounts `pgbench -i` creates per unit of
// scale (100,000; about 13 MB of pgbench_accounts).
const AccountsPerScale = 100000

// InitCitus builds the pgbench layout on the Citus coordinator dsn with
// the pgbench binary bin: `pgbench -i -s scale`, history given a hid
// bigserial and the primary key (aid, hid), accounts and history
// distributed by aid and colocated in shards shards, branches and tellers
// as reference tables, and the coordinator's local copies truncated.
func InitCitus(ctx context.Context, bin, dsn string, scale, shards int) error {
	if scale < 1 || shards < 1 {
		return fmt.Errorf("pgbench layout: scale and shards must be at least 1, got %d and %d", scale, shards)
	}
	out, err := exec.CommandContext(ctx, bin, "-i", "-s", strconv.Itoa(scale), dsn).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgbench -i -s %d: %w: %s", scale, err, strings.TrimSpace(string(out)))
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("pgbench layout: connect to the coordinator: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{sql: `ALTER TABLE pgbench_history ADD COLUMN hid bigserial`},
		{sql: `ALTER TABLE pgbench_history ADD PRIMARY KEY (aid, hid)`},
		{sql: `SELECT set_config('citus.shard_count', $1, false)`, args: []any{strconv.Itoa(shards)}},
		{sql: `SELECT create_reference_table('pgbench_branches')`},
		{sql: `SELECT create_reference_table('pgbench_tellers')`},
		{sql: `SELECT create_distributed_table('pgbench_accounts', 'aid')`},
		{sql: `SELECT create_distributed_table('pgbench_history', 'aid', colocate_with => 'pgbench_accounts')`},
		{sql: `SELECT truncate_local_data_after_distributing_table(t) FROM unnest(ARRAY['pgbench_branches', 'pgbench_tellers', 'pgbench_accounts', 'pgbench_history']::regclass[]) t`},
	} {
		if _, err := conn.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("pgbench layout: %s: %w", s.sql, err)
		}
	}
	return nil
}

// Querier is what CheckBalances reads through (a *pgx.Conn or a pool).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Balances is the database's side of the pgbench runs on a layout.
type Balances struct {
	// History is pgbench_history's row count: one per transaction that
	// committed.
	History int64
	// Wrong counts the accounts whose balance is not the sum of their
	// history's deltas; Examples describes up to five of them.
	Wrong    int64
	Examples string
}

// CheckBalances reads pgbench_history's row count and the accounts whose
// balance differs from the sum of their history's deltas (read through
// Citus: the placements it routes to).
func CheckBalances(ctx context.Context, q Querier) (Balances, error) {
	var b Balances
	err1 := q.QueryRow(ctx, `SELECT count(*) FROM pgbench_history`).Scan(&b.History)
	err2 := q.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(format('aid %s: balance %s, deltas %s', aid, abalance, s), '; ') FILTER (WHERE rn <= 5), '')
		FROM (SELECT a.aid, a.abalance, coalesce(h.s, 0) s, row_number() OVER (ORDER BY a.aid) rn
			FROM pgbench_accounts a LEFT JOIN (SELECT aid, sum(delta) s FROM pgbench_history GROUP BY aid) h USING (aid)
			WHERE a.abalance <> coalesce(h.s, 0)) w`).Scan(&b.Wrong, &b.Examples)
	if err := errors.Join(err1, err2); err != nil {
		return b, fmt.Errorf("check pgbench balances: %w", err)
	}
	return b, nil
}
