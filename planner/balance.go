package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
)

const (
	// blockScan is how many groups of one cost the colocation tie-break
	// looks at.
	blockScan = 8
	// checkBudget caps the Allowed checks of restricted groups spent on
	// one source and target pair.
	checkBudget = 256
)

// balancer runs the balancing phase.
//
// Each step takes the fullest node S that still has movable groups and
// walks the other nodes from the emptiest T up, with Citus's rules: stop
// when S is not above the lower bound, or when S is within the band and T
// is not below it; skip targets at or above the upper bound or not
// emptier than S. For a pair it picks a group with pick. A source for which
// no target works is set aside ("stuck") until some node becomes emptier
// than the best target it had, or it receives a group.
type balancer struct {
	p      *planner
	rule   pickRule
	lo, hi float64
	eps    float64
	src    *nodeHeap
	tgt    *nodeHeap
	counts colocCounts

	stuck    *heap[stuckEntry] // highest m first
	stuckVer []int32
	isStuck  []bool

	// For retargeting (see canRetarget): the last move index at which a
	// node was the source of a balancing move, and at which a balancing
	// move touched it or a forced move left it; -1 for never.
	lastSource []int32
	lastTouch  []int32

	keys []candKey // scratch for setCandidates

	budget int
	maxCap float64 // largest capacity of an eligible node
}

type stuckEntry struct {
	node int32
	m    float64 // lowest target utilization when the node got stuck
	ver  int32
}

// pickRule selects how pick chooses among acceptable groups.
type pickRule int

const (
	_ pickRule = iota
	// pickFit lowers the band violation with the fewest bytes (see pick).
	pickFit
	// pickGreedy is Citus's rule: the largest acceptable group, Citus's
	// tie-breaks, and no retargeting (Citus under the one-move rule).
	pickGreedy
)

func newBalancer(p *planner, lo, hi float64, rule pickRule) *balancer {
	b := &balancer{p: p, rule: rule, lo: lo, hi: hi, eps: bandEps((lo + hi) / 2)}
	nn := len(p.nodes)
	b.src = newNodeHeap(nn, func(x, y int32) bool {
		nx, ny := &p.nodes[x], &p.nodes[y]
		ux, uy := nx.util(), ny.util()
		if ux != uy {
			return ux > uy
		}
		if rule == pickGreedy { // Citus: the reverse of the target order
			if nx.cap != ny.cap {
				return nx.cap < ny.cap
			}
			return x > y
		}
		return x < y
	})
	b.tgt = newNodeHeap(nn, func(x, y int32) bool {
		nx, ny := &p.nodes[x], &p.nodes[y]
		ux, uy := nx.util(), ny.util()
		if ux != uy {
			return ux < uy
		}
		if nx.cap != ny.cap {
			return nx.cap > ny.cap
		}
		return x < y
	})
	b.stuck = newHeap(stuckFirst)
	b.stuckVer = make([]int32, nn)
	b.isStuck = make([]bool, nn)
	b.lastSource = make([]int32, nn)
	b.lastTouch = make([]int32, nn)
	for i := range nn {
		b.lastSource[i], b.lastTouch[i] = -1, -1
	}
	// A forced move out of t after a group's move means t was fuller
	// then than now, so t's load now says nothing of its room then (see
	// canRetarget); forced moves into t only make it fuller now, which is
	// the safe side.
	for i, s := range p.steps {
		b.lastTouch[s.from] = int32(i)
	}
	b.buildCandidates()
	for i := range p.nodes {
		if p.nodes[i].eligible() {
			b.maxCap = max(b.maxCap, p.nodes[i].cap)
			b.tgt.push(int32(i))
			if b.movable(int32(i)) {
				b.src.push(int32(i))
			}
		}
	}
	return b
}

// candKey is what setCandidates sorts by.
type candKey struct {
	cost    float64
	bytes   int64
	gi      int32
	coloc   int32
	rank    int32
	arrived int
}

