package procs_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/shardmover/shardmover/internal/procs"
)

func TestDefaultIsHalfAtLeastOne(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 1, 3: 1, 4: 2, 8: 4, 64: 32} {
		assert.Equal(t, want, procs.Default(n), "Go would use %d", n)
	}
}

func TestApplyLeavesAnOperatorsChoice(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)

	runtime.GOMAXPROCS(4)
	t.Setenv("GOMAXPROCS", "")
	assert.Equal(t, 4, procs.Apply())
	assert.Equal(t, 2, runtime.GOMAXPROCS(0), "unset: half")

	runtime.GOMAXPROCS(4)
	t.Setenv("GOMAXPROCS", "4")
	assert.Equal(t, 4, procs.Apply())
	assert.Equal(t, 4, runtime.GOMAXPROCS(0), "set by the operator: left alone")
}
