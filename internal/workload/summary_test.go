package workload_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/shardmover/shardmover/internal/workload"
)

// TestSummarize: max and the counts over 100 ms and 1 s come from every
// latency of the run; p50 and p99 are Percentile's.
func TestSummarize(t *testing.T) {
	var res workload.RunResult
	at := time.Unix(0, 0)
	for i, ms := range []int{1, 2, 3, 150, 90, 1200, 4, 101, 5, 2} {
		res.Latencies = append(res.Latencies, workload.Latency{At: at.Add(time.Duration(i) * time.Second), Dur: time.Duration(ms) * time.Millisecond})
	}
	s := res.Summarize()
	assert.Equal(t, 1200*time.Millisecond, s.Max)
	assert.Equal(t, int64(3), s.Over100ms)
	assert.Equal(t, int64(1), s.Over1s)
	assert.Equal(t, 4*time.Millisecond, s.P50)
	assert.Equal(t, 150*time.Millisecond, s.P99)
}
