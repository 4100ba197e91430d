package planner

import (
	"cmp"
	"math"
	"slices"
)

// citusGreedy is a straightforward Go rendering of Citus's rebalancer
// (RebalancePlacementUpdates: MoveShardsAwayFromDisallowedNodes, then
// FindAndMoveShardCost until no move is found), used as the quality
// reference in property tests and as the baseline in benchmarks. It works on
// our model: all groups are balanced together; excluded groups count but
// never move; the average is taken over the nodes that may hold shards after
// draining, like Plan's. Like Citus it re-sorts the nodes after every move,
// keeps each node's groups in a sorted list, and may move a group twice. It
// knows nothing of isolation or MaxCost.
type refResult struct {
	moves      int // balancing moves
	drainMoves int
	twice      int // moves of a group that had moved before
	bytes      int64
	nodeOf     map[string]int64 // final node of each group
}

type refNode struct {
	id       int64
	node     Node
	cap      float64
	eligible bool
	load     float64
	shards   []*refGroup // cost descending
}

func (n *refNode) util() float64 {
	if n.cap <= 0 {
		return math.Inf(1)
	}
	return n.load / n.cap
}

type refGroup struct {
	g     *Group
	order int
	cost  float64
	node  *refNode
}

func citusGreedy(in Input) refResult { return citusGreedyOpt(in, false) }

// citusGreedyOpt runs the reference; with frozen, a group that moved (to
// drain or balance) never moves again, Plan's rule.
func citusGreedyOpt(in Input, frozen bool) refResult {
	nodes := make([]*refNode, len(in.Nodes))
	byID := map[int64]*refNode{}
	for i, n := range in.Nodes {
		c := n.Capacity
		if in.Capacity != nil {
			c = in.Capacity(n)
		}
		eligible := c > 0 && n.ShouldHaveShards && !n.Drain
		if !eligible {
			c = 0
		}
		nodes[i] = &refNode{id: n.ID, node: n, cap: c, eligible: eligible}
		byID[n.ID] = nodes[i]
	}
	slices.SortFunc(nodes, func(a, b *refNode) int { return cmp.Compare(a.id, b.id) })

	groups := make([]*refGroup, len(in.Groups))
	for i := range in.Groups {
		g := &in.Groups[i]
		groups[i] = &refGroup{g: g, cost: costOf(in, g), node: byID[g.Node]}
	}
	slices.SortFunc(groups, func(a, b *refGroup) int {
		return cmp.Or(cmp.Compare(a.g.ColocationID, b.g.ColocationID), cmp.Compare(a.g.Index, b.g.Index), cmp.Compare(a.g.ID, b.g.ID))
	})
	for i, g := range groups {
		g.order = i
		g.node.load += g.cost
		g.node.shards = append(g.node.shards, g)
	}
	costDesc := func(a, b *refGroup) int { return cmp.Or(cmp.Compare(b.cost, a.cost), cmp.Compare(a.order, b.order)) }
	for _, n := range nodes {
		slices.SortFunc(n.shards, costDesc)
	}
	asc := func() []*refNode {
		s := slices.Clone(nodes)
		slices.SortFunc(s, func(a, b *refNode) int {
			return cmp.Or(cmp.Compare(a.util(), b.util()), cmp.Compare(b.cap, a.cap), cmp.Compare(a.id, b.id))
		})
		return s
	}
	allowed := func(g *refGroup, n *refNode) bool {
		if !n.eligible {
			return false
		}
		if len(g.g.PinnedTo) > 0 && !slices.Contains(g.g.PinnedTo, n.id) {
			return false
		}
		if slices.Contains(g.g.AvoidNodes, n.id) {
			return false
		}
		return in.Allowed == nil || in.Allowed(*g.g, n.node)
	}
	var res refResult
	movedOnce := map[*refGroup]bool{}
	move := func(g *refGroup, to *refNode) {
		if movedOnce[g] {
			res.twice++
		}
		movedOnce[g] = true
		from := g.node
		from.load -= g.cost
		from.shards = slices.DeleteFunc(from.shards, func(x *refGroup) bool { return x == g })
		to.load += g.cost
		to.shards = append(to.shards, g)
		slices.SortFunc(to.shards, costDesc)
		g.node = to
		res.bytes += g.g.Bytes
	}

	// MoveShardsAwayFromDisallowedNodes
	var disallowed []*refGroup
	for _, g := range groups {
		if !g.g.Excluded && !allowed(g, g.node) {
			disallowed = append(disallowed, g)
		}
	}
	slices.SortFunc(disallowed, costDesc)
	for _, g := range disallowed {
		for _, t := range asc() {
			if t != g.node && allowed(g, t) {
				move(g, t)
				res.drainMoves++
				break
			}
		}
	}

	var cost, capacity float64
	for _, n := range nodes {
		if n.eligible {
			cost += n.load
			capacity += n.cap
		}
	}
	if capacity > 0 && !in.DrainOnly {
		avg := cost / capacity
		lower, upper := (1-in.Threshold)*avg, (1+in.Threshold)*avg
		for in.MaxMoves < 0 || res.moves < in.MaxMoves {
			canMove := func(g *refGroup) bool { return !g.g.Excluded && g.cost > 0 && !(frozen && movedOnce[g]) }
			if !refFindAndMove(nodes, asc, allowed, canMove, move, lower, upper, in.ImprovementThreshold) {
				break
			}
			res.moves++
		}
	}
	res.nodeOf = map[string]int64{}
	for _, g := range groups {
		res.nodeOf[g.g.ID] = g.node.id
	}
	return res
}

