package benchreport

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Summary is min / median / max over N values.
type Summary struct {
	N                int
	Min, Median, Max float64
}

// Stats summarizes values (the zero Summary for none).
func Stats(values []float64) Summary {
	if len(values) == 0 {
		return Summary{}
	}
	v := append([]float64(nil), values...)
	sort.Float64s(v)
	s := Summary{N: len(v), Min: v[0], Max: v[len(v)-1]}
	if m := len(v) / 2; len(v)%2 == 1 {
		s.Median = v[m]
	} else {
		s.Median = (v[m-1] + v[m]) / 2
	}
	return s
}

// Comparison pairs benchmarks with their baselines.
type Comparison struct {
	// Title names the comparison; $1 is the Side pattern's first group.
	Title string
	// Side matches the benchmark names compared (anchored).
	Side *regexp.Regexp
	// Base is the baseline's name, with $1 for Side's first group; empty
	// when Within is set.
	Base string
	// Metric is the metric of both lines divided (side ÷ base), or, with
	// Within, the metric of the side's line that already is a ratio.
	Metric string
	Within bool
	// Meaning says how to read the ratio.
	Meaning string
}

// Ratio is one comparison's ratios over the runs where both lines exist.
type Ratio struct {
	Title, Side, Base, Metric, Meaning string
	Values                             []float64 // by run
	// Missing says why there are no values.
	Missing string
}

