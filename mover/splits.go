package mover

import (
	"time"

	"go.uber.org/zap"
)

// splits times the parts of one step for a debug line at its end: where a
// move's fixed cost goes (docs/design.md 10 lists what the benchmarks
// measure; this says which part of a phase took the time).
type splits struct {
	last   time.Time
	fields []zap.Field
}

func newSplits() *splits { return &splits{last: time.Now()} }

// mark ends the part called name; on a nil splits it does nothing.
func (s *splits) mark(name string) {
	if s == nil {
		return
	}
	now := time.Now()
	s.fields = append(s.fields, zap.Duration(name, now.Sub(s.last).Round(time.Millisecond)))
	s.last = now
}

// log writes the parts, in order, as one debug line.
func (s *splits) log(log *zap.Logger, msg string) { log.Debug(msg, s.fields...) }
