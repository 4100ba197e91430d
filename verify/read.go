package verify

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/internal/ratelimit"
	"github.com/shardmover/shardmover/metadata"
)

const (
	defaultBatchPages = 1024
	keyPassRows       = 1000
)

// sessionSettings fix the text form of rows, so both sides hash the same
// text for the same values.
var sessionSettings = []string{
	"SET LOCAL datestyle = 'ISO, YMD'",
	"SET LOCAL intervalstyle = 'postgres'",
	"SET LOCAL timezone = 'UTC'",
	"SET LOCAL extra_float_digits = 3",
	"SET LOCAL bytea_output = 'hex'",
}

type reader struct {
	cat   *metadata.Catalog
	opts  Options
	bytes *ratelimit.Limiter
	rows  *ratelimit.Limiter
}

// sum is a table's order-independent checksum.
type sum struct {
	rows int64
	add  string // sum of the row hashes, numeric as text
	xor  int64
}

func (s sum) String() string { return fmt.Sprintf("%s/%016x", s.add, uint64(s.xor)) }

// begin opens the read transaction of one side: one snapshot, read only,
// with the fixed text settings.
func begin(ctx context.Context, conn *pgx.Conn) (pgx.Tx, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	for _, s := range sessionSettings {
		if _, err := tx.Exec(ctx, s); err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
	}
	return tx, nil
}

func (r *reader) batchPages(blockSize int64) int64 {
	if r.opts.BatchPages > 0 {
		return r.opts.BatchPages
	}
	n := int64(defaultBatchPages)
	if r.opts.BytesPerSecond > 0 {
		// About a quarter second's worth of the rate per batch.
		n = min(n, max(1, r.opts.BytesPerSecond/4/blockSize))
	}
	return n
}

// checksum reads a table in batches of heap pages within one snapshot.
// found is false when the table does not exist.
func (r *reader) checksum(ctx context.Context, conn *pgx.Conn, table pgx.Identifier) (sum, bool, error) {
	tx, err := begin(ctx, conn)
	if err != nil {
		return sum{}, false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	s, found, err := r.checksumTx(ctx, tx, table)
	if err != nil || !found {
		return s, found, err
	}
	return s, true, tx.Commit(ctx)
}

// checksumTx is checksum within the open transaction tx (REPEATABLE READ,
// with the fixed text settings), which it leaves open.
func (r *reader) checksumTx(ctx context.Context, tx pgx.Tx, table pgx.Identifier) (sum, bool, error) {
	// In a fresh transaction the first statement takes the snapshot; the
	// size read after it covers every row the snapshot sees.
	var exists bool
	var pages, blockSize int64
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
			coalesce(pg_relation_size(to_regclass($1)), 0) / current_setting('block_size')::bigint,
			current_setting('block_size')::bigint`, table.Sanitize()).Scan(&exists, &pages, &blockSize); err != nil {
		return sum{}, false, err
	}
	if !exists {
		return sum{}, false, nil
	}
	batch := r.batchPages(blockSize)
	q := `SELECT count(*), coalesce(sum(h), 0)::text, coalesce(bit_xor(h), 0)
		FROM (SELECT hashtextextended(t::text, 0) AS h FROM ` + table.Sanitize() + ` t
			WHERE t.ctid >= $1::text::tid AND t.ctid < $2::text::tid) s`
	var total sum
	var addTotal []string
	// Pages are counted up to pages+1 so that the last partial batch is read;
	// a snapshot never sees rows beyond the size read after it was taken.
	for p := int64(0); p <= pages; p += batch {
		var n, x int64
		var add string
		if err := tx.QueryRow(ctx, q, fmt.Sprintf("(%d,0)", p), fmt.Sprintf("(%d,0)", p+batch)).Scan(&n, &add, &x); err != nil {
			return sum{}, true, err
		}
		total.rows += n
		total.xor ^= x
		addTotal = append(addTotal, add)
		if err := r.bytes.Wait(ctx, int(min(batch, pages-p+1)*blockSize)); err != nil {
			return sum{}, true, err
		}
		if err := r.rows.Wait(ctx, int(n)); err != nil {
			return sum{}, true, err
		}
	}
	// Add the batches' numeric sums on the server: exact, whatever their size.
	if err := tx.QueryRow(ctx, "SELECT coalesce(sum(x::numeric), 0)::text FROM unnest($1::text[]) AS x", addTotal).Scan(&total.add); err != nil {
		return sum{}, true, err
	}
	return total, true, nil
}

// keyColumn is one column of a primary key.
type keyColumn struct {
	name       string
	collatable bool
	typeName   string
}

var errUnordered = errors.New("key type not ordered in Go")

// querier is a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// primaryKey reads a table's primary key columns in key order.
func primaryKey(ctx context.Context, conn querier, table pgx.Identifier) ([]keyColumn, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname, ty.typcollation <> 0, format_type(a.atttypid, NULL)
		FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		JOIN pg_type ty ON ty.oid = a.atttypid
		WHERE i.indrelid = to_regclass($1) AND i.indisprimary
		ORDER BY k.ord`, table.Sanitize())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (keyColumn, error) {
		var k keyColumn
		err := r.Scan(&k.name, &k.collatable, &k.typeName)
		return k, err
	})
}

// keyRows opens the ordered stream of (key values, key text, row hash).
func keyRows(ctx context.Context, tx pgx.Tx, table pgx.Identifier, key []keyColumn) (pgx.Rows, error) {
	var sel, order, text []string
	for _, k := range key {
		col := "t." + pgx.Identifier{k.name}.Sanitize()
		sel = append(sel, col)
		text = append(text, col+"::text")
		if k.collatable {
			order = append(order, col+` COLLATE "C"`)
		} else {
			order = append(order, col)
		}
	}
	q := "SELECT " + strings.Join(sel, ", ") + ", concat_ws(', ', " + strings.Join(text, ", ") + "), hashtextextended(t::text, 0) FROM " +
		table.Sanitize() + " t ORDER BY " + strings.Join(order, ", ")
	return tx.Query(ctx, q)
}

