package procs

import (
	"os"
	"runtime"
)

// Default is the number of threads for Go code on a machine where Go would
// use n: half of them, at least one.
func Default(n int) int {
	return max(1, n/2)
}

// Apply sets GOMAXPROCS to Default of its current value unless the
// GOMAXPROCS environment variable is set (an operator's choice wins), and
// returns the value before, for a caller that restores it.
func Apply() (previous int) {
	previous = runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(Default(previous))
	}
	return previous
}
