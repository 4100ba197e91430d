package planner

import (
	"cmp"
	"math"
	"slices"
)

// shrinkBytes lowers the bytes a finished plan moves without changing how
// many moves it makes or leaving any node further from the band [lo, hi]
// (utilization). The balancer picks each move for the balance it gains;
// when costs hardly differ between groups (by_disk_size with its base cost
// on small groups, say) that favors the largest groups although smaller
// ones, moved in the same number of moves, balance as well. So each
// balancing move, largest first, is given the smallest group on the same
// source that
//   - belongs to the same colocation, so each table stays as spread over
//     the nodes as the balancer left it,
//   - has not moved and is not excluded, isolated or reported skipped,
//   - may go to the same target (placement rules),
//   - costs no more than the group it replaces, so the target is never
//     fuller at any point of the plan than before (MaxCost holds), and
//   - keeps the source's and the target's final band violation at most
//     what it was.
//
// Sources with a MaxCost are left alone: the group that stays would make
// them fuller at every later point of the plan. The other nodes' loads do
// not change, so the plan stays as balanced as it was. Each move looks at
// most shrinkScan candidates, so the pass stays linear in the plan's size.
func (p *planner) shrinkBytes(lo, hi float64) {
	const shrinkScan = 64
	type cand struct {
		step  int
		bytes int64
	}
	var order []cand
	for i, s := range p.steps {
		if s.reason == ReasonBalance && p.nodes[s.from].eligible() && math.IsInf(p.nodes[s.from].maxCost, 1) {
			order = append(order, cand{i, p.groups[s.g].Bytes})
		}
	}
	if len(order) == 0 {
		return
	}
	slices.SortFunc(order, func(a, b cand) int { return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(a.step, b.step)) })
	// Groups that may replace a move, per node, fewest bytes first.
	stay := make([][]int32, len(p.nodes))
	for i := range p.groups {
		g := &p.groups[i]
		if g.movedAt >= 0 || g.done || g.Excluded || g.Isolate || g.cost <= 0 || p.skipSet[int32(i)] {
			continue
		}
		stay[g.node] = append(stay[g.node], int32(i))
	}
	for n := range stay {
		slices.SortFunc(stay[n], func(a, b int32) int {
			return cmp.Or(cmp.Compare(p.groups[a].Bytes, p.groups[b].Bytes), cmp.Compare(a, b))
		})
	}
	violation := func(n *nodeState, load float64) float64 {
		return max(0, load-hi*n.cap) + max(0, lo*n.cap-load)
	}
	for _, c := range order {
		i := c.step
		st := &p.steps[i]
		G := &p.groups[st.g]
		S, T := &p.nodes[st.from], &p.nodes[st.to]
		eps := bandEps(max(S.load/S.cap, T.load/T.cap, 1)) * (S.cap + T.cap)
		was := violation(S, S.load) + violation(T, T.load)
		for k, h := range stay[st.from] {
			H := &p.groups[h]
			if H.Bytes >= G.Bytes || k >= shrinkScan {
				break
			}
			if H.coloc != G.coloc || H.node != st.from || H.movedAt >= 0 || H.cost > G.cost || (H.restricted && !p.ruleAllows(H, st.to)) {
				continue
			}
			sLoad, tLoad := S.load+G.cost-H.cost, T.load-G.cost+H.cost
			if violation(S, sLoad)+violation(T, tLoad) > was+eps {
				continue
			}
			// H moves in G's place and leaves the list; G stays.
			S.load, T.load = sLoad, tLoad
			H.node, H.movedAt, H.origin, H.done = st.to, int32(i), st.from, true
			G.node, G.movedAt, G.done = st.from, -1, false
			stay[st.from] = slices.Delete(stay[st.from], k, k+1)
			st.g = h
			break
		}
	}
}
