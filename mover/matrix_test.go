package mover_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// Hostile names of the matrix. The schema has a dot, a quote, a space and
// a non-ASCII letter; t2's name is long enough that <shard>_moved_<id>
// passes 63 bytes (movedName's hashed form).
const (
	mxSchema       = "sch.\"ema ü"
	mxT1           = "tä.b\"le x"
	mxT2           = "fülł \"ïdéntïtý\" tàblé.with a löng näme xyz"
	mxMood         = "mo\"od ü"
	mxPair         = "pa.ir"
	mxPrice        = "pri ce"
	mxHostileIndex = "x USING btree (id); DROP TABLE victim; --"

	// Columns of t1.
	mxSeq = "sé\"q.n"
	mxC10 = "c10 \"x\""
	mxV5  = "v.5"
	mxN62 = "n62 ü"
	mxGen = "gen;col"
)

func qi(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// mxDDL creates the types of the matrix in schema (on every node: types
// are not distributed) and, with tables, the two tables (on the
// coordinator).
func mxDDL(schema string, tables bool) []string {
	s := func(name string) string { return qi(schema, name) }
	out := []string{
		"CREATE SCHEMA " + qi(schema),
		"CREATE TYPE " + s(mxMood) + " AS ENUM ('sad', 'ok', 'happy')",
		"CREATE TYPE " + s(mxPair) + " AS (a int, b text)",
		"CREATE DOMAIN " + s(mxPrice) + " AS numeric(6,2) CHECK (VALUE >= 0)",
	}
	if !tables {
		return out
	}
	t1, t2 := s(mxT1), s(mxT2)
	return append(out,
		`CREATE TABLE `+t1+` (
			id bigint NOT NULL,
			`+qi(mxSeq)+` bigint GENERATED ALWAYS AS IDENTITY,
			`+qi(mxC10)+` char(10),
			`+qi(mxV5)+` varchar(5),
			b4 bit(4),
			`+qi(mxN62)+` numeric(6,2),
			ts0 timestamp(0),
			c3a char(3)[],
			n51a numeric(5,1)[],
			pr `+s(mxPrice)+`,
			md `+s(mxMood)+`,
			cp `+s(mxPair)+`,
			rng int4range,
			u int,
			`+qi(mxGen)+` bigint GENERATED ALWAYS AS (id * 2 + coalesce(u, 0)) STORED,
			CONSTRAINT "pk ""1""" PRIMARY KEY (id),
			CONSTRAINT "chk.n62 ü" CHECK (`+qi(mxN62)+` >= 0 AND length(`+qi(mxV5)+`) >= 1),
			CONSTRAINT "uq ""u""" UNIQUE (u),
			CONSTRAINT "ex.rng" EXCLUDE USING gist (rng WITH &&)
		)`,
		"CREATE INDEX "+qi(mxHostileIndex)+" ON "+t1+" USING btree (id)",
		"CREATE INDEX \"pärt ial\" ON "+t1+" ("+qi(mxV5)+") WHERE md = 'happy'",
		"CREATE INDEX \"expr.idx\" ON "+t1+" (lower("+qi(mxV5)+"), ("+qi(mxN62)+" * 2))",
		`CREATE TABLE `+t2+` (
			id bigint NOT NULL,
			"nö te" text,
			c10 char(10),
			n numeric(6,2),
			tags char(3)[],
			pt point,
			md `+s(mxMood)+`
		)`,
		"ALTER TABLE "+t2+" REPLICA IDENTITY FULL",
		"CREATE INDEX \"ïdx \"\"t2\"\"\" ON "+t2+" (id)",
	)
}

func mxExec(t *testing.T, ctx context.Context, conn *pgx.Conn, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, "%s", s)
	}
}

// mxModel is what the acknowledged writes left: t1's rows by id (v5 and
// n62 as text), t2's row count by id.
type mxModel struct {
	mu  sync.Mutex
	t1  map[int64][2]string
	ids []int64 // t1 ids, for picking
	t2  map[int64]int
	t2i []int64
}

