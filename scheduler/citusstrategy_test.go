package scheduler_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// TestCitusStrategyCatalog: on Citus, a plan with no --strategy uses
// Citus's default rebalance strategy from its catalog, custom functions
// included: a cost function (even shard ids cost 3, odd ones 1), a capacity
// function (the new worker counts double) and an allowed-on-node function
// (nothing on the first worker). The plan must move every group off the
// first worker, put nothing there, and end with every eligible node's
// utilization, by those functions, within the strategy's threshold of the
// average, as Citus's own rebalancer would; Citus's threshold (0.2 here)
// is the one applied. Naming a strategy (by_shard_count) ignores the
// catalog.
func TestCitusStrategyCatalog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCitus(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, 8))
	_, err := sb.AddNode(ctx)
	require.NoError(t, err)
	nodes, err := cat.Nodes(ctx)
	require.NoError(t, err)
	var first, last int32
	for _, n := range nodes {
		if n.IsCoordinator() {
			continue
		}
		if first == 0 || n.ID < first {
			first = n.ID
		}
		last = max(last, n.ID)
	}
	for _, stmt := range []string{
		`CREATE FUNCTION test_cost(shardid bigint) RETURNS real LANGUAGE sql AS $$ SELECT CASE WHEN shardid % 2 = 0 THEN 3 ELSE 1 END::real $$`,
		`CREATE FUNCTION test_capacity(nodeid int) RETURNS real LANGUAGE sql AS $$ SELECT CASE WHEN nodeid = ` + strconv.Itoa(int(last)) + ` THEN 2 ELSE 1 END::real $$`,
		`CREATE FUNCTION test_allowed(shardid bigint, nodeid int) RETURNS boolean LANGUAGE sql AS $$ SELECT nodeid <> ` + strconv.Itoa(int(first)) + ` $$`,
		`SELECT citus_add_rebalance_strategy('by_test', 'test_cost', 'test_capacity', 'test_allowed', 0.2, 0.01, 0)`,
		`SELECT citus_set_default_rebalance_strategy('by_test')`,
	} {
		_, err := cat.Pool().Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}

	r := scheduler.NewRunner(cat, mover.DefaultConfig(), nil)
	res, err := r.Plan(ctx, scheduler.DefaultPlanOptions())
	require.NoError(t, err)
	require.NotEmpty(t, res.Moves)
	for _, m := range res.Moves {
		assert.NotEqual(t, int64(first), m.To, "group %s moved onto the node the strategy forbids", m.GroupID)
	}
	cost := func(shard int64) float64 {
		if shard%2 == 0 {
			return 3
		}
		return 1
	}
	load := map[int64]float64{}
	var total float64
	for _, u := range res.After {
		if u.Node == int64(first) {
			assert.Zero(t, u.Groups, "every group must leave the forbidden node")
		}
	}
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	final := map[string]int64{}
	for _, g := range cl.Groups {
		n, _ := cl.NodeByGroup(g.GroupID)
		final[g.Key()] = int64(n.ID)
	}
	for _, m := range res.Moves {
		final[m.GroupID] = m.To
	}
	for _, g := range cl.Groups {
		c := cost(g.ShardIDs[0])
		load[final[g.Key()]] += c
		total += c
	}
	capacity := func(n int64) float64 {
		if n == int64(last) {
			return 2
		}
		return 1
	}
	avg := total / (capacity(int64(last)) + 1) // the other allowed worker has capacity 1
	for n, l := range load {
		assert.NotEqual(t, int64(first), n)
		u := l / capacity(n)
		assert.InDelta(t, avg, u, 0.2*avg+3, "node %d's utilization %v against the average %v (threshold 0.2, one group's cost)", n, u, avg)
	}

	// A strategy named on the command line ignores the catalog.
	o := scheduler.DefaultPlanOptions()
	o.Strategy = "by_shard_count"
	named, err := r.Plan(ctx, o)
	require.NoError(t, err)
	assert.Equal(t, "by_shard_count", named.Strategy.String())
	var ontoFirst bool
	for _, u := range named.After {
		if u.Node == int64(first) && u.Groups > 0 {
			ontoFirst = true
		}
	}
	assert.True(t, ontoFirst, "by_shard_count knows nothing of the catalog's allowed-on-node rule")
}
