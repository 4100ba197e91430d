package planner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// evenBytesHotNode: three nodes with four 10 MiB groups each (bytes and
// counts perfectly even), the two hottest groups both on node 1.
func evenBytesHotNode(s Strategy) Input {
	in := DefaultInput(s)
	for id := int64(1); id <= 3; id++ {
		in.Nodes = append(in.Nodes, Node{ID: id, Name: fmt.Sprintf("w%d:5432", id), Capacity: 1, ShouldHaveShards: true})
	}
	loads := []float64{900, 800, 20, 10, 300, 250, 200, 150, 5, 0, 0, 0}
	for i, l := range loads {
		in.Groups = append(in.Groups, Group{ID: fmt.Sprintf("c1:%d", i), ColocationID: 1, Index: i,
			ShardIDs: []int64{int64(1000 + i)}, Tables: []string{"events"}, Bytes: 10 << 20, Node: int64(1 + i/4), Load: l})
	}
	return in
}

// TestByLoadSpreadsHotGroups: bytes and counts are even, so by_disk_size
// moves nothing; by_load moves a hot group off the hot node, ends with
// every node's load in the band, and keeps the colocation spread (4/4/4).
func TestByLoadSpreadsHotGroups(t *testing.T) {
	res, err := Plan(evenBytesHotNode(ByDiskSize))
	require.NoError(t, err)
	assert.Empty(t, res.Moves, "by_disk_size sees even bytes and moves nothing")

	in := evenBytesHotNode(ByLoad)
	res, err = Plan(in)
	require.NoError(t, err)
	require.NotEmpty(t, res.Moves)
	assert.True(t, res.Balanced, "every node's load within the band")
	assert.InDelta(t, 0.1*(2635.0/12), res.LoadBase, 1e-9, "automatic base: 10%% of the mean load")
	final := finalNodes(res)
	at := func(id string) int64 {
		if n, ok := final[id]; ok {
			return n
		}
		return in.Groups[slices.IndexFunc(in.Groups, func(g Group) bool { return g.ID == id })].Node
	}
	assert.NotEqual(t, at("c1:0"), at("c1:1"), "the two hot groups end on different nodes")
	var total float64
	for _, a := range res.After {
		assert.Equal(t, 4, a.Groups, "%s keeps its share of the colocation", a.Name)
		total += a.Load
	}
	assert.InDelta(t, 2635.0, total, 1e-6, "load is moved, never lost")
	for _, a := range res.After {
		assert.InDelta(t, total/3, a.Load, 0.1*total/3+0.2*res.LoadBase*4, "%s: load %v", a.Name, a.Load)
	}
	// The before/after numbers of every node are in the JSON result.
	assert.Equal(t, 1730.0, res.Before[0].Load)
	assert.Equal(t, 4, res.Before[0].Shards)
}

// TestByLoadIdleGroupsByCount: with no load measured at all, by_load
// weighs every group MinLoadBase and spreads them by count, like
// by_shard_count.
func TestByLoadIdleGroupsByCount(t *testing.T) {
	in := DefaultInput(ByLoad)
	for id := int64(1); id <= 4; id++ {
		in.Nodes = append(in.Nodes, Node{ID: id, Name: fmt.Sprintf("w%d:5432", id), Capacity: 1, ShouldHaveShards: true})
	}
	for i := range 12 {
		in.Groups = append(in.Groups, Group{ID: fmt.Sprintf("c1:%d", i), ColocationID: 1, Index: i,
			ShardIDs: []int64{int64(1000 + i)}, Bytes: int64(i+1) << 20, Node: int64(1 + i%3)})
	}
	res, err := Plan(in)
	require.NoError(t, err)
	assert.Equal(t, MinLoadBase, res.LoadBase)
	assert.Len(t, res.Moves, 3, "4 groups each on the old nodes, 3 each after")
	for _, a := range res.After {
		assert.Equal(t, 3, a.Groups, a.Name)
	}
}

// TestByLoadInvalid: a negative or NaN load is invalid input.
func TestByLoadInvalid(t *testing.T) {
	for _, l := range []float64{-1, math.NaN(), math.Inf(1)} {
		in := evenBytesHotNode(ByLoad)
		in.Groups[3].Load = l
		_, err := Plan(in)
		require.ErrorIs(t, err, ErrInvalidInput, "load %v", l)
		assert.Contains(t, err.Error(), `shard group "c1:3" has load`)
	}
	s, err := ParseStrategy("by_load")
	require.NoError(t, err)
	assert.Equal(t, ByLoad, s)
	_, err = ParseStrategy("by_heat")
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.Contains(t, err.Error(), "by_shard_count, by_disk_size, by_load")
}

// TestPropertyLoadBalanced: on random layouts with measured loads (many
// idle groups, a few hot ones), every plan keeps the invariants, is
// deterministic in any input order, and whenever balance is certainly
// possible (equal capacities, no rules, every group's cost at most
// threshold × average, so a move from a node above the band to the
// emptiest node always helps) every node's load ends within the band.
func TestPropertyLoadBalanced(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	possible := 0
	for i := range 1500 {
		o := layoutOpts{strategy: ByLoad, loads: true}
		if r.IntN(3) == 0 {
			o.capacities, o.drains, o.rules, o.isolate = true, true, true, r.IntN(2) == 0
		}
		in := randomInput(r, o)
		if !o.capacities && r.IntN(2) == 0 {
			// mild: every group busy, none much hotter than the others
			for k := range in.Groups {
				in.Groups[k].Load = 10 + math.Round(r.Float64()*2000)/100
			}
			in.Threshold, in.ImprovementThreshold = []float64{0.1, 0.2, 0.3}[r.IntN(3)], 0
		}
		res, err := Plan(in)
		require.NoError(t, err, "layout %d", i)
		checkInvariants(t, in, res)
		assert.InDelta(t, loadBaseOf(in), res.LoadBase, 1e-9*max(1, res.LoadBase), "layout %d", i)

		if i%5 == 0 {
			shuffled := in
			shuffled.Nodes, shuffled.Groups = slices.Clone(in.Nodes), slices.Clone(in.Groups)
			r.Shuffle(len(shuffled.Groups), func(a, b int) { shuffled.Groups[a], shuffled.Groups[b] = shuffled.Groups[b], shuffled.Groups[a] })
			r.Shuffle(len(shuffled.Nodes), func(a, b int) { shuffled.Nodes[a], shuffled.Nodes[b] = shuffled.Nodes[b], shuffled.Nodes[a] })
			require.Equal(t, planJSON(t, in), planJSON(t, shuffled), "layout %d: input order changed the plan", i)
		}

		if o.capacities || in.Threshold == 0 || in.MaxMoves >= 0 {
			continue
		}
		var total, maxCost float64
		for k := range in.Groups {
			c := costOf(in, &in.Groups[k])
			total += c
			maxCost = max(maxCost, c)
		}
		avg := total / float64(len(in.Nodes))
		if maxCost > in.Threshold*avg || in.ImprovementThreshold > 0 {
			continue
		}
		possible++
		assert.True(t, res.Balanced, "layout %d: every group is small against the band, yet the load is not balanced", i)
		for _, a := range res.After {
			assert.InDelta(t, avg, a.Cost, in.Threshold*avg*(1+1e-9), "layout %d: %s", i, a.Name)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("%d layouts where balance was certainly possible", possible)
	assert.Positive(t, possible, "the generator must produce layouts where balance is possible")
}
