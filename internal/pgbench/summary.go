package pgbench

import (
	"regexp"
	"strconv"
	"strings"
)

// Summary is what pgbench's output says about a run.
type Summary struct {
	// Processed is "number of transactions actually processed" (the
	// transactions that committed); -1 when the output has no summary.
	Processed int64
	// Failed is "number of failed transactions" (serialization and
	// deadlock failures; pgbench 15 counts them without aborting the
	// client); -1 when the output does not say.
	Failed int64
	// Aborted counts the clients pgbench stopped after an error ("client
	// N script M aborted in command ...").
	Aborted int
	// Problems lists every line reporting an error or an abort (the
	// aborted clients' lines among them): each line that says "error" or
	// "abort", but for the lines naming the script file ("transaction
	// type: <file>", "SQL script N: <file>"), which say what the file's
	// name says.
	Problems []string
}

var (
	processedRE = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	failedRE    = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	abortedRE   = regexp.MustCompile(`\bclient \d+ script \d+ aborted\b`)
	// scriptLineRE matches the summary's lines that name a script file.
	scriptLineRE = regexp.MustCompile(`^(transaction type|SQL script \d+): `)
)

// ParseSummary reads pgbench's output (stdout and stderr).
func ParseSummary(out string) Summary {
	s := Summary{Processed: -1, Failed: -1}
	if m := processedRE.FindStringSubmatch(out); m != nil {
		s.Processed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := failedRE.FindStringSubmatch(out); m != nil {
		s.Failed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	for _, line := range strings.Split(out, "\n") {
		l := strings.ToLower(line)
		if scriptLineRE.MatchString(line) {
			continue
		}
		if strings.Contains(l, "abort") || strings.Contains(l, "error") {
			s.Problems = append(s.Problems, line)
		}
		if abortedRE.MatchString(line) {
			s.Aborted++
		}
	}
	return s
}
