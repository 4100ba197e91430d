package scheduler

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ScheduleHelp is how --schedule and --timezone behave, for --help.
const ScheduleHelp = `Schedules follow the wall clock of --timezone. On the day clocks go forward,
a time that does not exist (02:30 when 02:00 jumps to 03:00) runs once, right after
the jump (at 03:30); on the day clocks go back, a time in the repeated hour runs twice,
once in each offset (the second run finds the cluster balanced). Use UTC for no
daylight saving time at all. A schedule that never fires (0 0 30 2 *) or fires more
often than every second (@every 500ms) is refused.`

// ParseSchedule checks a cron expression (5 fields, 6 with seconds first,
// or a descriptor like @daily or @every 1h) against loc, the schedules'
// zone, and returns it ready to run. Errors match metadata.ErrInvalid and
// say, in one sentence, why the schedule is refused: not a cron expression,
// never fires, or fires more often than every second.
func ParseSchedule(spec string, loc *time.Location, now time.Time) (cron.Schedule, error) {
	if loc == nil {
		loc = time.Local
	}
	trimmed := strings.TrimSpace(spec)
	if d, ok := strings.CutPrefix(trimmed, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, optionf("Schedules", "%q is not a duration after @every; write it like \"@every 1h30m\"", spec)
		}
		if every < time.Second {
			return nil, optionf("Schedules", "%q would fire more often than every second (the least interval is @every 1s)", spec)
		}
		if every%time.Second != 0 {
			return nil, optionf("Schedules", "%q is not a whole number of seconds; cron would round it down to %s", spec, every.Truncate(time.Second))
		}
	}
	s, err := cronParser.Parse(trimmed)
	if err != nil {
		return nil, optionf("Schedules", "%q is not a cron expression (%v); write 5 fields like \"0 3 * * *\", or 6 with seconds first", spec, err)
	}
	if s.Next(now.In(loc)).IsZero() {
		return nil, optionf("Schedules", "%q never fires: no date in the next five years matches it (a day that does not exist, like February 30?)", spec)
	}
	if spec, ok := s.(*cron.SpecSchedule); ok {
		zone := loc
		if spec.Location != time.Local {
			zone = spec.Location // CRON_TZ= in the expression wins
		}
		wall := *spec
		wall.Location = time.UTC
		return wallClock{spec: spec, wall: &wall, loc: zone}, nil
	}
	return s, nil
}

// wallClock is a cron schedule that runs a time skipped by a daylight
// saving gap right after the gap, instead of skipping that day as
// robfig/cron does. Otherwise it is the schedule as it is.
type wallClock struct {
	spec *cron.SpecSchedule // in its zone
	wall *cron.SpecSchedule // the same fields, in UTC: wall-clock arithmetic without gaps
	loc  *time.Location
}

func (w wallClock) Next(t time.Time) time.Time {
	next := w.spec.Next(t)
	lt := t.In(w.loc)
	// The next wall-clock match, as if the zone had no gaps.
	n := w.wall.Next(time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), lt.Nanosecond(), time.UTC))
	if n.IsZero() {
		return next
	}
	real := time.Date(n.Year(), n.Month(), n.Day(), n.Hour(), n.Minute(), n.Second(), 0, w.loc)
	if real.Hour() == n.Hour() && real.Minute() == n.Minute() {
		return next // the wall time exists: the schedule itself finds it
	}
	// The wall time falls in a gap: time.Date moved it past the gap.
	if real.After(t) && (next.IsZero() || real.Before(next)) {
		return real.In(t.Location())
	}
	return next
}
