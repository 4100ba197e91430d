package scheduler

import (
	"context"
	"slices"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/planner"
)

// ApplyClusterStrategy makes in use the cluster's own rebalance strategy
// when the operator named none (o.Strategy empty): on Citus, Citus's
// default strategy from its strategy catalog, so that a Citus user's
// strategy means the same to shardmover as to Citus. Its thresholds apply
// unless given as flags; Citus's built-in functions map to the planner's
// strategies (citus_shard_cost_1: by_shard_count; citus_shard_cost_by_disk_size:
// by_disk_size with citus.rebalancer_by_disk_size_base_cost); any other
// cost, capacity or allowed-on-node function is called through SQL, once
// per shard group (its first shard: Citus's cost of a shard covers its
// colocated shards), node, or pair. On compat, or with a strategy named,
// in is left as BuildInput made it.
func ApplyClusterStrategy(ctx context.Context, cat *metadata.Catalog, o PlanOptions, in *planner.Input) error {
	if o.Strategy != "" || cat.Flavor() != metadata.Citus {
		return nil
	}
	s, err := cat.CitusDefaultStrategy(ctx)
	if err != nil || s == nil {
		return err
	}
	switch {
	case slices.Equal(s.Cost, metadata.CitusCostOne):
		in.Strategy = planner.ByShardCount
	case slices.Equal(s.Cost, metadata.CitusCostDiskSize):
		in.Strategy = planner.ByDiskSize
		if o.BaseCost == nil {
			in.BaseCost = s.BaseCost
		}
	default:
		in.Strategy = planner.ByShardCount
		anchors := make([]int64, 0, len(in.Groups))
		for _, g := range in.Groups {
			if len(g.ShardIDs) > 0 {
				anchors = append(anchors, g.ShardIDs[0])
			}
		}
		costs, err := cat.CitusShardCosts(ctx, s, anchors)
		if err != nil {
			return err
		}
		in.Cost = func(g planner.Group) float64 {
			if len(g.ShardIDs) == 0 {
				return 0
			}
			return max(costs[g.ShardIDs[0]], 0)
		}
	}
	if o.Threshold == nil {
		in.Threshold = s.Threshold
	} else if *o.Threshold < s.MinimumThreshold {
		return optionf("Threshold", "%v is below Citus strategy %s's minimum threshold %v", *o.Threshold, s.Name, s.MinimumThreshold)
	}
	if o.ImprovementThreshold == nil {
		in.ImprovementThreshold = s.ImprovementThreshold
	}
	var nodes []int32
	for _, n := range in.Nodes {
		nodes = append(nodes, int32(n.ID))
	}
	if !slices.Equal(s.Capacity, metadata.CitusCapacityOne) {
		caps, err := cat.CitusNodeCapacities(ctx, s, nodes)
		if err != nil {
			return err
		}
		in.Capacity = func(n planner.Node) float64 { return max(caps[int32(n.ID)], 0) }
	}
	if !slices.Equal(s.Allowed, metadata.CitusAllowedAlways) {
		var anchors []int64
		for _, g := range in.Groups {
			if len(g.ShardIDs) > 0 {
				anchors = append(anchors, g.ShardIDs[0])
			}
		}
		refused, err := cat.CitusDisallowed(ctx, s, anchors, nodes)
		if err != nil {
			return err
		}
		// Both the Citus function and what BuildInput already allows (the
		// operator's rules, inactive nodes) must agree.
		prev := in.Allowed
		in.Allowed = func(g planner.Group, n planner.Node) bool {
			if prev != nil && !prev(g, n) {
				return false
			}
			return len(g.ShardIDs) == 0 || !refused[[2]int64{g.ShardIDs[0], n.ID}]
		}
	}
	return nil
}
