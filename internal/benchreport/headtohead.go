package benchreport

import (
	"strconv"
	"strings"
)

// HeadToHead sets two benchmarks that ran next to each other (one
// `go test` invocation per run) against each other run by run: a row per
// run with each metric as ours / theirs and that run's ratios, then a row
// with each side's median and each ratio's min / median / max.
type HeadToHead struct {
	Title        string
	Ours, Theirs Column
	Metrics      []string
	Ratios       []HeadRatio
	// Meaning says how to read the table.
	Meaning string
}

// HeadRatio is one ratio column of a HeadToHead, taken within each run.
type HeadRatio struct {
	Metric string
	// TheirsOverOurs divides theirs by ours (for a metric where less is
	// better, so that above 1 reads ours better); otherwise ours ÷ theirs.
	TheirsOverOurs bool
}

// label heads the ratio's column.
func (r HeadRatio) label(h HeadToHead) string {
	if r.TheirsOverOurs {
		return h.Theirs.Label + " ÷ " + h.Ours.Label + " " + r.Metric
	}
	return h.Ours.Label + " ÷ " + h.Theirs.Label + " " + r.Metric
}

// DefaultHeadToHeads are BENCHMARKS.md's run-by-run tables: the headline
// comparison with Citus.
var DefaultHeadToHeads = []HeadToHead{{
	Title:   "Rebalance of the pgbench layout under pgbench, shardmover and Citus: the same bytes moved",
	Ours:    Column{Label: "shardmover", Name: "BenchmarkCitusPgbench/shardmover"},
	Theirs:  Column{Label: "Citus", Name: "BenchmarkCitusPgbench/citus"},
	Metrics: []string{"wall_s", "moved_MB", "moved_MB/s", "tps_fraction", "p99_txn_ms", "max_txn_ms", "errors"},
	Ratios: []HeadRatio{
		{Metric: "wall_s", TheirsOverOurs: true},
		{Metric: "moved_MB/s"},
		{Metric: "max_txn_ms", TheirsOverOurs: true},
	},
	Meaning: "pgbench's layout (`pgbench -i`, pgbench_accounts and pgbench_history colocated in 16 shard groups of equal size on two workers, a third added) " +
		"on a fresh Citus cluster per side, rebalanced while pgbench (never retrying, -M prepared, 2 clients through each of the four nodes, unthrottled) runs the TPC-B-like " +
		"transaction of internal/pgbench: shardmover at its defaults against `citus_rebalance_start(shard_transfer_mode := 'force_logical')`, both by Citus's default strategy. " +
		"Its shard groups are of one size, so both planners move the same bytes (moved_MB shows it) and the wall-time ratio compares the movers. " +
		"tps_fraction is pgbench's committed transactions per second during the rebalance over the 5 s before; p99_txn_ms and max_txn_ms are the transactions that ended " +
		"during the rebalance, from pgbench's per-transaction logs; errors counts failed transactions and aborted clients (any fails the benchmark). " +
		"Every ratio reads above 1 as shardmover better: Citus's wall time and slowest transaction over shardmover's, shardmover's bytes per second over Citus's.",
}}

// renderHeadToHead writes one HeadToHead's table.
func renderHeadToHead(p func(string, ...any), out *Output, h HeadToHead) {
	p("### %s\n\n%s One row per run, each figure %s / %s (`%s` / `%s`); the ratios are taken within each run; ",
		h.Title, h.Meaning, cell(h.Ours.Label), cell(h.Theirs.Label), cell(h.Ours.Name), cell(h.Theirs.Name))
	p("the last row gives each side's median and each ratio's min / median / max over the runs.\n\n")
	p("| run |")
	for _, m := range h.Metrics {
		p(" %s |", cell(m))
	}
	for _, r := range h.Ratios {
		p(" %s |", cell(r.label(h)))
	}
	p("\n|---|%s\n", strings.Repeat("---|", len(h.Metrics)+len(h.Ratios)))

	ours, oursMissing := results(out, h.Ours.Name)
	theirs, theirsMissing := results(out, h.Theirs.Name)
	if len(ours) == 0 && len(theirs) == 0 {
		p("| — |%s\n\nmissing: %s; %s\n\n", strings.Repeat(" — |", len(h.Metrics)+len(h.Ratios)), oursMissing, theirsMissing)
		return
	}
	byRun := func(rs []Result) map[int]Result {
		m := map[int]Result{}
		for _, r := range rs {
			m[r.Run] = r
		}
		return m
	}
	o, t := byRun(ours), byRun(theirs)
	runs := 0
	for _, r := range append(append([]Result{}, ours...), theirs...) {
		runs = max(runs, r.Run+1)
	}
	pair := func(a, b Result, okA, okB bool, m string) string {
		f := func(r Result, ok bool) string {
			if !ok {
				return "—"
			}
			if v, ok := r.Get(m); ok {
				return num(v)
			}
			return "—"
		}
		return f(a, okA) + " / " + f(b, okB)
	}
	ratios := make([][]float64, len(h.Ratios))
	for run := 0; run < runs; run++ {
		a, okA := o[run]
		b, okB := t[run]
		p("| %d |", run+1)
		for _, m := range h.Metrics {
			p(" %s |", pair(a, b, okA, okB, m))
		}
		for i, r := range h.Ratios {
			v, ok := headRatio(a, b, okA && okB, r)
			if !ok {
				p(" — |")
				continue
			}
			ratios[i] = append(ratios[i], v)
			p(" %s |", num(v))
		}
		p("\n")
	}
	p("| %s |", cell("all "+strconv.Itoa(runs)+" runs: medians; ratios min / median / max"))
	for _, m := range h.Metrics {
		med := func(rs []Result) string {
			if s, ok := summary(rs, m); ok {
				return num(s.Median)
			}
			return "—"
		}
		p(" %s / %s |", med(ours), med(theirs))
	}
	for i := range h.Ratios {
		if len(ratios[i]) == 0 {
			p(" — |")
			continue
		}
		p(" %s |", triple(Stats(ratios[i])))
	}
	p("\n\n")
	var missing []string
	for _, m := range []string{oursMissing, theirsMissing} {
		if m != "" {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		p("missing: %s\n\n", cell(strings.Join(missing, "; ")))
	}
}

// headRatio is one run's ratio r of ours a and theirs b.
func headRatio(a, b Result, both bool, r HeadRatio) (float64, bool) {
	if !both {
		return 0, false
	}
	av, ok1 := a.Get(r.Metric)
	bv, ok2 := b.Get(r.Metric)
	if r.TheirsOverOurs {
		av, bv = bv, av
	}
	if !ok1 || !ok2 || bv == 0 {
		return 0, false
	}
	return av / bv, true
}
