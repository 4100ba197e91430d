package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// nodeState is the planner's view of one node. Nodes are kept sorted by
// id, so a smaller index always means a smaller id.
type nodeState struct {
	Node
	cap        float64 // effective capacity (Input.Capacity or Node.Capacity)
	maxCost    float64 // +Inf when there is no ceiling
	load       float64 // summed cost of the groups on the node now
	canHold    bool    // may hold shards: capacity > 0, shouldhaveshards, not draining
	reservedBy int32   // isolated group that owns the node, or -1

	// balancing candidates, see balance.go
	cands   []int32
	ccost   []float64
	right   []int32
	left    []int32
	alive   int
	pending []int32 // groups that arrived and are not in cands yet
	arrived int     // groups in cands that arrived by a move
	rebuild bool    // cands must be rebuilt before use
}

// eligible reports whether the node takes part in balancing.
func (n *nodeState) eligible() bool { return n.canHold && n.reservedBy < 0 }

func (n *nodeState) util() float64 { return n.load / n.cap }

// groupState is the planner's view of one group. Groups are kept sorted by
// (ColocationID, Index, ID); that order breaks every tie between groups.
type groupState struct {
	*Group
	cost       float64
	node       int32 // index of the node that holds it in the plan
	coloc      int32 // dense colocation ordinal
	restricted bool  // has its own placement rules, or Input.Allowed is set
	pinned     []int32
	avoid      []int32
	done       bool  // moved, or may not move again in this plan
	pos        int32 // position in its node's candidate list, or -1
	movedAt    int32 // index of its move in the plan, or -1
	origin     int32 // node it moved from, when movedAt >= 0
}

// step is one move of the plan, before it becomes a Move.
type step struct {
	g, from, to int32
	reason      Reason
}

type planner struct {
	in     *Input
	nodes  []nodeState
	groups []groupState
	byID   map[int64]int32 // node id -> index; lookups only

	loadBase float64   // ByLoad's base, see setLoadBase
	steps    []step    // the moves, compactly; see result
	fromLoad []float64 // load of each move's source just before it
	skipped  []Skipped
	skipG    []int32        // group of each skipped entry
	skipSet  map[int32]bool // groups with an entry in skipped; lookups only

	balanceMoves    int
	virtualMoves    int // balancing moves past MaxMoves, reported as skipped
	maxMovesHit     bool
	restrictedFirst bool // order of forced moves, see forcedMoves

	// cands, when set, holds each node's sorted balancing candidates from
	// an earlier run with the same forced moves (or receives them).
	cands *[][]int32
}

// Plan computes an ordered list of moves that drains the nodes that may not
// hold shards, honours the placement rules, and then balances utilization.
// It is pure and deterministic: the same Input (in any order of Nodes and
// Groups) gives the same Result. It returns an error wrapping
// ErrInvalidInput when, and only when, the input is invalid.
//
// Balancing is planned with the planner's own rule (fit, see pick), and
// the plan is repaired (repair.go) so that every colocation group is
// spread over its nodes and, with by_disk_size, every node's bytes are in
// the band. When something is left to improve, balancing is also planned
// with Citus's rule (the largest group whose move is acceptable) and, when
// groups must leave their nodes, after forced moves placed by Citus's
// policy instead of the planner's (see forcedMoves); each is repaired, and
// the best is returned: less cost outside the band, then that cost shared
// more evenly over the nodes (see costV2), then colocation groups closer to
// their quotas, then fewer bytes outside the byte band, then
// fewer moves, then fewer moved bytes, then the first tried.
func Plan(in Input) (Result, error) {
	if err := validateOptions(&in); err != nil {
		return Result{}, err
	}
	cands := map[bool]*[][]int32{true: new([][]int32), false: new([][]int32)}
	best, err := planOnce(&in, pickFit, true, cands[true])
	if err != nil {
		return Result{}, err
	}
	// The repair pass (repair.go) spreads every colocation group and, with
	// by_disk_size, the bytes. When it leaves nothing to improve on the
	// first plan but moves, that plan is taken; otherwise the others are
	// planned and repaired too and the best is kept (see repairScore).
	r := repairPlan(best.p, best.lo, best.hi)
	if score := r.score(); !score.perfect() || r.searched && len(in.Groups) <= searchedAlternatives {
		orders := []bool{true}
		if best.forced {
			orders = append(orders, false)
		}
		first := best
		for _, restrictedFirst := range orders {
			for _, rule := range []pickRule{pickFit, pickGreedy} {
				if rule == pickFit && restrictedFirst {
					continue // that is the first plan
				}
				if rule == pickGreedy && (in.DrainOnly || in.MaxMoves == 0) {
					continue // no balancing: the rule does not matter
				}
				if restrictedFirst && first.balanced && first.balanceMoves <= first.minMoves {
					continue // nothing balances with fewer moves
				}
				alt, err := planOnce(&in, rule, restrictedFirst, cands[restrictedFirst])
				if err != nil {
					return Result{}, err
				}
				ra := repairPlan(alt.p, alt.lo, alt.hi)
				if s := ra.score(); s.better(score) {
					best, r, score = alt, ra, s
				}
			}
		}
	}
	r.rewrite()
	best.measure()
	res := best.result()
	res.BytesLimit = r.bytesLimit()
	res.BytesBalanced = res.BytesLimit == nil
	return res, nil
}

