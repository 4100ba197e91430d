package planner

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layoutOpts selects what a random layout may contain.
type layoutOpts struct {
	strategy   Strategy // 0 = random
	capacities bool     // capacities other than 1
	drains     bool     // nodes to drain
	rules      bool     // excluded, pinned and avoiding groups
	isolate    bool     // isolated groups
	maxCost    bool     // hard per-node limits
	maxMoves   bool     // random MaxMoves
	zeroSizes  bool     // groups with 0 bytes
	loads      bool     // measured loads: many idle groups, a few hot ones
}

// randomInput builds a skewed layout: the groups sit on a few "old" nodes,
// some nodes are new and empty.
func randomInput(r *rand.Rand, o layoutOpts) Input {
	s := o.strategy
	if s == 0 {
		s = Strategy(1 + r.IntN(2))
	}
	in := DefaultInput(s)
	in.Threshold = []float64{0, 0.05, 0.1, 0.2}[r.IntN(4)]
	in.ImprovementThreshold = []float64{0, 0, 0.5, 1}[r.IntN(4)]
	in.MaxPerNode = 1 + r.IntN(3)
	if s == ByDiskSize && r.IntN(3) == 0 {
		in.BaseCost = 0
	}
	if o.maxMoves && r.IntN(2) == 0 {
		in.MaxMoves = r.IntN(6)
	}

	nn := 2 + r.IntN(9)
	ids := r.Perm(nn * 3)[:nn]
	for i := range nn {
		n := Node{ID: int64(ids[i] + 1), Name: fmt.Sprintf("n%d:5432", ids[i]+1), Capacity: 1, ShouldHaveShards: true}
		if o.capacities && r.IntN(3) == 0 {
			n.Capacity = float64(1 + r.IntN(4))
		}
		in.Nodes = append(in.Nodes, n)
	}
	if o.drains {
		for i := range in.Nodes {
			switch r.IntN(8) {
			case 0:
				in.Nodes[i].Drain = true
			case 1:
				in.Nodes[i].ShouldHaveShards = false
			case 2:
				in.Nodes[i].Capacity = 0
			}
		}
		// keep at least one node that may hold shards
		k := r.IntN(nn)
		in.Nodes[k].Drain, in.Nodes[k].ShouldHaveShards = false, true
		in.Nodes[k].Capacity = max(in.Nodes[k].Capacity, 1)
	}
	old := 1 + r.IntN(nn)
	colocs := 1 + r.IntN(4)
	for c := 1; c <= colocs; c++ {
		shards := 1 + r.IntN(16)
		scale := math.Exp(r.NormFloat64() * 1.5)
		for i := range shards {
			g := Group{
				ID:           fmt.Sprintf("c%d:%d", c, i),
				ColocationID: int64(c),
				Index:        i,
				ShardIDs:     []int64{int64(100000 + c*1000 + i), int64(200000 + c*1000 + i)},
				Tables:       []string{fmt.Sprintf("a%d", c), fmt.Sprintf("b%d", c)},
				Bytes:        int64(scale * math.Exp(r.NormFloat64()) * (1 << 30)),
				Node:         in.Nodes[r.IntN(old)].ID,
			}
			if r.IntN(3) == 0 {
				g.Node = in.Nodes[0].ID // extra skew
			}
			if o.zeroSizes && r.IntN(5) == 0 {
				g.Bytes = 0
			}
			if o.rules {
				switch r.IntN(12) {
				case 0:
					g.Excluded = true
				case 1, 2:
					for _, n := range in.Nodes {
						if r.IntN(2) == 0 {
							g.PinnedTo = append(g.PinnedTo, n.ID)
						}
					}
				case 3:
					g.AvoidNodes = append(g.AvoidNodes, in.Nodes[r.IntN(nn)].ID)
				}
			}
			if o.isolate && r.IntN(15) == 0 {
				g.Isolate = true
			}
			in.Groups = append(in.Groups, g)
		}
	}
	if o.loads {
		for i := range in.Groups {
			switch r.IntN(5) {
			case 0: // idle
			case 1: // hot
				in.Groups[i].Load = math.Round(math.Exp(r.NormFloat64())*1000*100) / 100
			default:
				in.Groups[i].Load = math.Round(math.Exp(r.NormFloat64())*20*100) / 100
			}
		}
	}
	if o.maxCost {
		var total float64
		for i := range in.Groups {
			total += costOf(in, &in.Groups[i])
		}
		for i := range in.Nodes {
			if r.IntN(3) == 0 {
				in.Nodes[i].MaxCost = math.Ceil(total / float64(nn) * (0.8 + r.Float64()))
			}
		}
	}
	return in
}

