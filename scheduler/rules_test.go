package scheduler_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/planner"
	"github.com/shardmover/shardmover/scheduler"
)

// rulesStatus: four workers (ids 2-5, 10.0.0.2-5), the first two holding
// everything: colocation 1 (github_events, 8 groups, shards 1000+i) and
// colocation 2 (events.users, 4 groups, shards 2000+i); 5 is new and empty.
func rulesStatus() metadata.Status {
	st := metadata.Status{SchemaVersion: 1, Flavor: metadata.Compat, Coordinator: "10.0.0.1:5432",
		Nodes: []metadata.StatusNode{{ID: 1, Addr: "10.0.0.1:5432", Role: "coordinator", IsActive: true, Capacity: 1}},
		Tables: []metadata.StatusTable{
			{Name: "github_events", ShardCount: 8, ColocationID: 1},
			{Name: "events.users", ShardCount: 4, ColocationID: 2},
		}}
	for id := int32(2); id <= 5; id++ {
		st.Nodes = append(st.Nodes, metadata.StatusNode{ID: id, GroupID: id - 1, Addr: fmt.Sprintf("10.0.0.%d:5432", id),
			Role: "worker", IsActive: true, ShouldHaveShards: true, Capacity: 1})
	}
	for i := 0; i < 8; i++ {
		st.ShardGroups = append(st.ShardGroups, metadata.StatusGroup{ID: fmt.Sprintf("1:%d", i), ColocationID: 1, Index: i,
			ShardIDs: []int64{int64(1000 + i)}, Tables: []string{"github_events"}, NodeID: int32(2 + i%2), Bytes: int64(i+1) << 20, SizeKnown: true})
	}
	for i := 0; i < 4; i++ {
		st.ShardGroups = append(st.ShardGroups, metadata.StatusGroup{ID: fmt.Sprintf("2:%d", i), ColocationID: 2, Index: i,
			ShardIDs: []int64{int64(2000 + i)}, Tables: []string{"events.users"}, NodeID: int32(2 + i%2), Bytes: 4 << 20, SizeKnown: true})
	}
	return st
}

// planEnd plans with the options and returns where every group ends.
func planEnd(t *testing.T, st metadata.Status, o scheduler.PlanOptions) (map[string]int64, planner.Result) {
	t.Helper()
	in, err := scheduler.BuildInput(st, o)
	require.NoError(t, err)
	res, err := planner.Plan(in)
	require.NoError(t, err)
	end := map[string]int64{}
	for _, g := range st.ShardGroups {
		end[g.ID] = int64(g.NodeID)
	}
	for _, m := range res.Moves {
		require.Equal(t, end[m.GroupID], m.From, "move %d of %s starts where the group is", m.Order, m.GroupID)
		end[m.GroupID] = m.To
	}
	return end, res
}

func rule(target string, nodes ...string) scheduler.PlacementRule {
	return scheduler.PlacementRule{Target: target, Nodes: nodes}
}

func TestRulesHoldInPlan(t *testing.T) {
	st := rulesStatus()
	o := scheduler.DefaultPlanOptions()
	o.Pin = []scheduler.PlacementRule{rule("1:0", "10.0.0.5:5432"), rule("1003", "10.0.0.4:5432")} // 1003: a shard of 1:3
	o.Avoid = []scheduler.PlacementRule{rule("1:6", "10.0.0.4:5432", "10.0.0.2:5432")}             // 1:6 is on 2
	o.Isolate = []scheduler.PlacementRule{rule("1:7")}
	o.Allow = []scheduler.PlacementRule{rule("events.users", "10.0.0.4:5432", "10.0.0.5:5432")}
	end, res := planEnd(t, st, o)

	assert.EqualValues(t, 5, end["1:0"], "pinned group ends on its node")
	assert.EqualValues(t, 4, end["1:3"], "a group pinned by a shard id ends on its node")
	assert.Empty(t, res.Skipped, "every rule could be met")
	assert.NotContains(t, []int64{2, 4}, end["1:6"], "the avoiding group leaves the avoided node")
	for _, m := range res.Moves {
		if m.GroupID == "1:6" {
			assert.NotContains(t, []int64{2, 4}, m.To, "an avoided node never receives the group")
		}
	}
	iso := end["1:7"]
	for id, n := range end {
		if id != "1:7" {
			assert.NotEqual(t, iso, n, "%s shares the isolated group's node", id)
		}
	}
	for i := 0; i < 4; i++ {
		assert.Contains(t, []int64{4, 5}, end[fmt.Sprintf("2:%d", i)], "events.users only on its allowed nodes")
	}
	var spread [6]int
	for i := 0; i < 4; i++ {
		spread[end[fmt.Sprintf("2:%d", i)]]++
	}
	assert.Equal(t, 2, spread[4], "the allowed table spreads over its nodes")
	assert.Equal(t, 2, spread[5])

	// Forced by a rule: the moves say so.
	reasons := map[string]planner.Reason{}
	for _, m := range res.Moves {
		if _, seen := reasons[m.GroupID]; !seen {
			reasons[m.GroupID] = m.Reason
		}
	}
	assert.Equal(t, planner.ReasonNotAllowed, reasons["1:0"])
	assert.Equal(t, planner.ReasonNotAllowed, reasons["2:0"])

	// "public.github_events" names the same table as "github_events".
	o = scheduler.DefaultPlanOptions()
	o.Allow = []scheduler.PlacementRule{rule("public.github_events", "10.0.0.3:5432")}
	end, _ = planEnd(t, st, o)
	for i := 0; i < 8; i++ {
		assert.EqualValues(t, 3, end[fmt.Sprintf("1:%d", i)])
	}

	// A simulated node may be named in a rule.
	o = scheduler.DefaultPlanOptions()
	o.AddNodes = []string{"10.0.0.9:5432"}
	o.Pin = []scheduler.PlacementRule{rule("2:1", "10.0.0.9:5432")}
	end, _ = planEnd(t, st, o)
	assert.EqualValues(t, 6, end["2:1"])
}

