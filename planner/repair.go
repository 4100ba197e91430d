package planner

import (
	"cmp"
	"math"
	"slices"
)

// The repair pass runs once, on the plan Plan chose, after balancing. That
// plan balances cost (node totals); repair then works on where every group
// ends, with a lexicographic goal:
//
//  1. never more cost outside the band on any pair of nodes it touches than
//     before (so the plan is never less balanced than balancing left it),
//     nor the same cost gathered more on one of them (costV2: when rules
//     keep some nodes below the band, the others stay above it, and moving
//     a group between two of them changes no total outside the band but
//     does change how far each is out);
//  2. every colocation group spread over the nodes that may hold it: on a
//     node of capacity w, out of W for all its nodes, a colocation of k
//     groups has floor(k·w/W) or ceil(k·w/W) of them (counts differing by
//     at most one when capacities are equal);
//  3. with by_disk_size, every node's bytes within the threshold band of
//     the average bytes per unit of capacity;
//  4. as few moves and as few moved bytes as those allow.
//
// It changes where groups go, by steps that each strictly improve 2 (or,
// once 2 can improve no further, 3) without making 1, 2 or 3 worse: move a
// group to another node, or move it and send one back (a swap, so node
// totals barely change). A group that already moves in the plan is
// retargeted (its move rewritten, so it still moves once) or, when it goes
// back where it came from, its move is dropped; other groups get a new move
// at the end of the plan. Last, moves whose undoing makes nothing worse are
// dropped. Nodes with a MaxCost never receive a group they did not receive
// before, so the ceiling holds at every point of the plan. The work is
// bounded (repairBudget evaluations per group), so large plans stay fast.
type repairer struct {
	p        *planner
	lo, hi   float64 // cost band, per unit of capacity
	bytesOn  bool    // balance bytes too (by_disk_size without a cost function)
	bLo, bHi float64 // byte band, per unit of capacity
	eps      float64 // cost tolerance per unit of capacity
	bEps     float64 // byte tolerance per unit of capacity

	node    []int32 // final node of each group
	origin  []int32 // node each group starts on
	step    []int32 // index of the group's move in p.steps, or -1
	forced  []bool  // the group's move is a drain, isolation or rule move
	movable []bool
	budget  int  // moves that may still be added (MaxMoves, DrainOnly)
	changed bool // some group ends elsewhere than the plan had it
	// searched: bandSearch brought the bytes into the band, so Plan
	// still compares the other plans (one may need fewer moves)
	searched bool
	work     int // evaluations left

	load  []float64
	bytes []float64
	cnt   colocCounts
	at    [][]int32 // movable groups on each node
	atPos []int32   // position of each movable group in at[node]

	colocs int
	k      []int32   // per colocation: groups on its nodes
	capSum []float64 // per colocation: capacity of its nodes
	allowC []bool    // colocation*nodes+node, when Input.Allowed is set
	first  []int32   // first group of each colocation
}

// repairBudget is how many candidate evaluations repair may spend per
// group of the input.
const repairBudget = 100

func newRepairer(p *planner, lo, hi float64) *repairer {
	in := p.in
	nn, ng := len(p.nodes), len(p.groups)
	r := &repairer{p: p, lo: lo, hi: hi, eps: bandEps((lo + hi) / 2)}
	r.node = make([]int32, ng)
	r.origin = make([]int32, ng)
	r.step = make([]int32, ng)
	r.forced = make([]bool, ng)
	r.movable = make([]bool, ng)
	for i := range p.groups {
		o := p.byID[p.groups[i].Group.Node]
		r.node[i], r.origin[i], r.step[i] = o, o, -1
	}
	nonForced := 0
	for si, s := range p.steps {
		r.node[s.g], r.step[s.g] = s.to, int32(si)
		r.forced[s.g] = s.reason != ReasonBalance
		if !r.forced[s.g] {
			nonForced++
		}
	}
	switch {
	case in.DrainOnly:
		r.budget = 0
	case in.MaxMoves >= 0:
		r.budget = max(0, in.MaxMoves-nonForced)
	default:
		r.budget = math.MaxInt
	}
	r.work = repairBudget * (ng + 1)

	r.load = make([]float64, nn)
	r.bytes = make([]float64, nn)
	if ng > 0 {
		r.colocs = int(p.groups[ng-1].coloc) + 1
	}
	r.cnt = newColocCounts(nn, r.colocs)
	r.first = make([]int32, r.colocs)
	for i := ng - 1; i >= 0; i-- {
		r.first[p.groups[i].coloc] = int32(i)
	}
	if in.Allowed != nil && r.colocs*nn <= 1<<24 {
		r.allowC = make([]bool, r.colocs*nn)
		for c := range r.colocs {
			g := p.groups[r.first[c]].Group
			for n := range nn {
				r.allowC[c*nn+n] = p.nodes[n].eligible() && in.Allowed(*g, p.nodes[n].Node)
			}
		}
	}
	for i := range p.groups {
		g := &p.groups[i]
		n := r.node[i]
		r.load[n] += g.cost
		r.bytes[n] += float64(g.Bytes)
		if r.inC(n, g.coloc) {
			r.cnt.add(n, g.coloc, 1)
		}
	}
	r.k = make([]int32, r.colocs)
	r.capSum = make([]float64, r.colocs)
	for c := range r.colocs {
		for n := range nn {
			if r.inC(int32(n), int32(c)) {
				r.capSum[c] += p.nodes[n].cap
				r.k[c] += r.cnt.get(int32(n), int32(c))
			}
		}
	}

	r.bytesOn = in.Strategy == ByDiskSize && in.Cost == nil
	var total, capacity float64
	for n := range p.nodes {
		if p.nodes[n].eligible() {
			total += r.bytes[n]
			capacity += p.nodes[n].cap
		}
	}
	if capacity > 0 {
		avg := total / capacity
		r.bLo, r.bHi = math.Max(0, (1-in.Threshold)*avg), (1+in.Threshold)*avg
		r.bEps = bandEps(avg)
	}

	r.at = make([][]int32, nn)
	r.atPos = make([]int32, ng)
	for i := range p.groups {
		g := &p.groups[i]
		n := r.node[i]
		ok := !g.Excluded && !g.Isolate && !p.skipSet[int32(i)] && p.nodes[n].eligible() && r.inC(n, g.coloc)
		if ok && r.step[i] < 0 && g.done {
			ok = false // had to stay (isolation, a skipped forced move)
		}
		r.movable[i] = ok
		if ok {
			r.atPos[i] = int32(len(r.at[n]))
			r.at[n] = append(r.at[n], int32(i))
		}
	}
	return r
}

