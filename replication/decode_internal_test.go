package replication

import (
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func rel(identity byte, keys ...bool) *relation {
	d := newDecoder()
	d.types[20000] = pgx.Identifier{"app", "mood"}
	m := &pglogrepl.RelationMessage{RelationID: 1, Namespace: "app", RelationName: "T t", ReplicaIdentity: identity}
	names := []string{"id", "big", "m", "j"}
	oids := []uint32{20, 3802, 20000, 114}
	for i, n := range names {
		var f uint8
		if i < len(keys) && keys[i] {
			f = 1
		}
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: n, DataType: oids[i], Flags: f})
	}
	return d.newRelation(m)
}

func tuple(kinds string, vals ...string) *pglogrepl.TupleData {
	t := &pglogrepl.TupleData{ColumnNum: uint16(len(kinds))}
	for i, k := range kinds {
		c := &pglogrepl.TupleDataColumn{DataType: uint8(k)}
		if k == 't' {
			c.Data = []byte(vals[i])
		}
		t.Columns = append(t.Columns, c)
	}
	return t
}

func TestStatements(t *testing.T) {
	pk := rel('d', true)
	full := rel('f', true, true, true, true)

	s, err := insertStmt(pk, &pglogrepl.InsertMessage{Tuple: tuple("ttnt", "1", "{}", "", `{"a":1}`)})
	require.NoError(t, err)
	assert.Equal(t, `INSERT INTO "app"."T t" ("id", "big", "m", "j") OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3::"app"."mood", $4)`, s.sql())
	assert.Equal(t, []uint32{20, 3802, 0, 114}, s.oids())
	assert.Nil(t, s.values[2], "NULL")

	// TOASTed big unchanged, key unchanged: neither is assigned.
	s, err = updateStmt(pk, &pglogrepl.UpdateMessage{NewTuple: tuple("tutt", "1", "", "ok", "[]")})
	require.NoError(t, err)
	assert.Equal(t, `UPDATE "app"."T t" SET "m" = $1::"app"."mood", "j" = $2 WHERE "id" = $3`, s.sql())
	assert.Equal(t, [][]byte{[]byte("ok"), []byte("[]"), []byte("1")}, s.values)

	// Key changed: the old key locates the row, the new key is assigned.
	s, err = updateStmt(pk, &pglogrepl.UpdateMessage{OldTupleType: 'K', OldTuple: tuple("tnnn", "1"), NewTuple: tuple("tunn", "2")})
	require.NoError(t, err)
	assert.Equal(t, `UPDATE "app"."T t" SET "id" = $1, "m" = $2::"app"."mood", "j" = $3 WHERE "id" = $4`, s.sql())
	assert.Equal(t, [][]byte{[]byte("2"), nil, nil, []byte("1")}, s.values)

	// Only unchanged TOAST and key: nothing to do.
	_, err = updateStmt(pk, &pglogrepl.UpdateMessage{NewTuple: tuple("tu", "1", "")})
	assert.ErrorIs(t, err, ErrPermanent, "wrong column count is refused")
	s, err = updateStmt(pk, &pglogrepl.UpdateMessage{NewTuple: tuple("tuuu", "1")})
	require.NoError(t, err)
	assert.Nil(t, s)

	s, err = deleteStmt(pk, &pglogrepl.DeleteMessage{OldTupleType: 'K', OldTuple: tuple("tnnn", "7")})
	require.NoError(t, err)
	assert.Equal(t, `DELETE FROM "app"."T t" WHERE "id" = $1`, s.sql())

	// REPLICA IDENTITY FULL: exactly one row, NULL-safe, the exact value
	// (record_image_eq: 5.0 and 5.00 are two rows), json as text, an old
	// TOASTed value left out.
	s, err = deleteStmt(full, &pglogrepl.DeleteMessage{OldTupleType: 'O', OldTuple: tuple("tunt", "7", "", "", "{}")})
	require.NoError(t, err)
	assert.Equal(t, `DELETE FROM "app"."T t" WHERE ctid = (SELECT ctid FROM "app"."T t" WHERE "id" IS NOT DISTINCT FROM $1 AND pg_catalog.record_image_eq(ROW("id"), ROW($1)) AND "m" IS NOT DISTINCT FROM $2::"app"."mood" AND pg_catalog.record_image_eq(ROW("m"), ROW($2::"app"."mood")) AND "j"::text IS NOT DISTINCT FROM $3 LIMIT 1)`, s.sql())
	assert.Equal(t, []uint32{20, 0, textOID}, s.oids())

	s, err = updateStmt(full, &pglogrepl.UpdateMessage{OldTupleType: 'O', OldTuple: tuple("tttt", "7", "{}", "ok", "{}"), NewTuple: tuple("tutt", "7", "", "sad", "{}")})
	require.NoError(t, err)
	assert.Equal(t, `UPDATE "app"."T t" SET "id" = $1, "m" = $2::"app"."mood", "j" = $3 WHERE ctid = (SELECT ctid FROM "app"."T t" WHERE "id" IS NOT DISTINCT FROM $4 AND pg_catalog.record_image_eq(ROW("id"), ROW($4)) AND "big" IS NOT DISTINCT FROM $5 AND pg_catalog.record_image_eq(ROW("big"), ROW($5)) AND "m" IS NOT DISTINCT FROM $6::"app"."mood" AND pg_catalog.record_image_eq(ROW("m"), ROW($6::"app"."mood")) AND "j"::text IS NOT DISTINCT FROM $7 LIMIT 1)`, s.sql())

	// Without any replica identity, updates and deletes are refused.
	_, err = deleteStmt(rel('n'), &pglogrepl.DeleteMessage{OldTupleType: 'K', OldTuple: tuple("tnnn", "1")})
	assert.ErrorIs(t, err, ErrPermanent)

	// Shapes differ exactly when the SQL differs.
	a, _ := updateStmt(pk, &pglogrepl.UpdateMessage{NewTuple: tuple("tutt", "1", "", "ok", "[]")})
	b, _ := updateStmt(pk, &pglogrepl.UpdateMessage{NewTuple: tuple("tttt", "1", "x", "ok", "[]")})
	assert.NotEqual(t, a.shape, b.shape)
	assert.NotEqual(t, a.sql(), b.sql())
}

