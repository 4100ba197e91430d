package benchreport

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func parseFile(t *testing.T, name string) *Output {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	require.NoError(t, err)
	defer f.Close()
	o, err := Parse(f)
	require.NoError(t, err)
	return o
}

// testdata/citus-rebalance.txt is one real run of BenchmarkCitusRebalance
// (SHARDMOVER_BENCH_CITUS_MB=150), logs included.
func TestParseCitusRun(t *testing.T) {
	o := parseFile(t, "citus-rebalance.txt")
	require.Equal(t, "AMD EPYC", o.CPU)
	require.Len(t, o.Results, 2)
	sm, ci := o.Results[0], o.Results[1]
	require.Equal(t, "github.com/shardmover/shardmover/scheduler", sm.Pkg)
	require.Equal(t, "BenchmarkCitusRebalance/shardmover", sm.Name)
	require.Equal(t, "BenchmarkCitusRebalance/citus", ci.Name)
	require.Equal(t, 2, sm.Procs)
	require.Equal(t, 0, sm.Run)
	require.Equal(t, 0, ci.Run)
	require.EqualValues(t, 1, sm.Iterations)
	v, ok := sm.Get("ns/op")
	require.True(t, ok)
	require.Equal(t, 16364679062.0, v)
	v, _ = sm.Get("wall_s")
	require.Equal(t, 16.37, v)
	v, _ = ci.Get("wall_s")
	require.Equal(t, 66.07, v)
	v, _ = ci.Get("writes/s_during")
	require.Equal(t, 1272.0, v)
	_, ok = ci.Get("max_cutover_ms")
	require.False(t, ok, "Citus reports no cutover of its own")
	require.Equal(t, "ns/op", sm.Metrics[0].Unit)
	require.Len(t, sm.Metrics, 12)
	require.Empty(t, o.Notes)
	require.Empty(t, o.Failed)
}

// testdata/apply.txt is one real run of BenchmarkApply with -count=3
// (each shape three times in a row, so runs 0, 1, 2), logs included, and
// the trailing name of a result line whose figures come after other output.
func TestParseApplyRuns(t *testing.T) {
	o := parseFile(t, "apply.txt")
	require.Equal(t, 3, o.Runs())
	names := o.Names()
	require.Equal(t, [][2]string{
		{"github.com/shardmover/shardmover/replication", "BenchmarkApply/txn10"},
		{"github.com/shardmover/shardmover/replication", "BenchmarkApply/txn1"},
		{"github.com/shardmover/shardmover/replication", "BenchmarkApply/insert"},
		{"github.com/shardmover/shardmover/replication", "BenchmarkApply/update-random"},
	}, names)
	for _, k := range names {
		rs := o.Of(k[0], k[1])
		require.Len(t, rs, 3, k[1])
		for i, r := range rs {
			require.Equal(t, i, r.Run)
			sm, ok1 := r.Get("shardmover_changes/s")
			na, ok2 := r.Get("native_changes/s")
			x, ok3 := r.Get("x_native")
			require.True(t, ok1 && ok2 && ok3, k[1])
			// The line's ratio is its two rates' ratio (to the 4 digits printed).
			require.InEpsilon(t, sm/na, x, 2e-3, k[1])
		}
	}
}

func TestParseBrokenLineAndNotes(t *testing.T) {
	in := strings.Join([]string{
		"pkg: example.com/p",
		"BenchmarkA/x-2         \t",
		"some log line the code under test printed",
		"       1\t 470767234 ns/op\t      9102 native_changes/s",
		"--- SKIP: BenchmarkCitusRebalance/citus",
		"    citus_test.go:40: Citus is not installed",
		"--- FAIL: BenchmarkCopy",
		"    bench_test.go:12: boom",
		"FAIL\texample.com/p\t12.3s",
	}, "\n")
	o, err := Parse(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, o.Results, 1)
	require.Equal(t, "BenchmarkA/x", o.Results[0].Name)
	v, _ := o.Results[0].Get("native_changes/s")
	require.Equal(t, 9102.0, v)
	require.Equal(t, []Note{
		{Pkg: "example.com/p", Name: "BenchmarkCitusRebalance/citus", Kind: "SKIP", Message: "citus_test.go:40: Citus is not installed"},
		{Pkg: "example.com/p", Name: "BenchmarkCopy", Kind: "FAIL", Message: "bench_test.go:12: boom"},
	}, o.Notes)
	require.Equal(t, []string{"example.com/p"}, o.Failed)
}