// inC reports whether node n is one of the nodes colocation c spreads over:
// an eligible node that Input.Allowed allows for the colocation's first
// group.
func (r *repairer) inC(n, c int32) bool {
	p := r.p
	if !p.nodes[n].eligible() {
		return false
	}
	if p.in.Allowed == nil {
		return true
	}
	if r.allowC != nil {
		return r.allowC[int(c)*len(p.nodes)+int(n)]
	}
	return p.in.Allowed(*p.groups[r.first[c]].Group, p.nodes[n].Node)
}

// quota returns the fewest and most groups of colocation c that node n
// should hold.
func (r *repairer) quota(n, c int32) (int32, int32) {
	q := float64(r.k[c]) * r.p.nodes[n].cap / r.capSum[c]
	return int32(math.Floor(q + 1e-9)), int32(math.Ceil(q - 1e-9))
}

// spreadV is how far node n's count of colocation c is outside its quota.
func (r *repairer) spreadV(n, c, count int32) int32 {
	lo, hi := r.quota(n, c)
	return max(0, count-hi) + max(0, lo-count)
}

func (r *repairer) costV(n int32, load float64) float64 {
	c := r.p.nodes[n].cap
	return max(0, load-r.hi*c) + max(0, r.lo*c-load)
}

// costV2 is node n's cost outside the band squared, per unit of capacity:
// summed over nodes it says how the cost outside the band is shared. With
// the same total outside, one node far out is worse than two a little out,
// which matters when some nodes cannot reach the band (rules keep them
// empty) and the others all stay above it.
func (r *repairer) costV2(n int32, load float64) float64 {
	v := r.costV(n, load)
	return v * v / r.p.nodes[n].cap
}

func (r *repairer) byteV(n int32, b float64) float64 {
	if !r.bytesOn {
		return 0
	}
	c := r.p.nodes[n].cap
	return max(0, b-r.bHi*c) + max(0, r.bLo*c-b)
}

// canGo reports whether group gi may end on node t instead of where it
// ends now.
func (r *repairer) canGo(gi, t int32) bool {
	p := r.p
	g := &p.groups[gi]
	if t == r.node[gi] || !r.inC(t, g.coloc) || !math.IsInf(p.nodes[t].maxCost, 1) {
		return false
	}
	if g.restricted && !p.ruleAllows(g, t) {
		return false
	}
	return r.movesDelta(gi, t) <= 0 || r.budget > 0
}

// movesDelta is the change in the plan's move count if gi ends on t.
func (r *repairer) movesDelta(gi, t int32) int {
	if r.forced[gi] {
		return 0
	}
	return b2i(t != r.origin[gi]) - b2i(r.node[gi] != r.origin[gi])
}

// option is one repair step: g goes from a to b and, when h >= 0, h goes
// from b to a.
type option struct {
	g, h    int32
	a, b    int32
	dSpread int32
	dCost   float64
	dCost2  float64 // change in the summed costV2 of the two nodes
	tol2    float64 // rounding tolerance of dCost2
	dBytes  float64
	dMoves  int
	moved   int64 // bytes of the groups that move in the plan after the step
	dMoved  int64 // change in the plan's moved bytes
}

// eval fills in what option o changes.
func (r *repairer) eval(o *option) {
	p := r.p
	r.work--
	G := &p.groups[o.g]
	cg, bg := G.cost, float64(G.Bytes)
	ch, bh := 0.0, 0.0
	var H *groupState
	if o.h >= 0 {
		H = &p.groups[o.h]
		ch, bh = H.cost, float64(H.Bytes)
	}
	a, b := o.a, o.b
	la, lb := r.load[a]-cg+ch, r.load[b]+cg-ch
	o.dCost = r.costV(a, la) + r.costV(b, lb) - r.costV(a, r.load[a]) - r.costV(b, r.load[b])
	o.dCost2 = r.costV2(a, la) + r.costV2(b, lb) - r.costV2(a, r.load[a]) - r.costV2(b, r.load[b])
	ca, cb := p.nodes[a].cap, p.nodes[b].cap
	ce := r.eps * (ca + cb)
	o.tol2 = ce * (2*(r.costV(a, la)+r.costV(b, lb)+r.costV(a, r.load[a])+r.costV(b, r.load[b])) + ce) / min(ca, cb)
	ba, bb := r.bytes[a]-bg+bh, r.bytes[b]+bg-bh
	o.dBytes = r.byteV(a, ba) + r.byteV(b, bb) - r.byteV(a, r.bytes[a]) - r.byteV(b, r.bytes[b])
	o.dSpread = 0
	if H == nil || H.coloc != G.coloc {
		ca, cb := r.cnt.get(a, G.coloc), r.cnt.get(b, G.coloc)
		o.dSpread += r.spreadV(a, G.coloc, ca-1) + r.spreadV(b, G.coloc, cb+1) - r.spreadV(a, G.coloc, ca) - r.spreadV(b, G.coloc, cb)
		if H != nil {
			ca, cb = r.cnt.get(a, H.coloc), r.cnt.get(b, H.coloc)
			o.dSpread += r.spreadV(a, H.coloc, ca+1) + r.spreadV(b, H.coloc, cb-1) - r.spreadV(a, H.coloc, ca) - r.spreadV(b, H.coloc, cb)
		}
	}
	o.dMoves = r.movesDelta(o.g, b)
	o.moved, o.dMoved = 0, 0
	if b != r.origin[o.g] {
		o.moved += G.Bytes
	}
	if r.node[o.g] != r.origin[o.g] {
		o.dMoved -= G.Bytes
	}
	if H != nil {
		o.dMoves += r.movesDelta(o.h, a)
		if a != r.origin[o.h] {
			o.moved += H.Bytes
		}
		if r.node[o.h] != r.origin[o.h] {
			o.dMoved -= H.Bytes
		}
	}
	o.dMoved += o.moved
}