// refFindAndMove is FindAndMoveShardCost over the eligible nodes.
func refFindAndMove(nodes []*refNode, asc func() []*refNode, allowed func(*refGroup, *refNode) bool,
	canMove func(*refGroup) bool, move func(*refGroup, *refNode), lower, upper, improvementThreshold float64) bool {
	order := asc()
	order = slices.DeleteFunc(order, func(n *refNode) bool { return !n.eligible })
	for si := len(order) - 1; si >= 0; si-- {
		s := order[si]
		if s.util() <= lower {
			return false
		}
		for _, t := range order {
			if t.util() >= upper {
				break
			}
			if t.util() >= lower && s.util() <= upper {
				break
			}
			for _, g := range s.shards {
				if !canMove(g) || !allowed(g, t) {
					continue
				}
				newT := (t.load + g.cost) / t.cap
				newS := (s.load - g.cost) / s.cap
				if newT <= newS {
					move(g, t)
					return true
				}
				if newT > s.util() {
					continue
				}
				if newT == s.util() && newS <= t.util() {
					continue
				}
				improvement := math.Max(s.util()-newT, newS-t.util())
				added := math.Min(newT-t.util(), s.util()-newS)
				if improvement/added < improvementThreshold {
					continue
				}
				move(g, t)
				return true
			}
		}
	}
	return false
}

// costOf is the planner's cost of a group, computed independently.
func costOf(in Input, g *Group) float64 {
	switch {
	case in.Cost != nil:
		return in.Cost(*g)
	case in.Strategy == ByShardCount:
		return 1
	case in.Strategy == ByLoad:
		return g.Load + loadBaseOf(in)
	default:
		return float64(g.Bytes) + float64(in.BaseCost)
	}
}

// loadBaseOf is by_load's base as documented on Input.LoadBase, computed
// here independently of the planner.
func loadBaseOf(in Input) float64 {
	if in.LoadBase > 0 {
		return in.LoadBase
	}
	if len(in.Groups) == 0 {
		return MinLoadBase
	}
	var sum float64
	for _, g := range in.Groups {
		sum += g.Load
	}
	return max(MinLoadBase, DefaultLoadBaseShare*sum/float64(len(in.Groups)))
}
