package scheduler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/scheduler"
)

// TestScheduleRefusals: schedules that never fire, fire more often than
// every second, or are not cron expressions are refused with a sentence
// naming the flag; the rest are accepted.
func TestScheduleRefusals(t *testing.T) {
	now := time.Date(2025, 1, 10, 12, 0, 0, 0, time.UTC)
	for spec, want := range map[string]string{
		"0 0 30 2 *":    "never fires",
		"0 0 31 4 *":    "never fires",
		"@every -5s":    "more often than every second",
		"@every 0s":     "more often than every second",
		"@every 500ms":  "more often than every second",
		"@every 1500ms": "not a whole number of seconds",
		"@every soon":   "is not a duration",
		"every day":     "is not a cron expression",
		"0 3 * *":       "is not a cron expression",
	} {
		_, err := scheduler.ParseSchedule(spec, time.UTC, now)
		require.Error(t, err, spec)
		assert.ErrorIs(t, err, metadata.ErrInvalid, spec)
		assert.Contains(t, err.Error(), "Schedules", spec)
		assert.Contains(t, err.Error(), want, spec)
	}
	for _, spec := range []string{"0 3 * * *", "*/1 * * * * *", "@every 1s", "@every 6h", "@daily", "0 0 29 2 *", "CRON_TZ=Asia/Tokyo 0 3 * * *"} {
		s, err := scheduler.ParseSchedule(spec, time.UTC, now)
		require.NoError(t, err, spec)
		assert.True(t, s.Next(now).After(now), spec)
	}
	cfg := scheduler.DefaultDaemonConfig()
	cfg.Schedules = []string{"0 3 * * *", "@every 0s"}
	err := cfg.Validate()
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Contains(t, err.Error(), `"@every 0s"`)
}

// TestScheduleAcrossDST: in Europe/Berlin, 02:30 does not exist on the day
// clocks go forward (2025-03-30); the schedule runs right after the jump,
// at 03:30 CEST, instead of skipping the day (robfig/cron alone skips it).
// On the day clocks go back (2025-10-26) it runs in both offsets, as
// --help says.
func TestScheduleAcrossDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	fires := func(spec string, from time.Time, n int) []string {
		s, err := scheduler.ParseSchedule(spec, berlin, from)
		require.NoError(t, err)
		var out []string
		for at := from; len(out) < n; {
			at = s.Next(at)
			out = append(out, at.In(berlin).Format("2006-01-02 15:04 MST"))
		}
		return out
	}
	assert.Equal(t, []string{"2025-03-29 02:30 CET", "2025-03-30 03:30 CEST", "2025-03-31 02:30 CEST"},
		fires("30 2 * * *", time.Date(2025, 3, 29, 0, 0, 0, 0, berlin), 3))
	assert.Equal(t, []string{"2025-03-30 03:00 CEST", "2025-03-31 02:00 CEST"},
		fires("0 2 * * *", time.Date(2025, 3, 29, 12, 0, 0, 0, berlin), 2))
	assert.Equal(t, []string{"2025-10-26 02:30 CEST", "2025-10-26 02:30 CET", "2025-10-27 02:30 CET"},
		fires("30 2 * * *", time.Date(2025, 10, 25, 12, 0, 0, 0, berlin), 3))
	// Times outside the gap are untouched.
	assert.Equal(t, []string{"2025-03-30 01:30 CET", "2025-03-30 04:30 CEST"},
		fires("30 1,4 * * *", time.Date(2025, 3, 30, 0, 0, 0, 0, berlin), 2))
}
