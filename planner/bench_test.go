package planner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// benchInput builds a skewed layout: all groups on the first tenth of the
// nodes (at least two), unevenly, the rest of the nodes new and empty.
// Group sizes are log-normal around 1 GiB. Eight colocation groups.
func benchInput(groups, nodes int, s Strategy) Input {
	r := rand.New(rand.NewPCG(uint64(groups), uint64(nodes)))
	in := DefaultInput(s)
	for i := range nodes {
		in.Nodes = append(in.Nodes, Node{ID: int64(i + 1), Name: fmt.Sprintf("10.0.%d.%d:5432", i/250, i%250), Capacity: 1, ShouldHaveShards: true})
	}
	old := max(2, nodes/10)
	const colocs = 8
	per := (groups + colocs - 1) / colocs
	for i := range groups {
		c, idx := i/per+1, i%per
		// skew: node k gets weight ~ 1/(k+1)
		n := int(math.Floor(float64(old) * math.Pow(r.Float64(), 2)))
		in.Groups = append(in.Groups, Group{
			ID:           fmt.Sprintf("c%d:%d", c, idx),
			ColocationID: int64(c),
			Index:        idx,
			ShardIDs:     []int64{int64(100000 + i)},
			Tables:       []string{fmt.Sprintf("t%d", c)},
			Bytes:        int64(math.Exp(r.NormFloat64()) * (1 << 30)),
			Node:         int64(n + 1),
		})
	}
	return in
}

var benchSizes = []struct{ groups, nodes int }{
	{1000, 10}, {1000, 100}, {1000, 1000},
	{10000, 10}, {10000, 100}, {10000, 1000},
	{100000, 10}, {100000, 100}, {100000, 1000},
}

func BenchmarkPlan(b *testing.B) {
	for _, s := range []Strategy{ByDiskSize, ByShardCount} {
		for _, sz := range benchSizes {
			in := benchInput(sz.groups, sz.nodes, s)
			b.Run(fmt.Sprintf("%s/groups=%d/nodes=%d", s, sz.groups, sz.nodes), func(b *testing.B) {
				b.ReportAllocs()
				var res Result
				for b.Loop() {
					var err error
					if res, err = Plan(in); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(res.Moves)), "moves")
			})
		}
	}
}

// BenchmarkCitusGreedy is the baseline: the straightforward Citus-style
// greedy of citus_test.go on the same layouts. The largest layouts take
// minutes per run; run them with -benchtime=1x.
func BenchmarkCitusGreedy(b *testing.B) {
	for _, s := range []Strategy{ByDiskSize, ByShardCount} {
		for _, sz := range benchSizes {
			in := benchInput(sz.groups, sz.nodes, s)
			b.Run(fmt.Sprintf("%s/groups=%d/nodes=%d", s, sz.groups, sz.nodes), func(b *testing.B) {
				b.ReportAllocs()
				var res refResult
				for b.Loop() {
					res = citusGreedy(in)
				}
				b.ReportMetric(float64(res.moves+res.drainMoves), "moves")
			})
		}
	}
}