// checkInvariants replays the plan over the input and checks every rule.
func checkInvariants(t *testing.T, in Input, res Result) {
	t.Helper()
	nodes := map[int64]Node{}
	capOf := func(n Node) float64 {
		if in.Capacity != nil {
			return in.Capacity(n)
		}
		return n.Capacity
	}
	canHold := func(n Node) bool { return capOf(n) > 0 && n.ShouldHaveShards && !n.Drain }
	for _, n := range in.Nodes {
		nodes[n.ID] = n
	}
	groups := map[string]*Group{}
	where := map[string]int64{}
	load := map[int64]float64{}
	for i := range in.Groups {
		g := &in.Groups[i]
		groups[g.ID] = g
		where[g.ID] = g.Node
		load[g.Node] += costOf(in, g)
	}
	moved := map[string]bool{}
	balanceMoves := 0
	type nodeWave struct {
		node int64
		wave int
	}
	perWave := map[nodeWave]int{}
	lastWave := map[int64]int{}
	k := max(in.MaxPerNode, 1)
	for i, m := range res.Moves {
		require.Equal(t, i+1, m.Order)
		g := groups[m.GroupID]
		require.NotNil(t, g, "move %d of unknown group %q", m.Order, m.GroupID)
		assert.False(t, moved[g.ID], "group %s moves twice", g.ID)
		moved[g.ID] = true
		assert.False(t, g.Excluded, "excluded group %s moves", g.ID)
		assert.Equal(t, where[g.ID], m.From, "group %s moves from %d but is on %d", g.ID, m.From, where[g.ID])
		assert.NotEqual(t, m.From, m.To)
		assert.Equal(t, nonNil(g.ShardIDs), m.ShardIDs, "group %s is split", g.ID)
		assert.Equal(t, nonNil(g.Tables), m.Tables)
		assert.Equal(t, g.Bytes, m.Bytes)
		to := nodes[m.To]
		assert.True(t, canHold(to), "group %s moves to node %d, which may not hold shards", g.ID, m.To)
		if len(g.PinnedTo) > 0 {
			assert.Contains(t, g.PinnedTo, m.To, "group %s leaves its pins", g.ID)
		}
		assert.NotContains(t, g.AvoidNodes, m.To, "group %s goes to a node it avoids", g.ID)
		if in.Allowed != nil {
			assert.True(t, in.Allowed(*g, to))
		}
		c := costOf(in, g)
		if to.MaxCost > 0 {
			assert.LessOrEqual(t, load[m.To]+c, to.MaxCost*(1+1e-12), "node %d goes over its max cost", m.To)
		}
		if m.Reason == ReasonBalance {
			balanceMoves++
			from := nodes[m.From]
			uS, uT := load[m.From]/capOf(from), load[m.To]/capOf(to)
			nS, nT := (load[m.From]-c)/capOf(from), (load[m.To]+c)/capOf(to)
			assert.True(t, nT < uS || nT == uS && nS > uT, "balance move %d does not improve balance", m.Order)
		}
		load[m.From] -= c
		load[m.To] += c
		where[g.ID] = m.To
		// waves
		for _, n := range []int64{m.From, m.To} {
			perWave[nodeWave{n, m.Wave}]++
			assert.LessOrEqual(t, perWave[nodeWave{n, m.Wave}], k, "node %d has too many moves in wave %d", n, m.Wave)
			assert.GreaterOrEqual(t, m.Wave, lastWave[n], "moves of node %d out of order", n)
			lastWave[n] = m.Wave
		}
	}
	if in.MaxMoves >= 0 {
		assert.LessOrEqual(t, balanceMoves, in.MaxMoves)
	}
	for _, s := range res.Skipped {
		assert.False(t, moved[s.GroupID], "group %s is both moved and skipped", s.GroupID)
	}
	// After matches the replay; isolated groups that were placed are alone.
	count := map[int64]int{}
	for _, n := range where {
		count[n]++
	}
	skipped := map[string]bool{}
	for _, s := range res.Skipped {
		skipped[s.GroupID] = true
	}
	for _, a := range res.After {
		assert.InDelta(t, load[a.Node], a.Cost, 1e-6*math.Max(1, math.Abs(a.Cost)))
		assert.Equal(t, count[a.Node], a.Groups)
	}
	for _, g := range in.Groups {
		if !g.Isolate || skipped[g.ID] {
			continue
		}
		for _, o := range in.Groups {
			if o.ID != g.ID && where[o.ID] == where[g.ID] {
				assert.True(t, skipped[o.ID], "isolated group %s shares its node with %s", g.ID, o.ID)
			}
		}
	}
}

