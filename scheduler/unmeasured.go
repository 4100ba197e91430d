package scheduler

import (
	"errors"
	"fmt"
	"strings"

	"github.com/shardmover/shardmover/metadata"
)

// A plan made while a node cannot be measured would guess: the node's
// shard groups read as empty, so balancing moves data onto it and between
// the healthy nodes, and a move to or from it cannot run anyway. So
// planning from the live cluster (plan, rebalance, drain, the daemon)
// refuses while metadata.Catalog.MeasuredSnapshot names a node it could not
// measure, whatever the strategy: by_shard_count needs no sizes, but a node
// shardmover cannot connect to must still send and receive nothing, and an
// outage is no time to reshuffle the rest. With PlanOptions.AllowUnmeasured
// the plan is made without those nodes, as for an inactive node: their
// groups stay where they are (Excluded), nothing may be placed on them
// (Input.Allowed), and they take no part in balancing.

// ErrUnmeasured is matched (errors.Is) by the refusal to plan while a node
// could not be measured. The refusal also matches metadata.ErrInvalid:
// nothing was changed.
var ErrUnmeasured = errors.New("a node could not be measured")

type unmeasuredError struct{ msg string }

func (e *unmeasuredError) Error() string { return e.msg }
func (e *unmeasuredError) Is(target error) bool {
	return target == ErrUnmeasured || target == metadata.ErrInvalid
}

// checkUnmeasured refuses to plan while a node could not be measured,
// unless o.AllowUnmeasured.
func checkUnmeasured(nodes []metadata.Unmeasured, o PlanOptions) error {
	if len(nodes) == 0 || o.AllowUnmeasured {
		return nil
	}
	if len(nodes) == 1 {
		return &unmeasuredError{msg: fmt.Sprintf("node %s could not be measured (%s), so a plan would guess its shard groups' sizes and could move groups to or from it; "+
			"bring it back or fix --node-conninfo, or pass --allow-unmeasured to plan without it (its shard groups stay where they are and no move involves it)",
			nodes[0].Node.Addr(), nodes[0].Reason)}
	}
	return &unmeasuredError{msg: fmt.Sprintf("nodes %s could not be measured, so a plan would guess their shard groups' sizes and could move groups to or from them; "+
		"bring them back or fix --node-conninfo, or pass --allow-unmeasured to plan without them (their shard groups stay where they are and no move involves them)",
		unmeasuredList(nodes))}
}

// nothingMeasured refuses a plan that --allow-unmeasured would leave with
// no node to hold shards.
func nothingMeasured(nodes []metadata.Unmeasured) error {
	return &unmeasuredError{msg: fmt.Sprintf("no node that may hold shards could be measured (%s), so there is nothing to plan; bring them back or fix --node-conninfo",
		unmeasuredList(nodes))}
}

// unmeasuredDrain refuses to drain a node that could not be measured: its
// groups cannot be copied from it.
func unmeasuredDrain(u metadata.Unmeasured) error {
	return &unmeasuredError{msg: fmt.Sprintf("node %s could not be measured (%s), so its shard groups cannot be copied from it; bring it back or fix --node-conninfo, then drain it",
		u.Node.Addr(), u.Reason)}
}

// unmeasuredList names the nodes with their reasons: "a (r1), b (r2) and c (r3)".
func unmeasuredList(nodes []metadata.Unmeasured) string {
	parts := make([]string, len(nodes))
	for i, u := range nodes {
		parts[i] = fmt.Sprintf("%s (%s)", u.Node.Addr(), u.Reason)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// unmeasuredIDs is the set of the nodes' ids.
func unmeasuredIDs(nodes []metadata.Unmeasured) map[int64]bool {
	ids := make(map[int64]bool, len(nodes))
	for _, u := range nodes {
		ids[int64(u.Node.ID)] = true
	}
	return ids
}
