// Package benchreport turns the output of repeated `go test -bench` runs
// into BENCHMARKS.md.
//
// Contract:
//
//   - Parse reads the standard text format of `go test -bench` (lines such
//     as `BenchmarkX/sub-2  1  123 ns/op  4.5 metric_name ...`, the
//     `pkg:` header lines, `--- SKIP:` and `--- FAIL:` blocks and their first
//     message line); log blocks and other lines are ignored. A result line
//     broken by other output (the name printed, the figures a line later)
//     is joined. The -N GOMAXPROCS suffix is taken off the name. Several
//     runs may be concatenated in one input: the i-th line of a benchmark
//     (package and name) is its run i, so two sub-benchmarks that run next
//     to each other in one `go test` invocation have the same run index.
//   - Stats gives min / median / max of a set of values (the median of an
//     even count is the mean of the middle two).
//   - A Comparison pairs a benchmark with its baseline (by a pattern on the
//     name) and a metric, and takes the ratio side ÷ baseline in each run
//     where both have the metric, or takes a metric the benchmark already
//     reports as a ratio measured within one run (x_native). Only ratios of
//     the same run are combined, as min / median / max over runs.
//     DefaultComparisons are the ones BENCHMARKS.md shows; a comparison with
//     no run is a row saying why (the skip or failure message of the
//     benchmark, or that it was not in the output).
//   - A HeadToHead sets two benchmarks against each other run by run: a
//     row per run with each metric as ours / theirs and that run's ratios
//     (each chosen to read above 1 as ours better), then a row with each
//     side's median and each ratio's min / median / max. A SideBySide puts
//     benchmarks next to each other, metric by metric (each cell min /
//     median / max over runs), with the ratio of the last column to the
//     first taken per run as a Comparison takes it; with Moved it opens
//     with a sentence computed from the runs comparing the bytes the first
//     and the last column moved: when they differ by more than a tenth it
//     says the planners moved different bytes and sets the wall-time ratio
//     beside the bytes-per-second ratio. A Target holds one metric of one
//     benchmark, or its ratio to another benchmark's in the same run
//     (Base), against a ceiling (or a floor) and counts the runs that meet
//     it. DefaultHeadToHeads (the headline comparison with Citus: the
//     rebalance of the pgbench layout under pgbench, where both sides move
//     the same bytes), DefaultSideBySides (the cutover pauses with 8 and 32
//     clients; one move of a small shard group by shardmover and by Citus;
//     the rebalance of the github layout by each, where the planners pick
//     different groups) and DefaultTargets (on the pgbench layout,
//     shardmover's rebalance at least 3 times as fast as Citus's and its
//     slowest transaction no slower than Citus's; the mover's peak RSS
//     moving one large shard group, under 150 MB; a move's fixed cost,
//     under 500 ms; the writes' rate during a rebalance, at least 0.8 of
//     before; the writes around the cutovers with 8 clients, p99 under 100
//     ms and max under 500 ms; each apply shape at least 1.5 times the
//     native subscription) are BENCHMARKS.md's key figures; a benchmark
//     with no result gives a cell saying why, as a comparison does.
//   - Render writes the document: the machine facts (CPU model and count,
//     memory, OS, Go, PostgreSQL and Citus versions, the load average at the
//     start and end of the run and its samples during it, with a sentence
//     saying whether the machine was busy), the command and the sizes that
//     produced it, the key figures (head-to-heads, side-by-sides, targets),
//     the comparisons, then each benchmark's metrics as min / median / max
//     over runs, and any skips and failures.
//     Every figure is computed from the input; nothing is typed by hand.
//   - Facts reads the machine facts from /proc, /etc/os-release, the
//     PostgreSQL binaries and the Citus control file, and a load file of
//     `unix_seconds loadavg-line` samples written while the benchmarks ran.
//
// `go run ./internal/benchreport/cmd/benchreport` is the generator; `make
// bench` runs the benchmarks, saves their output to bin/bench.txt and then
// runs it.
package benchreport
