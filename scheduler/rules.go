package scheduler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/planner"
)

// PlacementRule is one placement rule as the operator gave it: a shard
// group (COLOCATION:INDEX or a shard id) or, for --allow, a distributed
// table, and the nodes (host:port) the rule names. Source is where the rule
// came from, for error messages: empty for a flag, "--rules FILE" for the
// rules file.
type PlacementRule struct {
	Target string
	Nodes  []string
	Source string
}

// label names the rule in an error sentence: `--pin 1:3` for a flag,
// `--rules r.json: pin "1:3"` for an entry of the rules file.
func (r PlacementRule) label(kind string) string {
	if r.Source == "" {
		return "--" + kind + " " + r.Target
	}
	return fmt.Sprintf("%s: %s %q", r.Source, kind, r.Target)
}

// RulesFile is the JSON rules file of --rules (docs/design.md section 4):
//
//	{"pin": {"1:3": ["10.0.0.2:5432"]}, "avoid": {"1:5": ["10.0.0.3:5432"]},
//	 "isolate": ["1:4"], "allow": {"github_events": ["10.0.0.2:5432", "10.0.0.3:5432"]}}
type RulesFile struct {
	Pin     map[string][]string `json:"pin"`
	Avoid   map[string][]string `json:"avoid"`
	Isolate []string            `json:"isolate"`
	Allow   map[string][]string `json:"allow"`
}

