package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/pgsql"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
)

// cleanup finishes a decided move: the fence is settled again (a crash may
// have come between the decision and COMMIT PREPARED) and re-established if
// it is gone, the applier stops, and the slot, publication and origin are
// dropped. The old shards stay, recorded for a deferred drop.
//
// When the fence had to be re-established, the source took writes after
// the decision (someone rolled the fence back): before the slot is dropped,
// the applier carries everything up to the re-fence over to the target, and
// a conflict there fails loudly instead of losing those writes silently.
func (r *run) cleanup(ctx context.Context, m metadata.Move) error {
	sp := newSplits()
	defer sp.log(r.log, "cleanup timings")
	// A fence this run committed itself, with every Citus part, after
	// seeing its decision commit is settled: committed transactions cannot
	// be rolled back by anyone. Otherwise (a restart, a reply lost after
	// the decision) it is settled here.
	if !r.decisionSettled {
		if _, err := r.settle(ctx, m); err != nil {
			return err
		}
	}
	sp.mark("settle")
	// Due when this run re-fenced, or an earlier one did and stopped
	// before its carry-over (the journal says so: m was read before this
	// run's settlement, which records its own in r.carryOverDue).
	if r.carryOverDue || m.CarryOverDue {
		if err := r.carryOver(ctx, m); err != nil {
			return fmt.Errorf("the source of move %d took writes after the decision (its fence had been rolled back); carrying them to the target failed: %w; the slot is kept so nothing is lost, see `shardmover jobs show`", m.ID, err)
		}
		if err := r.e.cat.SetCarryOverDue(ctx, r.lease, m.ID, false); err != nil {
			return err
		}
		r.carryOverDue = false
	}
	r.stopStream()
	sp.mark("stop_stream")
	if err := r.finishIdentity(ctx, m); err != nil {
		return err
	}
	sp.mark("identity")
	if err := r.finishObjects(ctx, m); err != nil {
		return err
	}
	sp.mark("objects")
	if err := r.dropArtifacts(ctx, m, metadata.CleanupAlways); err != nil {
		return err
	}
	sp.mark("drop_artifacts")
	if err := r.changePhase(ctx, m, Cleanup, Done, stepped, "replication artifacts dropped", ""); err != nil {
		return err
	}
	r.progress(Progress{MoveID: m.ID, Phase: Done, BytesDone: m.BytesTotal, BytesTotal: m.BytesTotal})
	return nil
}

// hasIdentity reports whether any of the tables has an identity column.
func hasIdentity(tables []metadata.TableDDL) bool {
	for _, t := range tables {
		for _, c := range t.Columns {
			if c.Identity != nil {
				return true
			}
		}
	}
	return false
}

// finishIdentity makes sure the target's identity columns have the
// source's kind and a sequence past every value in use after the decision.
// The cutover finishes them in a target transaction that commits right
// after the decision; when that commit did not happen (the target was cut
// off, the mover died), the target still has them BY DEFAULT (its setval
// took effect all the same: sequences are not transactional). This run
// cannot tell whether that commit happened, so every identity column is
// finished again, each table in one transaction that first locks it
// against writes (EXCLUSIVE, bounded by lock_timeout; reads go on): the
// kind is set when it differs, and the sequence to the furthest of the
// source's position, the values the table holds and the sequence's own
// position, so it never moves back (writers may have used it since the
// placements flipped).
//
// The source's kind and position are read from the fenced old table. (On
// Citus, whose deferred cleanup may drop that table early, shard tables
// never have identity columns: Citus keeps them on the coordinator's
// table.) Should it be gone all the same (dropped by hand), the column
// keeps BY DEFAULT, its sequence is set from the target alone (a value the
// source handed out is in a row the target holds, or was never
// committed), and an error in the log says how to set the kind: a move
// must not stay in cleanup, holding its slot and the source's WAL, for
// that.
func (r *run) finishIdentity(ctx context.Context, m metadata.Move) (err error) {
	if r.targetFinished {
		return nil
	}
	src, dst, err := r.connectBoth(ctx)
	if err != nil {
		return err
	}
	defer r.releaseBoth(src, dst, &err)
	tables := shardIdents(m)
	// The target first, one batch for the whole group: without an identity
	// column there is nothing to finish.
	gots, err := metadata.ReadTablesDDL(ctx, dst, tables)
	if err != nil {
		return fmt.Errorf("read the definition of %s on the target: %w", names(tables), err)
	}
	if !hasIdentity(gots) {
		return nil
	}
	wants, err := r.sourceIdentities(ctx, m, src, tables)
	if err != nil {
		return err
	}
	for i, t := range tables {
		var cols []identityFinish
		for _, c := range gots[i].Columns {
			if c.Identity == nil {
				continue
			}
			f := identityFinish{name: c.Name, ascending: c.Identity.Increment >= 0}
			if w, ok := wants[i][c.Name]; ok {
				f.source = w
				f.setKind = w.Always != c.Identity.Always
			} else {
				r.log.Error("the source's kind of an identity column could not be read after the decision (its old table is gone); it stays GENERATED BY DEFAULT on the target: if it was GENERATED ALWAYS, run ALTER TABLE ... ALTER COLUMN ... SET GENERATED ALWAYS there",
					zap.String("table", t.Sanitize()), zap.String("column", c.Name))
			}
			cols = append(cols, f)
		}
		if err := finishIdentityColumns(ctx, dst, t, cols); err != nil {
			return err
		}
	}
	return nil
}