// movable reports whether node n has, or may have after a rebuild, a group
// to move.
func (b *balancer) movable(n int32) bool {
	return b.p.nodes[n].alive > 0 || len(b.p.nodes[n].pending) > 0
}

// buildCandidates gives every eligible node the sorted list of its groups
// that may move: those that have not moved, and those that moved here
// earlier in the plan (forced moves), which may be retargeted.
func (b *balancer) buildCandidates() {
	p := b.p
	colocs := 0
	if len(p.groups) > 0 {
		colocs = int(p.groups[len(p.groups)-1].coloc) + 1
	}
	b.counts = newColocCounts(len(p.nodes), colocs)
	lists := make([][]int32, len(p.nodes))
	for i := range p.groups {
		g := &p.groups[i]
		n := &p.nodes[g.node]
		if !n.eligible() {
			continue
		}
		b.counts.add(g.node, g.coloc, 1)
		if g.Excluded || g.Isolate || g.cost <= 0 || g.done && g.movedAt < 0 {
			continue
		}
		lists[g.node] = append(lists[g.node], int32(i))
	}
	cached := p.cands != nil && *p.cands != nil
	if !cached && p.cands != nil {
		*p.cands = make([][]int32, len(p.nodes))
	}
	for ni := range p.nodes {
		p.nodes[ni].pending = nil
		switch {
		case cached && len((*p.cands)[ni]) > 0:
			b.setSorted(int32(ni), slices.Clone((*p.cands)[ni]))
		case !cached && len(lists[ni]) > 0:
			b.setCandidates(int32(ni), lists[ni])
			if p.cands != nil {
				(*p.cands)[ni] = slices.Clone(p.nodes[ni].cands)
			}
		}
	}
}

// refresh rebuilds n's candidates when groups arrived or when arrived
// groups may no longer be retargeted from n.
func (b *balancer) refresh(n int32) {
	N := &b.p.nodes[n]
	if !N.rebuild && len(N.pending) == 0 {
		return
	}
	var list []int32
	for q := b.nextAlive(N, 0); q < int32(len(N.cands)); q = b.nextAlive(N, q+1) {
		list = append(list, N.cands[q])
	}
	for _, gi := range N.pending {
		if g := &b.p.groups[gi]; g.node == n && g.pos < 0 {
			list = append(list, gi)
		}
	}
	N.pending = nil
	list = slices.DeleteFunc(list, func(gi int32) bool {
		g := &b.p.groups[gi]
		return g.movedAt >= 0 && (g.movedAt <= b.lastSource[n] || b.p.maxMovesHit)
	})
	b.setCandidates(n, list)
}

// setCandidates sorts list into n's candidate arrays: by cost, then groups
// that arrived by an earlier move first (retargeting them costs no extra
// move and no extra bytes), then by rank, then by bytes, then group order. Rank orders the node's groups of
// one colocation from largest to smallest bytes (0, 1, ...); sorting by
// rank, highest first, puts first the colocations with the most groups on
// the node, and within a colocation its smallest group.
func (b *balancer) setCandidates(n int32, list []int32) {
	p := b.p
	N := &p.nodes[n]
	for _, gi := range N.cands {
		if p.groups[gi].node == n {
			p.groups[gi].pos = -1
		}
	}
	keys := b.keys[:0]
	for _, gi := range list {
		g := &p.groups[gi]
		keys = append(keys, candKey{cost: g.cost, bytes: g.Bytes, gi: gi, coloc: g.coloc, arrived: b2i(g.movedAt >= 0)})
	}
	slices.SortFunc(keys, func(x, y candKey) int {
		if x.coloc != y.coloc {
			return cmp.Compare(x.coloc, y.coloc)
		}
		if x.bytes != y.bytes {
			return cmp.Compare(y.bytes, x.bytes)
		}
		return cmp.Compare(y.gi, x.gi)
	})
	for i := range keys {
		if i > 0 && keys[i-1].coloc == keys[i].coloc {
			keys[i].rank = keys[i-1].rank + 1
		}
	}
	slices.SortFunc(keys, func(x, y candKey) int {
		switch {
		case x.cost != y.cost:
			return cmp.Compare(x.cost, y.cost)
		case x.arrived != y.arrived:
			return y.arrived - x.arrived
		case x.rank != y.rank:
			return cmp.Compare(y.rank, x.rank)
		case x.bytes != y.bytes:
			return cmp.Compare(x.bytes, y.bytes)
		}
		return cmp.Compare(x.gi, y.gi)
	})
	for i := range keys {
		list[i] = keys[i].gi
	}
	b.keys = keys[:0]
	b.setSorted(n, list)
}