// ReadRules decodes a rules file strictly: unknown fields, values of the
// wrong type and anything after the JSON object are refused, in one
// sentence naming the file (name) and the entry. The rules it returns carry
// the file as their Source; their syntax is checked by CheckRules.
func ReadRules(r io.Reader, name string) (pin, avoid, isolate, allow []PlacementRule, err error) {
	src := "--rules " + name
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, nil, nil, invalidf("%s cannot be read: %v", src, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f RulesFile
	if err := dec.Decode(&f); err != nil {
		var typ *json.UnmarshalTypeError
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &typ) && typ.Field == "":
			return nil, nil, nil, nil, invalidf(`%s is not a JSON object; write one like {"pin": {"1:3": ["10.0.0.2:5432"]}, "isolate": ["1:4"]}`, src)
		case errors.As(err, &typ):
			return nil, nil, nil, nil, invalidf(`%s: %q has the wrong type; "pin", "avoid" and "allow" map a group or table to a list of "host:port", "isolate" is a list of groups`, src, typ.Field)
		case errors.As(err, &syn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, nil, nil, nil, invalidf("%s is not valid JSON (%v); write an object like {\"pin\": {\"1:3\": [\"10.0.0.2:5432\"]}}", src, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return nil, nil, nil, nil, invalidf("%s has %s; the fields are pin, avoid, isolate and allow", src, strings.TrimPrefix(err.Error(), "json: "))
		}
		return nil, nil, nil, nil, invalidf("%s is not a rules file (%v); write an object like {\"pin\": {\"1:3\": [\"10.0.0.2:5432\"]}}", src, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, nil, nil, invalidf("%s has more after its JSON object; a rules file is one object", src)
	}
	fromMap := func(m map[string][]string) []PlacementRule {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out []PlacementRule
		for _, k := range keys {
			out = append(out, PlacementRule{Target: k, Nodes: m[k], Source: src})
		}
		return out
	}
	for _, g := range f.Isolate {
		isolate = append(isolate, PlacementRule{Target: g, Source: src})
	}
	return fromMap(f.Pin), fromMap(f.Avoid), isolate, fromMap(f.Allow), nil
}

// ParseNodeRules reads flag values GROUP=host:port[,host:port...] (or
// TABLE=... for --allow) into rules; flag is the flag's name without the
// dashes. Only the shape is checked here; CheckRules checks the parts.
func ParseNodeRules(flag string, specs []string) ([]PlacementRule, error) {
	what := "GROUP"
	example := "1:3=10.0.0.2:5432,10.0.0.3:5432"
	if flag == "allow" {
		what, example = "TABLE", "github_events=10.0.0.2:5432,10.0.0.3:5432"
	}
	var out []PlacementRule
	for _, s := range specs {
		target, list, ok := strings.Cut(s, "=")
		if !ok {
			return nil, invalidf("--%s %q must be %s=host:port[,host:port...], e.g. %s", flag, s, what, example)
		}
		var nodes []string
		if strings.TrimSpace(list) != "" {
			nodes = strings.Split(list, ",")
		}
		out = append(out, PlacementRule{Target: strings.TrimSpace(target), Nodes: nodes})
	}
	return out, nil
}

// IsolateRules turns --isolate values into rules.
func IsolateRules(groups []string) []PlacementRule {
	var out []PlacementRule
	for _, g := range groups {
		out = append(out, PlacementRule{Target: strings.TrimSpace(g)})
	}
	return out
}

var groupRef = regexp.MustCompile(`^[0-9]+:[0-9]+$`)

// checkGroupRef checks that s is written as a shard group (COLOCATION:INDEX)
// or a shard id.
func checkGroupRef(label, s string) error {
	if groupRef.MatchString(s) {
		return nil
	}
	if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 {
		return nil
	}
	return invalidf("%s: %q is not a shard group; write COLOCATION:INDEX as `shardmover status` shows it (e.g. 1:3) or a shard id", label, s)
}

// CheckRules checks the rules' syntax, without the cluster: every group is
// COLOCATION:INDEX or a shard id, every table a name, every node host:port,
// every node list not empty, and no group or table given twice for the
// same kind of rule (flags and file together). Errors match
// metadata.ErrInvalid and name the flag or file entry.
func CheckRules(o PlanOptions) error {
	checkNodes := func(kind string, r PlacementRule) error {
		if len(r.Nodes) == 0 {
			return invalidf("%s lists no node; give at least one host:port", r.label(kind))
		}
		for _, a := range r.Nodes {
			if _, _, err := metadata.ParseAddr(strings.TrimSpace(a)); err != nil {
				return invalidf("%s: %q is not host:port with a port from 1 to 65535 (for example 10.0.0.5:5432)", r.label(kind), a)
			}
		}
		return nil
	}
	for _, set := range []struct {
		kind  string
		rules []PlacementRule
	}{{"pin", o.Pin}, {"avoid", o.Avoid}, {"isolate", o.Isolate}, {"allow", o.Allow}} {
		seen := map[string]PlacementRule{}
		for _, r := range set.rules {
			switch set.kind {
			case "allow":
				if normTable(r.Target) == "" || strings.ContainsAny(r.Target, " \t\n") {
					return invalidf("%s: %q is not a table name; write schema.name, or name for the public schema", r.label(set.kind), r.Target)
				}
			default:
				if err := checkGroupRef(r.label(set.kind), r.Target); err != nil {
					return err
				}
			}
			if set.kind != "isolate" {
				if err := checkNodes(set.kind, r); err != nil {
					return err
				}
			}
			key := r.Target
			if set.kind == "allow" {
				key = normTable(key)
			}
			if prev, dup := seen[key]; dup && set.kind != "isolate" {
				return invalidf("%s is given twice (also as %s); give each one %s rule with all its nodes", r.label(set.kind), prev.label(set.kind), set.kind)
			}
			seen[key] = r
		}
	}
	return nil
}

// normTable writes a table name as the status document does: name for the
// public schema, schema.name otherwise.
func normTable(s string) string {
	s = strings.TrimSpace(s)
	return strings.TrimPrefix(s, "public.")
}

// applyRules checks the rules' references against the cluster and sets
// the planner's PinnedTo, AvoidNodes, Isolate and Allowed. byAddr holds
// in.Nodes by host:port (simulated nodes included).
func applyRules(st metadata.Status, o PlanOptions, in *planner.Input, byAddr map[string]*planner.Node) error {
	if len(o.Pin)+len(o.Avoid)+len(o.Isolate)+len(o.Allow) == 0 {
		return nil
	}
	groupIdx := map[string]int{}
	shardIdx := map[int64]int{}
	for i, g := range in.Groups {
		groupIdx[g.ID] = i
		for _, s := range g.ShardIDs {
			shardIdx[s] = i
		}
	}
	findGroup := func(label, ref string) (int, error) {
		if groupRef.MatchString(ref) {
			if i, ok := groupIdx[ref]; ok {
				return i, nil
			}
			return 0, invalidf("%s: no such shard group in the cluster; `shardmover status` lists the groups", label)
		}
		id, _ := strconv.ParseInt(ref, 10, 64)
		if i, ok := shardIdx[id]; ok {
			return i, nil
		}
		return 0, invalidf("%s: no such shard in the cluster; `shardmover status` lists the shard groups and their shards", label)
	}
	nodeIDs := func(kind string, r PlacementRule) ([]int64, error) {
		var ids []int64
		for _, a := range r.Nodes {
			a = strings.TrimSpace(a)
			n, ok := byAddr[a]
			if !ok {
				return nil, invalidf("%s: no such node %s in the cluster; `shardmover status` lists the nodes", r.label(kind), a)
			}
			ids = append(ids, n.ID)
		}
		return ids, nil
	}
	pinnedBy := map[int]PlacementRule{}
	for _, r := range o.Pin {
		i, err := findGroup(r.label("pin"), r.Target)
		if err != nil {
			return err
		}
		ids, err := nodeIDs("pin", r)
		if err != nil {
			return err
		}
		if prev, dup := pinnedBy[i]; dup {
			return invalidf("%s and %s pin the same shard group %s; give it one pin with all its nodes", prev.label("pin"), r.label("pin"), in.Groups[i].ID)
		}
		pinnedBy[i] = r
		in.Groups[i].PinnedTo = ids
	}
	for _, r := range o.Avoid {
		i, err := findGroup(r.label("avoid"), r.Target)
		if err != nil {
			return err
		}
		ids, err := nodeIDs("avoid", r)
		if err != nil {
			return err
		}
		g := &in.Groups[i]
		for _, id := range ids {
			if !containsID(g.AvoidNodes, id) {
				g.AvoidNodes = append(g.AvoidNodes, id)
			}
		}
		if pin, ok := pinnedBy[i]; ok && len(without(g.PinnedTo, g.AvoidNodes)) == 0 {
			return invalidf("%s and %s leave shard group %s no node; drop one of them or pin it to a node it does not avoid", pin.label("pin"), r.label("avoid"), g.ID)
		}
	}
	for _, r := range o.Isolate {
		i, err := findGroup(r.label("isolate"), r.Target)
		if err != nil {
			return err
		}
		in.Groups[i].Isolate = true
	}
	if len(o.Allow) == 0 {
		return nil
	}
	// A table's groups are its colocation's groups: the rule holds for the
	// whole colocation group, and the planner spreads it over those nodes.
	known := map[string]int64{}
	for _, t := range st.Tables {
		known[normTable(t.Name)] = int64(t.ColocationID)
	}
	for _, g := range in.Groups {
		for _, t := range g.Tables {
			known[normTable(t)] = g.ColocationID
		}
	}
	allowed := map[int64]map[int64]bool{} // colocation -> nodes
	allowedBy := map[int64]PlacementRule{}
	for _, r := range o.Allow {
		coloc, ok := known[normTable(r.Target)]
		if !ok {
			return invalidf("%s: no such distributed table in the cluster; `shardmover status` lists the tables (write schema.name, or name for the public schema)", r.label("allow"))
		}
		ids, err := nodeIDs("allow", r)
		if err != nil {
			return err
		}
		set := map[int64]bool{}
		for _, id := range ids {
			if prev, ok := allowed[coloc]; !ok || prev[id] {
				set[id] = true
			}
		}
		if len(set) == 0 {
			return invalidf("%s and %s are colocated and together allow no node; give them nodes in common", allowedBy[coloc].label("allow"), r.label("allow"))
		}
		allowed[coloc], allowedBy[coloc] = set, r
	}
	for i, g := range in.Groups {
		set, ok := allowed[g.ColocationID]
		if !ok || len(g.PinnedTo) == 0 {
			continue
		}
		left := false
		for _, id := range g.PinnedTo {
			left = left || set[id]
		}
		if !left {
			return invalidf("%s and %s leave shard group %s no node; pin it to a node the table is allowed on", pinnedBy[i].label("pin"), allowedBy[g.ColocationID].label("allow"), g.ID)
		}
	}
	prev := in.Allowed
	in.Allowed = func(g planner.Group, n planner.Node) bool {
		if prev != nil && !prev(g, n) {
			return false
		}
		set, ok := allowed[g.ColocationID]
		return !ok || set[n.ID]
	}
	return nil
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// without returns the ids of a not in b.
func without(a, b []int64) []int64 {
	var out []int64
	for _, x := range a {
		if !containsID(b, x) {
			out = append(out, x)
		}
	}
	return out
}