func TestSplitName(t *testing.T) {
	for in, want := range map[string]string{
		"BenchmarkApply/update-random-2":     "BenchmarkApply/update-random",
		"BenchmarkCopy/shardmover-4ranges-2": "BenchmarkCopy/shardmover-4ranges",
		"BenchmarkCopy/psql-pipe":            "BenchmarkCopy/psql-pipe",
	} {
		got, _ := splitName(in)
		require.Equal(t, want, got)
	}
}

func TestStats(t *testing.T) {
	require.Equal(t, Summary{}, Stats(nil))
	require.Equal(t, Summary{N: 3, Min: 1.024, Median: 1.244, Max: 4.852}, Stats([]float64{1.244, 4.852, 1.024}))
	require.Equal(t, Summary{N: 4, Min: 1, Median: 2.5, Max: 4}, Stats([]float64{4, 1, 3, 2}))
}

// The apply ratios are the lines' own x_native values, per run.
func TestCompareWithin(t *testing.T) {
	o := parseFile(t, "apply.txt")
	rs := Compare(o, DefaultComparisons)
	var got []Ratio
	for _, r := range rs {
		if strings.HasPrefix(r.Side, "BenchmarkApply/") && r.Metric == "x_native" {
			got = append(got, r)
		}
	}
	require.Len(t, got, 4)
	for _, r := range got {
		require.Equal(t, "apply "+strings.TrimPrefix(r.Side, "BenchmarkApply/")+", shardmover ÷ CREATE SUBSCRIPTION", r.Title)
		var want []float64
		for _, x := range o.Of("github.com/shardmover/shardmover/replication", r.Side) {
			v, _ := x.Get("x_native")
			want = append(want, v)
		}
		require.Equal(t, want, r.Values)
	}
}

// The rebalance ratios divide the two sides of the same run.
func TestComparePairs(t *testing.T) {
	o := parseFile(t, "citus-rebalance.txt")
	byMetric := map[string]Ratio{}
	for _, r := range Compare(o, DefaultComparisons) {
		if r.Side == "BenchmarkCitusRebalance/shardmover" {
			byMetric[r.Metric] = r
		}
	}
	require.InDeltaSlice(t, []float64{16.37 / 66.07}, byMetric["wall_s"].Values, 1e-12)
	require.InDeltaSlice(t, []float64{605.6 / 1451}, byMetric["max_write_ms"].Values, 1e-12)
	require.InDeltaSlice(t, []float64{22.94 / 25.24}, byMetric["p99_write_ms"].Values, 1e-12)
	// This capture predates moved_MB/s: the row says so instead of a number.
	require.Empty(t, byMetric["moved_MB/s"].Values)
	require.Contains(t, byMetric["moved_MB/s"].Missing, "no run in which both")

	// Runs pair by index: a second copy of the output is run 1 of both.
	b, err := os.ReadFile("testdata/citus-rebalance.txt")
	require.NoError(t, err)
	o2, err := Parse(bytes.NewReader(append(append([]byte{}, b...), b...)))
	require.NoError(t, err)
	for _, r := range Compare(o2, DefaultComparisons) {
		if r.Side == "BenchmarkCitusRebalance/shardmover" && r.Metric == "wall_s" {
			require.InDeltaSlice(t, []float64{16.37 / 66.07, 16.37 / 66.07}, r.Values, 1e-12)
		}
	}
}

func TestCompareMissing(t *testing.T) {
	in := "pkg: p\n--- SKIP: BenchmarkCitusRebalance\n    citus_test.go:40: Citus is not installed\n" +
		"BenchmarkApply/txn1-2 \t 1\t 5 ns/op\t 2.0 x_native\n"
	o, err := Parse(strings.NewReader(in))
	require.NoError(t, err)
	rs := Compare(o, DefaultComparisons)
	var reb, cp *Ratio
	for i := range rs {
		switch {
		case rs[i].Metric == "wall_s":
			reb = &rs[i]
		case rs[i].Metric == "MB/s":
			cp = &rs[i]
		}
	}
	require.NotNil(t, reb)
	require.Equal(t, "BenchmarkCitusRebalance skipped: citus_test.go:40: Citus is not installed", reb.Missing)
	require.NotNil(t, cp)
	require.Contains(t, cp.Missing, "no benchmark matching")
	require.Equal(t, "copy * ranges ÷ psql binary pipe", cp.Title)
}

