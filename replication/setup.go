package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardmover/shardmover/internal/ctxtime"
)

// DB is what the setup, preflight and cleanup helpers need of a connection.
// *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// sessionParams are set on every connection that moves values as text, on
// both ends, so that text renderings parse back to the same value whatever
// the servers' defaults (as PostgreSQL's own subscriber does).
var sessionParams = map[string]string{
	"datestyle":          "ISO",
	"intervalstyle":      "postgres",
	"extra_float_digits": "3",
	"client_encoding":    "UTF8",
}

func withSessionParams(cfg *pgconn.Config, appName string) {
	for k, v := range sessionParams {
		cfg.RuntimeParams[k] = v
	}
	if appName != "" {
		cfg.RuntimeParams["application_name"] = appName
	}
}

// CheckReplicaIdentity returns an error naming the first table that has
// neither a primary key nor REPLICA IDENTITY FULL (nor a valid REPLICA
// IDENTITY USING INDEX), or that does not exist. It reads catalogs only, so
// it belongs in a preflight, before anything is created; every table is
// read in one query. The error wraps ErrNoReplicaIdentity and ErrPermanent.
func CheckReplicaIdentity(ctx context.Context, db DB, tables []pgx.Identifier) error {
	if len(tables) == 0 {
		return nil
	}
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Sanitize()
	}
	type ident struct {
		kind                             string
		hasPK, hasIdentIdx, deferrablePK bool
	}
	found := make(map[int32]ident, len(tables))
	// db may be a pgx.Tx or a pool: rows are read through one statement
	// that returns them all as arrays, so QueryRow serves every kind.
	// PostgreSQL never takes a deferrable index (indimmediate false) for
	// the replica identity: with a deferrable primary key and REPLICA
	// IDENTITY DEFAULT, every UPDATE and DELETE of the table fails once it
	// is published.
	var pos []int32
	var kinds []string
	var pks, idxs, deferrable []bool
	err := db.QueryRow(ctx, `
		SELECT coalesce(array_agg(u.i::int ORDER BY u.i), '{}'), coalesce(array_agg(c.relreplident::text ORDER BY u.i), '{}'),
		       coalesce(array_agg(EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary AND i.indisvalid AND i.indimmediate) ORDER BY u.i), '{}'),
		       coalesce(array_agg(EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident AND i.indisvalid AND i.indimmediate) ORDER BY u.i), '{}'),
		       coalesce(array_agg(EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary AND NOT i.indimmediate) ORDER BY u.i), '{}')
		FROM unnest($1::text[]) WITH ORDINALITY AS u(name, i)
		JOIN pg_class c ON c.oid = to_regclass(u.name)`, names).Scan(&pos, &kinds, &pks, &idxs, &deferrable)
	if err != nil {
		return fmt.Errorf("check replica identity of %s: %w", strings.Join(names, ", "), err)
	}
	if len(kinds) != len(pos) || len(pks) != len(pos) || len(idxs) != len(pos) || len(deferrable) != len(pos) {
		return fmt.Errorf("check replica identity of %s: the catalog query returned arrays of different lengths", strings.Join(names, ", "))
	}
	for k, i := range pos {
		found[i] = ident{kinds[k], pks[k], idxs[k], deferrable[k]}
	}
	for i, name := range names {
		id, ok := found[int32(i+1)]
		if !ok {
			return permanent(fmt.Errorf("table %s does not exist on the source: check the table name and schema", name))
		}
		if id.kind == "d" && id.deferrablePK {
			return permanent(fmt.Errorf("%w: the primary key of table %s is DEFERRABLE, and PostgreSQL never uses a deferrable key as the replica identity, so while it moved every UPDATE and DELETE of the table would fail: make the key NOT DEFERRABLE, or run ALTER TABLE %s REPLICA IDENTITY FULL", ErrNoReplicaIdentity, name, name))
		}
		if !(id.kind == "f" || (id.kind == "d" && id.hasPK) || (id.kind == "i" && id.hasIdentIdx)) {
			return permanent(fmt.Errorf("%w: table %s has neither a primary key nor REPLICA IDENTITY FULL, so its updates and deletes cannot be replicated: add a primary key, or run ALTER TABLE %s REPLICA IDENTITY FULL", ErrNoReplicaIdentity, name, name))
		}
	}
	return nil
}