func (m *mxModel) pick(r *rand.Rand, n int) []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ids) < n {
		return nil
	}
	var out []int64
	for len(out) < n {
		id := m.ids[r.Intn(len(m.ids))]
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// mxIDs hands out fresh ids that hash into one shard index.
type mxIDs struct {
	mu    sync.Mutex
	next  int64
	cl    *metadata.Cluster
	table metadata.Table
}

func (g *mxIDs) take(index int) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		g.next++
		s, err := g.cl.ShardFor(g.table, g.next)
		if err == nil && s.Index == index {
			return g.next
		}
	}
}

func mxV5Val(r *rand.Rand) string {
	opts := []string{"äöü", "ab\"c", "x y", "ß.;--", "12345", "q", "ñ'ñ"}
	return opts[r.Intn(len(opts))]
}

func mxN62Val(r *rand.Rand) string {
	c := r.Intn(1000000) // cents: numeric(6,2) holds up to 9999.99
	return fmt.Sprintf("%d.%02d", c/100, c%100)
}

func mxC10Val(r *rand.Rand) string {
	opts := []string{"a", "bé c", "\"q\"", "0123456789", "x,y;z", "ü"}
	return opts[r.Intn(len(opts))]
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertT1 inserts a t1 row without an identity value and returns its v5
// and n62.
func insertT1(ctx context.Context, q execer, tbl string, id int64, r *rand.Rand) ([2]string, error) {
	v5, n62 := mxV5Val(r), mxN62Val(r)
	_, err := q.Exec(ctx, `INSERT INTO `+tbl+` (id, `+qi(mxC10)+`, `+qi(mxV5)+`, b4, `+qi(mxN62)+`, ts0, c3a, n51a, pr, md, cp, rng, u)
		VALUES ($1, $2::text, $3::text, $4::text::bit(4), $5::text::numeric, $6::text::timestamp, $7::text::char(3)[],
			$8::text::numeric(5,1)[], $9::text::numeric, $10::text::`+qi(mxSchema, mxMood)+`, $11::text::`+qi(mxSchema, mxPair)+`,
			int4range($12::int, $12::int + 5), $13::int)`,
		id, mxC10Val(r), v5, fmt.Sprintf("%04b", r.Intn(16)), n62,
		fmt.Sprintf("2024-0%d-02 03:04:05.%03d", 1+r.Intn(9), r.Intn(1000)),
		`{"ab","c","é z"}`, fmt.Sprintf("{%d.25,3,-0.05}", r.Intn(1000)), fmt.Sprintf("%d.255", r.Intn(9999)),
		[]string{"sad", "ok", "happy"}[r.Intn(3)], fmt.Sprintf(`(%d,"x ""y"", z")`, r.Intn(100)), id*10, id)
	return [2]string{v5, n62}, err
}

func insertT2(ctx context.Context, q execer, tbl string, id int64, r *rand.Rand) error {
	_, err := q.Exec(ctx, `INSERT INTO `+tbl+` (id, "nö te", c10, n, tags, pt, md)
		VALUES ($1::bigint, $2::text, $3::text, $4::text::numeric, $5::text::char(3)[], point($1::bigint, 1.5), 'ok')`,
		id, []string{"dup", "dup", "a\"b", "ü ü"}[r.Intn(4)], mxC10Val(r), "1.50", `{"x","yz"}`)
	return err
}

// mxWriter runs small transactions against one node's shard tables until
// they are renamed away (42P01) or ctx ends.
type mxWriter struct {
	txs, updates atomic.Int64
	renamed      atomic.Bool
	err          error
	done         chan struct{}
}

func startMxWriter(ctx context.Context, t *testing.T, cat *metadata.Catalog, n metadata.Node, t1, t2 string, index int,
	m *mxModel, ids *mxIDs, seed int64) *mxWriter {
	w := &mxWriter{done: make(chan struct{})}
	conn, err := cat.ConnectNode(ctx, n.Host, n.Port)
	require.NoError(t, err)
	go func() {
		defer close(w.done)
		defer conn.Close(context.WithoutCancel(ctx))
		r := rand.New(rand.NewSource(seed))
		for ctx.Err() == nil {
			err := w.one(ctx, conn, r, t1, t2, index, m, ids)
			var pgErr *pgconn.PgError
			switch {
			case err == nil:
			case errors.As(err, &pgErr) && pgErr.Code == "42P01":
				w.renamed.Store(true)
				return
			case ctx.Err() != nil:
				return
			default:
				w.err = err
				return
			}
		}
	}()
	return w
}

// one runs one transaction and, once it commits, applies it to the model.
func (w *mxWriter) one(ctx context.Context, conn *pgx.Conn, r *rand.Rand, t1, t2 string, index int, m *mxModel, ids *mxIDs) error {
	var after []func()
	updates := 0
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	one := func(tag pgconn.CommandTag, err error) error {
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%s affected %d rows", tag, tag.RowsAffected())
		}
		return nil
	}
	switch p := r.Intn(100); {
	case p < 30: // char, varchar, numeric of a few rows
		for _, id := range m.pick(r, 1+r.Intn(3)) {
			v5, n62 := mxV5Val(r), mxN62Val(r)
			if err := one(tx.Exec(ctx, "UPDATE "+t1+" SET "+qi(mxC10)+" = $2::text, "+qi(mxV5)+" = $3::text, "+qi(mxN62)+" = $4::text::numeric WHERE id = $1",
				id, mxC10Val(r), v5, n62)); err != nil {
				return err
			}
			updates++
			after = append(after, func() { m.t1[id] = [2]string{v5, n62} })
		}
	case p < 45: // the other typmod columns, the enum, the domain, the composite
		for _, id := range m.pick(r, 1+r.Intn(3)) {
			if err := one(tx.Exec(ctx, "UPDATE "+t1+` SET b4 = $2::text::bit(4), ts0 = $3::text::timestamp, c3a = $4::text::char(3)[],
				n51a = $5::text::numeric(5,1)[], pr = $6::text::numeric, md = $7::text::`+qi(mxSchema, mxMood)+`, cp = $8::text::`+qi(mxSchema, mxPair)+` WHERE id = $1`,
				id, fmt.Sprintf("%04b", r.Intn(16)), fmt.Sprintf("2023-12-31 23:59:59.%d", r.Intn(10)),
				fmt.Sprintf(`{"%c","é",NULL}`, 'a'+r.Intn(26)), fmt.Sprintf("{%d.04,%d.96}", r.Intn(999), r.Intn(999)),
				fmt.Sprintf("%d.995", r.Intn(9999)), []string{"sad", "ok", "happy"}[r.Intn(3)], fmt.Sprintf(`(%d,"a,b")`, r.Intn(1000)))); err != nil {
				return err
			}
			updates++
		}
	case p < 60: // insert, sometimes updated or deleted in the same transaction
		id := ids.take(index)
		vals, err := insertT1(ctx, tx, t1, id, r)
		if err != nil {
			return err
		}
		switch r.Intn(3) {
		case 0:
			v5 := mxV5Val(r)
			if err := one(tx.Exec(ctx, "UPDATE "+t1+" SET "+qi(mxV5)+" = $2::text WHERE id = $1", id, v5)); err != nil {
				return err
			}
			updates++
			vals[0] = v5
		case 1:
			if err := one(tx.Exec(ctx, "DELETE FROM "+t1+" WHERE id = $1", id)); err != nil {
				return err
			}
			return tx.Commit(ctx) // nothing to remember
		}
		after = append(after, func() { m.t1[id] = vals; m.ids = append(m.ids, id) })
	case p < 68: // delete, sometimes after an update
		m.mu.Lock()
		few := len(m.t1) < 40
		m.mu.Unlock()
		picked := m.pick(r, 1)
		if picked == nil || few {
			break
		}
		id := picked[0]
		if r.Intn(2) == 0 {
			if err := one(tx.Exec(ctx, "UPDATE "+t1+" SET "+qi(mxN62)+" = 1 WHERE id = $1", id)); err != nil {
				return err
			}
			updates++
		}
		if err := one(tx.Exec(ctx, "DELETE FROM "+t1+" WHERE id = $1", id)); err != nil {
			return err
		}
		after = append(after, func() {
			delete(m.t1, id)
			m.ids = slices.DeleteFunc(m.ids, func(x int64) bool { return x == id })
		})
	case p < 73: // swap the unique and the excluded values of two rows
		two := m.pick(r, 2)
		if two == nil {
			break
		}
		a, b := two[0], two[1]
		// a: u -> temporary, b: u -> a's, a: u -> b's (and the same for rng).
		var ua, ub int
		var ra, rb string
		if err := tx.QueryRow(ctx, "SELECT u, rng::text FROM "+t1+" WHERE id = $1", a).Scan(&ua, &ra); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT u, rng::text FROM "+t1+" WHERE id = $1", b).Scan(&ub, &rb); err != nil {
			return err
		}
		for _, s := range [][]any{{a, -ua, "empty"}, {b, ua, ra}, {a, ub, rb}} {
			if err := one(tx.Exec(ctx, "UPDATE "+t1+" SET u = $2, rng = $3::text::int4range WHERE id = $1", s...)); err != nil {
				return err
			}
			updates++
		}
	default: // t2, REPLICA IDENTITY FULL: inserts (duplicates too), updates and deletes of one of equal rows
		m.mu.Lock()
		var id int64
		if len(m.t2i) > 0 {
			id = m.t2i[r.Intn(len(m.t2i))]
		}
		m.mu.Unlock()
		switch k := r.Intn(3); {
		case k == 0 || id == 0:
			if id == 0 || r.Intn(2) == 0 {
				id = ids.take(index)
			}
			if err := insertT2(ctx, tx, t2, id, r); err != nil {
				return err
			}
			after = append(after, func() {
				if m.t2[id] == 0 {
					m.t2i = append(m.t2i, id)
				}
				m.t2[id]++
			})
		case k == 1:
			if err := one(tx.Exec(ctx, "UPDATE "+t2+` SET c10 = $2::text, n = n + 0.01, tags = tags || '{"ü"}'
				WHERE ctid = (SELECT ctid FROM `+t2+" WHERE id = $1 LIMIT 1)", id, mxC10Val(r))); err != nil {
				return err
			}
		default:
			if err := one(tx.Exec(ctx, "DELETE FROM "+t2+" WHERE ctid = (SELECT ctid FROM "+t2+" WHERE id = $1 LIMIT 1)", id)); err != nil {
				return err
			}
			after = append(after, func() {
				m.t2[id]--
				if m.t2[id] == 0 {
					delete(m.t2, id)
					m.t2i = slices.DeleteFunc(m.t2i, func(x int64) bool { return x == id })
				}
			})
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	for _, f := range after {
		f()
	}
	m.mu.Unlock()
	w.txs.Add(1)
	w.updates.Add(int64(updates))
	return nil
}

func (w *mxWriter) stop(t *testing.T, cancel context.CancelFunc) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(15 * time.Second):
		cancel()
		<-w.done
		t.Errorf("the writer was still writing to the source's shard tables 15s after the move: they were not renamed away")
	}
	cancel()
	require.NoError(t, w.err, "the writer failed")
	assert.True(t, w.renamed.Load(), "the writer must have stopped on 42P01 (the source shard renamed by the cutover)")
}

