package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
)

// writeSnapshot writes a status document: two workers with 8 groups each
// of growing size, and the coordinator.
func writeSnapshot(t *testing.T) string {
	st := metadata.Status{SchemaVersion: 1, Flavor: metadata.Compat, Coordinator: "10.0.0.1:5432",
		Nodes: []metadata.StatusNode{
			{ID: 1, GroupID: 0, Addr: "10.0.0.1:5432", Role: "coordinator", IsActive: true, Capacity: 1},
			{ID: 2, GroupID: 1, Addr: "10.0.0.2:5432", Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 1},
			{ID: 3, GroupID: 2, Addr: "10.0.0.3:5432", Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 1},
		}}
	for i := 0; i < 16; i++ {
		node := int32(2 + i%2)
		st.ShardGroups = append(st.ShardGroups, metadata.StatusGroup{ID: "1:" + itoa(i), ColocationID: 1, Index: i,
			ShardIDs: []int64{int64(102008 + i)}, Tables: []string{"github_events"}, NodeID: node, Bytes: int64(i+1) << 20, SizeKnown: true})
	}
	p := filepath.Join(t.TempDir(), "snap.json")
	b, err := json.Marshal(st)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestPlanWhatIf(t *testing.T) {
	snap := writeSnapshot(t)
	out, msg, code := run(t, "plan", "--snapshot", snap, "--add-node", "10.0.0.4:5432", "-o", "json")
	require.Equal(t, 0, code, msg)
	var res struct {
		Moves []struct {
			To     int64  `json:"to"`
			ToName string `json:"to_name"`
			Reason string `json:"reason"`
		} `json:"moves"`
		Balanced bool `json:"balanced"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.NotEmpty(t, res.Moves)
	for _, m := range res.Moves {
		assert.Equal(t, "10.0.0.4:5432", m.ToName, "every move fills the simulated node")
		assert.Equal(t, "balance", m.Reason)
	}
	// 16 groups on 3 nodes: 6/5/5, so 5 moves to the new node.
	assert.Len(t, res.Moves, 5)

	out, msg, code = run(t, "plan", "--snapshot", snap, "--drain", "10.0.0.3:5432")
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "drain")
	assert.Contains(t, out, "8 moves")
}

// With --base-cost 0, by_disk_size balances bytes alone: every worker ends
// within the 10% band of the average bytes.
func TestPlanBaseCost(t *testing.T) {
	snap := writeSnapshot(t)
	out, msg, code := run(t, "plan", "--snapshot", snap, "--add-node", "10.0.0.4:5432", "--base-cost", "0", "-o", "json")
	require.Equal(t, 0, code, msg)
	var res struct {
		Balanced bool `json:"balanced"`
		After    []struct {
			Name     string  `json:"name"`
			Eligible bool    `json:"eligible"`
			Bytes    int64   `json:"bytes"`
			Cost     float64 `json:"cost"`
		} `json:"after"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.True(t, res.Balanced)
	var total, n int64
	for _, a := range res.After {
		if a.Eligible {
			total += a.Bytes
			n++
			assert.EqualValues(t, a.Bytes, a.Cost, "%s: with no base cost, cost is bytes", a.Name)
		}
	}
	require.EqualValues(t, 3, n)
	for _, a := range res.After {
		if a.Eligible {
			assert.InDelta(t, float64(total)/3, float64(a.Bytes), 0.1*float64(total)/3+1, a.Name)
		}
	}
}

func TestPlanBadInput(t *testing.T) {
	snap := writeSnapshot(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--threshold", "-0.1"}, "--threshold must be"},
		{[]string{"--threshold", "NaN"}, "--threshold must be"},
		{[]string{"--improvement-threshold", "-1"}, "--improvement-threshold must be"},
		{[]string{"--drain", "10.9.9.9:5432"}, "--drain 10.9.9.9:5432: no such node"},
		{[]string{"--capacity", "10.9.9.9:5432=2"}, "--capacity 10.9.9.9:5432: no such node"},
		{[]string{"--capacity", "10.0.0.2:5432=0", "--capacity", "10.0.0.3:5432=0"}, "no node may hold shards"},
		{[]string{"--strategy", "by_magic"}, `--strategy "by_magic" does not exist`},
		{[]string{"--max-moves", "-1"}, "--max-moves must be 0 or more"},
		{[]string{"--exclude", "1"}, "--exclude 1: no such shard"},
		{[]string{"--capacity", "nonsense"}, "must be host:port=number"},
		{[]string{"--base-cost", "lots"}, `--base-cost "lots" is not a size`},
		{[]string{"--base-cost", "-5MB"}, `--base-cost "-5MB" is not a size`},
	}
	for _, tc := range cases {
		_, msg, code := run(t, append([]string{"plan", "--snapshot", snap}, tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, msg)
		assert.Contains(t, msg, tc.want, tc.args)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{not json"), 0o644))
	_, msg, code := run(t, "plan", "--snapshot", bad)
	assert.Equal(t, 2, code)
	assert.Contains(t, msg, "not valid JSON")

	// A node without its capacity (which would read as 0: no shards) and a
	// field the schema does not have are refused, naming the field.
	var doc map[string]any
	b, err := os.ReadFile(snap)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &doc))
	delete(doc["nodes"].([]any)[1].(map[string]any), "capacity")
	missing := filepath.Join(t.TempDir(), "missing.json")
	b, _ = json.Marshal(doc)
	require.NoError(t, os.WriteFile(missing, b, 0o644))
	_, msg, code = run(t, "plan", "--snapshot", missing)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, `node 2 (counting from 1) has no "capacity" field`)
	require.NoError(t, json.Unmarshal(mustRead(t, snap), &doc))
	doc["nodes"].([]any)[1].(map[string]any)["capacty"] = 2
	unknown := filepath.Join(t.TempDir(), "unknown.json")
	b, _ = json.Marshal(doc)
	require.NoError(t, os.WriteFile(unknown, b, 0o644))
	_, msg, code = run(t, "plan", "--snapshot", unknown)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, `unknown field "capacty"`)
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}