// DefaultComparisons are BENCHMARKS.md's comparisons.
var DefaultComparisons = []Comparison{
	{Title: "pgbench layout rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusPgbench/(shardmover)$`), Base: "BenchmarkCitusPgbench/citus", Metric: "wall_s", Meaning: "below 1: shardmover finished sooner, moving the same bytes (see moved_MB)"},
	{Title: "pgbench layout rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusPgbench/(shardmover)$`), Base: "BenchmarkCitusPgbench/citus", Metric: "moved_MB", Meaning: "near 1: both moved the same bytes"},
	{Title: "pgbench layout rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusPgbench/(shardmover)$`), Base: "BenchmarkCitusPgbench/citus", Metric: "moved_MB/s", Meaning: "above 1: shardmover moved bytes faster"},
	{Title: "pgbench layout rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusPgbench/(shardmover)$`), Base: "BenchmarkCitusPgbench/citus", Metric: "tps_fraction", Meaning: "above 1: pgbench slowed less during shardmover's rebalance"},
	{Title: "pgbench layout rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusPgbench/(shardmover)$`), Base: "BenchmarkCitusPgbench/citus", Metric: "max_txn_ms", Meaning: "below 1: shardmover's slowest transaction was faster"},
	{Title: "pgbench layout rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusPgbench/(shardmover)$`), Base: "BenchmarkCitusPgbench/citus", Metric: "p99_txn_ms", Meaning: "below 1: shardmover's p99 transaction was faster"},
	{Title: "rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusRebalance/(shardmover(?:-overlap|-streams)?)$`), Base: "BenchmarkCitusRebalance/citus", Metric: "wall_s", Meaning: "below 1: shardmover finished sooner (shardmover-overlap: with --overlap; shardmover-streams: with --groups-per-stream 8); the planners moved different bytes: see moved_MB/s"},
	{Title: "rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusRebalance/(shardmover(?:-overlap|-streams)?)$`), Base: "BenchmarkCitusRebalance/citus", Metric: "moved_MB", Meaning: "the planners pick different groups of the skewed data"},
	{Title: "rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusRebalance/(shardmover(?:-overlap|-streams)?)$`), Base: "BenchmarkCitusRebalance/citus", Metric: "moved_MB/s", Meaning: "above 1: shardmover moved bytes faster"},
	{Title: "rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusRebalance/(shardmover(?:-overlap|-streams)?)$`), Base: "BenchmarkCitusRebalance/citus", Metric: "throughput_fraction", Meaning: "above 1: writes slowed less during shardmover's rebalance"},
	{Title: "rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusRebalance/(shardmover(?:-overlap|-streams)?)$`), Base: "BenchmarkCitusRebalance/citus", Metric: "max_write_ms", Meaning: "below 1: shardmover's slowest write was faster"},
	{Title: "rebalance, $1 ÷ Citus", Side: regexp.MustCompile(`^BenchmarkCitusRebalance/(shardmover(?:-overlap|-streams)?)$`), Base: "BenchmarkCitusRebalance/citus", Metric: "p99_write_ms", Meaning: "below 1: shardmover's p99 write was faster"},
	{Title: "apply $1, shardmover ÷ CREATE SUBSCRIPTION", Side: regexp.MustCompile(`^BenchmarkApply/(.+)$`), Metric: "x_native", Within: true, Meaning: "changes/s ratio, both sides in each iteration; above 1: shardmover applied faster"},
	{Title: "apply $1, shardmover ÷ CREATE SUBSCRIPTION", Side: regexp.MustCompile(`^BenchmarkApply/(.+)$`), Metric: "x_native_cpu", Within: true, Meaning: "changes per CPU-second of both nodes and the bench process; above 1: shardmover used less CPU per change"},
	{Title: "apply $1, shardmover ÷ CREATE SUBSCRIPTION", Side: regexp.MustCompile(`^BenchmarkApply/(.+)$`), Metric: "x_native_walsender_bound", Within: true, Meaning: "the most x_native could be: the native windows over the CPU time of the walsender in shardmover's (one process, so never more than its window)"},
	{Title: "cutover, 32 ÷ 8 clients", Side: regexp.MustCompile(`^BenchmarkMoveUnderWorkload/clients=32$`), Base: "BenchmarkMoveUnderWorkload/clients=8", Metric: "max_write_pause_ms", Meaning: "above 1: the mover's longest cutover write pause grew with the clients"},
	{Title: "cutover, 32 ÷ 8 clients", Side: regexp.MustCompile(`^BenchmarkMoveUnderWorkload/clients=32$`), Base: "BenchmarkMoveUnderWorkload/clients=8", Metric: "cutover_p99_ms", Meaning: "above 1: the p99 write around the cutovers grew with the clients"},
	{Title: "copy adaptive ÷ one stream", Side: regexp.MustCompile(`^BenchmarkCopy/shardmover-adaptive$`), Metric: "x_one_stream", Within: true, Meaning: "the mover's copy (one stream, more while each pays) over one stream of the whole table, A B B A in each iteration; below 1: the adaptive copy was slower"},
	{Title: "copy $1 ranges ÷ psql binary pipe", Side: regexp.MustCompile(`^BenchmarkCopy/shardmover-(\d+)ranges$`), Base: "BenchmarkCopy/psql-pipe", Metric: "MB/s", Meaning: "above 1: Copy was faster"},
}

// Compare computes the comparisons over out. A comparison whose Side
// matches no result gives one Ratio saying so.
func Compare(out *Output, cs []Comparison) []Ratio {
	var rs []Ratio
	for _, c := range cs {
		matched := false
		for _, k := range out.Names() {
			pkg, name := k[0], k[1]
			if !c.Side.MatchString(name) {
				continue
			}
			matched = true
			r := Ratio{Title: c.Side.ReplaceAllString(name, c.Title), Side: name, Metric: c.Metric, Meaning: c.Meaning}
			side := out.Of(pkg, name)
			if c.Within {
				for _, s := range side {
					if v, ok := s.Get(c.Metric); ok {
						r.Values = append(r.Values, v)
					}
				}
			} else {
				r.Base = c.Side.ReplaceAllString(name, c.Base)
				base := map[int]Result{}
				for _, b := range out.Of(pkg, r.Base) {
					base[b.Run] = b
				}
				for _, s := range side {
					b, ok := base[s.Run]
					if !ok {
						continue
					}
					sv, ok1 := s.Get(c.Metric)
					bv, ok2 := b.Get(c.Metric)
					if ok1 && ok2 && bv != 0 {
						r.Values = append(r.Values, sv/bv)
					}
				}
				if len(r.Values) == 0 {
					if len(base) == 0 {
						r.Missing = why(out, pkg, r.Base)
					} else {
						r.Missing = fmt.Sprintf("no run in which both %s and %s report %s", name, r.Base, c.Metric)
					}
				}
			}
			if len(r.Values) == 0 && r.Missing == "" {
				r.Missing = fmt.Sprintf("%s reported no %s", name, c.Metric)
			}
			rs = append(rs, r)
		}
		if !matched {
			r := Ratio{Title: strings.ReplaceAll(c.Title, "$1", "*"), Side: c.Side.String(), Base: c.Base, Metric: c.Metric, Meaning: c.Meaning}
			r.Missing = "no benchmark matching " + c.Side.String() + " in the output"
			family := strings.SplitN(strings.TrimPrefix(c.Side.String(), "^"), "/", 2)[0]
			for _, n := range out.Notes {
				if c.Side.MatchString(n.Name) || n.Name == family {
					r.Title = c.Side.ReplaceAllString(n.Name, c.Title)
					r.Missing = fmt.Sprintf("%s %s: %s", n.Name, noteVerb(n.Kind), n.Message)
					break
				}
			}
			rs = append(rs, r)
		}
	}
	return rs
}

func noteVerb(kind string) string {
	if kind == "SKIP" {
		return "skipped"
	}
	return "failed"
}

// why says why a benchmark has no result; pkg "" is any package.
func why(out *Output, pkg, name string) string {
	for _, n := range out.Notes {
		if (n.Name == name || strings.HasPrefix(name, n.Name+"/")) && (pkg == "" || n.Pkg == pkg || n.Pkg == "") {
			return fmt.Sprintf("%s %s: %s", name, noteVerb(n.Kind), n.Message)
		}
	}
	return name + " is not in the output"
}