// TestMoveHostileSchemaMatrix moves a shard group of two tables with
// hostile names and every kind of column and constraint the copy and the
// grouped applier must carry, to a new node and back, under concurrent
// writes against the source shard tables; source and target must hold the
// same rows and definitions after each move.
func TestMoveHostileSchemaMatrix(t *testing.T) {
	start := time.Now()
	ctx, cancelAll := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelAll()
	require.LessOrEqual(t, len(mxT2)+len("_102008"), 63)
	require.Greater(t, len(mxT2)+len("_102008")+len("_moved_1"), 63, "t2 must take movedName's hashed form")

	sb, cat := sandboxtest.NewCompat(t, 2)
	connect := func(n metadata.Node) *pgx.Conn {
		t.Helper()
		c, err := cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	nodes, err := cat.Nodes(ctx)
	require.NoError(t, err)
	conns := map[int32]*pgx.Conn{}
	for _, n := range nodes {
		conns[n.GroupID] = connect(n)
		mxExec(t, ctx, conns[n.GroupID], mxDDL(mxSchema, n.IsCoordinator())...)
		if !n.IsCoordinator() {
			mxExec(t, ctx, conns[n.GroupID], "CREATE TABLE victim (x int)", "INSERT INTO victim VALUES (42)")
		}
	}

	// Distribute. The journal's quoted form is the one way to name a
	// schema with a dot in it.
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{
		Table: metadata.QualifiedName(pgx.Identifier{mxSchema, mxT1}), Column: "id", ShardCount: 2})
	if err != nil {
		t.Errorf("CreateDistributedTable cannot name a table in schema %q: %v (metadata.splitName cuts DistributeOptions.Table at its first dot and reads no quotes); "+
			"distributing under a plain schema name and renaming the schema on every node instead", mxSchema, err)
		const tmp = "mx_tmp_schema"
		for _, c := range conns {
			mxExec(t, ctx, c, "ALTER SCHEMA "+qi(mxSchema)+" RENAME TO "+qi(tmp))
		}
		_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: tmp + "." + mxT1, Column: "id", ShardCount: 2})
		require.NoError(t, err)
		_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: tmp + "." + mxT2, Column: "id"})
		require.NoError(t, err)
		for _, c := range conns {
			mxExec(t, ctx, c, "ALTER SCHEMA "+qi(tmp)+" RENAME TO "+qi(mxSchema))
		}
	} else {
		_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{
			Table: metadata.QualifiedName(pgx.Identifier{mxSchema, mxT2}), Column: "id"})
		require.NoError(t, err)
	}

	// The new node, with the types and a victim of its own.
	sn, err := sb.AddNode(ctx)
	require.NoError(t, err)
	newNode, err := cat.AddNode(ctx, sn.Host, sn.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	conns[newNode.GroupID] = connect(newNode)
	mxExec(t, ctx, conns[newNode.GroupID], mxDDL(mxSchema, false)...)
	mxExec(t, ctx, conns[newNode.GroupID], "CREATE TABLE victim (x int)", "INSERT INTO victim VALUES (42)")

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	var tab1, tab2 metadata.Table
	for _, tb := range cl.Tables {
		switch {
		case tb.Schema == mxSchema && tb.Name == mxT1:
			tab1 = tb
		case tb.Schema == mxSchema && tb.Name == mxT2:
			tab2 = tb
		}
	}
	require.NotZero(t, tab1.ColocationID, "t1 distributed")
	require.Equal(t, tab1.ColocationID, tab2.ColocationID, "t2 colocated with t1")
	shards1, shards2 := cl.TableShards(tab1), cl.TableShards(tab2)
	require.Len(t, shards1, 2)
	require.Len(t, shards2, 2)

	// Rows in every shard, loaded on the workers directly.
	model := &mxModel{t1: map[int64][2]string{}, t2: map[int64]int{}}
	ids := &mxIDs{cl: cl, table: tab1}
	r := rand.New(rand.NewSource(7))
	const moved = 0 // the shard index whose group moves
	for i := range shards1 {
		p, ok := cl.PlacementOf(shards1[i].ID)
		require.True(t, ok)
		c := conns[p.GroupID]
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		for k := 0; k < 150; k++ {
			id := ids.take(i)
			vals, err := insertT1(ctx, tx, shards1[i].Ident().Sanitize(), id, r)
			require.NoError(t, err)
			require.NoError(t, insertT2(ctx, tx, shards2[i].Ident().Sanitize(), id, r))
			if k%5 == 0 { // equal rows: REPLICA IDENTITY FULL must change one of them
				require.NoError(t, insertT2(ctx, tx, shards2[i].Ident().Sanitize(), id, rand.New(rand.NewSource(1))))
				require.NoError(t, insertT2(ctx, tx, shards2[i].Ident().Sanitize(), id, rand.New(rand.NewSource(1))))
			}
			if i == moved {
				model.t1[id] = vals
				model.ids = append(model.ids, id)
				model.t2[id] = 1
				if k%5 == 0 {
					model.t2[id] = 3
				}
				model.t2i = append(model.t2i, id)
			}
		}
		require.NoError(t, tx.Commit(ctx))
	}
	sh1, sh2 := shards1[moved], shards2[moved]
	p, _ := cl.PlacementOf(sh1.ID)
	origin, _ := cl.NodeByGroup(p.GroupID)

	// One move under the writer; returns the fenced old tables' names.
	moveOnce := func(from, to metadata.Node, seed int64) []pgx.Identifier {
		t.Helper()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w := startMxWriter(wctx, t, cat, from, sh1.Ident().Sanitize(), sh2.Ident().Sanitize(), moved, model, ids, seed)
		var atCatchUp, atLock int64 = -1, -1
		cfg := testConfig(t)
		cfg.AfterPhase = func(_ int64, p mover.Phase) error {
			if p != mover.Indexing {
				return nil
			}
			// Entering catch-up: let the writer pile up changes for the
			// applier to group.
			atCatchUp = w.updates.Load()
			deadline := time.Now().Add(10 * time.Second)
			for w.updates.Load() < atCatchUp+300 && time.Now().Before(deadline) && w.err == nil {
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}
		cfg.CutoverStep = func(_ int64, step string) error {
			if step == "locked" {
				atLock = w.updates.Load()
			}
			return nil
		}
		eng := mover.New(cfg, cat)
		m := scheduleMove(t, eng, sh1.ID, to)
		require.ElementsMatch(t, []string{metadata.QualifiedName(sh1.Ident()), metadata.QualifiedName(sh2.Ident())}, m.ShardTables)
		runErr := eng.Run(ctx, m.ID)
		w.stop(t, cancel)
		require.NoError(t, runErr)
		done, err := cat.Move(ctx, m.ID)
		require.NoError(t, err)
		require.Equal(t, "done", string(done.Phase))
		t.Logf("move %d: %d transactions, %d updates acknowledged; %d updates during catch-up before the cutover's lock",
			m.ID, w.txs.Load(), w.updates.Load(), atLock-atCatchUp)
		require.GreaterOrEqual(t, atCatchUp, int64(0), "the catch-up hook ran")
		assert.Greater(t, atLock-atCatchUp, int64(250), "the writer must have updated rows during catch-up, for the grouped applier")

		recs, err := cat.Cleanups(ctx, m.ID)
		require.NoError(t, err)
		var old []pgx.Identifier
		for _, rec := range recs {
			if rec.ObjectType == "table" && rec.Policy == metadata.CleanupDeferred && rec.NodeGroup == from.GroupID {
				id, err := metadata.ParseQualifiedName(rec.Name)
				require.NoError(t, err, "cleanup record %q", rec.Name)
				old = append(old, id)
			}
		}
		require.Len(t, old, 2, "the fenced old shards are recorded for a deferred drop: %+v", recs)
		for _, id := range old {
			require.Equal(t, mxSchema, id[0])
			assert.LessOrEqual(t, len(id[1]), 63, "fenced name %q", id[1])
		}
		// t1's first: its fenced name is <shard>_moved_<id>; t2's is
		// movedName's hashed form.
		if !strings.HasPrefix(old[0][1], sh1.Name()+"_moved_") {
			old[0], old[1] = old[1], old[0]
		}
		require.Equal(t, sh1.Name()+fmt.Sprintf("_moved_%d", m.ID), old[0][1])
		require.True(t, strings.HasSuffix(old[1][1], fmt.Sprintf("_moved_%d", m.ID)), "fenced name %q", old[1][1])
		return old
	}

	// compare checks the fenced old shards on from against the live ones
	// on to: rows, definitions, and the acknowledged writes.
	compare := func(from, to metadata.Node, old []pgx.Identifier) {
		t.Helper()
		src, dst := conns[from.GroupID], conns[to.GroupID]
		for i, live := range []pgx.Identifier{sh1.Ident(), sh2.Ident()} {
			order := "id"
			if i == 1 {
				order = "t::text"
			}
			sum := func(c *pgx.Conn, tbl pgx.Identifier) (string, int64) {
				var s string
				var n int64
				require.NoError(t, c.QueryRow(ctx, "SELECT coalesce(md5(string_agg(t::text, ',' ORDER BY "+order+")), ''), count(*) FROM "+tbl.Sanitize()+" t").Scan(&s, &n))
				return s, n
			}
			ws, wn := sum(src, old[i])
			gs, gn := sum(dst, live)
			assert.Equal(t, wn, gn, "rows of %s: source (fenced) vs target", live.Sanitize())
			assert.Equal(t, ws, gs, "md5 of %s: source (fenced) vs target", live.Sanitize())
			var exists bool
			require.NoError(t, src.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", live.Sanitize()).Scan(&exists))
			assert.False(t, exists, "%s must be gone from the source under its own name", live.Sanitize())

			want, err := metadata.ReadTableDDL(ctx, src, old[i])
			require.NoError(t, err)
			got, err := metadata.ReadTableDDL(ctx, dst, live)
			require.NoError(t, err)
			assert.Empty(t, want.Diff(got), "definition of %s: fenced source vs target", live.Sanitize())
			assert.Empty(t, got.Diff(want), "definition of %s: target vs fenced source", live.Sanitize())
			for j, c := range want.Columns {
				if c.Identity != nil {
					require.NotNil(t, got.Columns[j].Identity)
					assert.Equal(t, c.Identity.Always, got.Columns[j].Identity.Always, "identity kind of %q", c.Name)
				}
			}
		}

		// The acknowledged writes.
		model.mu.Lock()
		defer model.mu.Unlock()
		rows, err := dst.Query(ctx, "SELECT id, "+qi(mxV5)+"::text, "+qi(mxN62)+"::text FROM "+sh1.Ident().Sanitize())
		require.NoError(t, err)
		got := map[int64][2]string{}
		for rows.Next() {
			var id int64
			var v [2]string
			require.NoError(t, rows.Scan(&id, &v[0], &v[1]))
			got[id] = v
		}
		require.NoError(t, rows.Err())
		assert.Equal(t, len(model.t1), len(got), "t1 rows on the target vs acknowledged")
		bad := 0
		for id, v := range model.t1 {
			if got[id] != v && bad < 5 {
				bad++
				t.Errorf("t1 row %d: acknowledged %q, target has %q", id, v, got[id])
			}
		}
		rows, err = dst.Query(ctx, "SELECT id, count(*) FROM "+sh2.Ident().Sanitize()+" GROUP BY id")
		require.NoError(t, err)
		got2 := map[int64]int{}
		for rows.Next() {
			var id int64
			var n int
			require.NoError(t, rows.Scan(&id, &n))
			got2[id] = n
		}
		require.NoError(t, rows.Err())
		assert.Equal(t, model.t2, got2, "t2 rows by id on the target vs acknowledged")

		// Identity ALWAYS again, and past the source's values.
		var kind string
		require.NoError(t, dst.QueryRow(ctx, "SELECT attidentity::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2",
			sh1.Ident().Sanitize(), mxSeq).Scan(&kind))
		assert.Equal(t, "a", kind, "identity column is GENERATED ALWAYS on the target after the cutover")
		var srcMax int64
		require.NoError(t, src.QueryRow(ctx, "SELECT max("+qi(mxSeq)+") FROM "+old[0].Sanitize()).Scan(&srcMax))
		tx, err := dst.Begin(ctx)
		require.NoError(t, err)
		var next int64
		require.NoError(t, tx.QueryRow(ctx, "INSERT INTO "+sh1.Ident().Sanitize()+" (id, "+qi(mxV5)+", u, rng) VALUES (-1, 'n', -999999, 'empty') RETURNING "+qi(mxSeq)).Scan(&next))
		require.NoError(t, tx.Rollback(ctx))
		assert.Greater(t, next, srcMax, "the target's identity sequence continues past the source's values")
		var replident string
		require.NoError(t, dst.QueryRow(ctx, "SELECT relreplident::text FROM pg_class WHERE oid = $1::regclass", sh2.Ident().Sanitize()).Scan(&replident))
		assert.Equal(t, "f", replident, "t2 keeps REPLICA IDENTITY FULL")

		// Constraints refuse what they must.
		var anyID int64
		var anyU int
		var anyRng string
		require.NoError(t, dst.QueryRow(ctx, "SELECT id, u, rng::text FROM "+sh1.Ident().Sanitize()+" WHERE u IS NOT NULL AND NOT isempty(rng) LIMIT 1").Scan(&anyID, &anyU, &anyRng))
		for _, tc := range []struct {
			code, sql string
			args      []any
		}{
			{"23514", "INSERT INTO %s (id, " + qi(mxV5) + ", " + qi(mxN62) + ") VALUES (-2, 'n', -1)", nil},
			{"23514", "INSERT INTO %s (id, " + qi(mxV5) + ", pr) VALUES (-2, 'n', -1)", nil},
			{"23514", "INSERT INTO %s (id, " + qi(mxV5) + ") VALUES (-2, '')", nil},
			{"23505", "INSERT INTO %s (id, " + qi(mxV5) + ", u) VALUES (-2, 'n', $1)", []any{anyU}},
			{"23505", "INSERT INTO %s (id, " + qi(mxV5) + ") VALUES ($1, 'n')", []any{anyID}},
			{"23P01", "INSERT INTO %s (id, " + qi(mxV5) + ", rng) VALUES (-2, 'n', $1::text::int4range)", []any{anyRng}},
			{"22001", "INSERT INTO %s (id, " + qi(mxV5) + ") VALUES (-2, 'toolong')", nil},
			{"22026", "INSERT INTO %s (id, " + qi(mxV5) + ", b4) VALUES (-2, 'n', B'101')", nil},
			{"428C9", "INSERT INTO %s (id, " + qi(mxV5) + ", " + qi(mxSeq) + ") VALUES (-2, 'n', 1)", nil},
		} {
			_, err := dst.Exec(ctx, fmt.Sprintf(tc.sql, sh1.Ident().Sanitize()), tc.args...)
			var pgErr *pgconn.PgError
			if assert.ErrorAs(t, err, &pgErr, "%s must be refused", tc.sql) {
				assert.Equal(t, tc.code, pgErr.Code, "%s: %s", tc.sql, pgErr.Message)
			}
		}

		// Nothing dropped by a name, nothing left behind.
		cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
		require.NoError(t, err)
		for _, n := range cl.Nodes {
			c := conns[n.GroupID]
			if !n.IsCoordinator() {
				var x int
				assert.NoError(t, c.QueryRow(ctx, "SELECT x FROM victim").Scan(&x), "victim on %s", n.Addr())
			}
			var left int
			require.NoError(t, c.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%')
				+ (SELECT count(*) FROM pg_publication WHERE pubname LIKE 'shardmover%')
				+ (SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%')
				+ (SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'shardmover%')`).Scan(&left))
			assert.Zero(t, left, "replication artifacts left on %s", n.Addr())
		}
		for _, id := range []int64{sh1.ID, sh2.ID} {
			p, ok := cl.PlacementOf(id)
			require.True(t, ok)
			assert.Equal(t, to.GroupID, p.GroupID, "shard %d placed on the target", id)
		}
	}

	// There.
	old := moveOnce(origin, newNode, 11)
	compare(origin, newNode, old)
	t.Logf("first move checked after %s", time.Since(start).Round(time.Millisecond))

	// Back. The fenced old copies still hold the shards' index names on
	// the origin: the move back is refused until they are dropped.
	eng := mover.New(testConfig(t), cat)
	specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: sh1.ID, Target: origin}})
	require.NoError(t, err)
	// With only t1's old copy gone (dropped by hand), t2's old copy (its
	// fenced name in movedName's hashed form) still holds an index name.
	mxExec(t, ctx, conns[origin.GroupID], "DROP TABLE "+old[0].Sanitize())
	err = eng.Preflight(ctx, specs[0])
	if assert.Error(t, err, "preflight must refuse a target that still holds the fenced copy of %s (index names collide)", old[1].Sanitize()) {
		assert.Contains(t, err.Error(), "cleanup")
	}
	_, err = eng.Sweep(ctx, mover.SweepOptions{KeepOldFor: 0})
	require.NoError(t, err)
	for _, id := range old {
		var exists bool
		require.NoError(t, conns[origin.GroupID].QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", id.Sanitize()).Scan(&exists))
		assert.False(t, exists, "sweep dropped %s", id.Sanitize())
	}
	old = moveOnce(newNode, origin, 12)
	compare(newNode, origin, old)
	t.Logf("runtime %s", time.Since(start).Round(time.Millisecond))
}