func TestRender(t *testing.T) {
	o := parseFile(t, "citus-rebalance.txt")
	var buf bytes.Buffer
	start := time.Unix(1796142890, 0).UTC()
	require.NoError(t, Render(&buf, Report{
		Output: o, Command: "make bench", Env: []string{"SHARDMOVER_BENCH_CITUS_MB=150"}, Took: 152 * time.Second,
		Facts: Facts{CPUModel: "AMD EPYC", CPUs: 2, Loads: []Load{
			{At: start, One: 8.51, CPU: true, Total: 1000, Idle: 400, Steal: 10},
			{At: start.Add(152 * time.Second), One: 9.14, CPU: true, Total: 1400, Idle: 500, Steal: 30}}},
		Ratios: Compare(o, DefaultComparisons),
	}))
	doc := buf.String()
	require.Contains(t, doc, "| wall_s | BenchmarkCitusRebalance/citus | 1 | 0.248 | 0.248 | 0.248 |")
	require.Contains(t, doc, "**The CPUs were saturated:** the 1-minute load average reached 9.14 on 2 CPUs")
	// 400 ticks: 100 idle, 20 stolen.
	require.Contains(t, doc, "| CPU time busy / taken by the hypervisor (steal), whole run | 70% / 5.0% |\n")
	require.Contains(t, doc, "the hypervisor gave 5.0% of the CPU time to something else.")
	require.Contains(t, doc, "| `SHARDMOVER_BENCH_CITUS_MB` | 150 |")
	require.Contains(t, doc, "| wall_s | 16.37 | 16.37 | 16.37 |")
}

// testdata/apply-abba.txt is a real run of the current BenchmarkApply (each
// iteration A B B A, wall and CPU rates) with -count=2.
func TestParseApplyABBA(t *testing.T) {
	o := parseFile(t, "apply-abba.txt")
	require.Equal(t, 2, o.Runs())
	require.Len(t, o.Results, 8)
	for _, r := range o.Results {
		sm, _ := r.Get("shardmover_changes/cpu_s")
		na, _ := r.Get("native_changes/cpu_s")
		x, ok := r.Get("x_native_cpu")
		require.True(t, ok, r.Name)
		require.InEpsilon(t, sm/na, x, 2e-3, r.Name)
	}
	var cpu []float64
	for _, r := range Compare(o, DefaultComparisons) {
		if r.Side == "BenchmarkApply/txn10" && r.Metric == "x_native_cpu" {
			cpu = r.Values
		}
	}
	require.Equal(t, []float64{0.9862, 0.7534}, cpu)
	s := Stats(cpu)
	require.Equal(t, 2, s.N)
	require.Equal(t, 0.7534, s.Min)
	require.Equal(t, 0.9862, s.Max)
	require.InDelta(t, 0.8698, s.Median, 1e-12)
}

// testdata/move-under-workload.txt is one real run of
// BenchmarkMoveUnderWorkload with its clients=8 and clients=32
// sub-benchmarks (SHARDMOVER_BENCH_EVENTS=60000).
func TestSideBySidePauses(t *testing.T) {
	o := parseFile(t, "move-under-workload.txt")
	require.Equal(t, 1, o.Runs())
	var pause []float64
	for _, r := range Compare(o, DefaultComparisons) {
		if r.Side == "BenchmarkMoveUnderWorkload/clients=32" && r.Metric == "max_write_pause_ms" {
			require.Equal(t, "cutover, 32 ÷ 8 clients", r.Title)
			require.Equal(t, "BenchmarkMoveUnderWorkload/clients=8", r.Base)
			pause = r.Values
		}
	}
	require.InDeltaSlice(t, []float64{505.5 / 161.2}, pause, 1e-12)

	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, SideBySides: DefaultSideBySides, Targets: DefaultTargets}))
	doc := buf.String()
	require.Contains(t, doc, "## Key figures\n\n### Cutover write pause, 8 and 32 clients\n")
	require.Contains(t, doc, "| metric | 8 clients (`BenchmarkMoveUnderWorkload/clients=8`) | 32 clients (`BenchmarkMoveUnderWorkload/clients=32`) | 32 ÷ 8 clients |\n|---|---|---|---|\n")
	require.Contains(t, doc, "| max_write_pause_ms | 161.2 / 161.2 / 161.2 | 505.5 / 505.5 / 505.5 | 3.14 / 3.14 / 3.14 |\n")
	require.Contains(t, doc, "| cutover_p99_ms | 13.27 / 13.27 / 13.27 | 55.98 / 55.98 / 55.98 | 4.22 / 4.22 / 4.22 |\n")
	// The memory benchmark is not in this output: its row says so.
	require.Contains(t, doc, "| `shardmover move` peak RSS moving one shard group of ? MB | BenchmarkMoveMemory | peak_rss_MB | 0 | — | — | — | under 150 MB | missing: BenchmarkMoveMemory is not in the output |\n")
}

