package benchreport

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// SideBySide is a table of benchmarks next to each other, metric by
// metric: each column's figures over its runs and, with Ratio, the last
// column ÷ the first taken per run (as a Comparison takes it).
type SideBySide struct {
	Title   string
	Columns []Column
	Metrics []string
	// Ratio heads the ratio column; empty for none.
	Ratio string
	// Meaning says how to read the table.
	Meaning string
	// Moved, when set, opens the table with a sentence comparing the bytes
	// the first and the last column moved (see Moved).
	Moved *Moved
}

// Moved names a rebalance table's metrics of what each side moved: Bytes
// (MB moved), Groups (shard groups moved), Rate (MB moved per second) and
// Wall (wall time). The sentence gives the first and the last column's
// medians of Bytes and Groups, and the Wall ratio (last ÷ first: how many
// times as fast the first finished) beside the Rate ratio (first ÷ last:
// how many times as fast it moved each byte), both taken within each run.
// When the Bytes differ by more than a tenth it opens saying the planners
// moved different bytes, so that the wall-time ratio compares different
// work; a Rate ratio within a tenth of 1 is called level.
type Moved struct {
	Bytes, Groups, Rate, Wall string
	// First and Last name the first and the last column in the sentence.
	First, Last string
}

// Column is one benchmark of a SideBySide, under a label.
type Column struct {
	Label, Name string
}

// Target is one metric of one benchmark held against a ceiling.
type Target struct {
	// Title names the figure; {metric} in it becomes the median of that
	// metric of the benchmark's runs.
	Title        string
	Name, Metric string
	// Base, when set, makes the figure a ratio taken within each run:
	// Name's Metric ÷ Base's Metric of the same run.
	Base string
	// Below is the ceiling: a run meets the target when its value is
	// under it. With AtLeast set, Below is the floor instead: a run meets
	// the target when its value is at or above it.
	Below   float64
	AtLeast bool
	// Unit follows the ceiling in the table.
	Unit string
}

// DefaultSideBySides are BENCHMARKS.md's side-by-side tables.
var DefaultSideBySides = []SideBySide{{
	Title: "Cutover write pause, 8 and 32 clients",
	Columns: []Column{
		{Label: "8 clients", Name: "BenchmarkMoveUnderWorkload/clients=8"},
		{Label: "32 clients", Name: "BenchmarkMoveUnderWorkload/clients=32"},
	},
	Metrics: []string{"max_write_pause_ms", "cutover_p50_ms", "cutover_p99_ms", "cutover_max_ms"},
	Ratio:   "32 ÷ 8 clients",
	Meaning: "The same moves (4 shard groups, one after another) under a routed workload of 8 and of 32 clients. " +
		"max_write_pause_ms is the longest write pause the mover measured in its cutovers; cutover_p50/p99/max_ms are " +
		"the latencies of the writes acknowledged from 2 s before to 1 s after each cutover. A ratio above 1: the pause grew with the clients.",
}, {
	Title: "One move of a small shard group, shardmover and Citus",
	Columns: []Column{
		{Label: "shardmover", Name: "BenchmarkMoveFixedCost/shardmover"},
		{Label: "Citus citus_move_shard_placement, force_logical", Name: "BenchmarkMoveFixedCost/citus"},
	},
	Metrics: []string{"move_ms", "schedule_ms", "overhead_ms", "copy_ms", "catchup_ms"},
	Ratio:   "Citus ÷ shardmover",
	Meaning: "Shard groups of about 0.1 MB (github_users and github_events, 200 users and 2,000 events in 32 shards), each moved on its own from its worker to an added one on an idle Citus cluster, " +
		"after one untimed move per side. move_ms is the mean wall time of one move from the request until it returned done; for shardmover, " +
		"schedule_ms is what comes before the engine runs it (catalog snapshot, checks, journal rows), overhead_ms the engine's time outside copying " +
		"and catching up (preflight, setup, indexing, cutover, cleanup), copy_ms and catchup_ms the rest. A ratio above 1: Citus took longer.",
}, {
	Title: "Rebalance of the github layout after adding a node, where the planners pick different groups: shardmover (one move at a time, --overlap, and --groups-per-stream 8) and Citus",
	Columns: []Column{
		{Label: "shardmover", Name: "BenchmarkCitusRebalance/shardmover"},
		{Label: "shardmover --overlap", Name: "BenchmarkCitusRebalance/shardmover-overlap"},
		{Label: "shardmover --groups-per-stream 8", Name: "BenchmarkCitusRebalance/shardmover-streams"},
		{Label: "Citus citus_rebalance_start, force_logical", Name: "BenchmarkCitusRebalance/citus"},
	},
	Metrics: []string{"wall_s", "moved_MB/s", "moved_MB", "throughput_fraction", "max_write_ms", "p99_write_ms",
		"server_cpu_ms/write_before", "server_cpu_ms/write_during", "rebalance_server_cpu_s"},
	Ratio: "Citus ÷ shardmover",
	Moved: &Moved{Bytes: "moved_MB", Groups: "moved_groups", Rate: "moved_MB/s", Wall: "wall_s", First: "shardmover", Last: "Citus"},
	Meaning: "The same layout on a fresh Citus cluster per side (github_users and github_events, 32 colocated shards, about 125 MB on two workers, a third added), " +
		"rebalanced by shard count while 8 clients write through Citus. throughput_fraction is the writes' rate during the rebalance over the 5 s before; " +
		"server_cpu_ms/write is the CPU of every PostgreSQL process of the cluster per acknowledged write, and rebalance_server_cpu_s what the servers used " +
		"during the rebalance beyond its writes at the rate before. The data is skewed (a few users write most events), so the two planners pick groups of different sizes: " +
		"compare moved_MB/s (moved_MB over wall_s), not only wall_s; the pgbench layout above is the comparison where both move the same bytes. " +
		"The ratio column divides Citus's figure by shardmover's default one.",
}}