// worthIt applies the improvement threshold to a byte step: the bytes it
// brings into the band must be at least ImprovementThreshold times the
// bytes it adds to the plan's moves (Citus's rule against moving much for
// little gain).
func (r *repairer) worthIt(o *option) bool {
	it := r.p.in.ImprovementThreshold
	return it == 0 || o.dMoved <= 0 || -o.dBytes >= it*float64(o.dMoved)
}

// costOK: the step leaves the two nodes no further outside the cost band,
// and does not gather the cost outside it on one of them (see costV2).
func (r *repairer) costOK(o *option) bool {
	return o.dCost <= r.eps*(r.p.nodes[o.a].cap+r.p.nodes[o.b].cap) && o.dCost2 <= o.tol2
}

func (r *repairer) bytesTol(o *option) float64 {
	return r.bEps * (r.p.nodes[o.a].cap + r.p.nodes[o.b].cap)
}

// better orders valid options of the spread pass: less spread, then fewer
// added moves, then less cost outside the band, then fewer bytes outside
// it, then fewer moved bytes, then group order.
func (r *repairer) better(x, y *option) bool {
	if y.g < 0 {
		return true
	}
	ce := r.eps * (r.p.nodes[x.a].cap + r.p.nodes[x.b].cap)
	be := r.bytesTol(x)
	switch {
	case x.dSpread != y.dSpread:
		return x.dSpread < y.dSpread
	case x.dMoves != y.dMoves:
		return x.dMoves < y.dMoves
	case math.Abs(x.dCost-y.dCost) > ce:
		return x.dCost < y.dCost
	case math.Abs(x.dBytes-y.dBytes) > be:
		return x.dBytes < y.dBytes
	case x.moved != y.moved:
		return x.moved < y.moved
	case x.g != y.g:
		return x.g < y.g
	}
	return x.h < y.h
}

// apply makes option o.
func (r *repairer) apply(o *option) {
	r.spend(o.dMoves)
	r.relocate(o.g, o.b)
	if o.h >= 0 {
		r.relocate(o.h, o.a)
	}
}

// spend counts d more moves (fewer when negative) against the budget; an
// unlimited budget stays unlimited.
func (r *repairer) spend(d int) {
	if r.budget != math.MaxInt {
		r.budget -= d
	}
}

func (r *repairer) relocate(gi, t int32) {
	p := r.p
	g := &p.groups[gi]
	s := r.node[gi]
	r.changed = true
	r.load[s] -= g.cost
	r.load[t] += g.cost
	r.bytes[s] -= float64(g.Bytes)
	r.bytes[t] += float64(g.Bytes)
	r.cnt.add(s, g.coloc, -1)
	r.cnt.add(t, g.coloc, 1)
	// leave at[s]
	i := r.atPos[gi]
	last := int32(len(r.at[s]) - 1)
	moved := r.at[s][last]
	r.at[s][i] = moved
	r.atPos[moved] = i
	r.at[s] = r.at[s][:last]
	r.atPos[gi] = int32(len(r.at[t]))
	r.at[t] = append(r.at[t], gi)
	r.node[gi] = t
}

// repairPlan runs the repair pass on p (see repairer) and returns the
// repairer with the final placement; rewrite then makes it the plan. Two
// variants are tried when moves are not limited: local steps alone, and a
// redistribution of every colocation group to its quotas first (global);
// the better final placement is kept (see repairScore). The global variant
// goes first when colocations are not spread; when it leaves no cost
// outside the band, it is kept without trying the local one (otherwise the
// local steps may leave less cost outside it, or share it more evenly).
// When colocations are only a little off their quotas (by at most one
// group in a hundred), local steps go first and are kept when they spread
// every colocation.
func repairPlan(p *planner, lo, hi float64) *repairer {
	g := newRepairer(p, lo, hi)
	spread := g.spreadTotal()
	if g.budget != math.MaxInt || spread == 0 {
		g.improve()
		return g
	}
	if spread <= len(p.groups)/100 {
		// A little off: local steps first, and when they spread every
		// colocation, that is the answer.
		if g.improve(); g.spreadTotal() == 0 {
			return g
		}
		g = newRepairer(p, lo, hi)
	}
	g.global()
	g.improve()
	gs := g.score()
	if gs.costV <= gs.costEps {
		return g
	}
	r := newRepairer(p, lo, hi)
	if r.improve(); gs.better(r.score()) {
		return g
	}
	return r
}

// improve runs the local steps: spread, then bytes, then dropping moves,
// then moving smaller groups.
func (r *repairer) improve() {
	for r.work > 0 && r.spreadRound() {
	}
	if r.bytesOn {
		for r.work > 0 && r.bytesRound() {
		}
		r.bandSearch()
	}
	r.trim()
	r.shrink()
}

