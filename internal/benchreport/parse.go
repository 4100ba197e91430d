package benchreport

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Metric is one value of a result line, in the order of the line.
type Metric struct {
	Unit  string
	Value float64
}

// Result is one benchmark result line.
type Result struct {
	Pkg        string
	Name       string // without the -N GOMAXPROCS suffix
	Procs      int    // the suffix, 0 if none
	Run        int    // 0 for the first line of Pkg and Name, 1 for the next...
	Iterations int64
	Metrics    []Metric
}

// Get returns the value of the metric with unit, and whether it is there.
func (r Result) Get(unit string) (float64, bool) {
	for _, m := range r.Metrics {
		if m.Unit == unit {
			return m.Value, true
		}
	}
	return 0, false
}

// Note is a skip or a failure of a benchmark, with its first message line.
type Note struct {
	Pkg, Name, Kind, Message string // Kind is SKIP or FAIL
}

// Output is what Parse read.
type Output struct {
	Results []Result
	Notes   []Note
	// CPU is the first `cpu:` header line's value.
	CPU string
	// Failed lists packages whose run ended with a FAIL line.
	Failed []string
}

// Runs is the largest run count of any benchmark.
func (o *Output) Runs() int {
	n := 0
	for _, r := range o.Results {
		n = max(n, r.Run+1)
	}
	return n
}

// Names lists the benchmarks (package, name) in order of first appearance.
func (o *Output) Names() [][2]string {
	seen := map[[2]string]bool{}
	var out [][2]string
	for _, r := range o.Results {
		k := [2]string{r.Pkg, r.Name}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// Of returns the results of one benchmark, by run.
func (o *Output) Of(pkg, name string) []Result {
	var out []Result
	for _, r := range o.Results {
		if r.Pkg == pkg && r.Name == name {
			out = append(out, r)
		}
	}
	return out
}

// splitName takes the -N GOMAXPROCS suffix off a benchmark name.
func splitName(s string) (string, int) {
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		if n, err := strconv.Atoi(s[i+1:]); err == nil && n > 0 {
			return s[:i], n
		}
	}
	return s, 0
}

// parseFigures parses "<iterations> <value> <unit> <value> <unit>...".
func parseFigures(fields []string) (int64, []Metric, error) {
	if len(fields) < 3 || len(fields)%2 != 1 {
		return 0, nil, fmt.Errorf("want iterations then value-unit pairs, got %q", strings.Join(fields, " "))
	}
	n, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("iterations: %w", err)
	}
	var ms []Metric
	for i := 1; i < len(fields); i += 2 {
		v, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			return 0, nil, fmt.Errorf("value of %s: %w", fields[i+1], err)
		}
		ms = append(ms, Metric{Unit: fields[i+1], Value: v})
	}
	return n, ms, nil
}

// Parse reads go test -bench output (see the package doc).
func Parse(r io.Reader) (*Output, error) {
	out := &Output{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	pkg := ""
	pending := "" // a benchmark name whose figures have not come yet
	var note *Note
	seen := map[[2]string]int{}
	add := func(full string, fields []string) bool {
		n, ms, err := parseFigures(fields)
		if err != nil {
			return false
		}
		name, procs := splitName(full)
		k := [2]string{pkg, name}
		out.Results = append(out.Results, Result{Pkg: pkg, Name: name, Procs: procs, Run: seen[k], Iterations: n, Metrics: ms})
		seen[k]++
		return true
	}
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if note != nil {
			if strings.HasPrefix(line, "    ") && trimmed != "" {
				note.Message = trimmed
				out.Notes = append(out.Notes, *note)
				note = nil
				continue
			}
			out.Notes = append(out.Notes, *note)
			note = nil
		}
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimSpace(strings.TrimPrefix(line, "pkg: "))
		case strings.HasPrefix(line, "cpu: "):
			if out.CPU == "" {
				out.CPU = strings.TrimSpace(strings.TrimPrefix(line, "cpu: "))
			}
		case strings.HasPrefix(trimmed, "--- SKIP: Benchmark"), strings.HasPrefix(trimmed, "--- FAIL: Benchmark"):
			f := strings.Fields(trimmed)
			name, _ := splitName(f[2])
			note = &Note{Pkg: pkg, Name: name, Kind: strings.TrimSuffix(f[1], ":")}
		case strings.HasPrefix(line, "FAIL\t"):
			f := strings.Split(line, "\t")
			out.Failed = append(out.Failed, f[1])
		case strings.HasPrefix(line, "Benchmark"):
			f := strings.Fields(line)
			if len(f) == 1 {
				pending = f[0]
				continue
			}
			if add(f[0], f[1:]) {
				pending = ""
			} else {
				// The name, then other output on the same line.
				pending = f[0]
			}
		case pending != "" && len(line) > 0 && (line[0] == ' ' || line[0] == '\t'):
			if add(pending, strings.Fields(line)) {
				pending = ""
			}
		}
	}
	if note != nil {
		out.Notes = append(out.Notes, *note)
	}
	return out, sc.Err()
}