// DefaultTargets are BENCHMARKS.md's figures with a target.
var DefaultTargets = []Target{{
	Title: "rebalance of the pgbench layout under pgbench (the same bytes moved): how many times as fast as Citus's, Citus's wall time ÷ shardmover's",
	Name:  "BenchmarkCitusPgbench/citus", Base: "BenchmarkCitusPgbench/shardmover", Metric: "wall_s", Below: 3, AtLeast: true,
}, {
	Title: "slowest pgbench transaction during that rebalance, Citus's ÷ shardmover's (at least 1: shardmover's no worse)",
	Name:  "BenchmarkCitusPgbench/citus", Base: "BenchmarkCitusPgbench/shardmover", Metric: "max_txn_ms", Below: 1, AtLeast: true,
}, {
	Title: "`shardmover move` peak RSS moving one shard group of {group_MB} MB",
	Name:  "BenchmarkMoveMemory", Metric: "peak_rss_MB", Below: 150, Unit: "MB",
}, {
	Title: "a move's fixed cost: the engine's time outside copying and catching up, per move of a small shard group",
	Name:  "BenchmarkMoveFixedCost/shardmover", Metric: "overhead_ms", Below: 500, Unit: "ms",
}, {
	Title: "writes' rate during a rebalance after adding a node, as a fraction of before (defaults: one move at a time)",
	Name:  "BenchmarkCitusRebalance/shardmover", Metric: "throughput_fraction", Below: 0.8, AtLeast: true,
}, {
	Title: "writes' rate during a rebalance after adding a node, as a fraction of before (`--overlap`)",
	Name:  "BenchmarkCitusRebalance/shardmover-overlap", Metric: "throughput_fraction", Below: 0.8, AtLeast: true,
}, {
	Title: "writes' rate during a rebalance after adding a node, as a fraction of before (`--groups-per-stream 8`)",
	Name:  "BenchmarkCitusRebalance/shardmover-streams", Metric: "throughput_fraction", Below: 0.8, AtLeast: true,
}, {
	Title: "p99 latency of the writes around each cutover, 8 clients",
	Name:  "BenchmarkMoveUnderWorkload/clients=8", Metric: "cutover_p99_ms", Below: 100, Unit: "ms",
}, {
	Title: "slowest write around the cutovers, 8 clients",
	Name:  "BenchmarkMoveUnderWorkload/clients=8", Metric: "cutover_max_ms", Below: 500, Unit: "ms",
}, applyTarget("txn10", "10-change transactions"), applyTarget("txn1", "1-change transactions"),
	applyTarget("insert", "insert-only, github_events rows"), applyTarget("update-random", "single-row updates of random keys")}