func planJSON(t *testing.T, in Input) string {
	t.Helper()
	res, err := Plan(in)
	require.NoError(t, err)
	b, err := json.Marshal(res)
	require.NoError(t, err)
	return string(b)
}

func TestPropertyInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		o := layoutOpts{
			capacities: r.IntN(2) == 0, drains: r.IntN(2) == 0, rules: r.IntN(2) == 0,
			isolate: r.IntN(4) == 0, maxCost: r.IntN(4) == 0, maxMoves: r.IntN(3) == 0, zeroSizes: r.IntN(4) == 0,
		}
		in := randomInput(r, o)
		res, err := Plan(in)
		require.NoError(t, err, "layout %d", i)
		checkInvariants(t, in, res)
		if t.Failed() {
			t.Fatalf("layout %d (%+v) broke an invariant", i, o)
		}
	}
}

func TestPropertyDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		in := randomInput(r, layoutOpts{capacities: true, drains: true, rules: true, isolate: true, maxCost: true, maxMoves: true})
		want := planJSON(t, in)
		require.Equal(t, want, planJSON(t, in), "layout %d: same input, different plan", i)
		shuffled := in
		shuffled.Nodes = slices.Clone(in.Nodes)
		shuffled.Groups = slices.Clone(in.Groups)
		r.Shuffle(len(shuffled.Nodes), func(a, b int) { shuffled.Nodes[a], shuffled.Nodes[b] = shuffled.Nodes[b], shuffled.Nodes[a] })
		r.Shuffle(len(shuffled.Groups), func(a, b int) { shuffled.Groups[a], shuffled.Groups[b] = shuffled.Groups[b], shuffled.Groups[a] })
		require.Equal(t, want, planJSON(t, shuffled), "layout %d: input order changed the plan", i)
	}
}

// TestPropertyShardCountSpread: with one cost per group, equal capacities
// and no rules, the plan reaches the best spread there is.
func TestPropertyShardCountSpread(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		in := randomInput(r, layoutOpts{strategy: ByShardCount, drains: r.IntN(2) == 0})
		in.ImprovementThreshold = 0
		res, err := Plan(in)
		require.NoError(t, err)
		var eligible []NodeUtil
		for _, a := range res.After {
			if a.Eligible {
				eligible = append(eligible, a)
			}
		}
		groups, lo, hi := 0, math.MaxInt, 0
		for _, a := range eligible {
			groups += a.Groups
			lo, hi = min(lo, a.Groups), max(hi, a.Groups)
		}
		n := len(eligible)
		// The band holds an integer count for every node and the counts can
		// add up to the total: then the plan must be balanced.
		avg := float64(groups) / float64(n)
		bl, bh := math.Ceil((1-in.Threshold)*avg-1e-9), math.Floor((1+in.Threshold)*avg+1e-9)
		feasible := bl <= bh && float64(n)*bl <= float64(groups) && float64(groups) <= float64(n)*bh
		if feasible {
			assert.True(t, res.Balanced, "layout %d: a balanced layout exists but the plan is not balanced: %d..%d groups per node", i, lo, hi)
		}
		if in.Threshold == 0 {
			assert.LessOrEqual(t, hi-lo, 1, "layout %d: spread %d..%d", i, lo, hi)
		}
		assert.True(t, res.Converged)
		if t.Failed() {
			t.FailNow()
		}
	}
}

