package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/shardmover/shardmover/internal/units"
	"github.com/shardmover/shardmover/mover"
	"go.uber.org/zap"
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type table struct {
	head []string
	rows [][]string
}

func newTable(head ...string) *table { return &table{head: head} }

func (t *table) row(cells ...any) {
	r := make([]string, len(cells))
	for i, c := range cells {
		r[i] = fmt.Sprint(c)
	}
	t.rows = append(t.rows, r)
}

func (t *table) write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.head, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// bar renders a fraction 0..1 as a fixed-width bar.
func bar(frac float64, width int) string {
	if frac < 0 {
		frac = 0
	}
	if frac > 1 {
		frac = 1
	}
	full := int(frac*float64(width) + 0.5)
	return strings.Repeat("█", full) + strings.Repeat("░", width-full)
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress draws a bar on a terminal, and otherwise logs a line every few
// seconds.
type progress struct {
	mu    sync.Mutex
	w     *os.File
	tty   bool
	log   *zap.Logger
	last  time.Time
	start time.Time
	drawn bool
}

func newProgress(w *os.File, log *zap.Logger) *progress {
	return &progress{w: w, tty: isTerminal(w), log: log, start: time.Now()}
}

func (p *progress) update(label string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	frac := 0.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r%-14s %s %5.1f%% %d/%d", label, bar(frac, 30), frac*100, done, total)
		p.drawn = true
		return
	}
	if time.Since(p.last) >= 2*time.Second || done == total {
		p.last = time.Now()
		fmt.Fprintf(p.w, "%s %s: %d/%d (%.0f%%)\n", time.Now().Format(time.TimeOnly), label, done, total, frac*100)
	}
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}

// moveDisplay shows live progress of moves: one redrawn line per move on a
// terminal, a log line every few seconds otherwise.
type moveDisplay struct {
	mu    sync.Mutex
	w     *os.File
	tty   bool
	last  map[int64]mover.Progress
	start map[int64]time.Time
	lines int
	shown time.Time
}

func newMoveDisplay(w *os.File) *moveDisplay {
	return &moveDisplay{w: w, tty: isTerminal(w), last: map[int64]mover.Progress{}, start: map[int64]time.Time{}}
}

func (d *moveDisplay) update(p mover.Progress) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.start[p.MoveID]; !ok {
		d.start[p.MoveID] = time.Now()
	}
	prev := d.last[p.MoveID]
	d.last[p.MoveID] = p
	phaseChanged := prev.Phase != p.Phase
	if !phaseChanged && time.Since(d.shown) < 500*time.Millisecond && d.tty {
		return
	}
	if !d.tty && !phaseChanged && time.Since(d.shown) < 5*time.Second {
		return
	}
	d.shown = time.Now()
	if !d.tty {
		fmt.Fprintln(d.w, d.line(p.MoveID))
		return
	}
	if d.lines > 0 {
		fmt.Fprintf(d.w, "\033[%dA", d.lines)
	}
	d.lines = 0
	ids := sortedIDs(d.last)
	done := 0
	for _, id := range ids {
		if d.last[id].Phase.Terminal() {
			done++
		}
		fmt.Fprint(d.w, d.line(id)+"\033[K\n")
		d.lines++
	}
	if len(ids) > 1 {
		frac := float64(done) / float64(len(ids))
		eta := ""
		if done > 0 && done < len(ids) {
			var first time.Time
			for _, t := range d.start {
				if first.IsZero() || t.Before(first) {
					first = t
				}
			}
			per := time.Since(first) / time.Duration(done)
			eta = " eta " + (per * time.Duration(len(ids)-done)).Round(time.Second).String()
		}
		fmt.Fprintf(d.w, "overall %s %d/%d moves ended%s\033[K\n", bar(frac, 30), done, len(ids), eta)
		d.lines++
	}
}

func (d *moveDisplay) line(id int64) string {
	p := d.last[id]
	el := time.Since(d.start[id]).Seconds()
	s := fmt.Sprintf("%s move %d %-11s", time.Now().Format(time.TimeOnly), id, p.Phase)
	switch {
	case p.Phase == mover.Copying && p.BytesTotal > 0:
		frac := float64(p.BytesDone) / float64(p.BytesTotal)
		rate := float64(p.BytesDone) / max(el, 0.001)
		s += fmt.Sprintf(" %s %3.0f%% %s/%s %s/s", bar(frac, 20), frac*100, units.Bytes(p.BytesDone), units.Bytes(p.BytesTotal), units.Bytes(int64(rate)))
		if rate > 0 {
			eta := time.Duration(float64(p.BytesTotal-p.BytesDone)/rate) * time.Second
			s += fmt.Sprintf(" eta %s", eta.Round(time.Second))
		}
	case p.BytesDone > 0:
		s += fmt.Sprintf(" copied %s", units.Bytes(p.BytesDone))
	}
	if p.Phase == mover.CatchingUp || p.Phase == mover.Cutover {
		s += fmt.Sprintf(" lag %s %s", units.Bytes(int64(p.LagBytes)), p.Lag.Round(time.Millisecond))
	}
	return s
}

func sortedIDs(m map[int64]mover.Progress) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && ids[j] < ids[j-1]; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
	return ids
}

// citusHelp ends the --help of every command that moves shards.
const citusHelp = `

On a Citus cluster (12 or later) the move cooperates with Citus: Citus keeps routing every
query, the placements flip on the coordinator and on every worker with metadata in one
two-phase commit, and Citus's own deferred cleanup drops the old shards. shardmover refuses
to start while Citus itself rebalances or moves shards. Citus offers no lock a client can
take to make its own moves wait, so do not start citus_rebalance_start,
citus_move_shard_placement or citus_rebalance_table_shards while shardmover moves: Citus's
move would win and shardmover's move of that group would fail, leaving the group where
Citus put it.`