// applyTarget holds one BenchmarkApply shape's speed, as a multiple of
// PostgreSQL's own subscription on the same backlog, against 1.5.
func applyTarget(shape, what string) Target {
	return Target{
		Title: "applying a backlog (" + what + "), changes/s as a multiple of `CREATE SUBSCRIPTION`'s in the same iteration",
		Name:  "BenchmarkApply/" + shape, Metric: "x_native", Below: 1.5, AtLeast: true,
	}
}

// results returns the results of the benchmark called name in whichever
// package has it, or why there are none.
func results(out *Output, name string) ([]Result, string) {
	for _, k := range out.Names() {
		if k[1] == name {
			return out.Of(k[0], k[1]), ""
		}
	}
	return nil, why(out, "", name)
}

func summary(rs []Result, metric string) (Summary, bool) {
	var vs []float64
	for _, r := range rs {
		if v, ok := r.Get(metric); ok {
			vs = append(vs, v)
		}
	}
	return Stats(vs), len(vs) > 0
}

func triple(s Summary) string {
	return num(s.Min) + " / " + num(s.Median) + " / " + num(s.Max)
}

// renderSideBySide writes one SideBySide's table.
func renderSideBySide(p func(string, ...any), out *Output, t SideBySide) {
	p("### %s\n\n", t.Title)
	if t.Moved != nil {
		if s := movedSentence(out, t); s != "" {
			p("%s\n\n", s)
		}
	}
	p("%s Each cell is min / median / max over the runs", t.Meaning)
	if t.Ratio != "" {
		p("; the ratio is taken within each run (both sides ran next to each other), then summarized")
	}
	p(".\n\n| metric |")
	for _, c := range t.Columns {
		p(" %s (`%s`) |", cell(c.Label), cell(c.Name))
	}
	if t.Ratio != "" {
		p(" %s |", cell(t.Ratio))
	}
	p("\n|---|%s", strings.Repeat("---|", len(t.Columns)))
	if t.Ratio != "" {
		p("---|")
	}
	p("\n")
	for _, m := range t.Metrics {
		p("| %s |", cell(m))
		for _, c := range t.Columns {
			rs, missing := results(out, c.Name)
			s, ok := summary(rs, m)
			switch {
			case missing != "":
				p(" missing: %s |", cell(missing))
			case !ok:
				p(" not reported |")
			default:
				p(" %s |", triple(s))
			}
		}
		if t.Ratio != "" {
			p(" %s |", cell(sideRatio(out, t, m)))
		}
		p("\n")
	}
	p("\n")
}

// sideRatio is the ratio cell of metric m: the last column ÷ the first, per
// run, by Compare.
func sideRatio(out *Output, t SideBySide, m string) string {
	if len(t.Columns) < 2 {
		return "—"
	}
	first, last := t.Columns[0], t.Columns[len(t.Columns)-1]
	rs := Compare(out, []Comparison{{Side: regexp.MustCompile("^" + regexp.QuoteMeta(last.Name) + "$"), Base: first.Name, Metric: m}})
	if len(rs) != 1 || len(rs[0].Values) == 0 {
		return "—"
	}
	return triple(Stats(rs[0].Values))
}

var placeholder = regexp.MustCompile(`\{([^{}]+)\}`)

// renderTargets writes the table of figures with a target.
func renderTargets(p func(string, ...any), out *Output, ts []Target) {
	p("### Targets\n\nEach figure min / median / max over the runs, and the runs in which it met its target.\n\n")
	p("| figure | benchmark | metric | runs | min | median | max | target | met in |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range ts {
		rs, missing := results(out, t.Name)
		name := t.Name
		if t.Base != "" {
			name = t.Name + " ÷ " + t.Base
		}
		title := placeholder.ReplaceAllStringFunc(t.Title, func(s string) string {
			if v, ok := summary(rs, s[1:len(s)-1]); ok {
				return num(v.Median)
			}
			return "?"
		})
		bound := "under"
		if t.AtLeast {
			bound = "at least"
		}
		target := strings.TrimSpace(fmt.Sprintf("%s %s %s", bound, strconv.FormatFloat(t.Below, 'f', -1, 64), t.Unit))
		var vs []float64
		if t.Base == "" {
			for _, r := range rs {
				if v, ok := r.Get(t.Metric); ok {
					vs = append(vs, v)
				}
			}
		} else if missing == "" {
			vs, missing = withinRuns(out, t.Name, t.Base, t.Metric)
		}
		if len(vs) == 0 {
			if missing == "" {
				missing = fmt.Sprintf("%s reported no %s", t.Name, t.Metric)
			}
			p("| %s | %s | %s | 0 | — | — | — | %s | missing: %s |\n", cell(title), cell(name), cell(t.Metric), cell(target), cell(missing))
			continue
		}
		met := 0
		for _, v := range vs {
			if v < t.Below != t.AtLeast {
				met++
			}
		}
		s := Stats(vs)
		p("| %s | %s | %s | %d | %s | %s | %s | %s | %d of %d runs |\n", cell(title), cell(name), cell(t.Metric), s.N,
			num(s.Min), num(s.Median), num(s.Max), cell(target), met, s.N)
	}
	p("\n")
}