// setSorted makes list, already in candidate order, n's candidates.
func (b *balancer) setSorted(n int32, list []int32) {
	p := b.p
	N := &p.nodes[n]
	k := len(list)
	N.cands = list
	N.ccost = make([]float64, k)
	N.right = make([]int32, k+1)
	N.left = make([]int32, k+1)
	N.arrived = 0
	for j, gi := range list {
		N.ccost[j] = p.groups[gi].cost
		p.groups[gi].pos = int32(j)
		if p.groups[gi].movedAt >= 0 {
			N.arrived++
		}
	}
	for j := range N.right {
		N.right[j] = int32(j)
		N.left[j] = int32(j)
	}
	N.alive = k
	N.rebuild = false
}

func (b *balancer) run() {
	p := b.p
	for b.src.len() > 0 {
		s := b.src.top()
		b.refresh(s)
		if p.nodes[s].alive == 0 {
			b.src.remove(s)
			continue
		}
		uS := p.nodes[s].util()
		if uS <= b.lo+b.eps {
			return
		}
		tmin := b.tgt.top()
		if uS <= b.hi+b.eps && p.nodes[tmin].util() >= b.lo-b.eps {
			return
		}
		gi, to := int32(-1), int32(-1)
		rej, rejT := int32(-1), int32(-1)
		S := &p.nodes[s]
		cMin := S.ccost[b.nextAlive(S, 0)]
		try := func(t int32) (stop bool) {
			if t == s {
				return false
			}
			uT := p.nodes[t].util()
			if !(uT < uS) || uT >= b.hi-b.eps || (uT >= b.lo-b.eps && uS <= b.hi+b.eps) {
				return true
			}
			// No move to t or to any fuller node can be acceptable: even the
			// smallest group would end the target above S (see accept).
			if cMin > (uS-uT)*b.maxCap {
				return true
			}
			g, r := b.pick(s, t)
			if g >= 0 {
				gi, to = g, t
				return true
			}
			if rej < 0 && r >= 0 {
				rej, rejT = r, t
			}
			return false
		}
		// Fast path: the emptiest node; otherwise walk the targets in order.
		if !try(tmin) {
			for t := range b.tgt.inOrder() {
				if t != tmin && try(t) {
					break
				}
			}
		}

		if gi >= 0 {
			b.apply(gi, s, to)
			continue
		}
		if rej >= 0 && !p.skipSet[rej] {
			b.skipRejected(rej, s, rejT)
		}
		b.stick(s, p.nodes[tmin].util())
	}
}

func (b *balancer) apply(gi, s, t int32) {
	p := b.p
	g := &p.groups[gi]
	S := &p.nodes[s]
	b.removeCand(S, g.pos)
	g.pos = -1
	retarget := g.movedAt >= 0
	virtual := !retarget && p.in.MaxMoves >= 0 && p.balanceMoves >= p.in.MaxMoves
	if virtual {
		p.maxMovesHit = true
	}
	fixed := func(n int32) {
		b.src.fix(n)
		b.tgt.fix(n)
	}
	if retarget {
		p.retarget(gi, t, fixed)
	} else {
		step := int32(len(p.steps))
		p.moveWith(gi, t, ReasonBalance, virtual, fixed)
		if !virtual {
			p.balanceMoves++
			b.lastSource[s], b.lastTouch[s], b.lastTouch[t] = step, step, step
			if S.arrived > 0 {
				S.rebuild = true // its arrived groups may not leave any more
			}
		}
	}
	b.counts.add(s, g.coloc, -1)
	b.counts.add(t, g.coloc, 1)
	if !b.movable(s) {
		b.src.remove(s)
	}
	if b.isStuck[t] {
		b.unstick(t)
	} else if b.movable(t) {
		b.src.push(t)
	}
	b.unstickAbove(S.util())
}

