package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/shardmover/shardmover/internal/units"
)

// bandSearch is repair's last byte step (by_disk_size), for what
// bytesRound leaves outside the byte band: a local search that, step by
// step, takes the out-of-band node worst off (then the next, when it has no
// step) and its pairScan best counterparts (the emptiest nodes for an
// over-full node, the fullest for an under-full one), and makes the move or
// the swap within a colocation (so every count stays) that most lowers the
// bytes outside the band over both nodes, then adds the fewest moves, then
// the fewest moved bytes. A step never puts more cost outside the cost
// band on its two nodes (nor gathers it on one of them), never spreads a
// colocation less evenly and obeys every placement rule; unlike
// bytesRound's steps it is not held to the improvement threshold, because
// reaching the band is worth the bytes. For the same reason the search
// keeps its steps only when they bring every node into the band;
// otherwise it undoes them all, so a plan that cannot reach the band moves
// no more than bytesRound made it. It spends at most
// half the evaluations left and 4·nodes+32 steps.
func (r *repairer) bandSearch() {
	p := r.p
	var all []int32
	for n := range p.nodes {
		if p.nodes[n].eligible() && p.nodes[n].cap > 0 {
			all = append(all, int32(n))
		}
	}
	outV := func(n int32) float64 { return r.byteV(n, r.bytes[n]) / p.nodes[n].cap }
	anyOut := func() bool {
		for _, n := range all {
			if outV(n) > r.bEps {
				return true
			}
		}
		return false
	}
	if len(all) < 2 || !anyOut() {
		return
	}
	stop := r.work / 2
	changed, budget := r.changed, r.budget
	type undo struct{ g, from int32 }
	var log []undo
	var out []int32
	partners := make([]int32, 0, pairScan)
	for it := 4*len(all) + 32; it > 0 && r.work > stop; it-- {
		out = out[:0]
		for _, n := range all {
			if outV(n) > r.bEps {
				out = append(out, n)
			}
		}
		if len(out) == 0 {
			break
		}
		slices.SortFunc(out, func(x, y int32) int { return cmp.Or(cmp.Compare(outV(y), outV(x)), cmp.Compare(x, y)) })
		applied := false
		for _, x := range out {
			over := r.bytes[x] > r.bHi*p.nodes[x].cap
			partners = r.bytePartners(x, over, all, partners[:0])
			best := option{g: -1}
			for _, y := range partners {
				a, b := x, y
				if !over {
					a, b = y, x
				}
				if o := r.bandStep(a, b); o.g >= 0 && r.bandBetter(&o, &best) {
					best = o
				}
			}
			if best.g >= 0 {
				log = append(log, undo{best.g, best.a})
				if best.h >= 0 {
					log = append(log, undo{best.h, best.b})
				}
				r.apply(&best)
				applied = true
				break
			}
			if r.work <= stop {
				break
			}
		}
		if !applied {
			break
		}
	}
	if len(log) == 0 {
		return
	}
	if !anyOut() {
		r.searched = true
		return
	}
	for i := len(log) - 1; i >= 0; i-- {
		r.relocate(log[i].g, log[i].from)
	}
	r.changed, r.budget = changed, budget
}

