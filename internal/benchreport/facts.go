package benchreport

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Load is one load-average sample, with the machine's CPU counters of
// /proc/stat's "cpu" line when the sample has them.
type Load struct {
	At                 time.Time
	One, Five, Fifteen float64
	// CPU says the counters below were in the sample. Total is the sum of
	// the first eight columns (clock ticks since boot, all CPUs; the guest
	// columns are already in user and nice), Idle the idle and iowait
	// columns, Steal the time the hypervisor ran something else while
	// this machine had work.
	CPU                bool
	Total, Idle, Steal int64
}

// Facts describes the machine and the run.
type Facts struct {
	CPUModel   string
	CPUs       int
	MemoryMiB  int64
	OS         string
	Go         string
	PostgreSQL string
	Citus      string // the version, or why it is missing
	Loads      []Load // first at the start, last at the end
}

// PostgresBin is where the PostgreSQL 15 server binaries live.
const PostgresBin = "/usr/lib/postgresql/15/bin"

// CitusControl is the Citus extension's control file for PostgreSQL 15.
const CitusControl = "/usr/share/postgresql/15/extension/citus.control"

// ReadFacts reads the machine facts, and the load samples from loadFile
// (see ReadLoads; "" for none).
func ReadFacts(loadFile string) (Facts, error) {
	var f Facts
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "processor":
				f.CPUs++
			case "model name":
				if f.CPUModel == "" {
					f.CPUModel = strings.TrimSpace(v)
				}
			}
		}
	}
	if f.CPUs == 0 {
		f.CPUs = runtime.NumCPU()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				f.MemoryMiB = kb / 1024
			}
		}
	}
	f.OS = runtime.GOOS + "/" + runtime.GOARCH
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				f.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		f.OS += ", Linux " + strings.TrimSpace(string(b))
	}
	f.Go = runtime.Version()
	if b, err := exec.Command(filepath.Join(PostgresBin, "postgres"), "--version").Output(); err == nil {
		f.PostgreSQL = strings.TrimSpace(string(b))
	} else {
		f.PostgreSQL = fmt.Sprintf("not found (%s/postgres --version: %v)", PostgresBin, err)
	}
	f.Citus = "not installed (no " + CitusControl + ")"
	if b, err := os.ReadFile(CitusControl); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "default_version"); ok {
				f.Citus = strings.Trim(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), "=")), "'")
			}
		}
	}
	if loadFile != "" {
		loads, err := ReadLoads(loadFile)
		if err != nil {
			return f, err
		}
		f.Loads = loads
	}
	return f, nil
}

// ReadLoads reads a load file: each line `unix_seconds l1 l5 l15 ...`
// (a /proc/loadavg line after the time), optionally followed by
// /proc/stat's first line (`cpu user nice system idle iowait irq softirq
// steal ...`).
func ReadLoads(path string) ([]Load, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var out []Load
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		var v [4]float64
		ok := true
		for i := range v {
			if v[i], err = strconv.ParseFloat(f[i], 64); err != nil {
				ok = false
			}
		}
		if ok {
			l := Load{At: time.Unix(int64(v[0]), 0).UTC(), One: v[1], Five: v[2], Fifteen: v[3]}
			readCPU(&l, f)
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

// readCPU fills l's CPU counters from the "cpu" field and the eight
// numbers after it, if the line has them.
func readCPU(l *Load, f []string) {
	for i, w := range f {
		if w != "cpu" || len(f) < i+9 {
			continue
		}
		var c [8]int64
		for j := range c {
			n, err := strconv.ParseInt(f[i+1+j], 10, 64)
			if err != nil {
				return
			}
			c[j] = n
		}
		for _, n := range c { // guest time is already in user and nice
			l.Total += n
		}
		l.CPU, l.Idle, l.Steal = true, c[3]+c[4], c[7]
		return
	}
}
