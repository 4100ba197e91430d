package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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

// planEnds runs plan -o json and returns where every group of
// writeSnapshot ends and the moves' targets by group.
func planEnds(t *testing.T, args ...string) (map[string]string, map[string][]string) {
	t.Helper()
	out, msg, code := run(t, append([]string{"plan", "-o", "json"}, args...)...)
	require.Equal(t, 0, code, msg)
	var res struct {
		Moves []struct {
			GroupID  string `json:"group_id"`
			FromName string `json:"from_name"`
			ToName   string `json:"to_name"`
			Reason   string `json:"reason"`
		} `json:"moves"`
		Skipped []any `json:"skipped"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.Empty(t, res.Skipped, "every rule can be met")
	end := map[string]string{}
	for i := 0; i < 16; i++ {
		end["1:"+itoa(i)] = "10.0.0." + itoa(2+i%2) + ":5432"
	}
	targets := map[string][]string{}
	for _, m := range res.Moves {
		require.Equal(t, end[m.GroupID], m.FromName)
		end[m.GroupID] = m.ToName
		targets[m.GroupID] = append(targets[m.GroupID], m.ToName)
	}
	return end, targets
}

// Placement rules given as flags and as a rules file reach the plan, and
// the file and the flags plan the same.
func TestPlanRules(t *testing.T) {
	snap := writeSnapshot(t)
	const n2, n3, n4 = "10.0.0.2:5432", "10.0.0.3:5432", "10.0.0.4:5432"
	flags := []string{"--snapshot", snap, "--add-node", n4,
		"--pin", "1:0=" + n3, // on 10.0.0.2
		"--pin", "102010=" + n3 + "," + n4, // shard of 1:2, on 10.0.0.2
		"--avoid", "1:1=" + n3, // on 10.0.0.3
		"--isolate", "1:14",
	}
	check := func(end map[string]string, targets map[string][]string) {
		assert.Equal(t, n3, end["1:0"], "pinned")
		assert.Contains(t, []string{n3, n4}, end["1:2"], "pinned by a shard id")
		assert.NotEqual(t, n3, end["1:1"], "avoided")
		assert.NotContains(t, targets["1:1"], n3)
		for g, n := range end {
			if g != "1:14" {
				assert.NotEqual(t, end["1:14"], n, "%s shares the isolated group's node", g)
			}
		}
	}
	endFlags, targets := planEnds(t, flags...)
	check(endFlags, targets)

	rules := filepath.Join(t.TempDir(), "rules.json")
	require.NoError(t, os.WriteFile(rules, []byte(`{
  "pin": {"1:0": ["`+n3+`"], "102010": ["`+n3+`", "`+n4+`"]},
  "avoid": {"1:1": ["`+n3+`"]},
  "isolate": ["1:14"]
}`), 0o644))
	endFile, targets := planEnds(t, "--snapshot", snap, "--add-node", n4, "--rules", rules)
	check(endFile, targets)
	assert.Equal(t, endFlags, endFile, "the file plans as the flags do")

	// --allow: the table stays off the new node; merged with a file's pin.
	pin := filepath.Join(t.TempDir(), "pin.json")
	require.NoError(t, os.WriteFile(pin, []byte(`{"pin": {"1:4": ["`+n3+`"]}}`), 0o644))
	end, targets := planEnds(t, "--snapshot", snap, "--add-node", n4, "--allow", "public.github_events="+n2+","+n3, "--rules", pin)
	assert.Equal(t, n3, end["1:4"])
	for g, ts := range targets {
		assert.NotContains(t, ts, n4, "%s moved to a node its table is not allowed on", g)
	}
}

func TestPlanRulesBadInput(t *testing.T) {
	snap := writeSnapshot(t)
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(doc), 0o644))
		return p
	}
	unknownField := write("unknown.json", `{"pinned": {"1:3": ["10.0.0.2:5432"]}}`)
	badGroup := write("badgroup.json", `{"pin": {"1:99": ["10.0.0.2:5432"]}}`)
	badNode := write("badnode.json", `{"avoid": {"1:3": ["10.0.0.9:5432"]}}`)
	dup := write("dup.json", `{"pin": {"1:3": ["10.0.0.2:5432"]}}`)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--pin", "1:99=10.0.0.2:5432"}, "--pin 1:99: no such shard group in the cluster; `shardmover status` lists the groups"},
		{[]string{"--pin", "999999=10.0.0.2:5432"}, "--pin 999999: no such shard in the cluster"},
		{[]string{"--avoid", "1:3=10.0.0.9:5432"}, "--avoid 1:3: no such node 10.0.0.9:5432 in the cluster; `shardmover status` lists the nodes"},
		{[]string{"--isolate", "2:0"}, "--isolate 2:0: no such shard group in the cluster"},
		{[]string{"--allow", "events=10.0.0.2:5432"}, "--allow events: no such distributed table in the cluster"},
		{[]string{"--pin", "1:3=10.0.0.2:5432", "--avoid", "1:3=10.0.0.2:5432"}, "--pin 1:3 and --avoid 1:3 leave shard group 1:3 no node"},
		{[]string{"--pin", "1:3"}, `--pin "1:3" must be GROUP=host:port[,host:port...]`},
		{[]string{"--pin", "1:3="}, "--pin 1:3 lists no node; give at least one host:port"},
		{[]string{"--isolate", "three"}, `--isolate three: "three" is not a shard group`},
		{[]string{"--rules", unknownField}, `has unknown field "pinned"; the fields are pin, avoid, isolate and allow`},
		{[]string{"--rules", badGroup}, `: pin "1:99": no such shard group in the cluster`},
		{[]string{"--rules", badNode}, `: avoid "1:3": no such node 10.0.0.9:5432 in the cluster`},
		{[]string{"--rules", dup, "--pin", "1:3=10.0.0.3:5432"}, `: pin "1:3" is given twice (also as --pin 1:3)`},
		{[]string{"--rules", filepath.Join(dir, "missing.json")}, "missing.json cannot be read"},
	}
	for _, tc := range cases {
		_, msg, code := run(t, append([]string{"plan", "--snapshot", snap}, tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, msg)
		assert.Contains(t, msg, tc.want, tc.args)
	}
}

// writeLoadSnapshot writes writeSnapshot's layout with measured loads: the
// two hottest groups both on 10.0.0.2, bytes even between the workers.
func writeLoadSnapshot(t *testing.T) string {
	var st metadata.Status
	require.NoError(t, json.Unmarshal(mustRead(t, writeSnapshot(t)), &st))
	for i := range st.ShardGroups {
		g := &st.ShardGroups[i]
		g.Bytes = 8 << 20
		g.Load = 2
		switch g.ID {
		case "1:0", "1:2":
			g.Load = 500
		}
	}
	p := filepath.Join(t.TempDir(), "load.json")
	b, err := json.Marshal(st)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

// plan --strategy by_load on a snapshot with loads: the JSON result has
// every node's bytes, shards and load before and after, the hot groups are
// moved apart, and the text output shows each node's small table with bars.
func TestPlanByLoadNodeTable(t *testing.T) {
	snap := writeLoadSnapshot(t)
	out, msg, code := run(t, "plan", "--snapshot", snap, "--strategy", "by_load", "-o", "json")
	require.Equal(t, 0, code, msg)
	type nodeUtil struct {
		Name   string  `json:"name"`
		Groups int     `json:"groups"`
		Shards int     `json:"shards"`
		Bytes  int64   `json:"bytes"`
		Load   float64 `json:"load"`
	}
	var res struct {
		Strategy string     `json:"strategy"`
		LoadBase float64    `json:"load_base"`
		Balanced bool       `json:"balanced"`
		Before   []nodeUtil `json:"before"`
		After    []nodeUtil `json:"after"`
		Moves    []struct {
			GroupID string `json:"group_id"`
			ToName  string `json:"to_name"`
		} `json:"moves"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.Equal(t, "by_load", res.Strategy)
	assert.True(t, res.Balanced)
	require.Len(t, res.Before, 2, "the coordinator holds nothing and is left out")
	assert.Equal(t, nodeUtil{Name: "10.0.0.2:5432", Groups: 8, Shards: 8, Bytes: 64 << 20, Load: 1012}, res.Before[0])
	assert.Equal(t, nodeUtil{Name: "10.0.0.3:5432", Groups: 8, Shards: 8, Bytes: 64 << 20, Load: 16}, res.Before[1])
	require.NotEmpty(t, res.Moves, "the hot groups share a node: by_load moves one")
	assert.InDelta(t, res.After[0].Load, res.After[1].Load, 0.25*(res.After[0].Load+res.After[1].Load)/2)
	assert.InDelta(t, 1028, res.After[0].Load+res.After[1].Load, 1e-9, "load is moved, never lost")

	// by_disk_size sees even bytes and moves nothing.
	out, msg, code = run(t, "plan", "--snapshot", snap, "-o", "json")
	require.Equal(t, 0, code, msg)
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.Empty(t, res.Moves)

	text, msg, code := run(t, "plan", "--snapshot", snap, "--strategy", "by_load")
	require.Equal(t, 0, code, msg)
	again, _, _ := run(t, "plan", "--snapshot", snap, "--strategy", "by_load")
	assert.Equal(t, text, again, "the output is deterministic")
	_, nodes, found := strings.Cut(text, "\nnodes (bars: share of the fullest node; fill: utilization as % of average):\n")
	require.True(t, found, text)
	nodes, spread, found := strings.Cut(nodes, "\nshard groups per node, by colocation (nodes in the order above):\n")
	require.True(t, found, text)
	assert.Equal(t, []string{"1", "github_events", "8", "8", "->", "8", "8"}, strings.Fields(spread), "one colocation, 8 groups on each node before and after")
	lines := strings.Split(strings.TrimRight(nodes, "\n"), "\n")
	require.Len(t, lines, 14, nodes)
	assert.Equal(t, "  10.0.0.2:5432 (capacity 1)", lines[0])
	assert.Equal(t, []string{"before", "after"}, strings.Fields(lines[1]))
	assert.Equal(t, []string{"groups", "8"}, strings.Fields(lines[2])[:2])
	assert.Equal(t, []string{"shards", "8"}, strings.Fields(lines[3])[:2])
	bytesRow := strings.Fields(lines[4])
	assert.Equal(t, []string{"bytes", "64.0", "MiB", strings.Repeat("█", 20)}, bytesRow[:4], "the fullest node's bar is full")
	loadRow := strings.Fields(lines[5])
	assert.Equal(t, []string{"load", "1012/s", strings.Repeat("█", 20)}, loadRow[:3])
	assert.Equal(t, "fill", strings.Fields(lines[6])[0])
	loadRow = strings.Fields(lines[12])
	require.Equal(t, "load", loadRow[0])
	assert.Equal(t, "16.0/s", loadRow[1])
	assert.Equal(t, "░░░░░░░░░░░░░░░░░░░░", loadRow[2], "16/s against 1012/s rounds to no block")
	assert.Contains(t, text, "load in weighted rows per second; base")
}

// --load-window is checked before anything connects: a positive duration,
// and only with --strategy by_load; a negative load in a snapshot is
// refused.
func TestPlanLoadWindowBadInput(t *testing.T) {
	snap := writeSnapshot(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--snapshot", snap, "--strategy", "by_load", "--load-window", "0s"}, "--load-window must be a positive duration such as 30s, got 0s"},
		{[]string{"plan", "--snapshot", snap, "--strategy", "by_load", "--load-window", "-5s"}, "--load-window must be a positive duration such as 30s, got -5s"},
		{[]string{"plan", "--snapshot", snap, "--strategy", "by_load", "--load-window", "soon"}, `--load-window "soon" is not a duration`},
		{[]string{"plan", "--snapshot", snap, "--load-window", "10s"}, "--load-window applies only to --strategy by_load"},
		{[]string{"plan", "--snapshot", snap, "--strategy", "by_heat"}, `--strategy "by_heat" does not exist; use one of by_shard_count, by_disk_size, by_load`},
		{[]string{"rebalance", "--strategy", "by_load", "--load-window", "0s"}, "--load-window must be a positive duration"},
		{[]string{"rebalance", "--strategy", "by_disk_size", "--load-window", "1m"}, "--load-window applies only to --strategy by_load"},
		{[]string{"drain", "--node", "10.0.0.2:5432", "--strategy", "by_load", "--load-window", "-1s"}, "--load-window must be a positive duration"},
		{[]string{"daemon", "--strategy", "by_load", "--load-window", "0s"}, "--load-window must be a positive duration"},
	}
	for _, tc := range cases {
		out, msg, code := run(t, tc.args...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, msg)
		assert.Contains(t, msg, tc.want, tc.args)
		assert.Empty(t, out, tc.args)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(msg), "\n")+1, "one sentence: %q", msg)
	}

	var doc map[string]any
	require.NoError(t, json.Unmarshal(mustRead(t, snap), &doc))
	doc["shard_groups"].([]any)[3].(map[string]any)["load"] = -4
	neg := filepath.Join(t.TempDir(), "neg.json")
	b, _ := json.Marshal(doc)
	require.NoError(t, os.WriteFile(neg, b, 0o644))
	_, msg, code := run(t, "plan", "--snapshot", neg, "--strategy", "by_load")
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "the snapshot gives shard group 1:3 a negative load")
}
