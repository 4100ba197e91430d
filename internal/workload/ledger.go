package workload

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

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

	Inserts, Updates, Deletes int64
	InDoubt                   int64
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{rows: map[Key]*RowState{}} }

func (l *Ledger) ackInsert(k Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[k] = &RowState{Present: true}
	l.Inserts++
}

func (l *Ledger) ackUpdate(k Key, rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[k].Rev = rev
	l.Updates++
}

func (l *Ledger) ackDelete(k Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[k].Present = false
	l.Deletes++
}

// doubt records a write with unknown outcome.
func (l *Ledger) doubt(k Key, present bool, rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
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

// Check reads the rows of the ledger's run (event ids from RunBase(RunID)) from
// every shard's placement, as fresh metadata names it, and compares them
// with the ledger.
func Check(ctx context.Context, r *Router, l *Ledger) (Verdict, error) {
	if err := r.Refresh(ctx); err != nil {
		return Verdict{}, err
	}
	cl := r.Cluster()
	t, err := cl.Table(EventsTable)
	if err != nil {
		return Verdict{}, err
	}
	type seen struct {
		rev   int64
		shard int64
		count int
	}
	found := map[Key]*seen{}
	var v Verdict
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
			return v, err
		}
		rows, err := pool.Query(ctx, "SELECT user_id, event_id, coalesce((payload->>'rev')::bigint, -1) FROM "+
			sh.Ident().Sanitize()+" WHERE event_id >= $1 AND event_id < $2", RunBase(l.RunID), RunBase(l.RunID)+1<<40)
		if err != nil {
			return v, fmt.Errorf("read %s on %s: %w", sh.Name(), n.Addr(), err)
		}
		for rows.Next() {
			var k Key
			var rev int64
			if err := rows.Scan(&k.UserID, &k.EventID, &rev); err != nil {
				rows.Close()
				return v, err
			}
			s, ok := found[k]
			if !ok {
				s = &seen{}
				found[k] = s
			}
			s.count++
			s.rev, s.shard = rev, sh.ID
			if h := metadata.HashInt8(k.UserID); h < sh.Min || h > sh.Max {
				v.Misplaced++
				v.violate("row %v is in shard %d whose range does not hold hash %d", k, sh.ID, h)
			}
		}
		if err := rows.Err(); err != nil {
			return v, err
		}
	}
	ledger := l.Rows()
	v.Acknowledged = l.Acknowledged()
	v.InDoubt = l.InDoubt
	keys := make([]Key, 0, len(ledger))
	for k := range ledger {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].UserID != keys[j].UserID {
			return keys[i].UserID < keys[j].UserID
		}
		return keys[i].EventID < keys[j].EventID
	})
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
		switch {
		case want.Present && !present:
			v.Lost++
			v.violate("acknowledged row %v (rev %d) is missing from shard %d", k, want.Rev, shardOf(cl, t, k.UserID))
		case !want.Present && present:
			v.Resurrected++
			v.violate("acknowledged delete of %v, but the row is present in shard %d (rev %d)", k, got.shard, got.rev)
		default:
			v.WrongValue++
			v.violate("row %v in shard %d has rev %d, the last acknowledged update set %d", k, got.shard, got.rev, want.Rev)
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