// imbalance measures a layout: the largest distance of an eligible node's
// utilization from the average, relative to the average; the band
// violation (cost outside the band, summed over eligible nodes); and
// whether the layout is balanced.
func imbalance(in Input, nodeOf func(g *Group) int64) (dev, violation float64, balanced bool) {
	capOf := func(n Node) float64 {
		if in.Capacity != nil {
			return in.Capacity(n)
		}
		return n.Capacity
	}
	load := map[int64]float64{}
	for i := range in.Groups {
		load[nodeOf(&in.Groups[i])] += costOf(in, &in.Groups[i])
	}
	var cost, capacity float64
	for _, n := range in.Nodes {
		if capOf(n) > 0 && n.ShouldHaveShards && !n.Drain {
			cost += load[n.ID]
			capacity += capOf(n)
		}
	}
	if cost == 0 {
		return 0, 0, true
	}
	avg := cost / capacity
	lo, hi := (1-in.Threshold)*avg, (1+in.Threshold)*avg
	balanced = true
	for _, n := range in.Nodes {
		if c := capOf(n); c > 0 && n.ShouldHaveShards && !n.Drain {
			u := load[n.ID] / c
			dev = math.Max(dev, math.Abs(u-avg)/avg)
			if v := max(0, load[n.ID]-hi*c) + max(0, lo*c-load[n.ID]); v > 1e-9*avg*c {
				balanced = false
				violation += v
			}
		}
	}
	return dev, violation, balanced
}

// violation2 is the sum over the eligible nodes of the squared cost outside
// the band per unit of capacity: with the same total outside the band
// (imbalance's violation), the smaller the more evenly it is shared.
func violation2(in Input, nodeOf func(g *Group) int64) float64 {
	capOf := func(n Node) float64 {
		if in.Capacity != nil {
			return in.Capacity(n)
		}
		return n.Capacity
	}
	load := map[int64]float64{}
	for i := range in.Groups {
		load[nodeOf(&in.Groups[i])] += costOf(in, &in.Groups[i])
	}
	var cost, capacity float64
	for _, n := range in.Nodes {
		if capOf(n) > 0 && n.ShouldHaveShards && !n.Drain {
			cost += load[n.ID]
			capacity += capOf(n)
		}
	}
	if capacity == 0 {
		return 0
	}
	avg := cost / capacity
	lo, hi := (1-in.Threshold)*avg, (1+in.Threshold)*avg
	var v2 float64
	for _, n := range in.Nodes {
		if c := capOf(n); c > 0 && n.ShouldHaveShards && !n.Drain {
			v := max(0, load[n.ID]-hi*c) + max(0, lo*c-load[n.ID])
			v2 += v * v / c
		}
	}
	return v2
}

func finalNodes(res Result) map[string]int64 {
	m := map[string]int64{}
	for _, mv := range res.Moves {
		m[mv.GroupID] = mv.To
	}
	return m
}

// colocSpread measures how evenly each colocation group is spread over
// the eligible nodes (Input.Allowed and capacities taken into account, pins
// and avoid lists not): the summed distance of each node's count from
// [floor(q), ceil(q)], q = the colocation's groups × the node's share of
// capacity; and the largest max-min count difference of any colocation
// over nodes of equal capacity.
func colocSpread(in Input, nodeOf func(g *Group) int64) (excess, width int) {
	capOf := func(n Node) float64 {
		if in.Capacity != nil {
			return in.Capacity(n)
		}
		return n.Capacity
	}
	first := map[int64]*Group{}
	count := map[[2]int64]int{}
	var colocs []int64
	for i := range in.Groups {
		g := &in.Groups[i]
		if _, ok := first[g.ColocationID]; !ok {
			first[g.ColocationID] = g
			colocs = append(colocs, g.ColocationID)
		}
		count[[2]int64{nodeOf(g), g.ColocationID}]++
	}
	isolated := map[int64]bool{} // nodes an isolated group may have reserved
	for i := range in.Groups {
		if in.Groups[i].Isolate {
			isolated[nodeOf(&in.Groups[i])] = true
		}
	}
	for _, c := range colocs {
		var nodes []Node
		var capSum float64
		k := 0
		for _, n := range in.Nodes {
			if capOf(n) > 0 && n.ShouldHaveShards && !n.Drain && !isolated[n.ID] && (in.Allowed == nil || in.Allowed(*first[c], n)) {
				nodes = append(nodes, n)
				capSum += capOf(n)
				k += count[[2]int64{n.ID, c}]
			}
		}
		lo, hi := map[float64]int{}, map[float64]int{}
		for _, n := range nodes {
			q := float64(k) * capOf(n) / capSum
			x := count[[2]int64{n.ID, c}]
			excess += max(0, x-int(math.Ceil(q-1e-9))) + max(0, int(math.Floor(q+1e-9))-x)
			w := capOf(n)
			if v, ok := lo[w]; !ok || x < v {
				lo[w] = x
			}
			if v, ok := hi[w]; !ok || x > v {
				hi[w] = x
			}
		}
		for w := range lo {
			width = max(width, hi[w]-lo[w])
		}
	}
	return excess, width
}