// withinRuns is metric of name ÷ metric of base, per run in which both
// report it, or why there is none.
func withinRuns(out *Output, name, base, metric string) ([]float64, string) {
	rs, missing := results(out, base)
	if missing != "" {
		return nil, missing
	}
	byRun := map[int]Result{}
	for _, r := range rs {
		byRun[r.Run] = r
	}
	sides, _ := results(out, name)
	var vs []float64
	for _, s := range sides {
		b, ok := byRun[s.Run]
		if !ok {
			continue
		}
		sv, ok1 := s.Get(metric)
		bv, ok2 := b.Get(metric)
		if ok1 && ok2 && bv != 0 {
			vs = append(vs, sv/bv)
		}
	}
	if len(vs) == 0 {
		return nil, fmt.Sprintf("no run in which both %s and %s report %s", name, base, metric)
	}
	return vs, ""
}

// movedSentence compares what the first and the last column of t moved
// (t.Moved), from the medians over the runs and the ratios within them;
// "" when either reported none.
func movedSentence(out *Output, t SideBySide) string {
	if len(t.Columns) < 2 {
		return ""
	}
	first, last := t.Columns[0], t.Columns[len(t.Columns)-1]
	fr, m1 := results(out, first.Name)
	lr, m2 := results(out, last.Name)
	if m1 != "" || m2 != "" {
		return ""
	}
	mv := t.Moved
	fb, ok1 := summary(fr, mv.Bytes)
	lb, ok2 := summary(lr, mv.Bytes)
	wall, _ := withinRuns(out, last.Name, first.Name, mv.Wall)
	rate, _ := withinRuns(out, first.Name, last.Name, mv.Rate)
	if !ok1 || !ok2 || len(wall) == 0 || len(rate) == 0 || fb.Median <= 0 {
		return ""
	}
	w, r := Stats(wall).Median, Stats(rate).Median
	groups := ""
	if fg, ok := summary(fr, mv.Groups); ok && mv.Groups != "" {
		if lg, ok := summary(lr, mv.Groups); ok {
			if fg.Median == lg.Median {
				groups = fmt.Sprintf(", each in %s groups (%s)", count(fg.Median), mv.Groups)
			} else {
				groups = fmt.Sprintf(", in %s and %s groups (%s)", count(fg.Median), count(lg.Median), mv.Groups)
			}
		}
	}
	moved := fmt.Sprintf("%s moved %s MB and %s %s MB (%s, medians)%s", mv.First, num(fb.Median), mv.Last, num(lb.Median), mv.Bytes, groups)
	wallRatio := fmt.Sprintf("%s's %s ÷ %s's, %s", mv.Last, mv.Wall, mv.First, num(w))
	rateRatio := fmt.Sprintf("%s's %s ÷ %s's is %s", mv.First, mv.Rate, mv.Last, num(r))
	if r >= 0.9 && r <= 1/0.9 {
		rateRatio = "the two are level: " + rateRatio
	}
	const within = " (medians of the ratios within each run)"
	if q := lb.Median / fb.Median; q >= 0.9 && q <= 1/0.9 {
		return fmt.Sprintf("Both sides moved about the same bytes: %s; the wall-time ratio (%s) compares the same work, and on bytes moved per second %s%s.", moved, wallRatio, rateRatio, within)
	}
	return fmt.Sprintf("**The planners moved different bytes:** %s. So the wall-time ratio (%s) compares different work; on bytes moved per second %s%s.",
		moved, wallRatio, rateRatio, within)
}

// count formats a count: no decimals unless it has some (a median of
// two).
func count(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
