package planner

import (
	"cmp"
	"fmt"
	"slices"
)

// reserveIsolated gives every isolated group a node of its own. An
// isolated group keeps its current node when it may stay there and no
// earlier isolated group (in group order) claimed it; otherwise it gets the
// eligible node with the least load (then smallest id) that allows it.
// Groups that find no node are reported as skipped and stay where they are.
// The reserved nodes leave balancing.
func (p *planner) reserveIsolated() {
	var pending []int32
	for i := range p.groups {
		g := &p.groups[i]
		if !g.Isolate {
			continue
		}
		n := &p.nodes[g.node]
		if n.canHold && n.reservedBy < 0 && p.ruleAllows(g, g.node) {
			n.reservedBy = int32(i)
			g.done = true
			continue
		}
		pending = append(pending, int32(i))
	}
	if len(pending) == 0 {
		return
	}
	// Free nodes by (load, id); loads do not change until forcedMoves.
	var free []int32
	for i := range p.nodes {
		if p.nodes[i].canHold && p.nodes[i].reservedBy < 0 {
			free = append(free, int32(i))
		}
	}
	slices.SortStableFunc(free, func(a, b int32) int { return cmp.Compare(p.nodes[a].load, p.nodes[b].load) })
	for _, gi := range pending {
		g := &p.groups[gi]
		g.done = true
		if g.Excluded {
			p.addSkip(gi, g.node, -1, SkipExcluded, "isolated group is not on a node of its own but is excluded from moving")
			continue
		}
		target, allowed := int32(-1), false
		for _, n := range free {
			if p.nodes[n].reservedBy >= 0 || !p.ruleAllows(g, n) {
				continue
			}
			allowed = true
			if g.cost <= p.nodes[n].maxCost {
				target = n
				break
			}
		}
		switch {
		case target >= 0:
			p.nodes[target].reservedBy = gi
		case allowed:
			p.addSkip(gi, g.node, -1, SkipNoRoom, "isolated group is larger than the max cost of every free node that allows it")
		default:
			p.addSkip(gi, g.node, -1, SkipNotAllowedAnywhere, "no node that allows the isolated group is free to hold it alone")
		}
	}
}

// forcedMoves moves every group off a node it may not stay on: nodes that
// may not hold shards (drain), nodes reserved for another group (isolate),
// and nodes its rules forbid (not allowed). Then isolated groups move to
// the nodes reserved for them. MaxMoves does not apply. By the planner's
// policy (restrictedFirst), groups with their own pins or avoid lists go
// first (they have the fewest choices), then by cost, largest first, then
// group order, each to the allowed node with room whose utilization after
// the move is lowest; by Citus's policy, by cost, largest first, each to
// the allowed node with room whose utilization before the move is lowest.
// Ties go to the larger capacity, then the smaller id.
func (p *planner) forcedMoves() {
	type forced struct {
		g      int32
		reason Reason
	}
	var list []forced
	for i := range p.groups {
		g := &p.groups[i]
		if g.Isolate {
			continue
		}
		n := &p.nodes[g.node]
		var r Reason
		switch {
		case !n.canHold:
			r = ReasonDrain
		case n.reservedBy >= 0:
			r = ReasonIsolate
		case g.restricted && !p.ruleAllows(g, g.node):
			r = ReasonNotAllowed
		default:
			continue
		}
		g.done = true // stays or moves; either way it is not a balancing candidate
		if g.Excluded {
			p.addSkip(int32(i), g.node, -1, SkipExcluded, fmt.Sprintf("must leave its node (%s) but is excluded from moving", r))
			continue
		}
		list = append(list, forced{int32(i), r})
	}
	own := func(gi int32) bool { return len(p.groups[gi].pinned)+len(p.groups[gi].avoid) > 0 }
	slices.SortStableFunc(list, func(a, b forced) int {
		ra, rb := own(a.g), own(b.g)
		if ra != rb && p.restrictedFirst {
			if ra {
				return -1
			}
			return 1
		}
		return cmp.Compare(p.groups[b.g].cost, p.groups[a.g].cost)
	})

	if len(list) > 0 {
		t := newTargetIndex(p)
		for _, f := range list {
			to, why := t.best(f.g)
			if to < 0 {
				detail := "no node that may hold shards allows it"
				if why == SkipNoRoom {
					detail = "every node that allows it would go over its max cost"
				}
				p.addSkip(f.g, p.groups[f.g].node, -1, why, fmt.Sprintf("must leave its node (%s): %s", f.reason, detail))
				continue
			}
			from := p.groups[f.g].node
			t.remove(from)
			t.remove(to)
			p.move(f.g, to, f.reason, false)
			t.add(from)
			t.add(to)
		}
	}

	// Isolated groups go to their reserved nodes last, once those are empty.
	for i := range p.nodes {
		n := &p.nodes[i]
		gi := n.reservedBy
		if gi < 0 || p.groups[gi].node == int32(i) {
			continue
		}
		if n.load+p.groups[gi].cost > n.maxCost {
			p.addSkip(gi, p.groups[gi].node, int32(i), SkipNoRoom, "groups that could not leave its reserved node leave no room under the node's max cost")
			continue
		}
		p.move(gi, int32(i), ReasonIsolate, false)
	}
}