// canRetarget reports whether group gi, which moved to s at move index
// movedAt, may go to t instead: no balancing move left s after it arrived
// (such a move was planned with gi on s), no balancing move touched t
// after that index (so t's load then is its load now), t is not where the
// group came from, and, if its move was a balancing move, the rewritten
// move is acceptable at that point of the plan. The caller checks rules
// and room.
func (b *balancer) canRetarget(gi, s, t int32) bool {
	p := b.p
	g := &p.groups[gi]
	i := g.movedAt
	if p.maxMovesHit || b.lastSource[s] >= i || b.lastTouch[t] >= i || t == g.origin {
		return false
	}
	if p.steps[i].reason != ReasonBalance {
		return true
	}
	A, T := &p.nodes[g.origin], &p.nodes[t]
	return b.acceptLoads(p.fromLoad[i], A.cap, T.load, T.cap, T.maxCost, g.cost)
}

func (b *balancer) stick(n int32, m float64) {
	b.src.remove(n)
	if !b.movable(n) {
		return
	}
	b.isStuck[n] = true
	b.stuckVer[n]++
	b.stuck.push(stuckEntry{n, m, b.stuckVer[n]})
}

func (b *balancer) unstick(n int32) {
	b.isStuck[n] = false
	b.stuckVer[n]++
	if b.movable(n) {
		b.src.push(n)
	}
}

// unstickAbove brings back the stuck sources whose best target was fuller
// than v, a utilization some node just dropped to.
func (b *balancer) unstickAbove(v float64) {
	for b.stuck.len() > 0 && b.stuck.top().m > v+b.eps {
		e := b.stuck.pop()
		if b.isStuck[e.node] && b.stuckVer[e.node] == e.ver {
			b.unstick(e.node)
		}
	}
}

// stuckFirst orders the stuck heap: highest m first, then node index.
func stuckFirst(a, b stuckEntry) bool {
	if a.m != b.m {
		return a.m > b.m
	}
	return a.node < b.node
}

// accept is the exact rule for a balancing move of cost c from s to t
// (Citus's): the target must stay within its MaxCost and end below the
// source's utilization before the move, or level with it while the source
// ends above the target's utilization before the move (so the pair's
// higher utilization falls, or stays while the lower one rises); and, when
// the target ends above the source, the move must pass the improvement
// threshold (see Input.ImprovementThreshold).
func (b *balancer) accept(s, t int32, c float64) bool {
	S, T := &b.p.nodes[s], &b.p.nodes[t]
	return b.acceptLoads(S.load, S.cap, T.load, T.cap, T.maxCost, c)
}

func (b *balancer) acceptLoads(sLoad, sCap, tLoad, tCap, tMax, c float64) bool {
	if tLoad+c > tMax {
		return false
	}
	return citusAccepts(sLoad, sCap, tLoad, tCap, c, b.p.in.ImprovementThreshold)
}

// citusAccepts is Citus's rule for moving cost c from a source to a
// target, without MaxCost (see accept).
func citusAccepts(sLoad, sCap, tLoad, tCap, c, improvementThreshold float64) bool {
	uS, uT := sLoad/sCap, tLoad/tCap
	nS, nT := (sLoad-c)/sCap, (tLoad+c)/tCap
	if !(nT < uS || nT == uS && nS > uT) {
		return false
	}
	if nT <= nS || improvementThreshold == 0 {
		return true
	}
	return improvementRatio(uS, uT, nS, nT) >= improvementThreshold
}

// improvementRatio is Citus's normalized utilization improvement.
func improvementRatio(uS, uT, nS, nT float64) float64 {
	improvement := math.Max(uS-nT, nS-uT)
	added := math.Min(nT-uT, uS-nS)
	if added <= 0 {
		return math.Inf(1)
	}
	return improvement / added
}