func TestRulesBadReferences(t *testing.T) {
	st := rulesStatus()
	file := func(r scheduler.PlacementRule) scheduler.PlacementRule { r.Source = "--rules r.json"; return r }
	cases := []struct {
		name string
		set  func(o *scheduler.PlanOptions)
		want string
	}{
		{"unknown group", func(o *scheduler.PlanOptions) { o.Pin = []scheduler.PlacementRule{rule("1:99", "10.0.0.2:5432")} },
			"--pin 1:99: no such shard group in the cluster; `shardmover status` lists the groups"},
		{"unknown shard", func(o *scheduler.PlanOptions) { o.Avoid = []scheduler.PlacementRule{rule("4242", "10.0.0.2:5432")} },
			"--avoid 4242: no such shard in the cluster"},
		{"unknown isolated group", func(o *scheduler.PlanOptions) { o.Isolate = []scheduler.PlacementRule{rule("3:0")} },
			"--isolate 3:0: no such shard group in the cluster"},
		{"unknown node", func(o *scheduler.PlanOptions) { o.Pin = []scheduler.PlacementRule{rule("1:2", "10.9.9.9:5432")} },
			"--pin 1:2: no such node 10.9.9.9:5432 in the cluster; `shardmover status` lists the nodes"},
		{"unknown table", func(o *scheduler.PlanOptions) { o.Allow = []scheduler.PlacementRule{rule("nosuch", "10.0.0.2:5432")} },
			"--allow nosuch: no such distributed table in the cluster"},
		{"table in another schema", func(o *scheduler.PlanOptions) { o.Allow = []scheduler.PlacementRule{rule("users", "10.0.0.2:5432")} },
			"--allow users: no such distributed table"},
		{"file entry", func(o *scheduler.PlanOptions) { o.Pin = []scheduler.PlacementRule{file(rule("1:99", "10.0.0.2:5432"))} },
			`--rules r.json: pin "1:99": no such shard group in the cluster`},
		{"file node", func(o *scheduler.PlanOptions) {
			o.Allow = []scheduler.PlacementRule{file(rule("github_events", "10.0.0.8:5432"))}
		}, `--rules r.json: allow "github_events": no such node 10.0.0.8:5432 in the cluster`},
		{"pin and avoid leave nothing", func(o *scheduler.PlanOptions) {
			o.Pin = []scheduler.PlacementRule{rule("1:2", "10.0.0.2:5432")}
			o.Avoid = []scheduler.PlacementRule{file(rule("1:2", "10.0.0.2:5432"))}
		}, `--pin 1:2 and --rules r.json: avoid "1:2" leave shard group 1:2 no node`},
		{"pin and allow leave nothing", func(o *scheduler.PlanOptions) {
			o.Pin = []scheduler.PlacementRule{rule("1:2", "10.0.0.2:5432")}
			o.Allow = []scheduler.PlacementRule{rule("github_events", "10.0.0.3:5432")}
		}, "--pin 1:2 and --allow github_events leave shard group 1:2 no node"},
		{"group pinned twice by shard and group", func(o *scheduler.PlanOptions) {
			o.Pin = []scheduler.PlacementRule{rule("1:2", "10.0.0.2:5432"), rule("1002", "10.0.0.3:5432")}
		}, "--pin 1:2 and --pin 1002 pin the same shard group 1:2"},
		// Syntax, refused by BuildInput even against an empty status.
		{"group syntax", func(o *scheduler.PlanOptions) { o.Pin = []scheduler.PlacementRule{rule("c1-3", "10.0.0.2:5432")} },
			`--pin c1-3: "c1-3" is not a shard group; write COLOCATION:INDEX`},
		{"node syntax", func(o *scheduler.PlanOptions) { o.Avoid = []scheduler.PlacementRule{rule("1:1", "10.0.0.2")} },
			`--avoid 1:1: "10.0.0.2" is not host:port`},
		{"no nodes", func(o *scheduler.PlanOptions) { o.Allow = []scheduler.PlacementRule{rule("github_events")} },
			"--allow github_events lists no node; give at least one host:port"},
		{"duplicate between flag and file", func(o *scheduler.PlanOptions) {
			o.Allow = []scheduler.PlacementRule{rule("github_events", "10.0.0.2:5432"), file(rule("public.github_events", "10.0.0.3:5432"))}
		}, `--rules r.json: allow "public.github_events" is given twice (also as --allow github_events)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := scheduler.DefaultPlanOptions()
			tc.set(&o)
			_, err := scheduler.BuildInput(st, o)
			require.Error(t, err)
			assert.True(t, errors.Is(err, metadata.ErrInvalid), "%v", err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "\n")
			if strings.Contains(tc.name, "syntax") || tc.name == "no nodes" {
				_, err := scheduler.BuildInput(metadata.Status{SchemaVersion: 1}, o)
				require.Error(t, err, "syntax is checked without a cluster")
				assert.Contains(t, err.Error(), tc.want)
			}
		})
	}
	// Against an empty status (the check before connecting) references are
	// not checked.
	o := scheduler.DefaultPlanOptions()
	o.Pin = []scheduler.PlacementRule{rule("1:99", "10.9.9.9:5432")}
	_, err := scheduler.BuildInput(metadata.Status{SchemaVersion: 1}, o)
	assert.NoError(t, err)
}

func TestRulesFile(t *testing.T) {
	pin, avoid, iso, allow, err := scheduler.ReadRules(strings.NewReader(
		`{"pin": {"1:3": ["10.0.0.2:5432"]}, "avoid": {"1:5": ["10.0.0.3:5432"]}, "isolate": ["1:4"], "allow": {"github_events": ["10.0.0.2:5432", "10.0.0.3:5432"]}}`), "r.json")
	require.NoError(t, err)
	require.Len(t, pin, 1)
	assert.Equal(t, scheduler.PlacementRule{Target: "1:3", Nodes: []string{"10.0.0.2:5432"}, Source: "--rules r.json"}, pin[0])
	require.Len(t, avoid, 1)
	require.Len(t, iso, 1)
	assert.Equal(t, "1:4", iso[0].Target)
	require.Len(t, allow, 1)
	assert.Equal(t, []string{"10.0.0.2:5432", "10.0.0.3:5432"}, allow[0].Nodes)

	for doc, want := range map[string]string{
		`{"pin": {}, "isolated": ["1:4"]}`:   `--rules r.json has unknown field "isolated"; the fields are pin, avoid, isolate and allow`,
		`{"pin": {"1:3": "10.0.0.2:5432"}}`:  `--rules r.json: "pin" has the wrong type`,
		`{"isolate": "1:4"}`:                 `--rules r.json: "isolate" has the wrong type`,
		`{"pin": `:                           "--rules r.json is not valid JSON",
		``:                                   "--rules r.json is not valid JSON",
		`{"isolate": []} {"isolate": []}`:    "--rules r.json has more after its JSON object",
		`["1:3"]`:                            "--rules r.json is not a JSON object",
		`{"allow": {"t": ["10.0.0.2:5432"]}`: "--rules r.json is not valid JSON",
	} {
		_, _, _, _, err := scheduler.ReadRules(strings.NewReader(doc), "r.json")
		require.Error(t, err, doc)
		assert.True(t, errors.Is(err, metadata.ErrInvalid), doc)
		assert.Contains(t, err.Error(), want, doc)
	}

	rs, err := scheduler.ParseNodeRules("pin", []string{"1:3=10.0.0.2:5432,10.0.0.3:5432"})
	require.NoError(t, err)
	assert.Equal(t, []scheduler.PlacementRule{{Target: "1:3", Nodes: []string{"10.0.0.2:5432", "10.0.0.3:5432"}}}, rs)
	_, err = scheduler.ParseNodeRules("allow", []string{"github_events"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--allow "github_events" must be TABLE=host:port[,host:port...]`)
}