// searchedAlternatives: up to this many groups, a first plan that reached
// the byte band only through the band search (see bandSearch) is still
// compared with the other plans, which may need fewer moves; above it the
// first plan is kept, to bound the work.
const searchedAlternatives = 20000

// outcome is one finished plan with what Plan compares.
type outcome struct {
	p            *planner
	before       []NodeUtil
	after        []NodeUtil
	avg, lo, hi  float64
	violation    float64 // cost outside the band after the plan
	balanced     bool
	balanceMoves int
	movedBytes   int64
	minMoves     int  // no plan balances with fewer balancing moves
	forced       bool // some group had to leave its node
}

func planOnce(in *Input, rule pickRule, restrictedFirst bool, cands *[][]int32) (outcome, error) {
	p := &planner{in: in, skipSet: map[int32]bool{}, restrictedFirst: restrictedFirst, cands: cands}
	if err := p.build(); err != nil {
		return outcome{}, err
	}
	o := outcome{p: p, before: p.snapshot()}
	p.reserveIsolated()
	p.forcedMoves()
	o.forced = len(p.steps) > 0 || len(p.skipped) > 0

	o.avg, o.lo, o.hi = p.band()
	o.minMoves = p.minMoves(o.lo, o.hi)
	if !in.DrainOnly {
		newBalancer(p, o.lo, o.hi, rule).run()
	}
	p.dropResolvedSkips()

	for i := range o.before {
		o.before[i].Eligible = p.nodes[i].eligible()
	}
	o.measure()
	return o, nil
}

// measure fills in what the plan leads to.
func (o *outcome) measure() {
	p := o.p
	o.after = p.after(o.before)
	o.movedBytes = 0
	for _, s := range p.steps {
		o.movedBytes += p.groups[s.g].Bytes
	}
	o.violation = 0
	o.balanced = true
	eps := bandEps(o.avg)
	for i, u := range o.after {
		if !p.nodes[i].eligible() {
			continue
		}
		c := p.nodes[i].cap
		if v := max(0, u.Cost-o.hi*c) + max(0, o.lo*c-u.Cost); v > eps*c {
			o.balanced = false
			o.violation += v
		}
	}
	o.balanceMoves = p.balanceMoves
}

// result turns the outcome into the Result.
func (o outcome) result() Result {
	p, in := o.p, o.p.in
	res := Result{
		Strategy:             in.Strategy,
		Threshold:            in.Threshold,
		ImprovementThreshold: in.ImprovementThreshold,
		MaxMoves:             in.MaxMoves,
		LoadBase:             p.loadBase,
		Average:              o.avg,
		Lower:                o.lo,
		Upper:                o.hi,
		Moves:                p.materialize(o.before),
		Skipped:              nonNil(p.skipped),
		Before:               o.before,
		After:                o.after,
		MovedBytes:           o.movedBytes,
		Balanced:             o.balanced,
	}
	res.Waves = assignWaves(res.Moves, in.MaxPerNode)
	res.Spread = spread(in.Groups, o.before, res.Moves)
	if in.DrainOnly {
		res.Converged = res.Balanced
	} else {
		res.Converged = !p.maxMovesHit
	}
	return res
}

