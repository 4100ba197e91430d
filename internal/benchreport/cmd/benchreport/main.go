// Command benchreport writes BENCHMARKS.md from go test -bench output
// (see package benchreport).
//
//	benchreport -in bin/bench.txt -load bin/bench-load.txt -out BENCHMARKS.md \
//	    -command 'make bench' -took 1800s -env 'SHARDMOVER_BENCH_CITUS_MB=150 ...'
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shardmover/shardmover/internal/benchreport"
)

func main() {
	in := flag.String("in", "bin/bench.txt", "go test -bench output of one or more runs")
	load := flag.String("load", "", "load samples: lines of `unix_seconds loadavg [/proc/stat cpu line]`")
	out := flag.String("out", "BENCHMARKS.md", "the document to write")
	command := flag.String("command", "make bench", "the command that produced -in")
	env := flag.String("env", "", "space-separated NAME=value sizes the command set")
	took := flag.Duration("took", 0, "how long the command took")
	flag.Parse()
	if err := run(*in, *load, *out, *command, *env, *took); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(in, load, out, command, env string, took time.Duration) error {
	fh, err := os.Open(in)
	if err != nil {
		return err
	}
	defer fh.Close()
	o, err := benchreport.Parse(fh)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if len(o.Results) == 0 {
		return fmt.Errorf("%s: no benchmark results", in)
	}
	facts, err := benchreport.ReadFacts(load)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := benchreport.Render(&buf, benchreport.Report{
		Output: o, Facts: facts, Command: command, Env: strings.Fields(env), Took: took,
		Ratios:      benchreport.Compare(o, benchreport.DefaultComparisons),
		HeadToHeads: benchreport.DefaultHeadToHeads, SideBySides: benchreport.DefaultSideBySides, Targets: benchreport.DefaultTargets,
	}); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}
