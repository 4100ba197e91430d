package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/shardmover/shardmover/internal/reliability"
)

// secretRE finds a password in a conninfo-like argument.
var secretRE = regexp.MustCompile(`(?i)(password\s*=\s*)\S+`)

// inputCase records, for RELIABILITY.md, one bad input of TestHostileInput:
// its arguments (passwords redacted), the exit code and the line the
// command printed; whether the case passed is known when it ends. Without
// SHARDMOVER_RELIABILITY_OUT it does nothing.
func inputCase(t *testing.T, args []string, code int, stderr string) {
	t.Helper()
	if !reliability.Enabled() {
		return
	}
	in := make([]string, len(args))
	var command []string
	for i, a := range args {
		in[i] = secretRE.ReplaceAllString(a, "${1}[redacted]")
		if len(command) == i && !strings.HasPrefix(a, "-") && i < 2 {
			command = append(command, a)
		}
	}
	msg := secretRE.ReplaceAllString(strings.TrimSpace(stderr), "${1}[redacted]")
	name := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]
	t.Cleanup(func() {
		rec := reliability.Record{Family: reliability.FamilyBadInput, Case: t.Name(), Fault: strings.ReplaceAll(name, "_", " "),
			Where: strings.Join(command, " "), Passed: !t.Failed(), Input: in, ExitCode: &code, Message: msg,
			Outcome: "refused before any connection: exit code 2, one line on stderr, nothing on stdout, nothing changed"}
		if err := reliability.Append(rec); err != nil {
			t.Errorf("record the case for RELIABILITY.md: %v", err)
		}
	})
}