// CreatePublication creates publication name for exactly tables on the
// source (inserts, updates, deletes and truncates). It is idempotent: when
// the publication exists its table list is set to tables.
func CreatePublication(ctx context.Context, db DB, name string, tables []pgx.Identifier) error {
	if err := ValidateName("publication", name); err != nil {
		return err
	}
	if len(tables) == 0 {
		return permanent(fmt.Errorf("create publication %q: no tables given", name))
	}
	list := make([]string, len(tables))
	for i, t := range tables {
		list[i] = t.Sanitize()
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("create publication %q: %w", name, err)
	}
	sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{name}.Sanitize(), strings.Join(list, ", "))
	if exists {
		sql = fmt.Sprintf("ALTER PUBLICATION %s SET TABLE %s", pgx.Identifier{name}.Sanitize(), strings.Join(list, ", "))
	}
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("create publication %q: %w", name, err)
	}
	return nil
}

// DropPublication drops the publication if it exists.
func DropPublication(ctx context.Context, db DB, name string) error {
	if err := ValidateName("publication", name); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("drop publication %q: %w", name, err)
	}
	return nil
}

// Snapshot is a logical replication slot just created, with the snapshot it
// exported. The snapshot can be imported (SET TRANSACTION SNAPSHOT) only
// while the replication connection that created the slot stays idle, so the
// Snapshot holds that connection until Release. Rows visible in the snapshot
// are exactly the changes committed before ConsistentLSN; the slot streams
// every change committed after it.
type Snapshot struct {
	// Slot is the slot's name.
	Slot string
	// Name is the exported snapshot, for Copy and SET TRANSACTION SNAPSHOT.
	Name string
	// ConsistentLSN is where streaming starts (StreamConfig.StartLSN).
	ConsistentLSN pglogrepl.LSN

	conn *pgconn.PgConn
}

// Release closes the connection that keeps the snapshot importable. Call it
// once every copy has started (in practice, after Copy returns). The slot
// stays. Release is idempotent.
func (s *Snapshot) Release(ctx context.Context) error {
	if s == nil || s.conn == nil {
		return nil
	}
	c := s.conn
	s.conn = nil
	return c.Close(ctx)
}

// connectReplication opens a logical replication connection
// (replication=database) to the server of dsn.
func connectReplication(ctx context.Context, cfg *pgconn.Config, appName string) (*pgconn.PgConn, error) {
	cfg = cfg.Copy()
	withSessionParams(cfg, appName)
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open replication connection to %s: %w", addr(cfg), err)
	}
	return conn, nil
}

// CreateSlot creates the logical replication slot slot (pgoutput) on the
// source with an exported snapshot. The returned Snapshot holds the
// replication connection idle so the snapshot stays importable; Release it
// after the copy has started everywhere. On error nothing is held; a slot
// that was created is left for DropSlot (a cleanup record should name it
// before this call). Creating the slot waits until every transaction
// running on the source when it started has finished (and, under constant
// load, for the next running-transactions record, which the source logs
// every 15 s), so bound ctx accordingly. A prepared transaction counts,
// in any database, and ends only when someone ends it: while the source
// holds one older than StuckPreparedAge, before or during the creation,
// CreateSlot returns at once an ErrStuckPrepared error naming each (gid,
// database, owner, age) and saying how to end it.
func CreateSlot(ctx context.Context, sourceDSN, slot string) (*Snapshot, error) {
	return createExportingSlot(ctx, sourceDSN, slot, false)
}