// TestPropertyAtLeastCitus compares each plan with the Citus-style greedy
// reference of citus_test.go. Citus may move a group twice, which Plan
// never does, so the assertions use Citus's algorithm under that same rule
// (frozen), and literal Citus on the layouts where it moves no group twice:
//   - when the reference balances the cluster, so does the plan;
//   - when neither does (coarse groups, rules), both are heuristics: the
//     plan leaves less cost outside the band overall, and loses (more cost
//     outside the band, or as much with more moves than the reference's
//     plus two per group it leaves outside its quota) on under 1% of them;
//   - without placement rules, every colocation group is spread at least
//     as evenly as the reference spreads it (summed distance from the
//     per-node quota), unless the plan leaves less cost outside the band
//     than the reference, or as much shared more evenly over the nodes
//     (violation2; node balance comes first); where both are as far
//     from quota, the plan's max-min count over nodes of equal capacity
//     is wider than the reference's on under 0.5% of the layouts.
//
// The reference balances node totals only, so the plan may need more
// moves than it (to spread colocation groups and, with by_disk_size,
// bytes); its moves are bounded by the reference's plus two for each group
// the reference leaves outside its colocation's quota, plus the byte
// steps, and only logged against literal Citus.
func TestPropertyAtLeastCitus(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const layouts = 4000
	var moreBalanced, lessBalanced, bothBalanced, ourMoves, citusMoves int
	var unbalanced, worse int
	var sumOurV, sumRefV float64
	var ourBytes, citusBytes int64
	var ourSpread, refSpread, widerSpread int
	for i := range layouts {
		o := layoutOpts{capacities: r.IntN(2) == 0, drains: r.IntN(3) == 0, rules: r.IntN(3) == 0}
		rules := o.rules
		in := randomInput(r, o)
		res, err := Plan(in)
		require.NoError(t, err)
		ours := finalNodes(res)
		ourNode := func(g *Group) int64 {
			if n, ok := ours[g.ID]; ok {
				return n
			}
			return g.Node
		}
		_, ourV, ourBal := imbalance(in, ourNode)
		ourEx, ourW := colocSpread(in, ourNode)
		moves := 0
		var bytes int64
		for _, m := range res.Moves {
			if m.Reason == ReasonBalance || m.Reason == ReasonSpread {
				moves++
				bytes += m.Bytes
			}
		}
		literal := citusGreedy(in)
		refs := []struct {
			name string
			ref  refResult
		}{{"frozen Citus", citusGreedyOpt(in, true)}}
		if literal.twice == 0 {
			refs = append(refs, struct {
				name string
				ref  refResult
			}{"Citus", literal})
		}
		for _, rf := range refs {
			refNode := func(g *Group) int64 { return rf.ref.nodeOf[g.ID] }
			_, refV, refBal := imbalance(in, refNode)
			refEx, refW := colocSpread(in, refNode)
			eps := 1e-9 * (ourV + refV)
			// Node balance comes first: where the plan is more balanced
			// than the reference (less cost outside the band, or as much
			// shared more evenly over the nodes), it may pay for that in
			// spread.
			ourV2, refV2 := violation2(in, ourNode), violation2(in, refNode)
			more := ourV < refV-eps || ourV <= refV+eps && ourV2 < refV2-1e-9*(ourV2+refV2)
			if !rules && !more {
				assert.LessOrEqual(t, ourEx, refEx, "layout %d: colocations less evenly spread than by %s", i, rf.name)
				if ourEx == refEx && ourW > max(refW, 1) {
					widerSpread++
				}
			}
			if !rules {
				ourSpread += ourEx
				refSpread += refEx
			}
			switch {
			case refBal:
				assert.True(t, ourBal, "layout %d: %s balances the cluster, the plan does not", i, rf.name)
				if in.Strategy == ByShardCount {
					assert.LessOrEqual(t, moves, rf.ref.moves+2*refEx, "layout %d: more moves than %s and its spread need", i, rf.name)
				}
			case !ourBal:
				unbalanced++
				sumOurV += ourV
				sumRefV += refV
				if ourV > refV+eps || math.Abs(ourV-refV) <= eps && moves > rf.ref.moves+2*refEx {
					worse++
				}
			}
		}
		if t.Failed() {
			t.Logf("input: %+v", in)
			t.FailNow()
		}
		_, litV, litBal := imbalance(in, func(g *Group) int64 { return literal.nodeOf[g.ID] })
		switch {
		case ourBal && litBal:
			bothBalanced++
			ourMoves += moves
			citusMoves += literal.moves
			ourBytes += bytes
			citusBytes += literal.bytes
		case ourBal || ourV < litV*(1-1e-9):
			moreBalanced++
		case litBal || litV < ourV*(1-1e-9):
			lessBalanced++
		}
	}
	// Where neither balances (coarse groups, rules), both are heuristics:
	// the plan may lose on a layout, rarely, but not overall.
	t.Logf("neither balanced: %d comparisons, plan worse in %d; cost outside the band %.3f of the reference's", unbalanced, worse, sumOurV/sumRefV)
	assert.LessOrEqual(t, worse, unbalanced/100, "the plan is worse than the reference on more than 1%% of the unbalanceable layouts")
	assert.LessOrEqual(t, sumOurV, sumRefV, "the plan leaves more cost outside the band than the reference overall")
	t.Logf("colocation spread (summed distance from quota, layouts without rules): plan %d, reference %d; as far from quota but wider: %d", ourSpread, refSpread, widerSpread)
	assert.LessOrEqual(t, widerSpread, layouts/200, "a colocation's counts differ more than by the reference too often")
	t.Logf("vs literal Citus over %d layouts: more balanced %d, less balanced %d; both balanced %d: balancing moves %d vs %d, bytes %.3f of Citus's",
		layouts, moreBalanced, lessBalanced, bothBalanced, ourMoves, citusMoves, float64(ourBytes)/float64(citusBytes))
}