// identityFinish is what finishIdentity does to one identity column of
// the target.
type identityFinish struct {
	name      string
	ascending bool
	// source is the column's identity on the source; nil when it could
	// not be read.
	source *metadata.Identity
	// setKind: the target's kind differs from the source's.
	setKind bool
}

// sourceIdentities reads, for each of the group's tables, its identity
// columns (by name) as the source had them, from the fenced old tables;
// none when one of them is gone.
func (r *run) sourceIdentities(ctx context.Context, m metadata.Move, src *pgx.Conn, tables []pgx.Identifier) ([]map[string]*metadata.Identity, error) {
	out := make([]map[string]*metadata.Identity, len(tables))
	olds := make([]pgx.Identifier, len(tables))
	for i, t := range tables {
		out[i] = map[string]*metadata.Identity{}
		olds[i] = pgx.Identifier{t[0], movedName(t[1], m.ID)}
		var exists bool
		if err := src.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", olds[i].Sanitize()).Scan(&exists); err != nil {
			return nil, fmt.Errorf("look for %s on the source: %w", olds[i].Sanitize(), err)
		}
		if !exists {
			return out, nil
		}
	}
	wants, err := metadata.ReadTablesDDL(ctx, src, olds)
	if err != nil {
		return nil, fmt.Errorf("read the definition of %s on the source: %w", names(olds), err)
	}
	for i, w := range wants {
		for _, c := range w.Columns {
			if c.Identity != nil {
				out[i][c.Name] = c.Identity
			}
		}
	}
	return out, nil
}