func TestDecoderRecoversFromMalformedMessages(t *testing.T) {
	d := newDecoder()
	for _, data := range [][]byte{{'I', 0, 0}, {'U', 0, 0, 0, 1, 'N', 0, 5}, {'R'}, {}, {'?'}} {
		_, err := d.parse(data)
		assert.ErrorIs(t, err, ErrPermanent, "%q", data)
	}
	_, err := d.relation(42)
	assert.ErrorIs(t, err, ErrPermanent)
}

func TestReached(t *testing.T) {
	const blk = 8192
	assert.True(t, reached(100, 100, blk))
	assert.False(t, reached(99, 100, blk))
	// The start of segment 2 and the position after its long page header
	// are the same point.
	assert.True(t, reached(0x2000000, 0x2000028, blk))
	assert.True(t, reached(0x2002000, 0x2002018, blk))
	assert.False(t, reached(0x2000000, 0x2000048, blk))
	assert.False(t, reached(0x2000008, 0x2000028, blk))
}

func TestSplitTable(t *testing.T) {
	p := tablePlan{cols: []string{`"a"`, `"b"`}, format: "binary", bytes: 100 << 20, blocks: 12800}
	id := pgx.Identifier{"s", "t"}
	one := splitTable(id, p, 0, 1, 1<<20)
	require.Len(t, one, 1)
	assert.Equal(t, `COPY "s"."t" ("a", "b") TO STDOUT (FORMAT binary)`, one[0].out)
	assert.Equal(t, `COPY "s"."t" ("a", "b") FROM STDIN (FORMAT binary)`, one[0].in)

	four := splitTable(id, p, 0, 4, 1<<20)
	require.Len(t, four, 4)
	assert.Equal(t, `COPY (SELECT "a", "b" FROM ONLY "s"."t" WHERE ctid < '(3200,0)'::tid) TO STDOUT (FORMAT binary)`, four[0].out)
	assert.Equal(t, `COPY (SELECT "a", "b" FROM ONLY "s"."t" WHERE ctid >= '(3200,0)'::tid AND ctid < '(6400,0)'::tid) TO STDOUT (FORMAT binary)`, four[1].out)
	assert.Equal(t, `COPY (SELECT "a", "b" FROM ONLY "s"."t" WHERE ctid >= '(9600,0)'::tid) TO STDOUT (FORMAT binary)`, four[3].out)

	// Ranges are at least MinRangeBytes: 100 MiB in 40 MiB ranges is 2.
	assert.Len(t, splitTable(id, p, 0, 4, 40<<20), 2)
	// Small tables are not split.
	assert.Len(t, splitTable(id, p, 0, 4, 64<<20), 1)
}