// spread counts each colocation group's shard groups per node (in the
// order of before) where they are and where the moves leave them.
func spread(groups []Group, before []NodeUtil, moves []Move) []Spread {
	at := make(map[int64]int, len(before))
	for i, u := range before {
		at[u.Node] = i
	}
	final := make(map[string]int64, len(moves))
	for _, m := range moves {
		final[m.GroupID] = m.To
	}
	byColoc := map[int64]*Spread{}
	var out []*Spread
	for _, g := range groups {
		sp := byColoc[g.ColocationID]
		if sp == nil {
			sp = &Spread{ColocationID: g.ColocationID, Tables: g.Tables, Before: make([]int, len(before)), After: make([]int, len(before))}
			byColoc[g.ColocationID] = sp
			out = append(out, sp)
		}
		to := g.Node
		if n, ok := final[g.ID]; ok {
			to = n
		}
		if i, ok := at[g.Node]; ok {
			sp.Before[i]++
		}
		if i, ok := at[to]; ok {
			sp.After[i]++
		}
	}
	slices.SortFunc(out, func(a, b *Spread) int { return cmp.Compare(a.ColocationID, b.ColocationID) })
	res := make([]Spread, len(out))
	for i, sp := range out {
		res[i] = *sp
	}
	return res
}

func bandEps(avg float64) float64 { return 1e-9 * math.Max(avg, 1e-300) }

// build validates nodes and groups and sets up the state.
func (p *planner) build() error {
	in := p.in
	p.nodes = make([]nodeState, len(in.Nodes))
	for i := range in.Nodes {
		p.nodes[i].Node = in.Nodes[i]
	}
	slices.SortFunc(p.nodes, func(a, b nodeState) int { return cmp.Compare(a.ID, b.ID) })
	p.byID = make(map[int64]int32, len(p.nodes))
	holders := 0
	for i := range p.nodes {
		n := &p.nodes[i]
		if i > 0 && p.nodes[i-1].ID == n.ID {
			return invalid("node %d appears twice; give every node a distinct id", n.ID)
		}
		p.byID[n.ID] = int32(i)
		n.cap = n.Capacity
		if in.Capacity != nil {
			n.cap = in.Capacity(n.Node)
		}
		if !finiteNonNeg(n.cap) {
			return invalid("node %d (%s) has capacity %v; use a finite number of 0 or more (0 means it may not hold shards)", n.ID, n.Name, n.cap)
		}
		if !finiteNonNeg(n.MaxCost) {
			return invalid("node %d (%s) has max cost %v; use a finite number of 0 or more (0 means no limit)", n.ID, n.Name, n.MaxCost)
		}
		n.maxCost = math.Inf(1)
		if n.MaxCost > 0 {
			n.maxCost = n.MaxCost
		}
		n.canHold = n.cap > 0 && n.ShouldHaveShards && !n.Drain
		n.reservedBy = -1
		if n.canHold {
			holders++
		}
	}

	p.groups = make([]groupState, len(in.Groups))
	for i := range in.Groups {
		p.groups[i].Group = &in.Groups[i]
	}
	if err := p.setLoadBase(); err != nil {
		return err
	}
	slices.SortFunc(p.groups, func(a, b groupState) int {
		return cmp.Or(cmp.Compare(a.ColocationID, b.ColocationID), cmp.Compare(a.Index, b.Index), cmp.Compare(a.ID, b.ID))
	})
	var coloc int32 = -1
	for i := range p.groups {
		g := &p.groups[i]
		if g.ID == "" {
			return invalid("a shard group of colocation %d index %d has no id; give every group a stable id such as \"c%d:%d\"", g.ColocationID, g.Index, g.ColocationID, g.Index)
		}
		if i > 0 && p.groups[i-1].ID == g.ID {
			return invalid("shard group %q appears twice; give every group a distinct id", g.ID)
		}
		if i == 0 || p.groups[i-1].ColocationID != g.ColocationID {
			coloc++
		}
		g.coloc = coloc
		n, ok := p.byID[g.Node]
		if !ok {
			return invalid("shard group %q is on node %d, which is not in the node list; pass every node that holds a group", g.ID, g.Node)
		}
		g.node = n
		g.pos = -1
		g.movedAt = -1
		if g.Bytes < 0 {
			return invalid("shard group %q has %d bytes; sizes must be 0 or more", g.ID, g.Bytes)
		}
		switch {
		case in.Cost != nil:
			g.cost = in.Cost(*g.Group)
		case in.Strategy == ByShardCount:
			g.cost = 1
		case in.Strategy == ByLoad:
			g.cost = g.Load + p.loadBase
		default:
			g.cost = float64(g.Bytes) + float64(in.BaseCost)
		}
		if !finiteNonNeg(g.cost) {
			return invalid("the cost function gave %v for shard group %q; it must return a finite number of 0 or more", g.cost, g.ID)
		}
		for _, id := range g.PinnedTo {
			n, ok := p.byID[id]
			if !ok {
				return invalid("shard group %q is pinned to node %d, which is not in the node list; fix or drop the pin", g.ID, id)
			}
			g.pinned = append(g.pinned, n)
		}
		for _, id := range g.AvoidNodes {
			n, ok := p.byID[id]
			if !ok {
				return invalid("shard group %q avoids node %d, which is not in the node list; fix or drop the rule", g.ID, id)
			}
			g.avoid = append(g.avoid, n)
		}
		g.restricted = in.Allowed != nil || len(g.pinned) > 0 || len(g.avoid) > 0
	}
	if len(p.groups) > 0 && holders == 0 {
		return invalid("no node may hold shards (each has capacity 0, shouldhaveshards false, or drain set) but %d shard groups need a place; add a node or set shouldhaveshards", len(p.groups))
	}
	// Sum loads in group order so they do not depend on input order
	// through floating point rounding.
	for i := range p.groups {
		p.nodes[p.groups[i].node].load += p.groups[i].cost
	}
	return nil
}

