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