func TestRowBatchStatements(t *testing.T) {
	r := rel('d', true)
	names := map[uint32]string{20: "bigint", 3802: "jsonb", 114: "json"}
	typeName := func(oid uint32) string { return names[oid] }

	ins, err := insertStmt(r, &pglogrepl.InsertMessage{Tuple: tuple("tttt", "1", `{"a":1}`, "ok", "{}")})
	require.NoError(t, err)
	assert.True(t, ins.batchable)
	assert.Equal(t, `INSERT INTO "app"."T t" ("id", "big", "m", "j") OVERRIDING SYSTEM VALUE SELECT u.p1::bigint, u.p2::jsonb, u.p3::"app"."mood", u.p4::json FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(p1, p2, p3, p4)`, ins.rowBatchSQL(typeName))
	assert.Equal(t, "1:1", ins.rowKeyBytes(), "an insert is keyed by its key columns")

	// An unchanged TOASTed value is not assigned.
	upd, err := updateStmt(r, &pglogrepl.UpdateMessage{NewTuple: tuple("tutt", "7", "", "sad", "null")})
	require.NoError(t, err)
	assert.True(t, upd.batchable)
	assert.Equal(t, `UPDATE "app"."T t" AS _t SET "m" = u.p1::"app"."mood", "j" = u.p2::json FROM unnest($1::text[], $2::text[], $3::text[]) AS u(p1, p2, p3) WHERE _t."id" = u.p3::bigint`, upd.rowBatchSQL(typeName))
	assert.Equal(t, "1:7", upd.rowKeyBytes())

	del, err := deleteStmt(r, &pglogrepl.DeleteMessage{OldTuple: tuple("tnnn", "7")})
	require.NoError(t, err)
	assert.True(t, del.batchable)
	assert.Equal(t, `DELETE FROM "app"."T t" AS _t USING unnest($1::text[]) AS u(p1) WHERE _t."id" = u.p1::bigint`, del.rowBatchSQL(typeName))

	// A key change and REPLICA IDENTITY FULL are never batched.
	kc, err := updateStmt(r, &pglogrepl.UpdateMessage{OldTuple: tuple("tnnn", "7"), NewTuple: tuple("tttt", "8", "{}", "ok", "{}")})
	require.NoError(t, err)
	assert.False(t, kc.batchable)
	full := rel('f', true, true, true, true)
	fd, err := deleteStmt(full, &pglogrepl.DeleteMessage{OldTuple: tuple("tttt", "7", "{}", "ok", "{}")})
	require.NoError(t, err)
	assert.False(t, fd.batchable)
}

func TestRowBatchArraysBinary(t *testing.T) {
	rb := &rowBatch{}
	s := &stmt{rel: rel('d', true), params: []param{{col: 0}, {col: 3}}}
	for _, vals := range [][][]byte{{[]byte("1"), []byte(`a"b\c`)}, {[]byte("2"), nil}} {
		one := *s
		one.values = vals
		rb.add(&one)
	}
	arr := rb.arrays()
	require.Len(t, arr, 2)
	// ndim 1, has-null, element type text, length 2, lower bound 1, then
	// length-prefixed elements with -1 for NULL.
	assert.Equal(t, []byte{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 25, 0, 0, 0, 2, 0, 0, 0, 1,
		0, 0, 0, 5, 'a', '"', 'b', '\\', 'c', 0xff, 0xff, 0xff, 0xff}, arr[1])
	assert.Equal(t, []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 25, 0, 0, 0, 2, 0, 0, 0, 1,
		0, 0, 0, 1, '1', 0, 0, 0, 1, '2'}, arr[0])
}

func TestCheckDescribesOnDemand(t *testing.T) {
	r := rel('d', true)
	del, err := deleteStmt(r, &pglogrepl.DeleteMessage{OldTuple: tuple("tnnn", "7")})
	require.NoError(t, err)
	assert.Equal(t, `delete of "app"."T t" with key (id)=(7)`, check{s: del}.what())
	rows := [][][]byte{{[]byte("1")}, {[]byte("2")}}
	assert.Equal(t, `delete of 3 rows of "app"."T t" with key (id)=(1), with key (id)=(2), ...`,
		check{s: del, n: 3, keys: rows}.what())
	assert.Equal(t, "truncate", check{label: "truncate"}.what())
}