// A column whose benchmark failed says why; the ratio needs both.
func TestSideBySideMissing(t *testing.T) {
	in := "pkg: p\nBenchmarkMoveUnderWorkload/clients=8-2 \t 1\t 5 ns/op\t 120.5 max_write_pause_ms\n" +
		"--- FAIL: BenchmarkMoveUnderWorkload/clients=32\n    move_test.go:80: boom\n"
	o, err := Parse(strings.NewReader(in))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, SideBySides: DefaultSideBySides}))
	doc := buf.String()
	require.Contains(t, doc, "| max_write_pause_ms | 120.5 / 120.5 / 120.5 | missing: BenchmarkMoveUnderWorkload/clients=32 failed: move_test.go:80: boom | — |\n")
	require.Contains(t, doc, "| cutover_p99_ms | not reported | missing: BenchmarkMoveUnderWorkload/clients=32 failed: move_test.go:80: boom | — |\n")
	require.NotContains(t, doc, "### Targets")
}

// A target counts the runs under its ceiling; {metric} in its title is
// that metric's median.
func TestTargets(t *testing.T) {
	in := "pkg: e\nBenchmarkMoveMemory-2 \t 1\t 5 ns/op\t 1030 group_MB\t 120 peak_rss_MB\n" +
		"BenchmarkMoveMemory-2 \t 1\t 5 ns/op\t 1034 group_MB\t 180 peak_rss_MB\n" +
		"BenchmarkMoveMemory-2 \t 1\t 5 ns/op\t 1031 group_MB\t 149.9 peak_rss_MB\n"
	o, err := Parse(strings.NewReader(in))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, Targets: DefaultTargets}))
	require.Contains(t, buf.String(), "| `shardmover move` peak RSS moving one shard group of 1031 MB | BenchmarkMoveMemory | peak_rss_MB | 3 | 120.0 | 149.9 | 180.0 | under 150 MB | 2 of 3 runs |\n")

	in = "pkg: e\n--- SKIP: BenchmarkMoveMemory\n    memory_bench_test.go:50: no room\n"
	o, err = Parse(strings.NewReader(in))
	require.NoError(t, err)
	buf.Reset()
	require.NoError(t, Render(&buf, Report{Output: o, Targets: DefaultTargets}))
	require.Contains(t, buf.String(), "| missing: BenchmarkMoveMemory skipped: memory_bench_test.go:50: no room |\n")
}

// testdata/move-memory.txt is one real run of BenchmarkMoveMemory
// (SHARDMOVER_BENCH_MEM_MB=1024), logs included.
func TestTargetsMemoryRun(t *testing.T) {
	o := parseFile(t, "move-memory.txt")
	rs := o.Of("github.com/shardmover/shardmover/e2e", "BenchmarkMoveMemory")
	require.Len(t, rs, 1)
	rss, ok := rs[0].Get("peak_rss_MB")
	require.True(t, ok)
	require.Equal(t, 29.93, rss)
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, SideBySides: DefaultSideBySides, Targets: DefaultTargets}))
	doc := buf.String()
	require.Contains(t, doc, "| `shardmover move` peak RSS moving one shard group of 1026 MB | BenchmarkMoveMemory | peak_rss_MB | 1 | 29.93 | 29.93 | 29.93 | under 150 MB | 1 of 1 runs |\n")
	require.Contains(t, doc, "| max_write_pause_ms | missing: BenchmarkMoveUnderWorkload/clients=8 is not in the output | missing: BenchmarkMoveUnderWorkload/clients=32 is not in the output | — |\n")
}

// The fixed-cost benchmark: both sides next to each other (the ratio per
// run), and its overhead held against 500 ms.
func TestFixedCost(t *testing.T) {
	in := "pkg: m\nBenchmarkMoveFixedCost/shardmover-2 \t 1\t 5 ns/op\t 420 move_ms\t 225 overhead_ms\n" +
		"BenchmarkMoveFixedCost/citus-2 \t 1\t 5 ns/op\t 6300 move_ms\n" +
		"pkg: m\nBenchmarkMoveFixedCost/shardmover-2 \t 1\t 5 ns/op\t 600 move_ms\t 520 overhead_ms\n" +
		"BenchmarkMoveFixedCost/citus-2 \t 1\t 5 ns/op\t 6000 move_ms\n"
	o, err := Parse(strings.NewReader(in))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, SideBySides: DefaultSideBySides, Targets: DefaultTargets}))
	doc := buf.String()
	require.Contains(t, doc, "| move_ms | 420.0 / 510.0 / 600.0 | 6000 / 6150 / 6300 | 10.00 / 12.50 / 15.00 |\n")
	require.Contains(t, doc, "| BenchmarkMoveFixedCost/shardmover | overhead_ms | 2 | 225.0 | 372.5 | 520.0 | under 500 ms | 1 of 2 runs |\n")
}

