// Command reliability writes RELIABILITY.md from the JSON lines the
// fault-injection tests recorded (SHARDMOVER_RELIABILITY_OUT); see package
// internal/reliability. `make reliability` runs it.
//
//	go run ./internal/reliability/cmd/reliability -in FILE -out RELIABILITY.md -command 'make reliability' -took 9m
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/shardmover/shardmover/internal/reliability"
)

func main() {
	in := flag.String("in", os.Getenv(reliability.EnvOut), "the records (JSON lines); default $"+reliability.EnvOut)
	out := flag.String("out", "RELIABILITY.md", "the document to write")
	command := flag.String("command", "", "the exact command that ran the tests, printed in the document")
	took := flag.Duration("took", 0, "how long the command ran, printed in the document")
	flag.Parse()
	if err := run(*in, *out, *command, *took); err != nil {
		fmt.Fprintln(os.Stderr, "reliability: "+err.Error())
		os.Exit(1)
	}
}

func run(in, out, command string, took time.Duration) error {
	if in == "" {
		return fmt.Errorf("give the records with -in FILE (or set %s)", reliability.EnvOut)
	}
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("%v: run the fault tests with %s set first (make reliability does)", err, reliability.EnvOut)
	}
	defer f.Close()
	recs, err := reliability.Read(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if len(recs) == 0 {
		return fmt.Errorf("%s holds no records: no fault test ran with %s set", in, reliability.EnvOut)
	}
	var buf bytes.Buffer
	if err := reliability.Render(&buf, recs, reliability.Meta{Command: command, Took: took, Generated: time.Now()}); err != nil {
		return err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s from %d records\n", out, len(recs))
	return nil
}