// pick chooses the group to move from s to t, or returns -1. The second
// result is a group that only the improvement threshold kept from moving,
// or -1.
//
// The planner measures how far the cluster is from balanced by the band
// violation V: the sum over nodes of the cost above the band's upper edge
// and below its lower edge (V = 0 exactly when the cluster is balanced).
// A move may reduce violation (S's excess, T's deficit) and may create it
// (T pushed over the band, S pulled under it); created violation counts
// twice, because no group moves twice in a plan and so it takes further
// moves to undo. With ex = S - hiS, def = loT - T, room = hiT - T and
// slack = S - loS (cost units), the change of V is convex and piecewise
// linear in the moved cost c, and lowest for c in [lo, hi] where
//
//	hi = min(room, slack)    lo = min(max(ex, def), hi)
//
// The planner takes, among groups whose move is acceptable (see accept):
//  1. the smallest group with a cost in [lo, hi]: the most progress for
//     the fewest bytes;
//  2. otherwise the better of the largest group below lo and the smallest
//     above hi, if it lowers V: first by the excess it would leave for
//     good on a target with no group of its own to shed, then by V, then
//     the smaller;
//  3. otherwise, as Citus does, the group closest to the amount that
//     would equalize S and T: the largest at or below it, else the
//     smallest above it.
//
// Among groups of equal cost it prefers the one whose colocation has the
// most groups on S and the fewest on T, so colocation groups spread out,
// then the one with fewer bytes.
func (b *balancer) pick(s, t int32) (int32, int32) {
	p := b.p
	S, T := &p.nodes[s], &p.nodes[t]
	if S.alive == 0 {
		return -1, -1
	}
	uS, uT := S.util(), T.util()
	if !(uT < uS) {
		return -1, -1
	}
	d := uS - uT
	e := d * S.cap * T.cap / (S.cap + T.cap)
	cImp := d * T.cap
	cRoom := T.maxCost - T.load
	cThr := math.Inf(1)
	if it := p.in.ImprovementThreshold; it > 0 {
		cThr = math.Max(e, d*math.Max(S.cap, T.cap)/(1+it))
	}
	cMax := min(cImp, cThr, cRoom)
	b.budget = checkBudget
	if cMax > 0 && b.rule == pickGreedy {
		if g := b.descend(s, t, upperBound(S.ccost, cMax), 0); g >= 0 {
			return g, -1
		}
	} else if cMax > 0 {
		cc := S.ccost
		hiS, loS, hiT, loT := b.hi*S.cap, b.lo*S.cap, b.hi*T.cap, b.lo*T.cap
		need := max(S.load-hiS, loT-T.load, 0)
		hi := max(min(hiT-T.load, S.load-loS), 0)
		lo := min(need, hi)
		// 1. smallest in [lo, hi]
		if lo <= min(hi, cMax) {
			if g := b.ascend(s, t, lowerBound(cc, lo), min(hi, cMax)); g >= 0 {
				return g, -1
			}
		}
		// 2. nearest below lo or above hi, if it lowers V
		below := b.descend(s, t, min(lowerBound(cc, lo), upperBound(cc, cMax)), 0)
		above := int32(-1)
		if hi < cMax {
			above = b.ascend(s, t, upperBound(cc, hi), cMax)
		}
		pBelow, dvBelow, pAbove, dvAbove := math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)
		if below >= 0 {
			pBelow, dvBelow = b.deltaV(s, t, p.groups[below].cost)
		}
		if above >= 0 {
			pAbove, dvAbove = b.deltaV(s, t, p.groups[above].cost)
		}
		veps := b.eps * (S.cap + T.cap)
		switch {
		case dvBelow < -veps && (pBelow < pAbove || pBelow == pAbove && dvBelow <= dvAbove):
			return below, -1
		case dvAbove < -veps && pAbove <= pBelow:
			return above, -1
		case dvBelow < -veps:
			return below, -1
		}
		// 3. closest to the equalizing amount
		if g := b.descend(s, t, upperBound(cc, min(e, cMax)), 0); g >= 0 {
			return g, -1
		}
		if g := b.ascend(s, t, upperBound(cc, e), cMax); g >= 0 {
			return g, -1
		}
	}
	// Report what the improvement threshold alone rejected.
	if cThr < min(cImp, cRoom) {
		lim := min(cImp, cRoom)
		b.budget = blockScan
		for q := b.nextAlive(S, int32(upperBound(S.ccost, max(cMax, 0)))); q < int32(len(S.cands)) && S.ccost[q] < lim && b.budget > 0; q = b.nextAlive(S, q+1) {
			gi := S.cands[q]
			if b.allowed(gi, t) {
				return -1, gi
			}
		}
	}
	return -1, -1
}