// setLoadBase checks every group's Load and sets the base ByLoad adds to
// it: Input.LoadBase, or when that is 0, DefaultLoadBaseShare of the mean
// load and at least MinLoadBase. The mean is summed in group order (the
// groups are sorted), so the base does not depend on the input's order.
func (p *planner) setLoadBase() error {
	var sum float64
	for i := range p.groups {
		g := &p.groups[i]
		if !finiteNonNeg(g.Load) {
			return invalid("shard group %q has load %v; a load is a finite number of 0 or more", g.ID, g.Load)
		}
	}
	if p.in.Strategy != ByLoad {
		return nil
	}
	if p.in.LoadBase > 0 {
		p.loadBase = p.in.LoadBase
		return nil
	}
	// Sorted order is set later in build; sum in a fixed order here.
	loads := make([]float64, len(p.groups))
	for i := range p.groups {
		loads[i] = p.groups[i].Load
	}
	slices.Sort(loads)
	for _, l := range loads {
		sum += l
	}
	p.loadBase = MinLoadBase
	if len(loads) > 0 {
		p.loadBase = max(MinLoadBase, DefaultLoadBaseShare*sum/float64(len(loads)))
	}
	return nil
}

// ruleAllows applies the group's own rules and Input.Allowed, but not node
// eligibility or isolation.
func (p *planner) ruleAllows(g *groupState, n int32) bool {
	if len(g.pinned) > 0 && !slices.Contains(g.pinned, n) {
		return false
	}
	if slices.Contains(g.avoid, n) {
		return false
	}
	if p.in.Allowed != nil && !p.in.Allowed(*g.Group, p.nodes[n].Node) {
		return false
	}
	return true
}

