package workload

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/metadata"
)

// Key identifies a github_events row.
type Key struct {
	UserID  int64
	EventID int64
}

// RowState is what the ledger knows of one row.
type RowState struct {
	// Present and Rev are the last acknowledged state.
	Present bool
	Rev     int64
	// InDoubt is set when a write's outcome is unknown; AltPresent and
	// AltRev are the state that write would have produced.
	InDoubt    bool
	AltPresent bool
	AltRev     int64
}

// Ledger records every acknowledged write of a workload run.
type Ledger struct {
	// RunID separates the rows of successive runs on one cluster.
	RunID uint8

	mu   sync.Mutex
	rows map[Key]*RowState
	// hist keeps every write to each row, acknowledged or in doubt, so
	// that a violation can name them (when, through which node, how many
	// rows the statement found).
	hist map[Key][]Write

	Inserts, Updates, Deletes int64
	InDoubt                   int64
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{rows: map[Key]*RowState{}, hist: map[Key][]Write{}} }

// Write is one write of the workload to one row, as its client saw it.
type Write struct {
	Op         string // insert, update or delete
	Rev        int64  // the rev an update set
	Start, End time.Time
	// Via is the node the client sent the statement to, and the relation
	// it named.
	Via string
	// Affected is the row count the server reported; -1 when the outcome
	// is unknown (the write is in doubt).
	Affected int64
}

func (w Write) String() string {
	op := w.Op
	if w.Op == "update" {
		op = fmt.Sprintf("update to rev %d", w.Rev)
	}
	out := "acknowledged"
	if w.Affected < 0 {
		out = "in doubt"
	} else {
		out += fmt.Sprintf(", %d row(s)", w.Affected)
	}
	return fmt.Sprintf("%s %s-%s via %s (%s)", op, w.Start.UTC().Format("15:04:05.000000"), w.End.UTC().Format("15:04:05.000000"), w.Via, out)
}

func (l *Ledger) note(k Key, w Write) {
	if l.hist != nil {
		l.hist[k] = append(l.hist[k], w)
	}
}

// History describes every write the run made to row k, in order.
func (l *Ledger) History(k Key) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := l.hist[k]
	if len(ws) == 0 {
		return "no write recorded"
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.String()
	}
	return strings.Join(parts, "; ")
}

func (l *Ledger) ackInsert(k Key, w Write) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[k] = &RowState{Present: true}
	l.note(k, w)
	l.Inserts++
}

func (l *Ledger) ackUpdate(k Key, rev int64, w Write) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[k].Rev = rev
	l.note(k, w)
	l.Updates++
}

func (l *Ledger) ackDelete(k Key, w Write) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[k].Present = false
	l.note(k, w)
	l.Deletes++
}

// doubt records a write with unknown outcome.
func (l *Ledger) doubt(k Key, present bool, rev int64, w Write) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.Affected = -1
	l.note(k, w)
	s, ok := l.rows[k]
	if !ok {
		s = &RowState{Present: false}
		l.rows[k] = s
	}
	s.InDoubt, s.AltPresent, s.AltRev = true, present, rev
	l.InDoubt++
}

// Rows returns a copy of the ledger's rows.
func (l *Ledger) Rows() map[Key]RowState {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[Key]RowState, len(l.rows))
	for k, v := range l.rows {
		out[k] = *v
	}
	return out
}

// Acknowledged counts acknowledged writes.
func (l *Ledger) Acknowledged() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Inserts + l.Updates + l.Deletes
}

// Verdict is the outcome of Check.
type Verdict struct {
	Acknowledged int64    `json:"acknowledged_writes"`
	Checked      int      `json:"rows_checked"`
	InDoubt      int64    `json:"in_doubt"`
	Lost         int      `json:"lost"`
	Resurrected  int      `json:"resurrected"`
	WrongValue   int      `json:"wrong_value"`
	Duplicated   int      `json:"duplicated"`
	Misplaced    int      `json:"misplaced"`
	Violations   []string `json:"violations,omitempty"`
	// BadKeys are the rows named by violations.
	BadKeys []Key `json:"-"`
}