// createExportingSlot is CreateSlot, or with temporary CreateTemporarySlot:
// a pgoutput slot made on a replication connection that exports its
// snapshot and stays open (held by the Snapshot).
func createExportingSlot(ctx context.Context, sourceDSN, slot string, temporary bool) (*Snapshot, error) {
	if err := ValidateName("slot", slot); err != nil {
		return nil, err
	}
	cfg, err := parseDSN("source", sourceDSN)
	if err != nil {
		return nil, err
	}
	what, kind := "slot", ""
	if temporary {
		what, kind = "temporary slot", " TEMPORARY"
	}
	// A new slot waits for every transaction running on the source, in
	// any database, to end; a prepared one that nobody finishes holds it
	// forever. So old ones are named and refused before, and looked for
	// while the slot is being created (watchPrepared).
	chk, err := connectPlain(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer closeConn(chk)
	if stuck, err := stuckPrepared(ctx, chk, addr(cfg)); err != nil || stuck != nil {
		return nil, errors.Join(stuck, err)
	}
	conn, err := connectReplication(ctx, cfg, slot)
	if err != nil {
		if temporary && pgCode(err) == "53300" { // too_many_connections: no WAL sender left
			return nil, fmt.Errorf("%w: %s has no free WAL sender for a temporary slot (raise max_wal_senders): %w", ErrNoFreeSlot, addr(cfg), err)
		}
		return nil, err
	}
	// The name is validated above: replication commands take no parameters.
	cctx, stuck := watchPrepared(ctx, chk, addr(cfg))
	res, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(cctx, "CREATE_REPLICATION_SLOT "+slot+kind+" LOGICAL pgoutput EXPORT_SNAPSHOT"))
	if serr := stuck(); serr != nil && err != nil {
		err = serr
	}
	if err != nil {
		conn.Close(context.Background())
		if errors.Is(err, ErrStuckPrepared) {
			return nil, err
		}
		switch {
		case temporary && pgCode(err) == "53400": // configuration_limit_exceeded: all replication slots are in use
			return nil, fmt.Errorf("%w: every replication slot of %s is in use (max_replication_slots); a temporary slot needs one more: %w", ErrNoFreeSlot, addr(cfg), err)
		case temporary && pgCode(err) == "42710":
			return nil, fmt.Errorf("create temporary slot %q on %s: a slot with this name exists: %w", slot, addr(cfg), err)
		case pgCode(err) == "42710":
			return nil, permanent(fmt.Errorf("create slot %q: a slot with this name already exists on %s: drop it (DropSlot) before creating it again: %w", slot, addr(cfg), err))
		}
		return nil, fmt.Errorf("create %s %q on %s: %w", what, slot, addr(cfg), err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("create %s %q: parse consistent point %q: %w", what, slot, res.ConsistentPoint, err)
	}
	if err := validateSnapshot(res.SnapshotName); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return &Snapshot{Slot: slot, Name: res.SnapshotName, ConsistentLSN: lsn, conn: conn}, nil
}

// ErrStuckPrepared is returned (wrapped) by CreateSlot and
// CreateTemporarySlot when the source holds a prepared transaction older
// than StuckPreparedAge: a new slot waits for it to end, and a prepared
// transaction ends only when someone commits or rolls it back. The error
// names each one and says how to end it. It is not permanent: once they
// are ended, creating the slot succeeds.
var ErrStuckPrepared = errors.New("the source holds prepared transactions a new replication slot would wait for")

// StuckPreparedAge is the age past which a prepared transaction counts as
// stuck: Citus prepares its own for milliseconds under load, a cutover's
// fence lasts at most its write pause.
const StuckPreparedAge = 10 * time.Second

// connectPlain opens an ordinary (not replication) session on the server
// of cfg.
func connectPlain(ctx context.Context, cfg *pgconn.Config) (*pgconn.PgConn, error) {
	cfg = cfg.Copy()
	withSessionParams(cfg, "shardmover")
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr(cfg), err)
	}
	return conn, nil
}

// stuckPrepared reads the prepared transactions on conn's server older
// than StuckPreparedAge and returns an ErrStuckPrepared error naming them
// (stuck nil: none); err is a failed read.
func stuckPrepared(ctx context.Context, conn *pgconn.PgConn, server string) (stuck, err error) {
	res := conn.ExecParams(ctx, `SELECT gid, database, owner, extract(epoch FROM now() - prepared)::bigint::text
		FROM pg_catalog.pg_prepared_xacts WHERE prepared <= now() - $1::bigint * interval '1 millisecond' ORDER BY prepared`,
		[][]byte{[]byte(strconv.FormatInt(StuckPreparedAge.Milliseconds(), 10))}, []uint32{textOID}, nil, nil).Read()
	if res.Err != nil {
		return nil, fmt.Errorf("read the prepared transactions on %s: %w", server, res.Err)
	}
	if len(res.Rows) == 0 {
		return nil, nil
	}
	var each []string
	for _, row := range res.Rows {
		gid, db, owner := string(row[0]), string(row[1]), string(row[2])
		secs, _ := strconv.ParseInt(string(row[3]), 10, 64)
		what := fmt.Sprintf("%s (database %s, owner %s, prepared %s ago", quoteLiteral(gid), pgx.Identifier{db}.Sanitize(), pgx.Identifier{owner}.Sanitize(), time.Duration(secs)*time.Second)
		switch {
		case strings.HasPrefix(gid, "shardmover_"):
			what += ": the fence of a shardmover move whose mover stopped; `shardmover cleanup` or a running daemon settles it"
		case strings.HasPrefix(gid, "citus_"):
			what += ": Citus's own two-phase commit; Citus's maintenance daemon recovers it, or SELECT recover_prepared_transactions() on the coordinator"
		}
		each = append(each, what+")")
	}
	return fmt.Errorf("%w: %s on %s, and creating a slot waits for every transaction running there to end. End each with COMMIT PREPARED or ROLLBACK PREPARED and its gid, connected to its database as its owner or a superuser: %s",
		ErrStuckPrepared, plural(len(res.Rows), "a prepared transaction is older than "+StuckPreparedAge.String(), "%d prepared transactions are older than "+StuckPreparedAge.String()),
		server, strings.Join(each, "; ")), nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// watchPrepared looks, every second while ctx's work runs, for prepared
// transactions on conn's server that have become older than
// StuckPreparedAge, and then cancels the returned context; stop ends the
// watch and returns the ErrStuckPrepared error that cancelled it (nil:
// none did).
func watchPrepared(ctx context.Context, conn *pgconn.PgConn, server string) (context.Context, func() error) {
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var found error
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			if stuck, err := stuckPrepared(cctx, conn, server); err == nil && stuck != nil {
				found = stuck
				cancel()
				return
			}
		}
	}()
	return cctx, func() error {
		cancel()
		<-done
		return found
	}
}