// shrink lowers the bytes the plan moves: each balancing move, largest
// group first, is given the smallest group of the same colocation that
// starts on the same node and does not move, when the exchange leaves the
// two nodes no further outside the cost band and the byte band (counts do
// not change, so neither does spread). The moved group then stays where it
// started. This is the byte-saving pass: it never trades balance for
// bytes. Each move looks at most shrinkScan candidates.
func (r *repairer) shrink() {
	const shrinkScan = 8
	p := r.p
	type key struct {
		coloc int32
		bytes int64
		g     int32
	}
	var moved []key
	stay := make([][]key, len(p.nodes))
	for gi := range p.groups {
		g := int32(gi)
		if !r.movable[g] || r.forced[g] {
			continue
		}
		k := key{p.groups[g].coloc, p.groups[g].Bytes, g}
		if r.node[g] != r.origin[g] {
			moved = append(moved, k)
		} else {
			stay[r.node[g]] = append(stay[r.node[g]], k)
		}
	}
	if len(moved) == 0 {
		return
	}
	byKey := func(x, y key) int {
		return cmp.Or(cmp.Compare(x.coloc, y.coloc), cmp.Compare(x.bytes, y.bytes), cmp.Compare(x.g, y.g))
	}
	for n := range stay {
		slices.SortFunc(stay[n], byKey)
	}
	slices.SortFunc(moved, func(x, y key) int { return cmp.Or(cmp.Compare(y.bytes, x.bytes), cmp.Compare(x.g, y.g)) })
	for _, m := range moved {
		if r.work <= 0 {
			return
		}
		g := m.g
		o, t := r.origin[g], r.node[g]
		if o == t || !r.canGo(g, o) {
			continue
		}
		list := stay[o]
		// With bytes balanced, the exchange moves g−h bytes onto o and off
		// t: start at the smallest h both nodes' room in the band allows.
		from := int64(0)
		if r.bytesOn {
			room := min(r.bHi*p.nodes[o].cap-r.bytes[o], r.bytes[t]-r.bLo*p.nodes[t].cap)
			if room < 0 {
				continue
			}
			from = max(0, m.bytes-int64(room))
		}
		i, _ := slices.BinarySearchFunc(list, key{m.coloc, from, -1}, byKey)
		for seen := 0; i < len(list) && list[i].coloc == m.coloc && list[i].bytes < m.bytes && seen < shrinkScan; i++ {
			h := list[i].g
			if r.node[h] != o || !r.canGo(h, t) {
				continue
			}
			seen++
			opt := option{g: g, h: h, a: t, b: o}
			r.eval(&opt)
			if opt.dSpread <= 0 && r.costOK(&opt) && opt.dBytes <= r.bytesTol(&opt) && opt.dMoved < 0 && opt.dMoves <= 0 {
				r.apply(&opt)
				break
			}
		}
	}
}

// repairScore is what decides between repair variants and between the
// plans Plan tried: less cost outside the band, then that cost shared more
// evenly (less summed costV2), then less spread, then fewer bytes outside
// the byte band, then fewer moves, then fewer moved bytes.
type repairScore struct {
	costV, costEps   float64
	costV2, cost2Eps float64
	spread           int
	bytesV, bEps     float64
	moves            int
	moved            int64
}

func (x repairScore) better(y repairScore) bool {
	switch {
	case math.Abs(x.costV-y.costV) > x.costEps:
		return x.costV < y.costV
	case math.Abs(x.costV2-y.costV2) > x.cost2Eps:
		return x.costV2 < y.costV2
	case x.spread != y.spread:
		return x.spread < y.spread
	case math.Abs(x.bytesV-y.bytesV) > x.bEps:
		return x.bytesV < y.bytesV
	case x.moves != y.moves:
		return x.moves < y.moves
	}
	return x.moved < y.moved
}

func (r *repairer) score() repairScore {
	p := r.p
	s := repairScore{spread: r.spreadTotal()}
	for n := range p.nodes {
		n := int32(n)
		if !p.nodes[n].eligible() {
			continue
		}
		v := r.costV(n, r.load[n])
		s.costV += v
		s.costV2 += r.costV2(n, r.load[n])
		s.cost2Eps += r.eps * (2*v + r.eps*p.nodes[n].cap)
		s.bytesV += r.byteV(n, r.bytes[n])
		s.costEps += r.eps * p.nodes[n].cap
		s.bEps += r.bEps * p.nodes[n].cap
	}
	for gi := range p.groups {
		if r.node[gi] != r.origin[gi] {
			s.moves++
			s.moved += p.groups[gi].Bytes
		}
	}
	return s
}

// perfect reports whether nothing is left to improve but moves: cost and
// bytes within their bands and every colocation spread.
func (s repairScore) perfect() bool {
	return s.costV <= s.costEps && s.spread == 0 && s.bytesV <= s.bEps
}

// spreadTotal is the summed distance of every colocation's counts from
// their quotas.
func (r *repairer) spreadTotal() int {
	t := 0
	for c := int32(0); c < int32(r.colocs); c++ {
		for n := range r.p.nodes {
			if r.inC(int32(n), c) {
				t += int(r.spreadV(int32(n), c, r.cnt.get(int32(n), c)))
			}
		}
	}
	return t
}