// finishIdentityColumns finishes table t's identity columns on the target,
// in one transaction that locks t against writes first.
func finishIdentityColumns(ctx context.Context, dst *pgx.Conn, t pgx.Identifier, cols []identityFinish) error {
	if len(cols) == 0 {
		return nil
	}
	// A lock that waits long would queue the table's writers behind it:
	// past lock_timeout the step fails and is retried.
	stmts := []string{"SET LOCAL statement_timeout = 0", "SET LOCAL lock_timeout = '2s'", "LOCK TABLE " + t.Sanitize() + " IN EXCLUSIVE MODE"}
	for _, c := range cols {
		col := pgx.Identifier{c.name}.Sanitize()
		if c.setKind {
			kind := "BY DEFAULT"
			if c.source.Always {
				kind = "ALWAYS"
			}
			stmts = append(stmts, "ALTER TABLE "+t.Sanitize()+" ALTER COLUMN "+col+" SET GENERATED "+kind)
		}
		far, agg := "greatest", "max"
		if !c.ascending {
			far, agg = "least", "min"
		}
		srcLast := "NULL"
		if c.source != nil {
			srcLast = fmt.Sprintf("%d", c.source.LastValue)
		}
		// greatest and least skip NULLs (an empty table, a sequence never
		// called, a source position unknown); with all three NULL nothing
		// is set.
		stmts = append(stmts, fmt.Sprintf(`SELECT pg_catalog.setval(q.seq, q.v, true) FROM (
				SELECT s.seq, %s(%s::bigint, (SELECT %s(%s) FROM %s)::bigint, pg_catalog.pg_sequence_last_value(s.seq)) AS v
				FROM (SELECT pg_catalog.pg_get_serial_sequence(%s, %s)::regclass AS seq) s) q
			WHERE q.v IS NOT NULL`,
			far, srcLast, agg, col, t.Sanitize(), quoteLiteral(t.Sanitize()), quoteLiteral(c.name)))
	}
	err := pgx.BeginFunc(ctx, dst, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := pgsql.ExecOne(ctx, tx.Conn(), s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("finish the identity columns of %s on the target: %w", t.Sanitize(), err)
	}
	return nil
}

// carryOver carries what the source took after the decision (its fence
// had been rolled back, and is established again by now) to the target,
// up to the source's current WAL position, without overwriting a row the
// target took since the decision (replication.CarryOver says how that is
// told). On a conflict nothing is carried: the rows are named, the error
// is recorded on the move (which stays in cleanup, its slot kept), and the
// error is permanent: a retry would find the same rows. It is settled by
// making each named row the same on both sides (the target's row, or the
// source's in its fenced table); the next run skips such rows.
func (r *run) carryOver(ctx context.Context, m metadata.Move) error {
	// The carry-over reads the slot and binds the origin itself.
	r.stopStream()
	src, err := r.e.connect(ctx, r.source)
	if err != nil {
		return err
	}
	defer src.Close(context.WithoutCancel(ctx))
	var lsnText string
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsnText); err != nil {
		return err
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return err
	}
	// The slot is read only as far as the WAL is flushed.
	if err := flushWAL(ctx, src); err != nil {
		return err
	}
	// A change reaches the slot under the name its table had then: its
	// own (while the fence was gone), or its fenced name (a change made
	// since, by an operator settling a conflict).
	tables := map[string]pgx.Identifier{}
	for _, t := range shardIdents(m) {
		tables[t.Sanitize()] = t
		tables[pgx.Identifier{t[0], movedName(t[1], m.ID)}.Sanitize()] = t
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	res, err := replication.CarryOver(cctx, replication.CarryOptions{
		SourceDSN: r.e.dsn(r.source), TargetDSN: r.e.dsn(r.target),
		Slot: m.Name(), Publication: m.Name(), Origin: m.Name(),
		UpTo: lsn, Tables: tables, Logger: r.log,
	})
	if errors.Is(err, replication.ErrConflict) {
		r.log.Error("the source took writes after the decision that would overwrite newer rows on the target; nothing was carried over, the slot is kept", zap.Error(err))
		why := fmt.Sprintf("carry-over stopped: %v. Nothing was overwritten and the slot keeps every change. For each row, decide which value is right and make both sides hold it: the target's table, or the source's old shard (%s); then resume the job: rows both sides agree on are skipped", err, r.oldShardNames(m))
		if rerr := r.e.cat.SetPhaseLeased(context.WithoutCancel(ctx), r.lease, m.ID, Cleanup.String(), Cleanup.String(), "carry-over stopped on conflicting rows", why); rerr != nil {
			r.log.Warn("could not record the carry-over's conflict on the move", zap.Error(rerr))
		}
		return permanent(errors.New(why))
	}
	if err != nil {
		return err
	}
	r.log.Info("carry-over done", zap.Int("transactions", res.Transactions), zap.Int("applied", res.Applied), zap.Int("skipped", res.Skipped))
	return nil
}

// oldShardNames names the move's old shards on the source: on compat
// their fenced names, on Citus their own (the fence renames nothing).
func (r *run) oldShardNames(m metadata.Move) string {
	var out []string
	for _, t := range shardIdents(m) {
		if !r.citus() {
			t = pgx.Identifier{t[0], movedName(t[1], m.ID)}
		}
		out = append(out, t.Sanitize())
	}
	return strings.Join(out, ", ") + " on " + r.source.Addr()
}

// fail ends a move that has not reached its decision: everything it created
// is dropped and the source serves as before. The move is marked failed even
// when something cannot be dropped now (a node is down): its records stay,
// and `shardmover cleanup` drops them once the node is back.
func (r *run) fail(ctx context.Context, m metadata.Move, p Phase, cause error) error {
	r.log.Error("move failed", zap.String("phase", p.String()), zap.Error(cause))
	err := r.abort(ctx, m, p, Failed, cause.Error())
	switch {
	case errors.Is(err, errPastDecision):
		return err
	case err != nil && !errors.Is(err, errAborted):
		cause = fmt.Errorf("%w (and cleaning up after it: %v; `shardmover cleanup` finishes that)", cause, err)
	}
	if p <= Preflight {
		return cause // nothing was created: a refusal keeps its class
	}
	return &moveFailedError{id: m.ID, cause: cause}
}

// moveFailedError is a move that failed after it created something. It
// does not unwrap to the cause's class: a node that became unreachable
// mid-move is a failure (exit code 1), not a refused request.
type moveFailedError struct {
	id    int64
	cause error
}

func (e *moveFailedError) Error() string { return e.cause.Error() }

var (
	errAborted      = errors.New("move aborted")
	errPastDecision = errors.New("move is past its cutover decision")
)

// abort rolls a move back before its decision and records the end phase.
// The decision is settled first, so that a decision in flight is never
// rolled back under it; a move found past its decision goes on to cleanup
// instead. The end phase is recorded before the artifacts are dropped, so
// that a drop that fails leaves a finished move whose records `shardmover
// cleanup` sweeps.
func (r *run) abort(ctx context.Context, m metadata.Move, p Phase, end Phase, why string) error {
	ctx = context.WithoutCancel(ctx)
	r.stopStream()
	if r.snapshot != nil {
		_ = r.snapshot.Release(ctx)
		r.snapshot = nil
	}
	if p >= Cutover || m.CutoverCommitted {
		// A fence may exist: settle the decision first. Once settled as
		// not committed no decision can commit any more, so the fence can
		// be rolled back later (dropArtifacts below, or recovery once the
		// source is back).
		st, err := r.e.cat.SettleDecision(ctx, m.ID)
		if err != nil {
			return err
		}
		if st.Committed {
			return fmt.Errorf("%w: move %d cannot be %s; it finishes instead", errPastDecision, m.ID, end)
		}
	}
	errText := ""
	if end == Failed {
		errText = why
	}
	if err := r.changePhase(ctx, m, p, end, aborted, why, errText); err != nil {
		return err
	}
	if err := r.dropArtifacts(ctx, m, metadata.CleanupAlways, metadata.CleanupOnFailure); err != nil {
		return err
	}
	if end == Cancelled {
		return fmt.Errorf("%w: move %d cancelled", errAborted, m.ID)
	}
	return nil
}

// names lists tables for a message.
func names(tables []pgx.Identifier) string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.Sanitize()
	}
	return strings.Join(out, ", ")
}