// deltaV returns what moving cost c from s to t does to the band
// violation V, counting created violation twice (see pick), and, first,
// the excess it creates on a target that has no group of its own it could
// shed to undo it: such excess is likely permanent (groups that moved there
// can rarely move on), so it weighs more than any V.
func (b *balancer) deltaV(s, t int32, c float64) (permanent, dv float64) {
	S, T := &b.p.nodes[s], &b.p.nodes[t]
	src := func(load float64) float64 { // S only loses load
		return max(0, load-b.hi*S.cap) + 2*max(0, b.lo*S.cap-load)
	}
	dst := func(load float64) float64 { // T only gains load
		return 2*max(0, load-b.hi*T.cap) + max(0, b.lo*T.cap-load)
	}
	if T.alive-T.arrived == 0 { // only groups that moved here, if any
		permanent = max(0, T.load+c-b.hi*T.cap) - max(0, T.load-b.hi*T.cap)
	}
	return permanent, src(S.load-c) - src(S.load) + dst(T.load+c) - dst(T.load)
}

// ascend walks cost values upward from position from while they are at
// most maxVal, and returns the first acceptable group.
func (b *balancer) ascend(s, t int32, from int, maxVal float64) int32 {
	S := &b.p.nodes[s]
	k := int32(len(S.cands))
	for q := b.nextAlive(S, int32(from)); q < k && S.ccost[q] <= maxVal && b.budget > 0; {
		v := S.ccost[q]
		be := int32(upperBound(S.ccost, v))
		if gi := b.chooseInBlock(s, t, q, be); gi >= 0 {
			if b.accept(s, t, v) {
				return gi
			}
			return -1 // larger groups are not acceptable either
		}
		q = b.nextAlive(S, be)
	}
	return -1
}

// descend walks cost values downward from position end (exclusive) while
// they are above minVal, and returns the first acceptable group.
func (b *balancer) descend(s, t int32, end int, minVal float64) int32 {
	S := &b.p.nodes[s]
	for q := b.prevAlive(S, int32(end)-1); q >= 0 && S.ccost[q] > minVal && b.budget > 0; {
		v := S.ccost[q]
		bs := int32(lowerBound(S.ccost, v))
		if gi := b.chooseInBlock(s, t, bs, q+1); gi >= 0 && b.accept(s, t, v) {
			return gi
		}
		q = b.prevAlive(S, bs-1)
	}
	return -1
}

// chooseInBlock picks, among the first blockScan movable groups in
// positions [from, to) (all of one cost): a group that can be retargeted
// over one that would need a new move; then the one whose colocation has
// the most groups on s minus those on t; then the one with fewer bytes;
// then the earlier position.
func (b *balancer) chooseInBlock(s, t int32, from, to int32) int32 {
	p := b.p
	S := &p.nodes[s]
	best, bestScore := int32(-1), int32(math.MinInt32)
	seen := 0
	for q := b.nextAlive(S, from); q < to && seen < blockScan && b.budget > 0; q = b.nextAlive(S, q+1) {
		gi := S.cands[q]
		if !b.allowed(gi, t) {
			continue
		}
		seen++
		g := &p.groups[gi]
		if b.rule == pickGreedy { // Citus: the first in group order
			if best < 0 || gi < best {
				best = gi
			}
			continue
		}
		score := b.counts.get(s, g.coloc) - b.counts.get(t, g.coloc)
		if best < 0 {
			best, bestScore = gi, score
			continue
		}
		o := &p.groups[best]
		if fx, fo := g.movedAt >= 0, o.movedAt >= 0; fx != fo {
			if fx {
				best, bestScore = gi, score
			}
			continue
		}
		if score > bestScore || (score == bestScore && g.Bytes < o.Bytes) {
			best, bestScore = gi, score
		}
	}
	return best
}