// global sends every colocation group to its quotas in one sweep, without
// regard to the cost band (the caller compares the outcome), like Citus's
// per-colocation rebalancing with the fewest moves:
//   - per colocation, each node gets floor(q) or ceil(q) groups: the
//     ceilings go to the nodes with the fewest groups planned so far, then
//     to those holding more of the colocation now;
//   - each node keeps (or gets back, dropping their moves) as many of the
//     groups that started on it as its count allows, chosen so that their
//     bytes add up to about the colocation's mean per group (see keep);
//   - the other groups go, per colocation and largest first, each to the
//     node with the fewest bytes per unit of capacity that still needs a
//     group of its colocation.
func (r *repairer) global() {
	p := r.p
	nn := len(p.nodes)
	byColoc := make([][]int32, r.colocs)
	for gi := range p.groups {
		if r.movable[gi] {
			c := p.groups[gi].coloc
			byColoc[c] = append(byColoc[c], int32(gi))
		}
	}
	planned := make([]float64, nn) // groups assigned so far, per node
	fill := make([]float64, nn)    // bytes of the groups placed so far, per node
	for gi := range p.groups {
		if !r.movable[gi] {
			fill[r.node[gi]] += float64(p.groups[gi].Bytes)
		}
	}
	need := newColocCounts(nn, r.colocs)
	dest := make([]int32, len(p.groups))
	var pool []int32
	target := make([]int32, nn)
	home := map[int32][]int32{} // movable groups of the colocation by origin; lookups only
	for c := int32(0); c < int32(r.colocs); c++ {
		gs := byColoc[c]
		if len(gs) == 0 {
			continue
		}
		var mean float64
		for _, gi := range gs {
			mean += float64(p.groups[gi].Bytes)
		}
		mean /= float64(len(gs))
		var nodes, extra []int32
		var sum int32
		for n := range p.nodes {
			n := int32(n)
			if r.inC(n, c) {
				nodes = append(nodes, n)
				lo, hi := r.quota(n, c)
				target[n] = lo
				sum += lo
				if hi > lo {
					extra = append(extra, n)
				}
			}
		}
		slices.SortFunc(extra, func(a, b int32) int {
			pa, pb := (planned[a]+float64(target[a]))/p.nodes[a].cap, (planned[b]+float64(target[b]))/p.nodes[b].cap
			return cmp.Or(cmp.Compare(pa, pb), cmp.Compare(r.cnt.get(b, c), r.cnt.get(a, c)), cmp.Compare(a, b))
		})
		for i := 0; i < len(extra) && sum < r.k[c]; i++ {
			target[extra[i]]++
			sum++
		}
		clear(home)
		movableOn := map[int32]int32{}
		for _, gi := range gs {
			movableOn[r.node[gi]]++
			if o := r.origin[gi]; r.inC(o, c) && r.canHome(gi) {
				home[o] = append(home[o], gi)
			} else {
				pool = append(pool, gi)
			}
		}
		for _, n := range nodes {
			planned[n] += float64(target[n])
			free := int(target[n]) - (int(r.cnt.get(n, c)) - int(movableOn[n])) // less the groups that may not move
			hs := home[n]
			out := r.keep(hs, min(max(free, 0), len(hs)), mean)
			pool = append(pool, out...)
			for _, gi := range out {
				dest[gi] = -1
			}
			kept := 0
			for _, gi := range hs {
				if dest[gi] != -1 {
					dest[gi] = n
					fill[n] += float64(p.groups[gi].Bytes)
					kept++
				}
			}
			need.add(n, c, int32(max(free-kept, 0)))
		}
	}
	// The rest, per colocation and largest first, each to the emptiest node
	// that needs one of its colocation.
	type sized struct {
		bytes int64
		g     int32
	}
	byC := make([][]sized, r.colocs)
	for _, gi := range pool {
		c := p.groups[gi].coloc
		byC[c] = append(byC[c], sized{p.groups[gi].Bytes, gi})
	}
	h := newNodeHeap(nn, func(a, b int32) bool {
		fa, fb := fill[a]/p.nodes[a].cap, fill[b]/p.nodes[b].cap
		if fa != fb {
			return fa < fb
		}
		return a < b
	})
	var held []int32
	for c := int32(0); c < int32(r.colocs); c++ {
		list := byC[c]
		if len(list) == 0 {
			continue
		}
		slices.SortFunc(list, func(a, b sized) int { return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(a.g, b.g)) })
		for n := range p.nodes {
			if need.get(int32(n), c) > 0 {
				h.push(int32(n))
			}
		}
		for _, it := range list {
			gi := it.g
			dest[gi] = -1
			held = held[:0]
			for h.len() > 0 && len(held) < 64 {
				n := h.pop()
				if n != r.node[gi] && !r.canGo(gi, n) {
					held = append(held, n)
					continue
				}
				dest[gi] = n
				need.add(n, c, -1)
				fill[n] += float64(it.bytes)
				if need.get(n, c) > 0 {
					h.push(n)
				}
				break
			}
			for _, n := range held {
				h.push(n)
			}
			if dest[gi] < 0 { // nowhere to go: it stays
				dest[gi] = r.node[gi]
				if n := r.node[gi]; need.get(n, c) > 0 {
					need.add(n, c, -1)
					if need.get(n, c) == 0 {
						h.remove(n)
					}
				}
			}
		}
		for h.len() > 0 {
			h.pop()
		}
	}
	for c := range byColoc {
		for _, gi := range byColoc[c] {
			if t := dest[gi]; t != r.node[gi] {
				r.spend(r.movesDelta(gi, t))
				r.relocate(gi, t)
			}
		}
	}
}

// canHome reports whether group gi may end on the node it started on.
func (r *repairer) canHome(gi int32) bool {
	o := r.origin[gi]
	return o == r.node[gi] || !r.forced[gi] && r.canGo(gi, o)
}

// keep chooses which of gs (the movable groups of one colocation on one
// node) stay so that k of them stay, with bytes adding up to about k times
// mean: slot by slot, the group closest to what the remaining slots should
// hold on average, groups that did not move before preferred on a tie. It
// returns the others.
func (r *repairer) keep(gs []int32, k int, mean float64) []int32 {
	p := r.p
	if k <= 0 {
		return gs
	}
	if k >= len(gs) {
		return nil
	}
	type sized struct {
		bytes float64
		g     int32
	}
	rest := make([]sized, len(gs))
	for i, g := range gs {
		rest[i] = sized{float64(p.groups[g].Bytes), g}
	}
	slices.SortFunc(rest, func(a, b sized) int { return cmp.Or(cmp.Compare(a.bytes, b.bytes), cmp.Compare(a.g, b.g)) })
	taken := make([]bool, len(rest))
	want := mean * float64(k)
	for m := k; m > 0; m-- {
		aim := want / float64(m)
		i, _ := slices.BinarySearchFunc(rest, aim, func(x sized, v float64) int { return cmp.Compare(x.bytes, v) })
		// the nearest untaken on either side
		lo, hi := i-1, i
		for lo >= 0 && taken[lo] {
			lo--
		}
		for hi < len(rest) && taken[hi] {
			hi++
		}
		j := hi
		if hi == len(rest) || lo >= 0 && aim-rest[lo].bytes <= rest[hi].bytes-aim {
			j = lo
		}
		taken[j] = true
		want -= rest[j].bytes
	}
	out := gs[:0:0]
	for i, x := range rest {
		if !taken[i] {
			out = append(out, x.g)
		}
	}
	return out
}