// bytePartners returns, in out, the pairScan nodes of all other than x
// that x should trade with: the emptiest (bytes per unit of capacity) for
// an over-full node, the fullest for an under-full one, ties by node.
func (r *repairer) bytePartners(x int32, over bool, all, out []int32) []int32 {
	p := r.p
	fill := func(n int32) float64 { return r.bytes[n] / p.nodes[n].cap }
	first := func(u, v int32) bool {
		if fill(u) != fill(v) {
			return (fill(u) < fill(v)) == over
		}
		return u < v
	}
	for _, y := range all {
		if y == x {
			continue
		}
		if len(out) == pairScan && !first(y, out[pairScan-1]) {
			continue
		}
		if len(out) < pairScan {
			out = append(out, y)
		} else {
			out[pairScan-1] = y
		}
		for j := len(out) - 1; j > 0 && first(out[j], out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// bandStep finds the best step (see bandBetter) that moves bytes from a to
// b: one group of a, or a group of a for a smaller one of b of the same
// colocation. Swaps aim at the transfers that matter: the least that
// brings both nodes as far into the band as they go, the most that keeps
// them there, and the one that levels them; a colocation with few groups
// on b is tried whole.
func (r *repairer) bandStep(a, b int32) option {
	p := r.p
	best := option{g: -1}
	consider := func(o option) {
		r.eval(&o)
		if o.dSpread <= 0 && r.costOK(&o) && o.dBytes < -r.bytesTol(&o) && o.dMoves <= r.budget && r.bandBetter(&o, &best) {
			best = o
		}
	}
	var gs []int32
	for _, gi := range r.at[a] {
		if r.work <= 0 {
			return best
		}
		if r.canGo(gi, b) {
			gs = append(gs, gi)
			consider(option{g: gi, h: -1, a: a, b: b})
		}
	}
	if len(gs) == 0 {
		return best
	}
	hs := r.swapCandidates(b, a)
	ca, cb := p.nodes[a].cap, p.nodes[b].cap
	aims := [...]float64{
		max(r.bytes[a]-r.bHi*ca, r.bLo*cb-r.bytes[b]),
		min(r.bytes[a]-r.bLo*ca, r.bHi*cb-r.bytes[b]),
		(r.bytes[a]*cb - r.bytes[b]*ca) / (ca + cb),
	}
	const whole = 16
	for _, g := range gs {
		G := &p.groups[g]
		same := r.ofColocation(hs, G.coloc)
		// only smaller groups of b send bytes from a to b
		k, _ := slices.BinarySearchFunc(same, G.Bytes, func(h int32, v int64) int { return cmp.Compare(p.groups[h].Bytes, v) })
		same = same[:k]
		if len(same) <= whole {
			for _, h := range same {
				if r.work <= 0 {
					return best
				}
				consider(option{g: g, h: h, a: a, b: b})
			}
			continue
		}
		for _, d := range aims {
			q, _ := slices.BinarySearchFunc(same, float64(G.Bytes)-d, func(h int32, v float64) int { return cmp.Compare(float64(p.groups[h].Bytes), v) })
			for e := max(0, q-2); e < min(len(same), q+2); e++ {
				if r.work <= 0 {
					return best
				}
				consider(option{g: g, h: same[e], a: a, b: b})
			}
		}
	}
	return best
}

// bandBetter orders options of the band search: fewer bytes outside the
// band, then fewer added moves, then fewer moved bytes, then less spread,
// then group order.
func (r *repairer) bandBetter(x, y *option) bool {
	if y.g < 0 {
		return true
	}
	switch {
	case math.Abs(x.dBytes-y.dBytes) > r.bytesTol(x):
		return x.dBytes < y.dBytes
	case x.dMoves != y.dMoves:
		return x.dMoves < y.dMoves
	case x.dMoved != y.dMoved:
		return x.dMoved < y.dMoved
	case x.dSpread != y.dSpread:
		return x.dSpread < y.dSpread
	case x.g != y.g:
		return x.g < y.g
	}
	return x.h < y.h
}

// bytesLimit says, when a by_disk_size plan leaves some node's bytes
// outside the band, what keeps them there, or returns nil. It blames a
// group only when that is provably why:
//   - a group larger than the band's upper bound on every node it may be
//     on (whichever node holds it is above the band);
//   - groups that may not move holding more than the band allows on their
//     node;
//   - a node that no combination of the groups that may be on it brings
//     into the band (see cannotFit), whatever the other nodes hold: the
//     groups are too coarse for it, and the largest of them is named.
//
// Otherwise it names the node worst off and no group, and says which
// guarantees the steps that would bring it closer to the band break (see
// blockers).
func (r *repairer) bytesLimit() *Limit {
	if !r.bytesOn {
		return nil
	}
	p := r.p
	var out []int32
	for n := range p.nodes {
		n := int32(n)
		if p.nodes[n].eligible() && p.nodes[n].cap > 0 && r.byteV(n, r.bytes[n])/p.nodes[n].cap > r.bEps {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil
	}
	outV := func(n int32) float64 { return r.byteV(n, r.bytes[n]) / p.nodes[n].cap }
	slices.SortFunc(out, func(x, y int32) int { return cmp.Or(cmp.Compare(outV(y), outV(x)), cmp.Compare(x, y)) })
	side := func(n int32) string {
		if r.bytes[n] > r.bHi*p.nodes[n].cap {
			return "above"
		}
		return "below"
	}
	limit := func(g, n int32, detail string) *Limit {
		N := &p.nodes[n]
		l := &Limit{Node: N.ID, NodeName: N.Name, Detail: detail}
		if g >= 0 {
			l.GroupID, l.Bytes = p.groups[g].ID, p.groups[g].Bytes
		}
		return l
	}
	band := func(n int32) string {
		c := p.nodes[n].cap
		return fmt.Sprintf("%s..%s", units.Bytes(int64(r.bLo*c)), units.Bytes(int64(r.bHi*c)))
	}
	// A group too large for any node it may be on.
	var big int32 = -1
	for gi := range p.groups {
		gi := int32(gi)
		G := &p.groups[gi]
		if big >= 0 && G.Bytes <= p.groups[big].Bytes {
			continue
		}
		fits := false
		for n := range p.nodes {
			n := int32(n)
			N := &p.nodes[n]
			if !N.eligible() || float64(G.Bytes) > (r.bHi+r.bEps)*N.cap {
				continue
			}
			if n == r.node[gi] || !G.Excluded && !G.Isolate && r.inC(n, G.coloc) && (!G.restricted || p.ruleAllows(G, n)) {
				fits = true
				break
			}
		}
		if !fits && r.byteV(r.node[gi], r.bytes[r.node[gi]])/p.nodes[r.node[gi]].cap > r.bEps {
			big = gi
		}
	}
	if big >= 0 {
		G, n := &p.groups[big], r.node[big]
		N := &p.nodes[n]
		return limit(big, n, fmt.Sprintf("group %s alone (%s) holds more bytes than the band allows on any node it may be on (%s per unit of capacity); %s stays above the band",
			G.ID, units.Bytes(G.Bytes), units.Bytes(int64(r.bHi)), nodeLabel(N.ID, N.Name)))
	}
	// A node the groups cannot bring into the band.
	for _, n := range out {
		N := &p.nodes[n]
		who := nodeLabel(N.ID, N.Name)
		fixed, largest, proven := r.cannotFit(n)
		if !proven {
			continue
		}
		if fixed >= 0 {
			G := &p.groups[fixed]
			return limit(fixed, n, fmt.Sprintf("groups that may not move (excluded or isolated) hold more bytes on %s than its band allows (%s), the largest %s (%s); it stays above the band",
				who, band(n), G.ID, units.Bytes(G.Bytes)))
		}
		if largest < 0 {
			return limit(-1, n, fmt.Sprintf("%s holds no group and none can move there; it stays below the band (%s)", who, band(n)))
		}
		G := &p.groups[largest]
		return limit(largest, n, fmt.Sprintf("no combination of the groups that may be on %s adds up to its band (%s): groups this coarse, the largest %s (%s), leave it %s the band",
			who, band(n), G.ID, units.Bytes(G.Bytes), side(n)))
	}
	n := out[0]
	N := &p.nodes[n]
	detail := fmt.Sprintf("no move or swap found brings %s (%s) into its band (%s) while keeping cost balance, every colocation group's spread and the placement rules", nodeLabel(N.ID, N.Name), units.Bytes(int64(r.bytes[n])), band(n))
	if b := r.blockers(n); b != "" {
		detail += "; " + b
	}
	return limit(-1, n, detail)
}

// cannotFit reports (proven) whether node n provably cannot end within
// its byte band: the groups that may never leave it (excluded or
// isolated) hold more than the band allows (fixed names the largest of
// them), or no subset of the other groups that may be on n, added to
// them, sums into the band. Groups this plan happens not to move count as
// movable: the claim is about every layout, not about this plan's steps.
// Capacity, counts and the other nodes are ignored, which only adds sums, so a
// "cannot" is sound. The subset sums are a dynamic program over sizes
// rounded down to a unit of a quarter of the band's width divided by the
// number of groups, each bucket keeping the least and the most real sum
// that reach it, so no sum is lost; when that takes too much work, proven
// is false. largest is the largest group that may be on n.
func (r *repairer) cannotFit(n int32) (fixed, largest int32, proven bool) {
	p := r.p
	c := p.nodes[n].cap
	lo, hi := (r.bLo-r.bEps)*c, (r.bHi+r.bEps)*c
	fixed, largest = -1, -1
	var fixedBytes float64
	var items []float64
	for gi := range p.groups {
		gi := int32(gi)
		G := &p.groups[gi]
		on := r.node[gi] == n
		if G.Excluded || G.Isolate {
			if on {
				fixedBytes += float64(G.Bytes)
				if fixed < 0 || G.Bytes > p.groups[fixed].Bytes {
					fixed = gi
				}
			}
			continue
		}
		if !on && (!r.inC(n, G.coloc) || G.restricted && !p.ruleAllows(G, n) || !math.IsInf(p.nodes[n].maxCost, 1)) {
			continue
		}
		if largest < 0 || G.Bytes > p.groups[largest].Bytes {
			largest = gi
		}
		if G.Bytes > 0 {
			items = append(items, float64(G.Bytes))
		}
	}
	if fixedBytes > hi {
		return fixed, largest, true
	}
	A, B := lo-fixedBytes, hi-fixedBytes
	if A <= 0 {
		return -1, largest, false
	}
	var total float64
	kept := items[:0]
	for _, w := range items {
		if w <= B {
			kept = append(kept, w)
			total += w
		}
	}
	items = kept
	if total < A {
		return -1, largest, true
	}
	m := float64(len(items))
	u := (B - A) / (4 * m)
	if !(u > 0) || B/u*m > 2e7 {
		return -1, largest, false
	}
	K := int(B / u)
	// bucket k: the subsets whose sizes, rounded down to units, add up to
	// k units; their real sums lie within [mn[k], mx[k]].
	mn, mx := make([]float64, K+1), make([]float64, K+1)
	for k := range mn {
		mn[k], mx[k] = math.Inf(1), math.Inf(-1)
	}
	mn[0], mx[0] = 0, 0
	for _, w := range items {
		f := int(w / u)
		for s := K; s >= f; s-- {
			if from := s - f; mn[from] <= mx[from] {
				mn[s], mx[s] = min(mn[s], mn[from]+w), max(mx[s], mx[from]+w)
			}
		}
	}
	// A real sum S in [A, B] rounds to some k <= B/u = K (rounding only
	// lowers it) and lies within [mn[k], mx[k]].
	for k := range mn {
		if mn[k] <= mx[k] && mn[k] <= B && mx[k] >= A {
			return -1, largest, false
		}
	}
	return -1, largest, true
}

// blockers says which guarantees the single moves and swaps within a
// colocation that would bring node x closer to its band break, counting
// each step by the first it breaks; "" when there are none to report. It
// looks at every other node and at most 20000 steps.
func (r *repairer) blockers(x int32) string {
	p := r.p
	over := r.bytes[x] > r.bHi*p.nodes[x].cap
	var rules, budget, spread, cost, other, fine int
	seen := 0
	try := func(o option) {
		seen++
		// placement: rules, MaxCost targets, the colocation's nodes
		for _, m := range [...][2]int32{{o.g, o.b}, {o.h, o.a}} {
			if m[0] < 0 {
				continue
			}
			G := &p.groups[m[0]]
			if !r.inC(m[1], G.coloc) || !math.IsInf(p.nodes[m[1]].maxCost, 1) || G.restricted && !p.ruleAllows(G, m[1]) {
				rules++
				return
			}
		}
		r.eval(&o)
		switch {
		case o.dMoves > r.budget:
			budget++
		case o.dSpread > 0:
			spread++
		case !r.costOK(&o):
			cost++
		case o.dBytes >= -r.bytesTol(&o):
			other++
		default:
			fine++
		}
	}
	// helps reports whether moving d bytes onto x (negative: off it)
	// brings x closer to its band.
	helps := func(d float64) bool {
		return r.byteV(x, r.bytes[x]+d) < r.byteV(x, r.bytes[x])-r.bEps*p.nodes[x].cap
	}
	for y := range p.nodes {
		y := int32(y)
		if y == x || !p.nodes[y].eligible() {
			continue
		}
		a, b := x, y
		if !over {
			a, b = y, x
		}
		sign := 1.0
		if over {
			sign = -1
		}
		for _, g := range r.at[a] {
			G := &p.groups[g]
			if seen >= 20000 {
				break
			}
			if helps(sign * float64(G.Bytes)) {
				try(option{g: g, h: -1, a: a, b: b})
			}
			for _, h := range r.at[b] {
				if seen >= 20000 {
					break
				}
				H := &p.groups[h]
				if H.coloc == G.coloc && H.Bytes < G.Bytes && helps(sign*float64(G.Bytes-H.Bytes)) {
					try(option{g: g, h: h, a: a, b: b})
				}
			}
		}
	}
	var parts []string
	add := func(k int, what string) {
		if k > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", k, what))
		}
	}
	add(cost, "would leave more cost outside the cost band")
	add(spread, "would spread a colocation group unevenly")
	add(rules, "would break a placement rule or a node's max cost")
	add(budget, "would exceed max_moves")
	add(other, "would push the other node as far out of the byte band")
	add(fine, "keep the guarantees but lead to no layout with every node in the band")
	if len(parts) == 0 {
		return "no move or swap would bring it closer"
	}
	return "of the moves and swaps that would bring it closer, " + strings.Join(parts, ", ")
}