// The rebalances' write rate is held against a floor (at least 0.8), both
// with the defaults, with --overlap and with --groups-per-stream, and each
// is compared with Citus's rebalance of the same run.
func TestThroughputFloor(t *testing.T) {
	in := "pkg: s\n" +
		"BenchmarkCitusRebalance/shardmover-2 \t 1\t 5 ns/op\t 0.85 throughput_fraction\t 17 wall_s\n" +
		"BenchmarkCitusRebalance/shardmover-overlap-2 \t 1\t 5 ns/op\t 0.7 throughput_fraction\t 9 wall_s\n" +
		"BenchmarkCitusRebalance/shardmover-streams-2 \t 1\t 5 ns/op\t 0.9 throughput_fraction\t 6 wall_s\n" +
		"BenchmarkCitusRebalance/citus-2 \t 1\t 5 ns/op\t 0.84 throughput_fraction\t 85 wall_s\n" +
		"pkg: s\n" +
		"BenchmarkCitusRebalance/shardmover-2 \t 1\t 5 ns/op\t 0.8 throughput_fraction\t 16 wall_s\n" +
		"BenchmarkCitusRebalance/shardmover-overlap-2 \t 1\t 5 ns/op\t 0.81 throughput_fraction\t 10 wall_s\n" +
		"BenchmarkCitusRebalance/shardmover-streams-2 \t 1\t 5 ns/op\t 0.75 throughput_fraction\t 8 wall_s\n" +
		"BenchmarkCitusRebalance/citus-2 \t 1\t 5 ns/op\t 0.8 throughput_fraction\t 80 wall_s\n"
	o, doc := targetsDoc(t, in)
	require.Contains(t, doc, "| BenchmarkCitusRebalance/shardmover | throughput_fraction | 2 | 0.8 | 0.825 | 0.85 | at least 0.8 | 2 of 2 runs |\n")
	require.Contains(t, doc, "| BenchmarkCitusRebalance/shardmover-overlap | throughput_fraction | 2 | 0.7 | 0.755 | 0.81 | at least 0.8 | 1 of 2 runs |\n")
	require.Contains(t, doc, "| BenchmarkCitusRebalance/shardmover-streams | throughput_fraction | 2 | 0.75 | 0.825 | 0.9 | at least 0.8 | 1 of 2 runs |\n")
	byRow := ratios(o)
	require.InDeltaSlice(t, []float64{17.0 / 85, 16.0 / 80}, byRow["rebalance, shardmover ÷ Citus wall_s"], 1e-12)
	require.InDeltaSlice(t, []float64{9.0 / 85, 10.0 / 80}, byRow["rebalance, shardmover-overlap ÷ Citus wall_s"], 1e-12)
	require.InDeltaSlice(t, []float64{6.0 / 85, 8.0 / 80}, byRow["rebalance, shardmover-streams ÷ Citus wall_s"], 1e-12)

	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, SideBySides: DefaultSideBySides}))
	require.Contains(t, buf.String(), "| wall_s | 16.00 / 16.50 / 17.00 | 9.00 / 9.50 / 10.00 | 6.00 / 7.00 / 8.00 | 80.00 / 82.50 / 85.00 | 5.00 / 5.00 / 5.00 |\n")
}

// ratios gives the default comparisons' values by title and metric.
func ratios(o *Output) map[string][]float64 {
	byRow := map[string][]float64{}
	for _, r := range Compare(o, DefaultComparisons) {
		byRow[r.Title+" "+r.Metric] = r.Values
	}
	return byRow
}

// targetsDoc parses in and renders its targets.
func targetsDoc(t *testing.T, in string) (*Output, string) {
	t.Helper()
	o, err := Parse(strings.NewReader(in))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, Targets: DefaultTargets}))
	return o, buf.String()
}

