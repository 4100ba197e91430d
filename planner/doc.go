// Package planner decides where shard groups should live. It turns a
// snapshot of a cluster (nodes, shard groups and where they are) and a
// strategy into an ordered list of moves.
//
// # Contract
//
// Plan is a pure function: no I/O, no clock, no logger, no randomness. The
// same Input gives the same Result, whatever the order of Input.Nodes and
// Input.Groups: every tie is broken by node id or by group order
// (ColocationID, Index, ID), and no map is ever ranged over into output.
// Plan returns an error only for invalid input, and that error wraps
// ErrInvalidInput. A group that cannot be placed is reported in
// Result.Skipped, never as an error.
//
// # What a plan does
//
// The unit of movement is the shard group (the shards with the same index
// across a colocation group); it is never split, and no group moves twice
// in one plan.
//
//  1. Isolation: each group with Isolate gets a node that holds it alone
//     (its own node when it may stay there). Reserved nodes leave balancing.
//  2. Forced moves, ignoring MaxMoves: groups leave nodes that may not hold
//     shards (shouldhaveshards false, capacity 0, Drain), nodes reserved for
//     another group, and nodes their rules forbid (PinnedTo, AvoidNodes,
//     Input.Allowed). Each goes to the allowed node with room that is least
//     utilized. A group that can go nowhere, or is Excluded, is skipped.
//  3. Balancing, unless DrainOnly: with utilization = summed cost of a
//     node's groups / its capacity and the band (1 ± Threshold) × average
//     over the nodes that take part, moves go from the fullest node to the
//     emptiest ones until every node is in the band or no move improves
//     balance. A move must improve balance by Citus's rule: the target ends
//     below the source's utilization before the move (or level with it
//     while the source ends above the target's), and a move that leaves the
//     target fuller than the source must pass Input.ImprovementThreshold.
//     MaxCost is never exceeded. Among acceptable moves the planner prefers
//     the one that brings the nodes into the band with the fewest bytes (see
//     pick in balance.go). A group that already moved in the plan may be
//     sent on to a better node by rewriting its move, so it still moves
//     once, when that cannot invalidate the moves planned in between.
//  4. Repair (repair.go): balancing evens out node totals only; repair then
//     works on where each group ends, with a lexicographic goal: never
//     more cost outside the band, nor the same cost gathered on fewer nodes
//     (when rules keep some nodes below the band and the others above it,
//     a group moved between two of those above changes no total but
//     makes one of them further out); every colocation group spread over
//     the nodes that may hold it (a node of capacity w out of W holds
//     floor(k·w/W) or ceil(k·w/W) of a colocation's k groups, so counts
//     differ by at most one where capacities are equal, as Citus's
//     per-colocation rebalancing achieves); with ByDiskSize, every node's
//     bytes within (1 ± Threshold) × the average bytes per unit of
//     capacity; then the fewest moves and moved bytes. It first tries a
//     global redistribution (each colocation to its quotas, each node
//     keeping as many of its own groups as its quota allows, chosen to add
//     up to its share of bytes, the rest largest first to the emptiest node
//     that needs one) and keeps it when it brings every node into the
//     band; otherwise it also tries local steps alone (moves and swaps
//     that each improve spread or bytes and make nothing else worse) and
//     keeps the better of the two. When the bytes are still outside the
//     band, a band search (band.go) takes the node worst off and its best
//     counterparts and makes the move or
//     same-colocation swap that most lowers the bytes outside the band
//     (then fewest moves, then fewest moved bytes), without more cost
//     outside the cost band, less spread or a broken placement rule, and
//     not held to the improvement threshold; it keeps its steps only when
//     every node ends in the band, and then Plan still compares the other
//     plans, which may reach it with fewer moves. Then moves
//     whose undoing costs nothing are dropped, and each remaining move is
//     given the smallest group of its colocation on its source that keeps
//     both nodes in their bands (the byte-saving pass, which never trades
//     balance for bytes). Result.BytesBalanced says whether the bytes ended
//     in the band; when not, Result.BytesLimit says why. It names a group
//     only when that is provably the cause: a group larger than the band's
//     upper bound on every node it may be on, excluded or isolated groups
//     holding more than a node's band, or a node that no combination of
//     the groups that may be on it brings into its band (a subset-sum
//     check), naming the largest such group. Otherwise it names the node
//     worst off and no group, and counts the moves and swaps that would
//     bring it closer by the guarantee each breaks (cost band, spread,
//     placement rules, MaxMoves). Nodes with a MaxCost never receive a group balancing did not
//     send them. When the repaired plan leaves something to improve, the
//     planner also plans with Citus's greedy rule (the largest acceptable
//     group) and, when groups had to leave their nodes, with Citus's
//     placement of those, repairs each, and returns the best (see Plan).
//     Repaired moves keep forced moves first; balancing moves run
//     round-robin over their sources. A balancing move that Citus's rule
//     accepts at its point of the plan has reason balance, otherwise
//     spread (often one half of a swap).
//  5. Waves: each move gets a wave so that within a wave a node takes part
//     in at most MaxPerNode moves and the moves of one node keep their
//     order.
//
// # Costs and capacity
//
// ByShardCount gives every group cost 1; ByDiskSize gives it its bytes plus
// BaseCost (100 MiB by default, so empty groups count). ByLoad gives it its
// measured Group.Load (weighted rows per second; the scheduler measures it
// from the nodes' pg_stat_user_tables, a written row weighing 4 and a read
// row 1) plus a base: Input.LoadBase, or by default 10% of the mean load
// of all groups and at least 1 (MinLoadBase), so idle groups still cost
// something and spread by count (with no load measured at all, ByLoad
// balances counts like ByShardCount), while measurement noise on an idle
// cluster cannot make a group look hot. ByLoad takes ByDiskSize's
// thresholds (0.1, improvement 0.5). The byte band of the repair pass is
// ByDiskSize's alone; the colocation spread applies to every strategy.
// Input.Cost and
// Input.Capacity replace them, like Citus's rebalance strategy catalog
// functions. Capacity is a relative weight; Node.MaxCost, when set, is a
// hard ceiling in cost units that no move crosses.
//
// # Output
//
// Result is plain data with snake_case JSON tags and enums that marshal as
// their names; it is the documented schema of `shardmover plan -o json`.
// Before and After give every node's groups, shards, bytes, load, cost and
// utilization; Result.LoadBase the base ByLoad used. Result.Render writes
// the same plan for people, with a small before/after table per node
// (groups, shards, bytes and, with ByLoad or any measured load, load; bars
// of bytes and load against the fullest node; fill as a percentage of the
// average utilization).
package planner
