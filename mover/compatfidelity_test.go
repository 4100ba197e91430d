package mover_test

import (
	"context"
	"errors"
	"math/rand"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// cfEveryNode is what the shard tables' objects need on every node, the
// one added later included: compat nodes share no roles and no functions.
var cfEveryNode = []string{
	`CREATE ROLE tenant_a LOGIN`,
	`CREATE ROLE tenant_b LOGIN`,
	`CREATE FUNCTION public.upper_name() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.name := upper(NEW.name); RETURN NEW; END$$`,
}

// cfShardObjects are the objects of one shard group on its worker, as
// Citus would have them on its shards (names suffixed with the shard id
// where they are unique per schema): %u is the users shard, %e the
// events shard, %U and %E their ids.
var cfShardObjects = []string{
	`ALTER TABLE %e ADD CONSTRAINT "events_user_fk_%E" FOREIGN KEY (uid) REFERENCES %u (id) ON DELETE CASCADE`,
	`CREATE TRIGGER "users_upper_%U" BEFORE INSERT OR UPDATE ON %u FOR EACH ROW EXECUTE FUNCTION public.upper_name()`,
	`CREATE STATISTICS "public"."users_stats_%U" (dependencies) ON id, country FROM %u`,
	`ALTER TABLE %u ENABLE ROW LEVEL SECURITY`,
	`CREATE POLICY tenant_pol ON %u USING (tenant = current_user)`,
	`GRANT SELECT ON %u TO tenant_a, tenant_b`,
	`COMMENT ON TABLE %u IS 'the users'`,
}

// TestCompatMovedShardIsTheSameTable is TestCitusMovedShardIsTheSameTable
// on compat, where there is no Citus to compare with: the oracle is the
// shard group's own definition before it moved. The group of two
// colocated tables, with a foreign key ON DELETE CASCADE between them, a
// trigger, extended statistics, a storage parameter, row-level security
// with a policy, a comment and an INCLUDE index, moves to a new worker and
// back, each time while a writer routed by the metadata (docs/design.md
// section 7) inserts, updates and deletes. After each move the shard
// tables must be defined exactly as before (ReadTableDDL and pg_dump, no
// name masked: compat keeps the names), hold exactly the rows the writer
// was acknowledged, and behave: the cascade, the trigger, and a tenant that
// sees only its own rows.
func TestCompatMovedShardIsTheSameTable(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCompat(t, 2)
	connect := func(n metadata.Node) *pgx.Conn {
		t.Helper()
		c, err := cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	run := func(c *pgx.Conn, stmts ...string) {
		t.Helper()
		for _, s := range stmts {
			_, err := c.Exec(ctx, s)
			require.NoError(t, err, s)
		}
	}
	nodes, err := cat.Nodes(ctx)
	require.NoError(t, err)
	conns := map[int32]*pgx.Conn{}
	for _, n := range nodes {
		conns[n.GroupID] = connect(n)
		run(conns[n.GroupID], cfEveryNode...)
	}
	run(conns[0],
		`CREATE TABLE users (id bigint PRIMARY KEY, country text, name text, tenant text) WITH (fillfactor = 70)`,
		`CREATE INDEX users_name_idx ON users (name) INCLUDE (tenant)`,
		`CREATE TABLE events (uid bigint, id bigint, note text, PRIMARY KEY (uid, id))`)
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "users", Column: "id", ShardCount: 4})
	require.NoError(t, err)
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "events", Column: "uid", ColocateWith: "users"})
	require.NoError(t, err)

	sn, err := sb.AddNode(ctx)
	require.NoError(t, err)
	added, err := cat.AddNode(ctx, sn.Host, sn.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	conns[added.GroupID] = connect(added)
	run(conns[added.GroupID], cfEveryNode...)

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	users, err := cl.Table("users")
	require.NoError(t, err)
	events, err := cl.Table("events")
	require.NoError(t, err)
	require.Equal(t, users.ColocationID, events.ColocationID, "events colocated with users")
	ushards, eshards := cl.TableShards(users), cl.TableShards(events)
	require.Len(t, ushards, 4)
	require.Len(t, eshards, 4)
	for i := range ushards {
		p, ok := cl.PlacementOf(ushards[i].ID)
		require.True(t, ok)
		c := conns[p.GroupID]
		for _, s := range cfShardObjects {
			run(c, strings.NewReplacer("%u", ushards[i].Ident().Sanitize(), "%e", eshards[i].Ident().Sanitize(),
				"%U", itoa(ushards[i].ID), "%E", itoa(eshards[i].ID)).Replace(s))
		}
	}

	// The moved group: shard index 0, from its worker to the new one and back.
	const moved = 0
	mu, me := ushards[moved], eshards[moved]
	p, _ := cl.PlacementOf(mu.ID)
	origin, ok := cl.NodeByGroup(p.GroupID)
	require.True(t, ok)
	sandboxNode := func(n metadata.Node) sandbox.Node {
		t.Helper()
		for _, s := range sb.Nodes {
			if s.Port == n.Port {
				return s
			}
		}
		t.Fatalf("no sandbox node on port %d", n.Port)
		return sandbox.Node{}
	}
	dump := func(n metadata.Node, tbl pgx.Identifier) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(sb.BinDir, "pg_dump"), "--schema-only", "-t", tbl.Sanitize(), sandboxNode(n).DSN())
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "pg_dump %s: %s", tbl.Sanitize(), out)
		s := dumpCommentRE.ReplaceAllString(string(out), "")
		return strings.TrimSpace(dumpBlankRE.ReplaceAllString(s, "\n"))
	}

	// The writer's ledger starts with the rows loaded through it.
	w := &cfWriter{cat: cat, users: users, events: events, moved: moved, cl: cl,
		conns: map[int32]*pgx.Conn{}, rows: map[int64]cfUser{}, evs: map[int64]map[int64]string{},
		rnd: rand.New(rand.NewSource(30))}
	defer w.close()
	for id := int64(1); id <= 400; id++ {
		tenant := "tenant_b"
		if id%2 == 0 {
			tenant = "tenant_a"
		}
		require.NoError(t, w.insert(ctx, id, map[bool]string{true: "de", false: "fr"}[id%3 == 0], "n"+itoa(id), tenant, 3))
	}
	w.next = 401
	require.Positive(t, len(w.live), "users in the moved group")

	// The oracle: the group's definitions before it moved.
	want := map[string]metadata.TableDDL{}
	wantDump := map[string]string{}
	for _, id := range []pgx.Identifier{mu.Ident(), me.Ident()} {
		d, err := metadata.ReadTableDDL(ctx, conns[origin.GroupID], id)
		require.NoError(t, err)
		want[id.Sanitize()] = d
		wantDump[id.Sanitize()] = dump(origin, id)
	}
	wu := want[mu.Ident().Sanitize()]
	require.Equal(t, []string{"fillfactor=70"}, wu.Options, "the storage parameter is on the shard before the move")
	require.Len(t, wu.Triggers, 1)
	require.Len(t, wu.Policies, 1)
	require.Len(t, wu.Statistics, 1)
	require.True(t, wu.RowSecurity)
	require.Len(t, want[me.Ident().Sanitize()].ForeignKeys, 1)
	for _, s := range []string{"fillfactor", "users_upper_", "ROW LEVEL SECURITY", "tenant_pol", "INCLUDE (tenant)", "GRANT SELECT"} {
		require.Contains(t, wantDump[mu.Ident().Sanitize()], s)
	}
	require.Contains(t, wantDump[me.Ident().Sanitize()], "ON DELETE CASCADE")

	moveOnce := func(to metadata.Node) {
		t.Helper()
		// The writer is stopped between writes, never in one: a write
		// cancelled in flight may have committed unacknowledged.
		var halt atomic.Bool
		done := make(chan error, 1)
		before := w.acked.Load()
		retriesBefore := w.retries.Load()
		go func() { done <- w.run(ctx, &halt) }()
		stopped := false
		stopWriter := func() error {
			if stopped {
				return nil
			}
			stopped = true
			halt.Store(true)
			return <-done
		}
		defer func() { _ = stopWriter() }()
		var atCatchUp, atLock int64 = -1, -1
		cfg := testConfig(t)
		cfg.AfterPhase = func(_ int64, p mover.Phase) error {
			if p != mover.Indexing {
				return nil
			}
			// Entering catch-up: let the writer pile up changes, deletes
			// whose cascades the applier replays among them.
			atCatchUp = w.acked.Load()
			for deadline := time.Now().Add(5 * time.Second); w.acked.Load() < atCatchUp+300 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}
		cfg.CutoverStep = func(_ int64, step string) error {
			if step == "locked" {
				atLock = w.acked.Load()
			}
			return nil
		}
		eng := mover.New(cfg, cat)
		m := scheduleMove(t, eng, mu.ID, to)
		runErr := eng.Run(ctx, m.ID)
		time.Sleep(300 * time.Millisecond) // writes after the cutover, on the target
		werr := stopWriter()
		require.NoError(t, runErr, "move %d to %s", m.ID, to.Addr())
		require.NoError(t, werr, "the routed writer")
		got, err := cat.Move(ctx, m.ID)
		require.NoError(t, err)
		require.Equal(t, "done", string(got.Phase), "move %d: %s", m.ID, got.Error)
		t.Logf("move %d to %s: %d writes acknowledged during it, %d during catch-up before the cutover's lock, %d retried on 42P01",
			m.ID, to.Addr(), w.acked.Load()-before, atLock-atCatchUp, w.retries.Load()-retriesBefore)
		assert.Positive(t, atLock-atCatchUp, "the writer must have written during catch-up")
		assert.Positive(t, w.retries.Load()-retriesBefore, "a write routed with the old placement must have met 42P01 and been routed again")
	}

	check := func(at metadata.Node) {
		t.Helper()
		c := conns[at.GroupID]
		cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
		require.NoError(t, err)
		for _, id := range []int64{mu.ID, me.ID} {
			p, ok := cl.PlacementOf(id)
			require.True(t, ok)
			require.Equal(t, at.GroupID, p.GroupID, "shard %d placed on %s", id, at.Addr())
		}

		// (1) The definitions, exactly the original's.
		for _, id := range []pgx.Identifier{mu.Ident(), me.Ident()} {
			name := id.Sanitize()
			got, err := metadata.ReadTableDDL(ctx, c, id)
			require.NoError(t, err)
			orig := want[name]
			assert.Empty(t, orig.Diff(got), "%s: definition on %s vs the original", name, at.Addr())
			assert.Empty(t, got.Diff(orig), "%s: definition on %s vs the original", name, at.Addr())
			assert.Equal(t, orig.ForeignKeys, got.ForeignKeys, "%s: foreign keys", name)
			assert.Equal(t, orig.Triggers, got.Triggers, "%s: triggers and their enabled state", name)
			assert.Equal(t, orig.Policies, got.Policies, "%s: policies", name)
			assert.Equal(t, orig.Statistics, got.Statistics, "%s: extended statistics", name)
			assert.Equal(t, orig.Options, got.Options, "%s: storage parameters", name)
			assert.Equal(t, orig.RowSecurity, got.RowSecurity, "%s: row-level security", name)
			assert.Equal(t, orig.ForceRowSecurity, got.ForceRowSecurity, "%s: forced row-level security", name)
			assert.Equal(t, orig.Comment, got.Comment, "%s: comment", name)
			assert.Equal(t, orig.Owner, got.Owner, "%s: owner", name)
			assert.Equal(t, orig.Grants, got.Grants, "%s: privileges", name)
			assert.Equal(t, orig, got, "%s: the whole definition", name)
			assert.Equal(t, wantDump[name], dump(at, id), "%s: pg_dump --schema-only on %s vs the original", name, at.Addr())
		}

		// (2) The rows: every shard on its placement holds exactly what
		// the writer was acknowledged.
		for i := range ushards {
			p, _ := cl.PlacementOf(ushards[i].ID)
			sc := conns[p.GroupID]
			wantSum, wantN, gotSum, gotN := w.usersSums(ctx, t, sc, ushards[i])
			assert.Equal(t, wantN, gotN, "rows of %s on its placement vs acknowledged", ushards[i].Ident().Sanitize())
			assert.Equal(t, wantSum, gotSum, "md5 of %s on its placement vs acknowledged", ushards[i].Ident().Sanitize())
			wantSum, wantN, gotSum, gotN = w.eventsSums(ctx, t, sc, eshards[i])
			assert.Equal(t, wantN, gotN, "rows of %s on its placement vs acknowledged", eshards[i].Ident().Sanitize())
			assert.Equal(t, wantSum, gotSum, "md5 of %s on its placement vs acknowledged", eshards[i].Ident().Sanitize())
		}

		// (3) Behaviour on the moved shards.
		var user int64 = -1
		for _, id := range w.live {
			if w.rows[id].tenant == "tenant_a" && len(w.evs[id]) > 0 {
				user = id
				break
			}
		}
		require.NotEqual(t, int64(-1), user, "a user of tenant_a with events in the moved group")
		var n int
		require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM "+me.Ident().Sanitize()+" WHERE uid = $1", user).Scan(&n))
		require.Equal(t, len(w.evs[user]), n, "the user's events")
		_, err = c.Exec(ctx, "DELETE FROM "+mu.Ident().Sanitize()+" WHERE id = $1", user)
		require.NoError(t, err)
		w.forget(user)
		require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM "+me.Ident().Sanitize()+" WHERE uid = $1", user).Scan(&n))
		assert.Zero(t, n, "ON DELETE CASCADE must delete the user's events")
		_, err = c.Exec(ctx, "INSERT INTO "+mu.Ident().Sanitize()+" VALUES ($1, 'de', 'lower', 'tenant_a')", user)
		require.NoError(t, err)
		w.remember(user, cfUser{"de", "LOWER", "tenant_a"}, nil)
		var stored string
		require.NoError(t, c.QueryRow(ctx, "SELECT name FROM "+mu.Ident().Sanitize()+" WHERE id = $1", user).Scan(&stored))
		assert.Equal(t, "LOWER", stored, "the trigger must fire")
		_, err = c.Exec(ctx, "INSERT INTO "+me.Ident().Sanitize()+" VALUES ($1, 1, 'orphan')", w.next+1000000)
		var pgErr *pgconn.PgError
		if assert.ErrorAs(t, err, &pgErr, "an event of no user must be refused") {
			assert.Equal(t, "23503", pgErr.Code, pgErr.Message)
		}
		var visible, other, all int
		err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+mu.Ident().Sanitize()+" WHERE tenant <> 'tenant_a'").Scan(&all); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE tenant_a"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE tenant <> 'tenant_a') FROM "+mu.Ident().Sanitize()).Scan(&visible, &other)
		})
		require.NoError(t, err)
		assert.Positive(t, all, "the shard holds other tenants' rows")
		assert.Positive(t, visible, "tenant_a sees its rows")
		assert.Zero(t, other, "tenant_a must see only its own rows")

		// Nothing left behind by the move.
		for _, n := range cl.Nodes {
			var left int
			require.NoError(t, conns[n.GroupID].QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'shardmover%')
				+ (SELECT count(*) FROM pg_publication WHERE pubname LIKE 'shardmover%')
				+ (SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%')
				+ (SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'shardmover%')`).Scan(&left))
			assert.Zero(t, left, "replication artifacts left on %s", n.Addr())
		}
	}

	// There.
	moveOnce(added)
	check(added)
	t.Logf("first move checked after %s", time.Since(start).Round(time.Millisecond))

	// Back, once the fenced old copies (which keep the index and
	// statistics names) are swept from the origin.
	_, err = mover.New(testConfig(t), cat).Sweep(ctx, mover.SweepOptions{KeepOldFor: 0})
	require.NoError(t, err)
	moveOnce(origin)
	check(origin)
	t.Logf("runtime %s", time.Since(start).Round(time.Millisecond))
}

// cfUser is a users row as acknowledged (name as the trigger stores it).
type cfUser struct{ country, name, tenant string }

// cfWriter writes users and events through the compat routing contract: it
// routes each write with its cached snapshot of the metadata and, on
// 42P01, takes a new snapshot and routes again. What it was acknowledged
// is its ledger: rows and evs. One goroutine at a time uses it.
type cfWriter struct {
	cat            *metadata.Catalog
	users, events  metadata.Table
	moved          int // the shard index most writes go to
	cl             *metadata.Cluster
	conns          map[int32]*pgx.Conn
	rnd            *rand.Rand
	rows           map[int64]cfUser
	evs            map[int64]map[int64]string
	live           []int64 // users of the moved group
	next           int64
	acked, retries atomic.Int64
}

func (w *cfWriter) close() {
	for _, c := range w.conns {
		c.Close(context.Background())
	}
}

// route runs fn in a transaction on the node holding id's shards, with
// their quoted names.
func (w *cfWriter) route(ctx context.Context, id int64, fn func(tx pgx.Tx, users, events string) error) error {
	for attempt := 0; ; attempt++ {
		us, err := w.cl.ShardFor(w.users, id)
		if err != nil {
			return err
		}
		es, err := w.cl.ShardFor(w.events, id)
		if err != nil {
			return err
		}
		up, ok1 := w.cl.PlacementOf(us.ID)
		ep, ok2 := w.cl.PlacementOf(es.ID)
		if !ok1 || !ok2 || up.GroupID != ep.GroupID {
			return errors.New("colocated shards " + itoa(us.ID) + " and " + itoa(es.ID) + " are not placed together")
		}
		conn := w.conns[up.GroupID]
		if conn == nil {
			n, ok := w.cl.NodeByGroup(up.GroupID)
			if !ok {
				return errors.New("no node in group " + itoa(int64(up.GroupID)))
			}
			if conn, err = w.cat.ConnectNode(ctx, n.Host, n.Port); err != nil {
				return err
			}
			w.conns[up.GroupID] = conn
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return fn(tx, us.Ident().Sanitize(), es.Ident().Sanitize()) })
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "42P01" || attempt >= 50 {
			return err
		}
		w.retries.Add(1)
		if w.cl, err = w.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true}); err != nil {
			return err
		}
	}
}

func (w *cfWriter) inMoved(id int64) bool {
	s, err := w.cl.ShardFor(w.users, id)
	return err == nil && s.Index == w.moved
}

func (w *cfWriter) insert(ctx context.Context, id int64, country, name, tenant string, nevents int) error {
	notes := map[int64]string{}
	err := w.route(ctx, id, func(tx pgx.Tx, users, events string) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+users+" VALUES ($1, $2, $3, $4)", id, country, name, tenant); err != nil {
			return err
		}
		for e := int64(1); e <= int64(nevents); e++ {
			notes[e] = "e" + itoa(id*10+e)
			if _, err := tx.Exec(ctx, "INSERT INTO "+events+" VALUES ($1, $2, $3)", id, e, notes[e]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.remember(id, cfUser{country, strings.ToUpper(name), tenant}, notes)
	w.acked.Add(1)
	return nil
}

func (w *cfWriter) remember(id int64, u cfUser, notes map[int64]string) {
	if _, ok := w.rows[id]; !ok && w.inMoved(id) {
		w.live = append(w.live, id)
	}
	w.rows[id] = u
	if notes == nil {
		notes = map[int64]string{}
	}
	w.evs[id] = notes
}

func (w *cfWriter) forget(id int64) {
	delete(w.rows, id)
	delete(w.evs, id)
	for i, l := range w.live {
		if l == id {
			w.live[i] = w.live[len(w.live)-1]
			w.live = w.live[:len(w.live)-1]
			break
		}
	}
}

// run writes until halt is set: new users with events, renamed users, one
// more event of a user, deleted users (their events cascade). Nine writes
// in ten go to the moved group.
func (w *cfWriter) run(ctx context.Context, halt *atomic.Bool) error {
	for !halt.Load() {
		var err error
		switch op := w.rnd.Intn(10); {
		case op < 3 || len(w.live) < 20:
			id := w.next
			w.next++
			for w.rnd.Intn(10) != 0 && !w.inMoved(id) {
				id = w.next
				w.next++
			}
			tenant := []string{"tenant_a", "tenant_b"}[w.rnd.Intn(2)]
			err = w.insert(ctx, id, "fr", "w"+itoa(id), tenant, 1+w.rnd.Intn(3))
		case op < 6:
			id := w.live[w.rnd.Intn(len(w.live))]
			name := "r" + itoa(w.rnd.Int63n(1000000))
			err = w.route(ctx, id, func(tx pgx.Tx, users, _ string) error {
				_, err := tx.Exec(ctx, "UPDATE "+users+" SET name = $2 WHERE id = $1", id, name)
				return err
			})
			if err == nil {
				u := w.rows[id]
				u.name = strings.ToUpper(name)
				w.rows[id] = u
			}
		case op < 8:
			id := w.live[w.rnd.Intn(len(w.live))]
			e := int64(len(w.evs[id])) + 100
			for w.evs[id][e] != "" {
				e++
			}
			err = w.route(ctx, id, func(tx pgx.Tx, _, events string) error {
				_, err := tx.Exec(ctx, "INSERT INTO "+events+" VALUES ($1, $2, 'late')", id, e)
				return err
			})
			if err == nil {
				w.evs[id][e] = "late"
			}
		default:
			id := w.live[w.rnd.Intn(len(w.live))]
			err = w.route(ctx, id, func(tx pgx.Tx, users, _ string) error {
				tag, err := tx.Exec(ctx, "DELETE FROM "+users+" WHERE id = $1", id)
				if err == nil && tag.RowsAffected() != 1 {
					err = errors.New("user " + itoa(id) + " acknowledged but not found to delete")
				}
				return err
			})
			if err == nil {
				w.forget(id)
			}
		}
		if err != nil {
			return err
		}
		w.acked.Add(1)
	}
	return nil
}

// usersSums is the md5 and count of the acknowledged users of shard s and
// of the rows of its table on conn, both ordered by id.
func (w *cfWriter) usersSums(ctx context.Context, t *testing.T, conn *pgx.Conn, s metadata.Shard) (string, int64, string, int64) {
	t.Helper()
	var ids []int64
	var countries, names, tenants []string
	for id := range w.rows {
		if sh, err := w.cl.ShardFor(w.users, id); err == nil && sh.ID == s.ID {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		u := w.rows[id]
		countries, names, tenants = append(countries, u.country), append(names, u.name), append(tenants, u.tenant)
	}
	var ws, gs string
	var wn, gn int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(md5(string_agg(t::text, ',' ORDER BY id)), ''), count(*)
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS t(id, country, name, tenant)`,
		ids, countries, names, tenants).Scan(&ws, &wn))
	require.NoError(t, conn.QueryRow(ctx, "SELECT coalesce(md5(string_agg(t::text, ',' ORDER BY id)), ''), count(*) FROM "+s.Ident().Sanitize()+" t").Scan(&gs, &gn))
	return ws, wn, gs, gn
}

// eventsSums is usersSums for the events of shard s, ordered by (uid, id).
func (w *cfWriter) eventsSums(ctx context.Context, t *testing.T, conn *pgx.Conn, s metadata.Shard) (string, int64, string, int64) {
	t.Helper()
	var uids, ids []int64
	var notes []string
	for uid, evs := range w.evs {
		if sh, err := w.cl.ShardFor(w.events, uid); err != nil || sh.ID != s.ID {
			continue
		}
		for id, note := range evs {
			uids, ids, notes = append(uids, uid), append(ids, id), append(notes, note)
		}
	}
	var ws, gs string
	var wn, gn int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(md5(string_agg(t::text, ',' ORDER BY uid, id)), ''), count(*)
		FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS t(uid, id, note)`, uids, ids, notes).Scan(&ws, &wn))
	require.NoError(t, conn.QueryRow(ctx, "SELECT coalesce(md5(string_agg(t::text, ',' ORDER BY uid, id)), ''), count(*) FROM "+s.Ident().Sanitize()+" t").Scan(&gs, &gn))
	return ws, wn, gs, gn
}