// OK reports whether no violation was found.
func (v Verdict) OK() bool { return len(v.Violations) == 0 }

func (v *Verdict) violate(format string, args ...any) {
	if len(v.Violations) < 50 {
		v.Violations = append(v.Violations, fmt.Sprintf(format, args...))
	} else if len(v.Violations) == 50 {
		v.Violations = append(v.Violations, "... more violations not listed")
	}
}

// seen is one row as a read found it.
type seen struct {
	rev   int64
	shard int64
	node  string
	count int
}

// Check compares the cluster's rows of the ledger's run (event ids from
// RunBase(RunID)) with the ledger.
//
// On compat it reads every shard from its placement, as fresh metadata
// names it. On Citus it reads through Citus (one query on github_events
// through the coordinator, which routes to the current placements), and
// compares that with the ledger; it then also reads every shard on the node
// Citus's metadata (its placement catalog) names and reports, as misplaced, a
// row Citus returns that is not there or differs there, or one that is
// there and Citus does not return. On both flavors a row in a shard whose
// hash range does not hold it is misplaced.
func Check(ctx context.Context, r *Router, l *Ledger) (Verdict, error) {
	if err := r.Refresh(ctx); err != nil {
		return Verdict{}, err
	}
	cl := r.Cluster()
	t, err := cl.Table(EventsTable)
	if err != nil {
		return Verdict{}, err
	}
	var v Verdict
	placed, err := readPlacements(ctx, r, cl, t, l.RunID, &v)
	if err != nil {
		return v, err
	}
	found := placed
	if r.citus() {
		if found, err = readThroughCitus(ctx, r, cl, t, l.RunID, &v); err != nil {
			return v, err
		}
		comparePlacements(cl, found, placed, &v)
	}
	ledger := l.Rows()
	v.Acknowledged = l.Acknowledged()
	v.InDoubt = l.InDoubt
	keys := make([]Key, 0, len(ledger))
	for k := range ledger {
		keys = append(keys, k)
	}
	sortKeys(keys)
	for _, k := range keys {
		want := ledger[k]
		got, present := found[k]
		v.Checked++
		if present && got.count > 1 {
			v.Duplicated++
			v.violate("row %v appears %d times", k, got.count)
		}
		okState := func(p bool, rev int64) bool {
			if p != present {
				return false
			}
			return !p || got.rev == rev
		}
		if okState(want.Present, want.Rev) || (want.InDoubt && okState(want.AltPresent, want.AltRev)) {
			continue
		}
		v.BadKeys = append(v.BadKeys, k)
		hist := l.History(k)
		switch {
		case want.Present && !present:
			v.Lost++
			v.violate("acknowledged row %v (rev %d) is missing from shard %d; its writes: %s", k, want.Rev, shardOf(cl, t, k.UserID), hist)
		case !want.Present && present:
			v.Resurrected++
			v.violate("acknowledged delete of %v, but the row is present in shard %d on %s (rev %d); its writes: %s",
				k, got.shard, placementNode(cl, got.shard), got.rev, hist)
		default:
			v.WrongValue++
			v.violate("row %v in shard %d on %s has rev %d, the last acknowledged update set %d; its writes: %s",
				k, got.shard, placementNode(cl, got.shard), got.rev, want.Rev, hist)
		}
	}
	for k := range found {
		if _, ok := ledger[k]; !ok {
			v.Resurrected++
			v.violate("row %v exists but was never acknowledged or attempted", k)
		}
	}
	return v, nil
}