type keyRow struct {
	vals []any
	text string
	hash int64
}

func nextKeyRow(rows pgx.Rows, n int) (*keyRow, error) {
	if !rows.Next() {
		return nil, rows.Err()
	}
	vals, err := rows.Values()
	if err != nil {
		return nil, err
	}
	kr := &keyRow{vals: vals[:n]}
	var ok bool
	if kr.text, ok = vals[n].(string); !ok {
		return nil, fmt.Errorf("key text is %T", vals[n])
	}
	if kr.hash, ok = vals[n+1].(int64); !ok {
		return nil, fmt.Errorf("row hash is %T", vals[n+1])
	}
	return kr, nil
}

// differingKeys merges both sides in primary key order and returns the
// first differing keys. note says why keys could not be listed, if so.
func (r *reader) differingKeys(ctx context.Context, liveConn *pgx.Conn, live pgx.Identifier, oldConn *pgx.Conn, old pgx.Identifier) ([]KeyDiff, string, error) {
	key, err := primaryKey(ctx, liveConn, live)
	if err != nil {
		return nil, "", err
	}
	if len(key) == 0 {
		return nil, noKeyNote, nil
	}
	ltx, err := begin(ctx, liveConn)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = ltx.Rollback(context.WithoutCancel(ctx)) }()
	otx, err := begin(ctx, oldConn)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = otx.Rollback(context.WithoutCancel(ctx)) }()
	return r.differingKeysTx(ctx, ltx, live, otx, old, key)
}

const noKeyNote = "the table has no primary key, so no differing keys are listed"

// differingKeysTx is the merge of differingKeys within two open
// transactions, which it leaves open.
func (r *reader) differingKeysTx(ctx context.Context, ltx pgx.Tx, live pgx.Identifier, otx pgx.Tx, old pgx.Identifier, key []keyColumn) ([]KeyDiff, string, error) {
	lrows, err := keyRows(ctx, ltx, live, key)
	if err != nil {
		return nil, "", err
	}
	defer lrows.Close()
	orows, err := keyRows(ctx, otx, old, key)
	if err != nil {
		return nil, "", err
	}
	defer orows.Close()
	n := len(key)
	var out []KeyDiff
	l, err := nextKeyRow(lrows, n)
	if err != nil {
		return nil, "", err
	}
	o, err := nextKeyRow(orows, n)
	if err != nil {
		return nil, "", err
	}
	read := 0
	for (l != nil || o != nil) && len(out) < r.opts.MaxKeys {
		var c int
		switch {
		case l == nil:
			c = 1
		case o == nil:
			c = -1
		default:
			c, err = compareKeys(l.vals, o.vals)
			if err != nil {
				return nil, fmt.Sprintf("its primary key has a type verify cannot order (%s), so no differing keys are listed", keyTypes(key)), nil
			}
		}
		switch {
		case c == 0:
			if l.hash != o.hash {
				out = append(out, KeyDiff{Key: l.text, What: "changed"})
			}
		case c < 0:
			out = append(out, KeyDiff{Key: l.text, What: "added"})
		default:
			out = append(out, KeyDiff{Key: o.text, What: "missing"})
		}
		if c <= 0 {
			if l, err = nextKeyRow(lrows, n); err != nil {
				return nil, "", err
			}
			read++
		}
		if c >= 0 {
			if o, err = nextKeyRow(orows, n); err != nil {
				return nil, "", err
			}
			read++
		}
		if read >= keyPassRows {
			if err := r.rows.Wait(ctx, read); err != nil {
				return nil, "", err
			}
			read = 0
		}
	}
	return out, "", nil
}

func keyTypes(key []keyColumn) string {
	var ts []string
	for _, k := range key {
		ts = append(ts, k.typeName)
	}
	return strings.Join(ts, ", ")
}

// compareKeys orders two keys as the ORDER BY of keyRows does.
func compareKeys(a, b []any) (int, error) {
	for i := range a {
		c, err := compareValue(a[i], b[i])
		if err != nil || c != 0 {
			return c, err
		}
	}
	return 0, nil
}

func compareValue(a, b any) (int, error) {
	switch x := a.(type) {
	case int16:
		if y, ok := b.(int16); ok {
			return cmp.Compare(x, y), nil
		}
	case int32:
		if y, ok := b.(int32); ok {
			return cmp.Compare(x, y), nil
		}
	case int64:
		if y, ok := b.(int64); ok {
			return cmp.Compare(x, y), nil
		}
	case float32:
		if y, ok := b.(float32); ok {
			return cmp.Compare(x, y), nil
		}
	case float64:
		if y, ok := b.(float64); ok {
			return cmp.Compare(x, y), nil
		}
	case string: // ordered COLLATE "C": bytes
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case bool:
		if y, ok := b.(bool); ok {
			switch {
			case x == y:
				return 0, nil
			case !x:
				return -1, nil
			}
			return 1, nil
		}
	case time.Time:
		if y, ok := b.(time.Time); ok {
			return x.Compare(y), nil
		}
	case [16]byte: // uuid: PostgreSQL orders it by memcmp
		if y, ok := b.([16]byte); ok {
			return bytes.Compare(x[:], y[:]), nil
		}
	case []byte:
		if y, ok := b.([]byte); ok {
			return bytes.Compare(x, y), nil
		}
	}
	return 0, errUnordered
}