// allowedTarget reports whether g may be placed on n as a non-isolated
// group.
func (p *planner) allowedTarget(gi int32, n int32) bool {
	g := &p.groups[gi]
	if !p.nodes[n].eligible() || g.node == n {
		return false
	}
	return !g.restricted || p.ruleAllows(g, n)
}

func reportUtil(load, capacity float64) float64 {
	if capacity > 0 {
		return load / capacity
	}
	return load
}

// move records that group gi goes to node to, and updates the loads.
// When virtual is true the move goes into Skipped as max_moves_reached.
func (p *planner) move(gi, to int32, reason Reason, virtual bool) {
	p.moveWith(gi, to, reason, virtual, nil)
}

// moveWith is move; fixed, when set, is called right after each of the
// two loads changes (the source's, then the target's), so a caller can
// keep heaps keyed on load consistent one key at a time.
func (p *planner) moveWith(gi, to int32, reason Reason, virtual bool, fixed func(n int32)) {
	g := &p.groups[gi]
	from := g.node
	src, dst := &p.nodes[from], &p.nodes[to]
	src.load -= g.cost
	if src.load < 0 && src.load > -1e-6*g.cost {
		src.load = 0
	}
	if fixed != nil {
		fixed(from)
	}
	dst.load += g.cost
	if fixed != nil {
		fixed(to)
	}
	g.node = to
	g.done = true
	if virtual {
		p.virtualMoves++
		p.addSkip(gi, from, to, SkipMaxMoves, fmt.Sprintf("balancing move %d of the full plan; max moves is %d", p.balanceMoves+p.virtualMoves, p.in.MaxMoves))
		return
	}
	g.movedAt, g.origin = int32(len(p.steps)), from
	p.fromLoad = append(p.fromLoad, src.load+g.cost)
	if !g.Isolate {
		dst.pending = append(dst.pending, gi)
	}
	p.steps = append(p.steps, step{g: gi, from: from, to: to, reason: reason})
}

// retarget rewrites the move of group gi (now on its move's target) to go
// to node to instead, so the group still moves once.
func (p *planner) retarget(gi, to int32, fixed func(n int32)) {
	g := &p.groups[gi]
	p.nodes[g.node].load -= g.cost
	fixed(g.node)
	p.nodes[to].load += g.cost
	fixed(to)
	g.node = to
	p.steps[g.movedAt].to = to
	p.nodes[to].pending = append(p.nodes[to].pending, gi)
}

