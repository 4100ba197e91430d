package verify_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/verify"
)

// TestCompareTx: two nodes with the same table, then one row changed,
// deleted or added on the second; CompareTx finds equal tables equal and
// names the differing key and how it differs, and a table missing on one
// side.
func TestCompareTx(t *testing.T) {
	c := sandboxtest.New(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := func(dsn string) *pgx.Conn {
		cn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { cn.Close(context.Background()) })
		return cn
	}
	src, tgt := conn(c.Nodes[0].DSN()), conn(c.Nodes[1].DSN())
	for _, cn := range []*pgx.Conn{src, tgt} {
		for _, sql := range []string{
			`CREATE TABLE t (id bigint PRIMARY KEY, v text, at timestamptz)`,
			`INSERT INTO t SELECT g, 'v' || g, '2024-01-01'::timestamptz + g * interval '1 min' FROM generate_series(1, 5000) g`,
		} {
			_, err := cn.Exec(ctx, sql)
			require.NoError(t, err)
		}
	}
	_, err := src.Exec(ctx, `CREATE TABLE only_src (id int PRIMARY KEY)`)
	require.NoError(t, err)
	compare := func(tables ...pgx.Identifier) []verify.TableResult {
		t.Helper()
		stx, err := src.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		require.NoError(t, err)
		defer stx.Rollback(ctx)
		ttx, err := tgt.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		require.NoError(t, err)
		defer ttx.Rollback(ctx)
		res, err := verify.CompareTx(ctx, stx, ttx, tables, verify.Options{BatchPages: 7})
		require.NoError(t, err)
		return res
	}
	table := pgx.Identifier{"public", "t"}
	res := compare(table)
	require.Len(t, res, 1)
	assert.True(t, res[0].Match, res[0].Describe())
	assert.EqualValues(t, 5000, res[0].Source.Rows)

	for _, tc := range []struct {
		name, sql, undo, key, what string
	}{
		{"changed", `UPDATE t SET v = 'behind its back' WHERE id = 4321`, `UPDATE t SET v = 'v4321' WHERE id = 4321`, "4321", "changed"},
		{"deleted", `DELETE FROM t WHERE id = 17`, `INSERT INTO t VALUES (17, 'v17', '2024-01-01'::timestamptz + 17 * interval '1 min')`, "17", "missing"},
		{"added", `INSERT INTO t VALUES (9999, 'new', now())`, `DELETE FROM t WHERE id = 9999`, "9999", "added"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tgt.Exec(ctx, tc.sql)
			require.NoError(t, err)
			defer func() { _, err := tgt.Exec(ctx, tc.undo); require.NoError(t, err) }()
			res := compare(table)
			require.Len(t, res, 1)
			assert.False(t, res[0].Match)
			require.Len(t, res[0].Differing, 1, res[0].Describe())
			assert.Equal(t, verify.KeyDiff{Key: tc.key, What: tc.what}, res[0].Differing[0])
			assert.Contains(t, res[0].Describe(), "public.t differs: ")
			assert.Contains(t, res[0].Describe(), "("+tc.key+")")
			t.Log(res[0].Describe())
		})
	}
	res = compare(table, pgx.Identifier{"public", "only_src"})
	require.Len(t, res, 2)
	assert.True(t, res[0].Match, "undone: equal again")
	assert.False(t, res[1].Match)
	assert.Equal(t, "it does not exist on the target", res[1].Note)
}