// spreadRound fixes each colocation's spread as far as it can; it reports
// whether anything changed.
func (r *repairer) spreadRound() bool {
	p := r.p
	changed := false
	var over, need []int32
	for c := int32(0); c < int32(r.colocs) && r.work > 0; c++ {
		over, need = over[:0], need[:0]
		for n := range p.nodes {
			n := int32(n)
			if !r.inC(n, c) {
				continue
			}
			lo, hi := r.quota(n, c)
			cn := r.cnt.get(n, c)
			if cn > hi {
				over = append(over, n)
			} else if cn < lo {
				need = append(need, n)
			}
		}
		if len(over) == 0 && len(need) == 0 {
			continue
		}
		// Counterparts: the nodes with room for one more (for over) and
		// the nodes with one to spare (for need), emptiest / fullest of
		// the colocation first.
		var room, spare []int32
		for n := range p.nodes {
			n := int32(n)
			if !r.inC(n, c) {
				continue
			}
			lo, hi := r.quota(n, c)
			cn := r.cnt.get(n, c)
			if cn < hi {
				room = append(room, n)
			}
			if cn > lo {
				spare = append(spare, n)
			}
		}
		rel := func(n int32) float64 {
			return float64(r.cnt.get(n, c)) - float64(r.k[c])*p.nodes[n].cap/r.capSum[c]
		}
		byRel := func(a, b int32) int { return cmp.Or(cmp.Compare(rel(a), rel(b)), cmp.Compare(a, b)) }
		slices.SortFunc(room, byRel)
		slices.SortFunc(spare, func(a, b int32) int { return byRel(b, a) })
		for _, a := range over {
			for r.work > 0 {
				_, hi := r.quota(a, c)
				if r.cnt.get(a, c) <= hi || !r.fixPair(a, c, room, true) {
					break
				}
				changed = true
			}
		}
		for _, b := range need {
			for r.work > 0 {
				lo, _ := r.quota(b, c)
				if r.cnt.get(b, c) >= lo || !r.fixPair(b, c, spare, false) {
					break
				}
				changed = true
			}
		}
	}
	return changed
}

const (
	// pairScan is how many counterpart nodes one repair step tries.
	pairScan = 8
	// candScan is how many groups of a node one spread step tries to
	// move (and 16 times as many to send back), so that a step costs the
	// same on a node with ten thousand groups as on one with ten.
	candScan = 16
)

// fixPair moves a group of colocation c off node x (from, over its quota)
// or onto it (not from), trying the counterparts in order.
func (r *repairer) fixPair(x, c int32, partners []int32, from bool) bool {
	tried := 0
	for _, y := range partners {
		if y == x {
			continue
		}
		lo, hi := r.quota(y, c)
		cy := r.cnt.get(y, c)
		if from && cy >= hi || !from && cy <= lo {
			continue
		}
		a, b := x, y
		if !from {
			a, b = y, x
		}
		best := r.bestOption(a, b, c)
		if best.g >= 0 {
			r.apply(&best)
			return true
		}
		if tried++; tried >= pairScan || r.work <= 0 {
			break
		}
	}
	return false
}

// bestOption finds the best step that takes a group of colocation c from a
// to b, alone or with a group sent back, and lowers spread without more
// cost or bytes outside the bands. g is -1 when there is none.
func (r *repairer) bestOption(a, b, c int32) option {
	p := r.p
	best := option{g: -1}
	var gs []int32
	for _, gi := range r.at[a] {
		if p.groups[gi].coloc == c && r.canGo(gi, b) {
			if gs = append(gs, gi); len(gs) == candScan {
				break
			}
		}
	}
	if len(gs) == 0 {
		return best
	}
	consider := func(o option) {
		r.eval(&o)
		if o.dSpread < 0 && r.costOK(&o) && o.dBytes <= r.bytesTol(&o) && o.dMoves <= r.budget && r.better(&o, &best) {
			best = o
		}
	}
	for _, g := range gs {
		consider(option{g: g, h: -1, a: a, b: b})
	}
	if best.g >= 0 && best.dCost <= 0 && best.dBytes <= 0 {
		return best // a plain move that costs no balance
	}
	// Swaps: send back a group of another colocation that b can spare and
	// a has room for, of about the same cost.
	var hs []int32
	for _, hi := range r.at[b] {
		h := &p.groups[hi]
		if h.coloc == c || !r.canGo(hi, a) {
			continue
		}
		ca, cb := r.cnt.get(a, h.coloc), r.cnt.get(b, h.coloc)
		if r.spreadV(a, h.coloc, ca+1)+r.spreadV(b, h.coloc, cb-1) > r.spreadV(a, h.coloc, ca)+r.spreadV(b, h.coloc, cb) {
			continue
		}
		if hs = append(hs, hi); len(hs) == 16*candScan {
			break
		}
	}
	r.pairNearest(gs, hs, a, b, consider)
	return best
}

// pairNearest calls consider for each g of gs with the few groups of hs
// closest to it in cost (then bytes).
func (r *repairer) pairNearest(gs, hs []int32, a, b int32, consider func(option)) {
	if len(hs) == 0 {
		return
	}
	p := r.p
	key := func(gi int32) float64 { return p.groups[gi].cost }
	slices.SortFunc(hs, func(x, y int32) int {
		return cmp.Or(cmp.Compare(key(x), key(y)), cmp.Compare(p.groups[x].Bytes, p.groups[y].Bytes), cmp.Compare(x, y))
	})
	for _, g := range gs {
		if r.work <= 0 {
			return
		}
		i, _ := slices.BinarySearchFunc(hs, key(g), func(h int32, v float64) int { return cmp.Compare(key(h), v) })
		for j := max(0, i-2); j < min(len(hs), i+2); j++ {
			consider(option{g: g, h: hs[j], a: a, b: b})
		}
	}
}