// DropSlot drops the replication slot if it exists. A walsender holding it
// (an applier, or a Snapshot not yet released) is terminated first.
func DropSlot(ctx context.Context, db DB, slot string) error {
	if err := ValidateName("slot", slot); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		var pid *int32
		err := db.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("drop slot %q: %w", slot, err)
		}
		if pid != nil {
			if _, err := db.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend($1::integer, 5000::bigint)`, *pid); err != nil && pgCode(err) != "" {
				return fmt.Errorf("drop slot %q: terminate walsender %d: %w", slot, *pid, err)
			}
		}
		_, err = db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
		switch {
		case err == nil, pgCode(err) == "42704": // undefined_object: gone meanwhile
			return nil
		case pgCode(err) == "55006" && attempt < 50: // object_in_use: a walsender took it again
			if err := ctxtime.Sleep(ctx, dropBackoff(attempt)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("drop slot %q: %w", slot, err)
		}
	}
}

// DropOrigin drops the replication origin on the target if it exists. A
// session still holding it (an applier, recognised by its application_name,
// which is the origin's name) is terminated first.
func DropOrigin(ctx context.Context, db DB, origin string) error {
	if err := ValidateName("origin", origin); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		_, err := db.Exec(ctx, `SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin WHERE roname = $1`, origin)
		if err == nil || pgCode(err) == "42704" {
			return nil
		}
		if pgCode(err) != "55006" || attempt >= 50 {
			return fmt.Errorf("drop origin %q: %w", origin, err)
		}
		if _, err := db.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend(pid, 5000::bigint) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, origin); err != nil {
			return fmt.Errorf("drop origin %q: terminate applier: %w", origin, err)
		}
		if err := ctxtime.Sleep(ctx, dropBackoff(attempt)); err != nil {
			return err
		}
	}
}

// dropBackoff is the wait before the next try to drop a slot or an origin
// still in use. The session holding it was terminated and waited for
// (pg_terminate_backend with a timeout), or is on its way out after its
// client closed it: it lets go within milliseconds, but PostgreSQL offers
// nothing to wait on for the release itself. So the first tries come
// quickly (5 ms, doubling) and only later ones wait 100 ms.
func dropBackoff(attempt int) time.Duration {
	return min(5*time.Millisecond<<min(attempt, 5), 100*time.Millisecond)
}

// OriginProgress returns the source position durably applied under origin
// on the target (the end of the last applied source transaction), or 0 when
// the origin does not exist or has applied nothing.
func OriginProgress(ctx context.Context, db DB, origin string) (pglogrepl.LSN, error) {
	if err := ValidateName("origin", origin); err != nil {
		return 0, err
	}
	var s *string
	err := db.QueryRow(ctx, `SELECT pg_replication_origin_progress(roname, true)::text FROM pg_replication_origin WHERE roname = $1`, origin).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && s == nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read origin %q progress: %w", origin, err)
	}
	return pglogrepl.ParseLSN(*s)
}

// CurrentLSN returns the source's WAL insert position: every transaction
// committed so far, including those committed with synchronous_commit =
// off, ends at or before it, so WaitFor(CurrentLSN()) waits for all of them.
// (pg_current_wal_lsn() is the write position, which can trail such
// commits.) The walsender sees WAL only once it is flushed, which for
// asynchronous commits takes up to three wal_writer_delay.
func CurrentLSN(ctx context.Context, db DB) (pglogrepl.LSN, error) {
	var s string
	if err := db.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
		return 0, fmt.Errorf("read current WAL position: %w", err)
	}
	return pglogrepl.ParseLSN(s)
}
