package mover

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRetainedWALLimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBytes int64
		fraction float64
		free     int64
		freeOK   bool
		limit    int64
		ok       bool
		byDisk   bool
	}{
		{"bytes only, disk unmeasured", 10e9, 0.5, 0, false, 10e9, true, false},
		{"bytes tighter than the disk", 10e9, 0.5, 100e9, true, 10e9, true, false},
		{"disk tighter than the bytes", 10e9, 0.5, 8e9, true, 4e9, true, true},
		{"equal: the byte limit names it", 4e9, 0.5, 8e9, true, 4e9, true, false},
		{"full disk", 10e9, 0.5, 0, true, 0, true, true},
		{"no byte limit, disk measured", -1, 0.25, 40e9, true, 10e9, true, true},
		{"no byte limit, disk unmeasured", -1, 0.5, 0, false, 0, false, false},
		{"no disk limit", 3 << 20, -1, 1e9, true, 3 << 20, true, false},
		{"nothing", 0, 0, 1e9, true, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit, ok, byDisk := retainedWALLimit(tc.maxBytes, tc.fraction, tc.free, tc.freeOK)
			assert.Equal(t, tc.ok, ok)
			if tc.ok {
				assert.Equal(t, tc.limit, limit)
				assert.Equal(t, tc.byDisk, byDisk)
			}
		})
	}
}

func TestNewDefaultsRetainedWAL(t *testing.T) {
	e := New(Config{}, nil)
	assert.Equal(t, int64(10e9), e.cfg.MaxRetainedWAL)
	assert.Equal(t, 0.5, e.cfg.MaxRetainedWALFraction)
	e = New(Config{MaxRetainedWAL: -1, MaxRetainedWALFraction: -1}, nil)
	assert.Negative(t, e.cfg.MaxRetainedWAL)
	assert.Negative(t, e.cfg.MaxRetainedWALFraction)
}

func TestWALLimitErrorIsOneSentence(t *testing.T) {
	msg := (&walLimitError{moveID: 7, source: "10.0.0.1:5432", retained: 12 << 20, limit: 4 << 20}).Error()
	assert.True(t, strings.HasPrefix(msg, "move 7 retained 12.0 MiB of WAL on 10.0.0.1:5432, more than the limit 4.0 MiB (--max-retained-wal): it was stopped and its slot dropped so the source's disk is safe;"), msg)
	assert.NotContains(t, msg, "\n")
	msg = (&walLimitError{moveID: 7, source: "s:1", retained: 5 << 30, limit: 4 << 30, byDisk: true, free: 8 << 30, fraction: 0.5}).Error()
	assert.Contains(t, msg, "more than the limit 4.0 GiB (0.5 of the 8.0 GiB free on its disk)")
}

func TestSlotMoveID(t *testing.T) {
	for name, want := range map[string]int64{
		"shardmover_12": 12, "shardmover_12_verify": 12, "shardmover_x": 0, "other_12": 0, "shardmover_0": 0, "shardmover_12_other": 0,
	} {
		if got := slotMoveID(name); got != want {
			t.Errorf("slotMoveID(%q) = %d, want %d", name, got, want)
		}
	}
}