// TestPropertyRulesHold: with every kind of rule at once (pins, avoid
// lists, isolation, excluded groups, MaxCost, drains, MaxMoves) and an
// Input.Allowed function, no move breaks a rule (checkInvariants), and the
// repair pass never leaves more cost outside the band than balancing did.
func TestPropertyRulesHold(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 1500 {
		in := randomInput(r, layoutOpts{capacities: true, drains: r.IntN(2) == 0, rules: true, isolate: r.IntN(2) == 0,
			maxCost: r.IntN(3) == 0, maxMoves: r.IntN(3) == 0, zeroSizes: r.IntN(4) == 0})
		if r.IntN(2) == 0 {
			salt := r.Uint64()
			in.Allowed = func(g Group, n Node) bool {
				return (uint64(g.ColocationID)*2654435761^uint64(n.ID)*40503^salt)%5 != 0
			}
		}
		res, err := Plan(in)
		require.NoError(t, err, "layout %d", i)
		checkInvariants(t, in, res)
		if in.Allowed != nil {
			for _, m := range res.Moves {
				var g Group
				for _, x := range in.Groups {
					if x.ID == m.GroupID {
						g = x
					}
				}
				for _, n := range in.Nodes {
					if n.ID == m.To {
						assert.True(t, in.Allowed(g, n), "layout %d: group %s moves to node %d, which Allowed refuses", i, g.ID, n.ID)
					}
				}
			}
		}
		if t.Failed() {
			t.Fatalf("layout %d broke a rule", i)
		}
	}
}

// TestPropertyColocationSpread: without rules and with equal capacities,
// by_shard_count spreads every colocation group (counts differ by at most
// one) and keeps node totals within one of each other.
func TestPropertyColocationSpread(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := range 1500 {
		in := randomInput(r, layoutOpts{strategy: ByShardCount, drains: r.IntN(2) == 0})
		in.ImprovementThreshold = 0
		in.Threshold = 0
		res, err := Plan(in)
		require.NoError(t, err)
		checkInvariants(t, in, res)
		final := finalNodes(res)
		excess, width := colocSpread(in, func(g *Group) int64 {
			if n, ok := final[g.ID]; ok {
				return n
			}
			return g.Node
		})
		assert.Zero(t, excess, "layout %d: a colocation group outside its quota", i)
		assert.LessOrEqual(t, width, 1, "layout %d", i)
		lo, hi := math.MaxInt, 0
		for _, a := range res.After {
			if a.Eligible {
				lo, hi = min(lo, a.Groups), max(hi, a.Groups)
			}
		}
		assert.LessOrEqual(t, hi-lo, 1, "layout %d: node totals %d..%d", i, lo, hi)
		if t.Failed() {
			t.FailNow()
		}
	}
}

