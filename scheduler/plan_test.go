package scheduler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/planner"
	"github.com/shardmover/shardmover/scheduler"
)

// TestBuildInputCapacityZero: capacity 0 in a snapshot means the node may
// hold no shards (it used to be read as 1), so planning drains it.
func TestBuildInputCapacityZero(t *testing.T) {
	st := metadata.Status{SchemaVersion: 1, Flavor: metadata.Compat, Coordinator: "10.0.0.1:5432",
		Nodes: []metadata.StatusNode{
			{ID: 2, GroupID: 1, Addr: "10.0.0.2:5432", Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 1},
			{ID: 3, GroupID: 2, Addr: "10.0.0.3:5432", Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 0},
		},
		ShardGroups: []metadata.StatusGroup{
			{ID: "1:0", ColocationID: 1, Index: 0, ShardIDs: []int64{100}, Tables: []string{"t"}, NodeID: 3, Bytes: 1 << 20, SizeKnown: true},
			{ID: "1:1", ColocationID: 1, Index: 1, ShardIDs: []int64{101}, Tables: []string{"t"}, NodeID: 2, Bytes: 1 << 20, SizeKnown: true},
		}}
	in, err := scheduler.BuildInput(st, scheduler.DefaultPlanOptions())
	require.NoError(t, err)
	require.Len(t, in.Nodes, 2)
	assert.Equal(t, 0.0, in.Nodes[1].Capacity)
	res, err := planner.Plan(in)
	require.NoError(t, err)
	require.Len(t, res.Moves, 1)
	assert.Equal(t, planner.ReasonDrain, res.Moves[0].Reason)
	assert.Equal(t, int64(2), res.Moves[0].To)

	st.Nodes[1].Capacity = -1
	_, err = scheduler.BuildInput(st, scheduler.DefaultPlanOptions())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "10.0.0.3:5432")
}

// TestStatusRoundTripByLoad: a status with capacities and measured loads,
// written as JSON and read back with metadata.ReadStatus (what `plan
// --snapshot` does), plans exactly as the status it came from.
func TestStatusRoundTripByLoad(t *testing.T) {
	st := metadata.Status{SchemaVersion: 1, Flavor: metadata.Compat, Coordinator: "10.0.0.1:5432",
		Nodes: []metadata.StatusNode{
			{ID: 1, GroupID: 0, Addr: "10.0.0.1:5432", Role: "coordinator", IsActive: true, Capacity: 1},
			{ID: 2, GroupID: 1, Addr: "10.0.0.2:5432", Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 1},
			{ID: 3, GroupID: 2, Addr: "10.0.0.3:5432", Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 2},
			{ID: 4, GroupID: 3, Addr: "10.0.0.4:5432", Role: "worker", IsActive: true, ShouldHaveShards: false, Capacity: 1},
		}}
	for i := range 12 {
		st.ShardGroups = append(st.ShardGroups, metadata.StatusGroup{ID: fmt.Sprintf("1:%d", i), ColocationID: 1, Index: i,
			ShardIDs: []int64{int64(100 + i)}, Tables: []string{"t"}, NodeID: int32(2 + i%3), Bytes: int64(i+1) << 20, SizeKnown: true,
			Load: float64((i * 37) % 11 * 13)})
	}
	o := scheduler.DefaultPlanOptions()
	o.Strategy = "by_load"
	in, err := scheduler.BuildInput(st, o)
	require.NoError(t, err)
	want, err := planner.Plan(in)
	require.NoError(t, err)
	require.NotEmpty(t, want.Moves)

	b, err := json.Marshal(st)
	require.NoError(t, err)
	back, err := metadata.ReadStatus(bytes.NewReader(b))
	require.NoError(t, err)
	in, err = scheduler.BuildInput(back, o)
	require.NoError(t, err)
	got, err := planner.Plan(in)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	o.LoadWindow = 0
	_, err = scheduler.BuildInput(st, o)
	require.ErrorIs(t, err, metadata.ErrInvalid)
	assert.Equal(t, "LoadWindow must be a positive duration such as 30s, got 0s", err.Error(), "a library error names the option, not a flag")
}

// TestPlanAvoidsOldCopies: a group is never planned back onto a node that
// still holds its old copy (a finished move's fenced tables, kept for the
// grace period; the move would be refused there), unless it must leave a
// node that is emptied and has nowhere else to go. The field survives a
// snapshot round trip.
func TestPlanAvoidsOldCopies(t *testing.T) {
	st := metadata.Status{SchemaVersion: 1, Flavor: metadata.Compat, Coordinator: "10.0.0.1:5432",
		Nodes: []metadata.StatusNode{
			{ID: 2, GroupID: 1, Addr: "10.0.0.2:5432", Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 1},
			{ID: 3, GroupID: 2, Addr: "10.0.0.3:5432", Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 1},
			{ID: 4, GroupID: 3, Addr: "10.0.0.4:5432", Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 1},
		}}
	// Six groups, four on node 2, two on node 3, none on node 4; two of
	// node 2's were moved away from node 4 a moment ago.
	for i := 0; i < 6; i++ {
		node := int32(2)
		if i >= 4 {
			node = 3
		}
		g := metadata.StatusGroup{ID: fmt.Sprintf("1:%d", i), ColocationID: 1, Index: i, ShardIDs: []int64{int64(100 + i)},
			Tables: []string{"t"}, NodeID: node, Bytes: 1 << 20, SizeKnown: true}
		if i < 2 {
			g.OldCopyNodes = []int32{4}
		}
		st.ShardGroups = append(st.ShardGroups, g)
	}
	var buf bytes.Buffer
	require.NoError(t, json.NewEncoder(&buf).Encode(st))
	back, err := metadata.ReadStatus(&buf)
	require.NoError(t, err)
	assert.Equal(t, []int32{4}, back.ShardGroups[0].OldCopyNodes)

	o := scheduler.DefaultPlanOptions()
	o.Strategy = "by_shard_count"
	in, err := scheduler.BuildInput(back, o)
	require.NoError(t, err)
	res, err := planner.Plan(in)
	require.NoError(t, err)
	require.NotEmpty(t, res.Moves)
	count := map[int64]int{2: 4, 3: 2}
	for _, m := range res.Moves {
		assert.False(t, m.To == 4 && (m.GroupID == "1:0" || m.GroupID == "1:1"),
			"group %s planned back onto node 4, which holds its old copy", m.GroupID)
		count[m.From]--
		count[m.To]++
	}
	assert.Equal(t, map[int64]int{2: 2, 3: 2, 4: 2}, count, "still balanced by count")

	// A group that must leave an emptied node may still go back where its
	// old copy is (the move then asks for cleanup): nothing else takes it.
	two := metadata.Status{SchemaVersion: 1, Flavor: metadata.Compat, Coordinator: st.Coordinator, Nodes: st.Nodes[1:],
		ShardGroups: []metadata.StatusGroup{{ID: "1:0", ColocationID: 1, ShardIDs: []int64{100}, Tables: []string{"t"}, NodeID: 3,
			Bytes: 1 << 20, SizeKnown: true, OldCopyNodes: []int32{4}}}}
	o.Drain = []string{"10.0.0.3:5432"}
	in, err = scheduler.BuildInput(two, o)
	require.NoError(t, err)
	res, err = planner.Plan(in)
	require.NoError(t, err)
	require.Len(t, res.Moves, 1)
	assert.Equal(t, int64(4), res.Moves[0].To)
}