// The other floors and ceilings: the apply shapes against 1.5x
// the native subscription, the writes around the cutovers against 100 ms
// (p99) and 500 ms (max); and the mover's adaptive copy against one
// stream, a ratio taken within the run.
func TestApplyCutoverCopyTargets(t *testing.T) {
	in := "pkg: r\n" +
		"BenchmarkCopy/psql-pipe-2 \t 1\t 5 ns/op\t 60.00 MB/s\n" +
		"BenchmarkCopy/shardmover-adaptive-2 \t 1\t 5 ns/op\t 55.00 adaptive_MB/s\t 50 one_stream_MB/s\t 1.1 x_one_stream\t 2 streams\n" +
		"BenchmarkApply/txn1-2 \t 1\t 5 ns/op\t 1.6 x_native\n" +
		"BenchmarkApply/insert-2 \t 1\t 5 ns/op\t 1.2 x_native\n" +
		"pkg: r\n" +
		"BenchmarkApply/txn1-2 \t 1\t 5 ns/op\t 1.4 x_native\n" +
		"BenchmarkApply/insert-2 \t 1\t 5 ns/op\t 1.5 x_native\n" +
		"pkg: e\n" +
		"BenchmarkMoveUnderWorkload/clients=8-2 \t 1\t 5 ns/op\t 9.5 cutover_p99_ms\t 520 cutover_max_ms\n"
	o, doc := targetsDoc(t, in)
	require.Contains(t, doc, "| BenchmarkApply/txn1 | x_native | 2 | 1.40 | 1.50 | 1.60 | at least 1.5 | 1 of 2 runs |\n")
	require.Contains(t, doc, "| BenchmarkApply/insert | x_native | 2 | 1.20 | 1.35 | 1.50 | at least 1.5 | 1 of 2 runs |\n")
	require.Contains(t, doc, "| BenchmarkApply/txn10 | x_native | 0 | — | — | — | at least 1.5 | missing: BenchmarkApply/txn10 is not in the output |\n")
	require.Contains(t, doc, "| BenchmarkMoveUnderWorkload/clients=8 | cutover_p99_ms | 1 | 9.50 | 9.50 | 9.50 | under 100 ms | 1 of 1 runs |\n")
	require.Contains(t, doc, "| BenchmarkMoveUnderWorkload/clients=8 | cutover_max_ms | 1 | 520.0 | 520.0 | 520.0 | under 500 ms | 0 of 1 runs |\n")

	require.Equal(t, []float64{1.1}, ratios(o)["copy adaptive ÷ one stream x_one_stream"])
}

// A load file's lines: the time, /proc/loadavg, and /proc/stat's cpu line
// when the sampler wrote it; older lines without it still read.
func TestReadLoads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "load.txt")
	require.NoError(t, os.WriteFile(path, []byte("1796239325 1.38 2.13 1.89 2/85 11823\n"+
		"1796239340 3.74 2.62 2.05 5/154 12431 cpu  359647 0 83412 3089709 705 0 8804 11860 7 9\n"+
		"garbage\n"), 0o644))
	ls, err := ReadLoads(path)
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.False(t, ls[0].CPU)
	require.Equal(t, Load{At: time.Unix(1796239340, 0).UTC(), One: 3.74, Five: 2.62, Fifteen: 2.05,
		CPU: true, Total: 359647 + 83412 + 3089709 + 705 + 8804 + 11860, Idle: 3089709 + 705, Steal: 11860}, ls[1])
}

// testdata/citus-pgbench.txt is two real runs of BenchmarkCitusPgbench
// (one `go test` each, as make bench runs them; scale 10), logs included.
func TestParsePgbenchRuns(t *testing.T) {
	o := parseFile(t, "citus-pgbench.txt")
	require.Equal(t, 2, o.Runs())
	require.Equal(t, [][2]string{
		{"github.com/shardmover/shardmover/scheduler", "BenchmarkCitusPgbench/shardmover"},
		{"github.com/shardmover/shardmover/scheduler", "BenchmarkCitusPgbench/citus"},
	}, o.Names())
	sm := o.Of("github.com/shardmover/shardmover/scheduler", "BenchmarkCitusPgbench/shardmover")
	require.Len(t, sm, 2)
	v, _ := sm[1].Get("wall_s")
	require.Equal(t, 17.58, v)
	v, _ = sm[0].Get("max_txn_ms")
	require.Equal(t, 111.6, v)
	_, ok := o.Of("github.com/shardmover/shardmover/scheduler", "BenchmarkCitusPgbench/citus")[0].Get("max_cutover_ms")
	require.False(t, ok, "Citus reports no cutover of its own")
}