// TestPropertyBytesBand: on small by_disk_size layouts (3 equal nodes, one
// colocation of 4 to 12 groups, log-normal sizes), a brute force over every assignment finds whether some
// layout has every node's bytes and cost in their bands with counts
// differing by at most one. Where one exists, the plan must end with bytes
// in the band in at least 95% of the layouts (it measures and logs the
// rate); wherever BytesLimit blames a group as too coarse for a node, no
// subset of the groups may add up to that node's band.
func TestPropertyBytesBand(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 14))
	feasible, reached, coarse := 0, 0, 0
	const layouts = 400
	for iter := range layouts {
		in := DefaultInput(ByDiskSize)
		for i := range 3 {
			in.Nodes = append(in.Nodes, Node{ID: int64(i + 1), Name: fmt.Sprintf("n%d:5432", i+1), Capacity: 1, ShouldHaveShards: true})
		}
		k := 4 + r.IntN(9)
		sizes := make([]float64, k)
		for i := range k {
			sizes[i] = math.Round(math.Exp(r.NormFloat64()*0.8) * (1 << 20) * 4)
			in.Groups = append(in.Groups, Group{ID: fmt.Sprintf("c1:%d", i), ColocationID: 1, Index: i,
				ShardIDs: []int64{int64(1000 + i)}, Tables: []string{"t1"}, Bytes: int64(sizes[i]), Node: int64(1 + r.IntN(3))})
		}
		var total float64
		for _, s := range sizes {
			total += s
		}
		avg, base := total/3, float64(in.BaseCost)
		bLo, bHi := (1-in.Threshold)*avg, (1+in.Threshold)*avg
		cAvg := (total + base*float64(k)) / 3
		cLo, cHi := (1-in.Threshold)*cAvg, (1+in.Threshold)*cAvg
		tol := 1e-6 * avg
		ok := false
		assign := make([]int, k)
		for code := 0; code < int(math.Pow(3, float64(k))) && !ok; code++ {
			c := code
			var b [3]float64
			var n [3]int
			for i := range k {
				assign[i] = c % 3
				c /= 3
				b[assign[i]] += sizes[i]
				n[assign[i]]++
			}
			good := true
			for j := range 3 {
				cost := b[j] + base*float64(n[j])
				if n[j] < k/3 || n[j] > (k+2)/3 || b[j] < bLo-tol || b[j] > bHi+tol || cost < cLo-tol || cost > cHi+tol {
					good = false
					break
				}
			}
			ok = good
		}
		res, err := Plan(in)
		require.NoError(t, err)
		if ok {
			feasible++
			if res.BytesBalanced {
				reached++
			} else {
				t.Logf("layout %d: feasible but %s", iter, res.BytesLimit.Detail)
			}
		}
		if l := res.BytesLimit; l != nil && l.GroupID != "" {
			coarse++
			if strings.Contains(l.Detail, " alone ") {
				// too large for any node
				require.Greater(t, float64(l.Bytes), bHi-tol, "layout %d: %q", iter, l.Detail)
				assert.False(t, ok, "layout %d: a group is blamed but a layout in the band exists", iter)
				continue
			}
			// The claim is about one node: no subset sums into its band.
			for mask := 0; mask < 1<<k; mask++ {
				var s float64
				for i := range k {
					if mask&(1<<i) != 0 {
						s += sizes[i]
					}
				}
				require.False(t, s >= bLo+tol && s <= bHi-tol, "layout %d: %q, but a subset sums to %.0f in [%.0f, %.0f]", iter, l.Detail, s, bLo, bHi)
			}
			assert.False(t, ok, "layout %d: a group is blamed but a layout in the band exists", iter)
		}
	}
	t.Logf("%d of %d layouts can reach the byte band; the plan reached it in %d (%.1f%%); %d blamed a group as too coarse",
		feasible, layouts, reached, 100*float64(reached)/float64(max(feasible, 1)), coarse)
	require.Positive(t, feasible)
	assert.GreaterOrEqual(t, float64(reached), 0.95*float64(feasible))
}
