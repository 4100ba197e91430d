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
//     pick in balance.go), and spreads colocation groups. A group that already moved in the plan may
//     be sent on to a better node by rewriting its move, so it still moves
//     once, when that cannot invalidate the moves planned in between. The
//     plan is also computed with Citus's own greedy rule, and the better of
//     the two is returned (see Plan). Before that, each balancing move of
//     our plan, largest first, is given the smallest group of the same
//     colocation on the same source that leaves both nodes as close to the
//     band (see shrinkBytes in refine.go): the same number of moves, as
//     balanced, fewer bytes.
//  4. Waves: each move gets a wave so that within a wave a node takes part
//     in at most MaxPerNode moves and the moves of one node keep their
//     order.
//
// # Costs and capacity
//
// ByShardCount gives every group cost 1; ByDiskSize gives it its bytes plus
// BaseCost (100 MiB by default, so empty groups count). Input.Cost and
// Input.Capacity replace them, like Citus's rebalance strategy catalog
// functions. Capacity is a relative weight; Node.MaxCost, when set, is a
// hard ceiling in cost units that no move crosses.
//
// # Output
//
// Result is plain data with snake_case JSON tags and enums that marshal as
// their names; it is the documented schema of `shardmover plan -o json`.
// Result.Render writes the same plan for people.
package planner
