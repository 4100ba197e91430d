package cpumeter

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// tick is one clock tick of /proc/<pid>/stat (USER_HZ = 100).
const tick = 10 * time.Millisecond

// procStat reads utime+stime and cutime+cstime (in clock ticks), the
// parent and the start time of a process from /proc/<pid>/stat.
func procStat(pid int) (own, reaped int64, ppid int, start string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, 0, 0, "", false
	}
	f := strings.Fields(s[i+2:]) // f[0] is field 3, state
	if len(f) < 20 {
		return 0, 0, 0, "", false
	}
	n := func(field int) int64 { v, _ := strconv.ParseInt(f[field-3], 10, 64); return v }
	return n(14) + n(15), n(16) + n(17), int(n(4)), f[22-3], true
}

// PostmasterOf returns the parent of a backend: its instance's postmaster.
func PostmasterOf(backendPID int) (int, bool) {
	_, _, ppid, _, ok := procStat(backendPID)
	return ppid, ok
}

// ProcessCPU returns the CPU time one live process has used since it
// started (not its children's), or false when it cannot be read.
func ProcessCPU(pid int) (time.Duration, bool) {
	own, _, _, _, ok := procStat(pid)
	return time.Duration(own) * tick, ok
}

// ProcessWait returns how long one live process has waited on a run queue
// since it started: runnable, but another process had the CPU (the second
// field of /proc/<pid>/schedstat, in nanoseconds). False when it cannot be
// read (no such process, or a kernel without schedstat).
func ProcessWait(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	return time.Duration(ns), err == nil
}

// Meter measures the instances of its postmasters and this process.
type Meter struct{ postmasters []int }

// New returns a Meter of the instances whose postmasters are pids.
func New(postmasters ...int) Meter { return Meter{postmasters: append([]int(nil), postmasters...)} }

// Sample is the state at the start of a window.
type Sample struct {
	ticks map[string]int64 // live processes by pid@start; "" the postmasters' own and reaped
	self  time.Duration
}

// Sample reads the ticks of every live process of the instances (keyed by
// pid and start time, so a reused pid is another process), the
// postmasters' own and reaped ticks, and this process's CPU time.
func (m Meter) Sample() Sample {
	s := Sample{ticks: map[string]int64{}}
	pm := map[int]bool{}
	for _, p := range m.postmasters {
		pm[p] = true
		own, reaped, _, _, _ := procStat(p)
		s.ticks[""] += own + reaped
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if own, _, ppid, start, ok := procStat(pid); ok && pm[ppid] {
			s.ticks[e.Name()+"@"+start] = own
		}
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return s
}

// Since returns the CPU time the instances (servers) and this process
// (self) used since start.
func (m Meter) Since(start Sample) (servers, self time.Duration) {
	end := m.Sample()
	var ticks int64
	for k, v := range end.ticks {
		ticks += v - start.ticks[k]
	}
	for k, v := range start.ticks {
		if _, alive := end.ticks[k]; !alive && k != "" {
			// Exited: its whole time is in the reaped ticks now.
			ticks -= v
		}
	}
	return time.Duration(ticks) * tick, end.self - start.self
}