// readPlacements reads the run's rows from every shard of t on the node the
// metadata places it on.
func readPlacements(ctx context.Context, r *Router, cl *metadata.Cluster, t metadata.Table, run uint8, v *Verdict) (map[Key]*seen, error) {
	found := map[Key]*seen{}
	for _, sh := range cl.TableShards(t) {
		p, ok := cl.PlacementOf(sh.ID)
		if !ok {
			v.violate("shard %d has no placement", sh.ID)
			continue
		}
		n, ok := cl.NodeByGroup(p.GroupID)
		if !ok {
			v.violate("shard %d is placed on group %d with no node", sh.ID, p.GroupID)
			continue
		}
		pool, err := r.pool(ctx, n)
		if err != nil {
			return nil, err
		}
		rows, err := pool.Query(ctx, "SELECT user_id, event_id, coalesce((payload->>'rev')::bigint, -1) FROM "+
			sh.Ident().Sanitize()+" WHERE event_id >= $1 AND event_id < $2", RunBase(run), RunBase(run)+1<<40)
		if err != nil {
			return nil, fmt.Errorf("read %s on %s: %w", sh.Name(), n.Addr(), err)
		}
		for rows.Next() {
			var k Key
			var rev int64
			if err := rows.Scan(&k.UserID, &k.EventID, &rev); err != nil {
				rows.Close()
				return nil, err
			}
			s, ok := found[k]
			if !ok {
				s = &seen{}
				found[k] = s
			}
			s.count++
			s.rev, s.shard, s.node = rev, sh.ID, n.Addr()
			if h := metadata.HashInt8(k.UserID); h < sh.Min || h > sh.Max {
				v.Misplaced++
				v.violate("row %v is in shard %d whose range does not hold hash %d", k, sh.ID, h)
			}
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// readThroughCitus reads the run's rows with one query on the distributed
// table through the coordinator; Citus routes it to the current placements.
// Each row also carries the shard Citus's metadata names for its user_id
// (get_shard_id_for_distribution_column), which must be the shard whose
// hash range holds it in shardmover's reading of the same metadata.
func readThroughCitus(ctx context.Context, r *Router, cl *metadata.Cluster, t metadata.Table, run uint8, v *Verdict) (map[Key]*seen, error) {
	coord, err := r.Entry(Coordinator)
	if err != nil {
		return nil, err
	}
	pool, err := r.pool(ctx, coord)
	if err != nil {
		return nil, err
	}
	rel := pgx.Identifier{t.Schema, t.Name}.Sanitize()
	rows, err := pool.Query(ctx, "SELECT user_id, event_id, coalesce((payload->>'rev')::bigint, -1), "+
		"get_shard_id_for_distribution_column($3::text::regclass, user_id) FROM "+rel+
		" WHERE event_id >= $1 AND event_id < $2", RunBase(run), RunBase(run)+1<<40, rel)
	if err != nil {
		return nil, fmt.Errorf("read %s through the Citus coordinator %s: %w", t.DisplayName(), coord.Addr(), err)
	}
	defer rows.Close()
	found := map[Key]*seen{}
	for rows.Next() {
		var k Key
		var rev, shard int64
		if err := rows.Scan(&k.UserID, &k.EventID, &rev, &shard); err != nil {
			return nil, err
		}
		s, ok := found[k]
		if !ok {
			s = &seen{}
			found[k] = s
		}
		s.count++
		s.rev, s.shard = rev, shard
		if ours := shardOf(cl, t, k.UserID); ours != shard {
			v.Misplaced++
			v.violate("row %v: Citus places user_id %d in shard %d, the metadata's hash ranges in shard %d", k, k.UserID, shard, ours)
		}
	}
	return found, rows.Err()
}

// comparePlacements reports rows that Citus returns and the placements the
// metadata names do not hold as Citus returned them, and rows the
// placements hold that Citus does not return.
func comparePlacements(cl *metadata.Cluster, routed, placed map[Key]*seen, v *Verdict) {
	keys := func(m map[Key]*seen) []Key {
		out := make([]Key, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		sortKeys(out)
		return out
	}
	for _, k := range keys(routed) {
		got := routed[k]
		p, ok := placed[k]
		switch {
		case !ok:
			v.Misplaced++
			v.violate("row %v (rev %d) is returned through Citus but is not in shard %d on %s, where the metadata places it",
				k, got.rev, got.shard, placementNode(cl, got.shard))
		case p.rev != got.rev:
			v.Misplaced++
			v.violate("row %v has rev %d through Citus but rev %d in shard %d on %s, where the metadata places it",
				k, got.rev, p.rev, p.shard, p.node)
		}
	}
	for _, k := range keys(placed) {
		if _, ok := routed[k]; !ok {
			p := placed[k]
			v.Misplaced++
			v.violate("row %v (rev %d) is in shard %d on %s, where the metadata places it, but Citus does not return it",
				k, p.rev, p.shard, p.node)
		}
	}
}

func placementNode(cl *metadata.Cluster, shard int64) string {
	p, ok := cl.PlacementOf(shard)
	if !ok {
		return "no node (the shard has no placement)"
	}
	n, ok := cl.NodeByGroup(p.GroupID)
	if !ok {
		return fmt.Sprintf("group %d (no node)", p.GroupID)
	}
	return n.Addr()
}

func sortKeys(keys []Key) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].UserID != keys[j].UserID {
			return keys[i].UserID < keys[j].UserID
		}
		return keys[i].EventID < keys[j].EventID
	})
}

