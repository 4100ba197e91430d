package replication

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRampClimbsWhileItPays: after a warm-up window at each step, a stream
// is kept only when it brought at least a tenth more throughput; the climb
// stops at the first step that did not pay, or at the most allowed.
func TestRampClimbsWhileItPays(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   int
		rates []int64 // bytes per measured window, one per step
		want  []int   // streams after each observation (warm-ups included)
	}{
		// 100 at 1, 150 at 2 (pays), 160 at 3 (does not): back to 2.
		{"settles where the last step paid", 4, []int64{100, 150, 160}, []int{1, 2, 2, 3, 3, 2}},
		// Two streams bring nothing (a shared rate limit, two cores busy).
		{"one stream when a second does not pay", 4, []int64{100, 105}, []int{1, 2, 2, 1}},
		// Every step pays: stop at the most allowed.
		{"stops at max", 3, []int64{100, 200, 300}, []int{1, 2, 2, 3, 3, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ramp{max: tc.max}
			k := 1
			var got []int
			step := 0
			for !r.settled {
				var bytes int64
				if r.warm {
					bytes = tc.rates[step]
					step++
				}
				k = r.observe(k, bytes)
				got = append(got, k)
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, k, r.observe(k, 1<<40), "settled means settled")
		})
	}
}