// The headline table: both sides of each run next to each other, the
// ratios of that run (each reading above 1 as shardmover better), and the
// medians and the ratios' spread over the runs; then the 3x goal and the
// slowest transaction as targets, ratios taken within each run.
func TestHeadToHeadPgbench(t *testing.T) {
	o := parseFile(t, "citus-pgbench.txt")
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, HeadToHeads: DefaultHeadToHeads, SideBySides: DefaultSideBySides, Targets: DefaultTargets}))
	doc := buf.String()
	require.Contains(t, doc, "## Key figures\n\n### Rebalance of the pgbench layout under pgbench, shardmover and Citus: the same bytes moved\n")
	require.Contains(t, doc, "| run | wall_s | moved_MB | moved_MB/s | tps_fraction | p99_txn_ms | max_txn_ms | errors | Citus ÷ shardmover wall_s | shardmover ÷ Citus moved_MB/s | Citus ÷ shardmover max_txn_ms |\n"+
		"|---|---|---|---|---|---|---|---|---|---|---|\n")
	// 56.07 / 11.49 = 4.88, 4.091 / 0.8404 = 4.87, 1125 / 111.6 = 10.08.
	require.Contains(t, doc, "| 1 | 11.49 / 56.07 | 46.98 / 47.12 | 4.09 / 0.84 | 0.768 / 0.827 | 13.46 / 10.77 | 111.6 / 1125 | 0 / 0 | 4.88 | 4.87 | 10.08 |\n")
	require.Contains(t, doc, "| 2 | 17.58 / 50.05 | 46.96 / 47.14 | 2.67 / 0.942 | 0.804 / 0.767 | 27.51 / 27.65 | 233.0 / 1353 | 0 / 0 | 2.85 | 2.84 | 5.81 |\n")
	require.Contains(t, doc, "| all 2 runs: medians; ratios min / median / max | 14.54 / 53.06 | 46.97 / 47.13 | 3.38 / 0.891 | 0.786 / 0.797 | 20.48 / 19.21 | 172.3 / 1239 | 0 / 0 | 2.85 / 3.86 / 4.88 | 2.84 / 3.85 / 4.87 | 5.81 / 7.94 / 10.08 |\n")
	require.Contains(t, doc, "| BenchmarkCitusPgbench/citus ÷ BenchmarkCitusPgbench/shardmover | wall_s | 2 | 2.85 | 3.86 | 4.88 | at least 3 | 1 of 2 runs |\n")
	require.Contains(t, doc, "| BenchmarkCitusPgbench/citus ÷ BenchmarkCitusPgbench/shardmover | max_txn_ms | 2 | 5.81 | 7.94 | 10.08 | at least 1 | 2 of 2 runs |\n")
	// The headline comes before the other key figures.
	require.Less(t, strings.Index(doc, "### Rebalance of the pgbench layout"), strings.Index(doc, "### Cutover write pause"))

	byRow := ratios(o)
	require.InDeltaSlice(t, []float64{11.49 / 56.07, 17.58 / 50.05}, byRow["pgbench layout rebalance, shardmover ÷ Citus wall_s"], 1e-12)
	require.InDeltaSlice(t, []float64{46.98 / 47.12, 46.96 / 47.14}, byRow["pgbench layout rebalance, shardmover ÷ Citus moved_MB"], 1e-12)
}

// A run with one side only shows the other as "—" and no ratio; a side
// that never ran says why under the table, and its targets say so too.
func TestHeadToHeadMissing(t *testing.T) {
	b, err := os.ReadFile("testdata/citus-pgbench.txt")
	require.NoError(t, err)
	// The first run's lines only, its Citus side failed.
	first, _, _ := strings.Cut(string(b), "PASS\n")
	first, _, _ = strings.Cut(first, "BenchmarkCitusPgbench/citus-2")
	in := first + "--- FAIL: BenchmarkCitusPgbench/citus\n    pgbench_bench_test.go:120: Citus's rebalance job 1\n"
	o, err := Parse(strings.NewReader(in))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, HeadToHeads: DefaultHeadToHeads, Targets: DefaultTargets}))
	doc := buf.String()
	require.Contains(t, doc, "| 1 | 11.49 / — | 46.98 / — | 4.09 / — | 0.768 / — | 13.46 / — | 111.6 / — | 0 / — | — | — | — |\n")
	require.Contains(t, doc, "missing: BenchmarkCitusPgbench/citus failed: pgbench_bench_test.go:120: Citus's rebalance job 1\n")
	require.Contains(t, doc, "| BenchmarkCitusPgbench/citus ÷ BenchmarkCitusPgbench/shardmover | wall_s | 0 | — | — | — | at least 3 | missing: BenchmarkCitusPgbench/citus failed: pgbench_bench_test.go:120: Citus's rebalance job 1 |\n")

	o, err = Parse(strings.NewReader("pkg: s\n"))
	require.NoError(t, err)
	buf.Reset()
	require.NoError(t, Render(&buf, Report{Output: o, HeadToHeads: DefaultHeadToHeads}))
	require.Contains(t, buf.String(), "| — | — | — | — | — | — | — | — | — | — | — |\n\nmissing: BenchmarkCitusPgbench/shardmover is not in the output; BenchmarkCitusPgbench/citus is not in the output\n")
}

