package mover

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestDiskCacheReuse: a target's free-space measurement is reused only for
// the same node, while younger than diskReuse, and only when no move can
// have copied into the node since it was taken.
func TestDiskCacheReuse(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newDiskCache()
	c.store("10.0.0.2:5432", diskReading{free: 1000, at: t0, moves: map[int64]Phase{1: Scheduled, 2: CatchingUp}})

	free, ok := c.fresh("10.0.0.2:5432", t0.Add(time.Second), map[int64]Phase{1: Preflight, 2: Cutover})
	assert.True(t, ok, "nothing copied since")
	assert.EqualValues(t, 1000, free)

	for _, tc := range []struct {
		why  string
		addr string
		at   time.Time
		now  map[int64]Phase
	}{
		{"another node", "10.0.0.3:5432", t0.Add(time.Second), map[int64]Phase{1: Preflight}},
		{"stale", "10.0.0.2:5432", t0.Add(diskReuse), map[int64]Phase{1: Preflight}},
		{"from the future", "10.0.0.2:5432", t0.Add(-time.Second), map[int64]Phase{1: Preflight}},
		{"a move copies there now", "10.0.0.2:5432", t0.Add(time.Second), map[int64]Phase{1: Copying}},
		{"a move sets up there now", "10.0.0.2:5432", t0.Add(time.Second), map[int64]Phase{1: Setup}},
		{"a move indexes there now", "10.0.0.2:5432", t0.Add(time.Second), map[int64]Phase{1: Indexing}},
		{"a move copied since", "10.0.0.2:5432", t0.Add(time.Second), map[int64]Phase{1: CatchingUp}},
		{"a move that was waiting ended (it may have copied)", "10.0.0.2:5432", t0.Add(time.Second), map[int64]Phase{2: Cutover}},
		{"a new move past its copy", "10.0.0.2:5432", t0.Add(time.Second), map[int64]Phase{1: Scheduled, 3: CatchingUp}},
	} {
		_, ok := c.fresh(tc.addr, tc.at, tc.now)
		assert.False(t, ok, tc.why)
	}
	// A new move that has not copied yet does not spoil it.
	_, ok = c.fresh("10.0.0.2:5432", t0.Add(time.Second), map[int64]Phase{1: Scheduled, 3: Preflight})
	assert.True(t, ok)

	c.forget("10.0.0.2:5432")
	_, ok = c.fresh("10.0.0.2:5432", t0.Add(time.Second), map[int64]Phase{1: Scheduled})
	assert.False(t, ok, "forgotten when a copy into the node starts")

	var none *diskCache
	_, ok = none.fresh("10.0.0.2:5432", t0, nil)
	assert.False(t, ok)
}