// bytesRound brings nodes into the byte band, worst first, by moves and
// same-count swaps that keep spread and cost; it reports whether anything
// changed.
func (r *repairer) bytesRound() bool {
	p := r.p
	var out, all []int32
	for n := range p.nodes {
		if p.nodes[n].eligible() {
			all = append(all, int32(n))
			if r.byteV(int32(n), r.bytes[n]) > r.bEps*p.nodes[n].cap {
				out = append(out, int32(n))
			}
		}
	}
	if len(out) == 0 {
		return false
	}
	fill := func(n int32) float64 { return r.bytes[n] / p.nodes[n].cap }
	slices.SortFunc(out, func(x, y int32) int {
		return cmp.Or(cmp.Compare(r.byteV(y, r.bytes[y])/p.nodes[y].cap, r.byteV(x, r.bytes[x])/p.nodes[x].cap), cmp.Compare(x, y))
	})
	changed := false
	partners := make([]int32, 0, pairScan)
	for _, x := range out {
		for r.work > 0 && r.byteV(x, r.bytes[x]) > r.bEps*p.nodes[x].cap {
			over := fill(x) > r.bHi
			partners = r.bytePartners(x, over, all, partners[:0])
			best := option{g: -1}
			for _, y := range partners {
				if r.work <= 0 {
					break
				}
				a, b := x, y
				if !over {
					a, b = y, x
				}
				if o := r.bestBytes(a, b); o.g >= 0 && r.byteBetter(&o, &best) {
					best = o
				}
			}
			if best.g < 0 {
				break
			}
			r.apply(&best)
			changed = true
		}
	}
	return changed
}

// swapCandidates lists the groups on b that may go to a, by colocation,
// then bytes, then index (what ofColocation and the swap searches expect).
func (r *repairer) swapCandidates(b, a int32) []int32 {
	p := r.p
	var hs []int32
	for _, hi := range r.at[b] {
		if r.canGo(hi, a) {
			hs = append(hs, hi)
		}
	}
	slices.SortFunc(hs, func(x, y int32) int {
		gx, gy := &p.groups[x], &p.groups[y]
		return cmp.Or(cmp.Compare(gx.coloc, gy.coloc), cmp.Compare(gx.Bytes, gy.Bytes), cmp.Compare(x, y))
	})
	return hs
}

// ofColocation is the run of hs (sorted as swapCandidates sorts) in
// colocation c, smallest first.
func (r *repairer) ofColocation(hs []int32, c int32) []int32 {
	p := r.p
	i, _ := slices.BinarySearchFunc(hs, c, func(h int32, c int32) int { return cmp.Compare(p.groups[h].coloc, c) })
	j := i
	for j < len(hs) && p.groups[hs[j]].coloc == c {
		j++
	}
	return hs[i:j]
}

// bestBytes finds the step from a (more bytes) to b that lowers the bytes
// outside the band most without more spread or cost outside the band.
func (r *repairer) bestBytes(a, b int32) option {
	p := r.p
	best := option{g: -1}
	consider := func(o option) {
		r.eval(&o)
		if o.dSpread <= 0 && r.costOK(&o) && o.dBytes < -r.bytesTol(&o) && o.dMoves <= r.budget && r.worthIt(&o) && r.byteBetter(&o, &best) {
			best = o
		}
	}
	var gs []int32
	for _, gi := range r.at[a] {
		if r.canGo(gi, b) {
			gs = append(gs, gi)
			if r.work <= 0 {
				return best
			}
			consider(option{g: gi, h: -1, a: a, b: b})
		}
	}
	if len(gs) == 0 {
		return best
	}
	// Swaps within a colocation keep every count; aim at the transfer that
	// levels the two nodes' bytes.
	want := (r.bytes[a]*p.nodes[b].cap - r.bytes[b]*p.nodes[a].cap) / (p.nodes[a].cap + p.nodes[b].cap)
	hs := r.swapCandidates(b, a)
	for _, g := range gs {
		G := &p.groups[g]
		target := float64(G.Bytes) - want
		same := r.ofColocation(hs, G.coloc)
		if len(same) == 0 {
			continue
		}
		k, _ := slices.BinarySearchFunc(same, target, func(h int32, v float64) int { return cmp.Compare(float64(p.groups[h].Bytes), v) })
		for q := max(0, k-1); q < min(len(same), k+1); q++ {
			if r.work <= 0 {
				return best
			}
			consider(option{g: g, h: same[q], a: a, b: b})
		}
	}
	if best.g >= 0 {
		return best
	}
	// Swaps across colocations, when every count stays within its quota
	// (eval measures that).
	slices.SortFunc(hs, func(x, y int32) int {
		return cmp.Or(cmp.Compare(p.groups[x].Bytes, p.groups[y].Bytes), cmp.Compare(x, y))
	})
	for _, g := range gs {
		G := &p.groups[g]
		target := float64(G.Bytes) - want
		k, _ := slices.BinarySearchFunc(hs, target, func(h int32, v float64) int { return cmp.Compare(float64(p.groups[h].Bytes), v) })
		for q := max(0, k-2); q < min(len(hs), k+2); q++ {
			if r.work <= 0 {
				return best
			}
			if p.groups[hs[q]].coloc != G.coloc {
				consider(option{g: g, h: hs[q], a: a, b: b})
			}
		}
	}
	return best
}

// byteBetter orders options of the byte pass: fewer added moves (a swap
// that changes which group of a source moves adds none), then fewer bytes
// outside the band, then less spread, then fewer moved bytes, then group
// order.
func (r *repairer) byteBetter(x, y *option) bool {
	if y.g < 0 {
		return true
	}
	be := r.bytesTol(x)
	switch {
	case x.dMoves != y.dMoves:
		return x.dMoves < y.dMoves
	case math.Abs(x.dBytes-y.dBytes) > be:
		return x.dBytes < y.dBytes
	case x.dSpread != y.dSpread:
		return x.dSpread < y.dSpread
	case x.moved != y.moved:
		return x.moved < y.moved
	case x.g != y.g:
		return x.g < y.g
	}
	return x.h < y.h
}