// testdata/citus-rebalance-rate.txt is one real run of BenchmarkCitusRebalance's
// default and Citus sides (SHARDMOVER_BENCH_CITUS_MB=150), with moved_MB/s.
// Its table opens saying the planners moved different bytes, the
// wall-time ratio beside the bytes-per-second ratio; moved_MB/s's row
// follows wall_s's.
func TestGithubLayoutMovedDifferentBytes(t *testing.T) {
	o := parseFile(t, "citus-rebalance-rate.txt")
	var buf bytes.Buffer
	require.NoError(t, Render(&buf, Report{Output: o, SideBySides: DefaultSideBySides}))
	doc := buf.String()
	// 88.08 / 8.217 = 10.72; 1.501 / 0.6899 = 2.18.
	require.Contains(t, doc, "**The planners moved different bytes:** shardmover moved 12.34 MB and Citus 60.77 MB (moved_MB, medians), each in 10 groups (moved_groups). "+
		"So the wall-time ratio (Citus's wall_s ÷ shardmover's, 10.72) compares different work; on bytes moved per second shardmover's moved_MB/s ÷ Citus's is 2.18 (medians of the ratios within each run).\n")
	require.Contains(t, doc, "| wall_s | 8.22 / 8.22 / 8.22 | missing: BenchmarkCitusRebalance/shardmover-overlap is not in the output | missing: BenchmarkCitusRebalance/shardmover-streams is not in the output | 88.08 / 88.08 / 88.08 | 10.72 / 10.72 / 10.72 |\n"+
		"| moved_MB/s | 1.50 / 1.50 / 1.50 | missing: BenchmarkCitusRebalance/shardmover-overlap is not in the output | missing: BenchmarkCitusRebalance/shardmover-streams is not in the output | 0.69 / 0.69 / 0.69 | 0.46 / 0.46 / 0.46 |\n")

	// The older capture has no moved_MB/s: no sentence, the table as before.
	o = parseFile(t, "citus-rebalance.txt")
	buf.Reset()
	require.NoError(t, Render(&buf, Report{Output: o, SideBySides: DefaultSideBySides}))
	require.NotContains(t, buf.String(), "moved different bytes:**")
	require.Contains(t, buf.String(), "| moved_MB/s | not reported | missing:")
}

// The same bytes on both sides (the pgbench runs' moved_MB, within a
// tenth) are said so, with a level rate named level.
func TestMovedSentenceSameBytes(t *testing.T) {
	o := parseFile(t, "citus-pgbench.txt")
	s := movedSentence(o, SideBySide{
		Columns: []Column{{Name: "BenchmarkCitusPgbench/shardmover"}, {Name: "BenchmarkCitusPgbench/citus"}},
		Moved:   &Moved{Bytes: "moved_MB", Groups: "moved_groups", Rate: "moved_MB/s", Wall: "wall_s", First: "shardmover", Last: "Citus"},
	})
	require.Equal(t, "Both sides moved about the same bytes: shardmover moved 46.97 MB and Citus 47.13 MB (moved_MB, medians), each in 5 groups (moved_groups); "+
		"the wall-time ratio (Citus's wall_s ÷ shardmover's, 3.86) compares the same work, and on bytes moved per second shardmover's moved_MB/s ÷ Citus's is 3.85 (medians of the ratios within each run).", s)

	// The medians of BenchmarkCitusRebalance in the BENCHMARKS.md of
	// 2026-12-04 (make bench, 3 runs), as one run: a level rate.
	in := "pkg: s\nBenchmarkCitusRebalance/shardmover-2 \t 1\t 5 ns/op\t 12.34 moved_MB\t 0.905 moved_MB/s\t 13.63 wall_s\n" +
		"BenchmarkCitusRebalance/citus-2 \t 1\t 5 ns/op\t 60.77 moved_MB\t 0.919 moved_MB/s\t 66.09 wall_s\n"
	o, err := Parse(strings.NewReader(in))
	require.NoError(t, err)
	s = movedSentence(o, DefaultSideBySides[2])
	require.Equal(t, "**The planners moved different bytes:** shardmover moved 12.34 MB and Citus 60.77 MB (moved_MB, medians). "+
		"So the wall-time ratio (Citus's wall_s ÷ shardmover's, 4.85) compares different work; "+
		"on bytes moved per second the two are level: shardmover's moved_MB/s ÷ Citus's is 0.985 (medians of the ratios within each run).", s)
}