// materialize builds the Moves, with the utilizations of each move's
// nodes just before and after it, replayed in order from before.
func (p *planner) materialize(before []NodeUtil) []Move {
	load := make([]float64, len(before))
	for i := range before {
		load[i] = before[i].Cost
	}
	moves := make([]Move, len(p.steps))
	for i, s := range p.steps {
		g, src, dst := &p.groups[s.g], &p.nodes[s.from], &p.nodes[s.to]
		m := Move{
			Order:        i + 1,
			GroupID:      g.ID,
			ColocationID: g.ColocationID,
			ShardIDs:     nonNil(g.ShardIDs),
			Tables:       nonNil(g.Tables),
			Bytes:        g.Bytes,
			Cost:         g.cost,
			From:         src.ID,
			FromName:     src.Name,
			To:           dst.ID,
			ToName:       dst.Name,
			Reason:       s.reason,
			FromBefore:   reportUtil(load[s.from], src.cap),
			ToBefore:     reportUtil(load[s.to], dst.cap),
		}
		load[s.from] -= g.cost
		load[s.to] += g.cost
		if math.Abs(load[s.from]) < 1e-9*g.cost {
			load[s.from] = 0
		}
		m.FromAfter, m.ToAfter = reportUtil(load[s.from], src.cap), reportUtil(load[s.to], dst.cap)
		moves[i] = m
	}
	return moves
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// addSkip records a skipped move. to may be -1 for "no target".
func (p *planner) addSkip(gi, from, to int32, why SkipReason, detail string) {
	g := &p.groups[gi]
	s := Skipped{GroupID: g.ID, Bytes: g.Bytes, From: p.nodes[from].ID, FromName: p.nodes[from].Name, Why: why, Detail: detail}
	if to >= 0 {
		s.To, s.ToName = p.nodes[to].ID, p.nodes[to].Name
	}
	p.skipped = append(p.skipped, s)
	p.skipG = append(p.skipG, gi)
	p.skipSet[gi] = true
}

// dropResolvedSkips removes improvement-threshold skips of groups that
// moved later in the plan (for real, or past MaxMoves).
func (p *planner) dropResolvedSkips() {
	n := 0
	for i, s := range p.skipped {
		if s.Why == SkipBelowImprovementThreshold && p.groups[p.skipG[i]].done {
			continue
		}
		p.skipped[n] = s
		n++
	}
	p.skipped = p.skipped[:n]
}

func (p *planner) snapshot() []NodeUtil {
	out := make([]NodeUtil, len(p.nodes))
	for i := range p.nodes {
		n := &p.nodes[i]
		out[i] = NodeUtil{Node: n.ID, Name: n.Name, Capacity: n.cap, Eligible: n.canHold}
	}
	for i := range p.groups {
		g := &p.groups[i]
		u := &out[g.node]
		u.Groups++
		u.Shards += len(g.ShardIDs)
		u.Bytes += g.Bytes
		u.Load += g.Load
		u.Cost += g.cost
	}
	for i := range out {
		out[i].Utilization = reportUtil(out[i].Cost, out[i].Capacity)
	}
	return out
}

// after replays the real moves over before.
func (p *planner) after(before []NodeUtil) []NodeUtil {
	out := slices.Clone(before)
	for _, s := range p.steps {
		g := &p.groups[s.g]
		f, t := &out[s.from], &out[s.to]
		f.Groups--
		f.Shards -= len(g.ShardIDs)
		f.Bytes -= g.Bytes
		f.Load -= g.Load
		f.Cost -= g.cost
		t.Groups++
		t.Shards += len(g.ShardIDs)
		t.Bytes += g.Bytes
		t.Load += g.Load
		t.Cost += g.cost
	}
	for i := range out {
		if math.Abs(out[i].Cost) < 1e-9 {
			out[i].Cost = 0
		}
		if out[i].Groups == 0 || math.Abs(out[i].Load) < 1e-9 {
			out[i].Load = 0
		}
		out[i].Eligible = p.nodes[i].eligible()
		out[i].Utilization = reportUtil(out[i].Cost, out[i].Capacity)
	}
	return out
}

// minMoves is a lower bound on the balancing moves that bring every
// eligible node into the band [lo, hi]: a node outside it must send or
// receive at least its distance to the band, and no move carries more than
// the costliest group. (Retargeting a forced move costs no move, so this
// holds only while no group has moved yet; it is computed before
// balancing and used only to skip work that cannot win.)
func (p *planner) minMoves(lo, hi float64) int {
	var maxCost float64
	for i := range p.groups {
		if g := &p.groups[i]; !g.Excluded && !g.Isolate {
			maxCost = max(maxCost, g.cost)
		}
	}
	if maxCost <= 0 {
		return 0
	}
	var over, under int
	for i := range p.nodes {
		n := &p.nodes[i]
		if !n.eligible() {
			continue
		}
		if e := n.load - hi*n.cap; e > bandEps(hi)*n.cap {
			over += int(math.Ceil(e/maxCost - 1e-9))
		}
		if d := lo*n.cap - n.load; d > bandEps(hi)*n.cap {
			under += int(math.Ceil(d/maxCost - 1e-9))
		}
	}
	if p.restrictedFirst && len(p.steps) > 0 {
		return 0 // forced moves may be retargeted for free
	}
	return max(over, under)
}

// band returns the average utilization of the eligible nodes and the
// balanced band around it.
func (p *planner) band() (avg, lo, hi float64) {
	var cost, capacity float64
	for i := range p.nodes {
		if p.nodes[i].eligible() {
			cost += p.nodes[i].load
			capacity += p.nodes[i].cap
		}
	}
	if capacity > 0 {
		avg = cost / capacity
	}
	t := p.in.Threshold
	return avg, math.Max(0, (1-t)*avg), (1 + t) * avg
}