// WorkloadEventBase is the first event id the workload uses; loaded data
// stays below it.
const WorkloadEventBase int64 = 1 << 50

// RunBase is the first event id of a run: runs on one cluster never share
// ids, and each run's check reads only its own rows.
func RunBase(run uint8) int64 { return WorkloadEventBase + int64(run)<<40 }

// Latency is one acknowledged write's timing.
type Latency struct {
	At  time.Time
	Dur time.Duration
	Op  string
}

func shardOf(cl *metadata.Cluster, t metadata.Table, userID int64) int64 {
	sh, err := cl.ShardFor(t, userID)
	if err != nil {
		return 0
	}
	return sh.ID
}

// NextRunID returns the run id after the highest one whose rows are in
// github_events (0 on a cluster no run has written to), so that a new run
// neither collides with nor is checked against an earlier run's rows. It
// reads every shard at its placement on compat, and through the
// coordinator on Citus.
func NextRunID(ctx context.Context, r *Router) (uint8, error) {
	cl := r.Cluster()
	t, err := cl.Table(EventsTable)
	if err != nil {
		return 0, err
	}
	const q = " WHERE event_id >= $1"
	var rels []pgx.Identifier
	var nodes []metadata.Node
	if r.citus() {
		coord, err := r.Entry(Coordinator)
		if err != nil {
			return 0, err
		}
		rels, nodes = []pgx.Identifier{{t.Schema, t.Name}}, []metadata.Node{coord}
	} else {
		for _, sh := range cl.TableShards(t) {
			p, ok := cl.PlacementOf(sh.ID)
			if !ok {
				return 0, fmt.Errorf("shard %d has no placement", sh.ID)
			}
			n, ok := cl.NodeByGroup(p.GroupID)
			if !ok {
				return 0, fmt.Errorf("shard %d is placed on group %d, which has no node", sh.ID, p.GroupID)
			}
			rels, nodes = append(rels, sh.Ident()), append(nodes, n)
		}
	}
	highest := int64(-1)
	for i, rel := range rels {
		pool, err := r.pool(ctx, nodes[i])
		if err != nil {
			return 0, err
		}
		var m *int64
		if err := pool.QueryRow(ctx, "SELECT max(event_id) FROM "+rel.Sanitize()+q, WorkloadEventBase).Scan(&m); err != nil {
			return 0, fmt.Errorf("read the last workload run from %s on %s: %w", rel.Sanitize(), nodes[i].Addr(), err)
		}
		if m != nil {
			highest = max(highest, (*m-WorkloadEventBase)>>40)
		}
	}
	if highest >= 255 {
		return 0, fmt.Errorf("%w: github_events already holds the rows of 256 workload runs; delete rows with event_id >= %d to start again", metadata.ErrInvalid, WorkloadEventBase)
	}
	return uint8(highest + 1), nil
}