func (b *balancer) allowed(gi, t int32) bool {
	g := &b.p.groups[gi]
	if g.movedAt >= 0 {
		b.budget--
		if b.rule == pickGreedy || !b.canRetarget(gi, g.node, t) {
			return false
		}
	}
	if !g.restricted {
		return true
	}
	b.budget--
	return b.p.ruleAllows(g, t)
}

func (b *balancer) skipRejected(gi, s, t int32) {
	p := b.p
	S, T := &p.nodes[s], &p.nodes[t]
	c := p.groups[gi].cost
	uS, uT := S.util(), T.util()
	nS, nT := (S.load-c)/S.cap, (T.load+c)/T.cap
	p.addSkip(gi, s, t, SkipBelowImprovementThreshold,
		fmt.Sprintf("improvement %.2f of the group's cost is below the improvement threshold %.2f", improvementRatio(uS, uT, nS, nT), p.in.ImprovementThreshold))
}

// removeCand marks position q of n's candidates as gone.
func (b *balancer) removeCand(n *nodeState, q int32) {
	n.right[q] = q + 1
	n.left[q+1] = q
	n.alive--
	if b.p.groups[n.cands[q]].movedAt >= 0 {
		n.arrived--
	}
}

// nextAlive returns the first live position >= q, or len(cands).
func (b *balancer) nextAlive(n *nodeState, q int32) int32 {
	if len(n.cands) == 0 {
		return 0
	}
	if q < 0 {
		q = 0
	}
	a := n.right
	r := q
	for a[r] != r {
		r = a[r]
	}
	for a[q] != r {
		a[q], q = r, a[q]
	}
	return r
}

// prevAlive returns the last live position <= q, or -1.
func (b *balancer) prevAlive(n *nodeState, q int32) int32 {
	if q < 0 || len(n.cands) == 0 {
		return -1
	}
	if k := int32(len(n.cands)); q >= k {
		q = k - 1
	}
	// left is indexed by position+1; slot 0 is the "none" sentinel.
	a := n.left
	j := q + 1
	r := j
	for a[r] != r {
		r = a[r]
	}
	for a[j] != r {
		a[j], j = r, a[j]
	}
	return r - 1
}

func lowerBound(a []float64, x float64) int {
	return sort.Search(len(a), func(i int) bool { return a[i] >= x })
}

func upperBound(a []float64, x float64) int {
	return sort.Search(len(a), func(i int) bool { return a[i] > x })
}

// colocCounts counts groups per (node, colocation): a dense table when it
// is small, a map otherwise (read by key only).
type colocCounts struct {
	colocs int
	dense  []int32
	sparse map[uint64]int32
}

func newColocCounts(nodes, colocs int) colocCounts {
	if nodes*colocs <= 1<<20 {
		return colocCounts{colocs: colocs, dense: make([]int32, nodes*colocs)}
	}
	return colocCounts{colocs: colocs, sparse: map[uint64]int32{}}
}

func (c *colocCounts) get(n, coloc int32) int32 {
	if c.dense != nil {
		return c.dense[int(n)*c.colocs+int(coloc)]
	}
	return c.sparse[uint64(n)<<32|uint64(uint32(coloc))]
}

func (c *colocCounts) add(n, coloc int32, d int32) {
	if c.dense != nil {
		c.dense[int(n)*c.colocs+int(coloc)] += d
		return
	}
	c.sparse[uint64(n)<<32|uint64(uint32(coloc))] += d
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}