// targetIndex finds drain targets fast: one min-heap of eligible nodes by
// load per distinct capacity, so the node with the lowest utilization
// after receiving a group is the best of the heap tops.
type targetIndex struct {
	p       *planner
	classes []*nodeHeap
	classOf []int32
}

func newTargetIndex(p *planner) *targetIndex {
	t := &targetIndex{p: p, classOf: make([]int32, len(p.nodes))}
	var caps []float64
	for i := range p.nodes {
		if p.nodes[i].eligible() {
			caps = append(caps, p.nodes[i].cap)
		}
	}
	slices.Sort(caps)
	caps = slices.Compact(caps)
	less := func(a, b int32) bool {
		na, nb := &p.nodes[a], &p.nodes[b]
		if na.load != nb.load {
			return na.load < nb.load
		}
		return a < b
	}
	for range caps {
		t.classes = append(t.classes, newNodeHeap(len(p.nodes), less))
	}
	for i := range p.nodes {
		t.classOf[i] = -1
		if p.nodes[i].eligible() {
			c, _ := slices.BinarySearch(caps, p.nodes[i].cap)
			t.classOf[i] = int32(c)
			t.classes[c].push(int32(i))
		}
	}
	return t
}

func (t *targetIndex) remove(n int32) {
	if c := t.classOf[n]; c >= 0 {
		t.classes[c].remove(n)
	}
}

func (t *targetIndex) add(n int32) {
	if c := t.classOf[n]; c >= 0 {
		t.classes[c].push(n)
	}
}

// best returns the target for group gi, or -1 and why there is none.
func (t *targetIndex) best(gi int32) (int32, SkipReason) {
	p := t.p
	g := &p.groups[gi]
	best, sawAllowed := int32(-1), false
	after := g.cost
	if !p.restrictedFirst {
		after = 0 // Citus: the least utilized node before the move
	}
	better := func(n int32) bool {
		if best < 0 {
			return true
		}
		a, b := &p.nodes[n], &p.nodes[best]
		ua, ub := (a.load+after)/a.cap, (b.load+after)/b.cap
		if ua != ub {
			return ua < ub
		}
		if a.cap != b.cap {
			return a.cap > b.cap
		}
		return n < best
	}
	consider := func(n int32) bool {
		if !p.allowedTarget(gi, n) {
			return false
		}
		sawAllowed = true
		if p.nodes[n].load+g.cost > p.nodes[n].maxCost {
			return false
		}
		if better(n) {
			best = n
		}
		return true
	}
	if len(g.pinned) > 0 {
		for _, n := range g.pinned {
			consider(n)
		}
	} else {
		for _, h := range t.classes {
			for n := range h.inOrder() {
				if consider(n) {
					break
				}
			}
		}
	}
	if best >= 0 {
		return best, 0
	}
	if sawAllowed {
		return -1, SkipNoRoom
	}
	return -1, SkipNotAllowedAnywhere
}