// trim drops balancing moves whose undoing leaves cost, spread and bytes
// no worse on the two nodes, largest first.
func (r *repairer) trim() {
	p := r.p
	type key struct {
		bytes int64
		g     int32
	}
	var moved []key
	for gi := range p.groups {
		g := int32(gi)
		if r.movable[g] && !r.forced[g] && r.node[g] != r.origin[g] {
			moved = append(moved, key{p.groups[g].Bytes, g})
		}
	}
	slices.SortFunc(moved, func(x, y key) int { return cmp.Or(cmp.Compare(y.bytes, x.bytes), cmp.Compare(x.g, y.g)) })
	for _, k := range moved {
		g := k.g
		if r.work <= 0 {
			return
		}
		o := option{g: g, h: -1, a: r.node[g], b: r.origin[g]}
		c := p.groups[g].coloc
		if _, hi := r.quota(o.b, c); r.cnt.get(o.b, c) >= hi && r.spreadV(o.a, c, r.cnt.get(o.a, c)) == 0 {
			continue // the origin has no room: spread would suffer
		}
		if !r.canGo(g, o.b) {
			continue
		}
		r.eval(&o)
		if o.dSpread <= 0 && o.dCost <= 0 && o.dCost2 <= o.tol2 && o.dBytes <= 0 {
			r.apply(&o)
		}
	}
}

// rewrite turns the final placement back into the plan's moves. When
// repair changed nothing the plan stays as it is. Otherwise forced moves
// keep their order (with their new targets) and come first; the balancing
// moves follow round-robin over their sources, fullest source first, each
// source's moves to its emptiest targets first, so that waves run many
// moves at once. With a MaxCost on some node the balancing moves keep the
// plan's order (existing moves first, new moves after, in group order), so
// the ceiling holds at every point. A move that is not forced is a
// balancing move when Citus's rule accepts it at its point of the plan, and
// a spread move otherwise.
func (r *repairer) rewrite() {
	p := r.p
	if !r.changed {
		return
	}
	var steps, balance []step
	for _, s := range p.steps {
		to := r.node[s.g]
		if to == r.origin[s.g] {
			continue
		}
		s.to = to
		if r.forced[s.g] {
			steps = append(steps, s)
		} else {
			balance = append(balance, s)
		}
	}
	for gi := range p.groups {
		g := int32(gi)
		if r.step[g] < 0 && r.node[g] != r.origin[g] {
			balance = append(balance, step{g: g, from: r.origin[g], to: r.node[g], reason: ReasonBalance})
		}
	}
	load := make([]float64, len(p.nodes))
	for i := range p.groups {
		load[r.origin[i]] += p.groups[i].cost
	}
	for _, s := range steps {
		load[s.from] -= p.groups[s.g].cost
		load[s.to] += p.groups[s.g].cost
	}
	ceiling := false
	for i := range p.nodes {
		ceiling = ceiling || !math.IsInf(p.nodes[i].maxCost, 1)
	}
	if !ceiling {
		util := make([]float64, len(p.nodes))
		for n := range util {
			util[n] = load[n] / math.Max(p.nodes[n].cap, 1e-300)
		}
		slices.SortFunc(balance, func(x, y step) int {
			return cmp.Or(cmp.Compare(util[y.from], util[x.from]), cmp.Compare(x.from, y.from),
				cmp.Compare(util[x.to], util[y.to]), cmp.Compare(x.to, y.to), cmp.Compare(x.g, y.g))
		})
		// Round-robin: one move of every source per round, each to a
		// target no other move of the round uses when one of the source's
		// next few moves has such a target.
		var sources []int32
		lists := map[int32][]step{} // moves per source; lookups only
		for _, s := range balance {
			if len(lists[s.from]) == 0 {
				sources = append(sources, s.from)
			}
			lists[s.from] = append(lists[s.from], s)
		}
		used := make([]int32, len(p.nodes))
		head := make([]int, len(sources))
		taken := make(map[int32][]bool, len(sources)) // lookups only
		for _, src := range sources {
			taken[src] = make([]bool, len(lists[src]))
		}
		out := balance[:0:0]
		for round := int32(1); len(out) < len(balance); round++ {
			for si, src := range sources {
				l, tk := lists[src], taken[src]
				for head[si] < len(l) && tk[head[si]] {
					head[si]++
				}
				if head[si] == len(l) {
					continue
				}
				k, seen := head[si], 0
				for j := head[si]; j < len(l) && seen < 16; j++ {
					if tk[j] {
						continue
					}
					seen++
					if used[l[j].to] != round {
						k = j
						break
					}
				}
				used[l[k].to] = round
				out = append(out, l[k])
				tk[k] = true
			}
		}
		balance = out
		balance = r.orderWithinBand(balance, load)
	}
	steps = append(steps, balance...)
	for i := range p.nodes {
		load[i] = 0
	}
	for i := range p.groups {
		load[r.origin[i]] += p.groups[i].cost
	}
	p.balanceMoves = 0
	for i := range steps {
		s := &steps[i]
		c := p.groups[s.g].cost
		if s.reason == ReasonBalance || s.reason == ReasonSpread {
			S, T := &p.nodes[s.from], &p.nodes[s.to]
			s.reason = ReasonSpread
			if citusAccepts(load[s.from], S.cap, load[s.to], T.cap, c, p.in.ImprovementThreshold) {
				s.reason = ReasonBalance
			}
			p.balanceMoves++
		}
		load[s.from] -= c
		load[s.to] += c
	}
	p.steps = steps
}

// bandWindow is how many of the next moves orderWithinBand looks at.
const bandWindow = 32

// orderWithinBand keeps each move's target within the cost band while the
// moves run in order, where the order allows it: a move whose target would
// end above the band waits for the first of the next bandWindow moves
// whose target would not (in a cycle of moves, the one that empties that
// target first). load is every node's cost before the moves.
func (r *repairer) orderWithinBand(moves []step, load []float64) []step {
	p := r.p
	cur := slices.Clone(load)
	out := make([]step, 0, len(moves))
	buf := make([]step, 0, bandWindow)
	next := 0
	for next < len(moves) || len(buf) > 0 {
		for len(buf) < bandWindow && next < len(moves) {
			buf = append(buf, moves[next])
			next++
		}
		pick := 0
		for j, s := range buf {
			to := &p.nodes[s.to]
			if (cur[s.to]+p.groups[s.g].cost)/math.Max(to.cap, 1e-300) <= r.hi+r.eps {
				pick = j
				break
			}
		}
		s := buf[pick]
		buf = slices.Delete(buf, pick, pick+1)
		cur[s.from] -= p.groups[s.g].cost
		cur[s.to] += p.groups[s.g].cost
		out = append(out, s)
	}
	return out
}