// dropArtifacts drops every recorded artifact of the move with one of the
// policies, and forgets each record once its artifact is gone. Each node's
// artifacts are dropped in order on one session of that node (slots before
// publications: a walsender may hold the slot; prepared transactions
// before tables: they lock them); different nodes are independent and
// are done at once. The first error (in node group order) is returned.
func (r *run) dropArtifacts(ctx context.Context, m metadata.Move, policies ...string) error {
	recs, err := r.e.cat.Cleanups(ctx, m.ID)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, p := range policies {
		want[p] = true
	}
	order := map[metadata.ObjectKind]int{metadata.ObjectPrepared: 0, metadata.ObjectSlot: 1, metadata.ObjectPublication: 2,
		metadata.ObjectOrigin: 3, metadata.ObjectTable: 4}
	byNode := map[int32][]metadata.CleanupRecord{}
	for pass := 0; pass <= 4; pass++ {
		for _, rec := range recs {
			if want[rec.Policy] && order[rec.ObjectType] == pass {
				byNode[rec.NodeGroup] = append(byNode[rec.NodeGroup], rec)
			}
		}
	}
	if len(byNode) == 0 {
		return nil
	}
	nodes, err := r.e.nodes(ctx)
	if err != nil {
		return err
	}
	groups := make([]int32, 0, len(byNode))
	for g := range byNode {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		n, ok := nodes[g]
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.e.dropOnNode(ctx, n, byNode[g])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// dropOnNode drops recs, in order, on node n (one session, reused), and
// forgets each record once its artifact is gone; it stops at the first
// error.
func (e *Engine) dropOnNode(ctx context.Context, n metadata.Node, recs []metadata.CleanupRecord) error {
	sp := newSplits()
	defer sp.log(e.log.With(zap.String("node", n.Addr())), "drop timings")
	conns := e.newNodeConns()
	defer conns.close(ctx)
	for _, rec := range recs {
		if err := e.dropOne(ctx, conns, n, rec); err != nil {
			return err
		}
		sp.mark(string(rec.ObjectType))
		if err := e.cat.RemoveCleanup(ctx, rec.ID); err != nil {
			return err
		}
		sp.mark("record")
	}
	return nil
}

// nodeConns keeps one session per node for a series of drops (a move's
// cleanup drops its slot and publication on the source and its origin on
// the target), instead of one new session per artifact. The sessions come
// from the engine's sessions and go back there when they served without
// error.
type nodeConns struct {
	e     *Engine
	conns map[int32]*pgx.Conn
	nodes map[int32]metadata.Node
}

func (e *Engine) newNodeConns() *nodeConns {
	return &nodeConns{e: e, conns: map[int32]*pgx.Conn{}, nodes: map[int32]metadata.Node{}}
}

// get returns the node's session, opening (or reusing) one on first use.
func (c *nodeConns) get(ctx context.Context, n metadata.Node) (*pgx.Conn, error) {
	if conn, ok := c.conns[n.GroupID]; ok && !conn.IsClosed() {
		return conn, nil
	}
	conn, err := c.e.session(ctx, n)
	if err != nil {
		return nil, err
	}
	c.conns[n.GroupID], c.nodes[n.GroupID] = conn, n
	return conn, nil
}

// forget closes the node's session after an error, so the next use opens
// a fresh one.
func (c *nodeConns) forget(ctx context.Context, n metadata.Node) {
	if conn, ok := c.conns[n.GroupID]; ok {
		conn.Close(context.WithoutCancel(ctx))
		delete(c.conns, n.GroupID)
	}
}

// close gives the sessions back (each was forgotten after an error).
func (c *nodeConns) close(context.Context) {
	for g, conn := range c.conns {
		c.e.release(c.nodes[g], conn, nil)
		delete(c.conns, g)
	}
}

// dropOne drops one recorded artifact through the node's session in conns;
// a missing artifact is not an error.
func (e *Engine) dropOne(ctx context.Context, conns *nodeConns, n metadata.Node, rec metadata.CleanupRecord) (err error) {
	conn, err := conns.get(ctx, n)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			conns.forget(ctx, n)
		}
	}()
	switch rec.ObjectType {
	case metadata.ObjectSlot:
		err = replication.DropSlot(ctx, conn, rec.Name)
	case metadata.ObjectPublication:
		err = replication.DropPublication(ctx, conn, rec.Name)
	case metadata.ObjectOrigin:
		err = replication.DropOrigin(ctx, conn, rec.Name)
	case metadata.ObjectPrepared:
		// The fences of the move (any epoch), settled by the recovery rule.
		id, _, ok := parseFenceGID(rec.Name)
		if !ok {
			return fmt.Errorf("cleanup record %d names no move's fence: %q", rec.ID, rec.Name)
		}
		var st metadata.Settlement
		if st, err = e.cat.SettleDecision(ctx, id); err == nil {
			_, err = settleFences(ctx, conn, id, st)
		}
	case metadata.ObjectTable:
		var id pgx.Identifier
		if id, err = metadata.ParseQualifiedName(rec.Name); err != nil {
			break
		}
		drop := func(ctx context.Context) error {
			_, err := pgsql.ExecOne(ctx, conn, "DROP TABLE IF EXISTS "+id.Sanitize())
			return err
		}
		shard, isShard := metadata.ShardIDOfTable(id[len(id)-1])
		if !isShard {
			// A fenced old shard: its name is ours alone.
			err = drop(ctx)
			break
		}
		// A shard table is dropped only while no placement points at it,
		// and on Citus not while Citus moves shards (its move of this
		// group may be building its own copy under the same name): the
		// record then stays for the next sweep.
		var busy string
		if busy, err = e.cat.CitusBusy(ctx); err == nil && busy != "" {
			err = fmt.Errorf("not dropped while Citus moves shards (%s); a later `shardmover cleanup` drops it", busy)
			break
		}
		if err == nil {
			err = e.cat.DropUnlessPlaced(ctx, shard, n.GroupID, drop)
		}
		if errors.Is(err, metadata.ErrPlacedThere) {
			e.log.Error("not dropping a table shardmover created: a placement points at it now (Citus's own mover may have moved the group there); it is Citus's, and shardmover forgets its record",
				zap.String("table", rec.Name), zap.String("node", n.Addr()), zap.Error(err))
			return nil
		}
	default:
		return fmt.Errorf("unknown cleanup object type %q", rec.ObjectType)
	}
	if err != nil {
		return fmt.Errorf("drop %s %s on %s: %w", rec.ObjectType, rec.Name, n.Addr(), err)
	}
	e.log.Info("dropped", zap.String("object", string(rec.ObjectType)), zap.String("name", rec.Name), zap.String("node", n.Addr()))
	return nil
}
