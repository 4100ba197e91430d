package planner

// Golden tests: each testdata/*.txt file holds an input layout, a line
// "----", and the rendered plan. Regenerate with
//
//	go test ./planner -run TestGolden -update
//
// and review the diff before committing.
//
// Input format, one directive per line ('#' starts a comment):
//
//	strategy by_disk_size        first; starts from DefaultInput(strategy)
//	threshold 0.1
//	improvement_threshold 0.5
//	max_moves 3                  -1 = unlimited
//	max_per_node 2
//	base_cost 100MiB
//	load_base 5                  by_load's base (0: automatic)
//	drain_only
//	node <id> <host:port> [capacity=N] [max_cost=N|SIZE] [noshards] [drain]
//	group <cC:I> node=<id> [size=SIZE] [tables=a,b] [shards=1,2]
//	      [excluded] [isolate] [pin=1,2] [avoid=3] [load=N]
//	groups <cC:I-J> node=<id> [...]   one group per index I..J
//
// Nodes default to capacity 1 and shouldhaveshards true. A group id cC:I
// means colocation C, shard index I. Without tables= the group has one
// table "tC"; without shards= shard ids are 100000+C*10000+table*1000+I.
// SIZE is bytes with an optional KiB, MiB, GiB or TiB suffix.

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const goldenSep = "----\n"

func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			input, want, found := strings.Cut(string(raw), goldenSep)
			require.True(t, found, "%s has no %q line", file, strings.TrimSpace(goldenSep))
			in, err := parseLayout(input)
			require.NoError(t, err)
			got := renderOrError(in)
			if *update {
				require.NoError(t, os.WriteFile(file, []byte(input+goldenSep+got), 0o644))
				return
			}
			require.Equal(t, want, got, "plan differs; rerun with -update and review the diff")
		})
	}
}

func renderOrError(in Input) string {
	res, err := Plan(in)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	var b bytes.Buffer
	if err := res.Render(&b); err != nil {
		return "render error: " + err.Error() + "\n"
	}
	return b.String()
}

// parseLayout reads the golden input format described above.
func parseLayout(text string) (Input, error) {
	in := DefaultInput(ByShardCount)
	for ln, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		fail := func(err error) (Input, error) { return Input{}, fmt.Errorf("line %d: %q: %w", ln+1, line, err) }
		arg := func() string {
			if len(f) < 2 {
				return ""
			}
			return f[1]
		}
		var err error
		switch f[0] {
		case "strategy":
			var s Strategy
			if s, err = ParseStrategy(arg()); err == nil {
				nodes, groups := in.Nodes, in.Groups
				in = DefaultInput(s)
				in.Nodes, in.Groups = nodes, groups
			}
		case "threshold":
			in.Threshold, err = strconv.ParseFloat(arg(), 64)
		case "improvement_threshold":
			in.ImprovementThreshold, err = strconv.ParseFloat(arg(), 64)
		case "max_moves":
			in.MaxMoves, err = strconv.Atoi(arg())
		case "max_per_node":
			in.MaxPerNode, err = strconv.Atoi(arg())
		case "base_cost":
			in.BaseCost, err = parseSize(arg())
		case "load_base":
			in.LoadBase, err = strconv.ParseFloat(arg(), 64)
		case "drain_only":
			in.DrainOnly = true
		case "node":
			var n Node
			n, err = parseNode(f[1:])
			in.Nodes = append(in.Nodes, n)
		case "group", "groups":
			var gs []Group
			gs, err = parseGroups(f[1:], f[0] == "groups")
			in.Groups = append(in.Groups, gs...)
		default:
			err = fmt.Errorf("unknown directive %q", f[0])
		}
		if err != nil {
			return fail(err)
		}
	}
	return in, nil
}

func parseNode(f []string) (Node, error) {
	if len(f) < 2 {
		return Node{}, fmt.Errorf("want: node <id> <name> [options]")
	}
	id, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return Node{}, err
	}
	n := Node{ID: id, Name: f[1], Capacity: 1, ShouldHaveShards: true}
	for _, opt := range f[2:] {
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "capacity":
			n.Capacity, err = strconv.ParseFloat(v, 64)
		case "max_cost":
			var b int64
			b, err = parseSize(v)
			n.MaxCost = float64(b)
		case "noshards":
			n.ShouldHaveShards = false
		case "drain":
			n.Drain = true
		default:
			err = fmt.Errorf("unknown node option %q", opt)
		}
		if err != nil {
			return Node{}, err
		}
	}
	return n, nil
}

func parseGroups(f []string, isRange bool) ([]Group, error) {
	if len(f) < 1 {
		return nil, fmt.Errorf("want: group <cC:I> [options]")
	}
	cs, is, ok := strings.Cut(strings.TrimPrefix(f[0], "c"), ":")
	if !ok {
		return nil, fmt.Errorf("group id %q is not cC:I", f[0])
	}
	coloc, err := strconv.ParseInt(cs, 10, 64)
	if err != nil {
		return nil, err
	}
	from, to := is, is
	if isRange {
		if from, to, ok = strings.Cut(is, "-"); !ok {
			return nil, fmt.Errorf("group range %q is not cC:I-J", f[0])
		}
	}
	lo, err := strconv.Atoi(from)
	if err != nil {
		return nil, err
	}
	hi, err := strconv.Atoi(to)
	if err != nil {
		return nil, err
	}
	proto := Group{ColocationID: coloc, Tables: []string{"t" + cs}}
	var shards []int64
	for _, opt := range f[1:] {
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "node":
			proto.Node, err = strconv.ParseInt(v, 10, 64)
		case "size":
			proto.Bytes, err = parseSize(v)
		case "tables":
			proto.Tables = strings.Split(v, ",")
		case "shards":
			shards, err = parseIDs(v)
		case "load":
			proto.Load, err = strconv.ParseFloat(v, 64)
		case "excluded":
			proto.Excluded = true
		case "isolate":
			proto.Isolate = true
		case "pin":
			proto.PinnedTo, err = parseIDs(v)
		case "avoid":
			proto.AvoidNodes, err = parseIDs(v)
		default:
			err = fmt.Errorf("unknown group option %q", opt)
		}
		if err != nil {
			return nil, err
		}
	}
	var out []Group
	for i := lo; i <= hi; i++ {
		g := proto
		g.ID = fmt.Sprintf("c%d:%d", coloc, i)
		g.Index = i
		g.ShardIDs = shards
		if shards == nil {
			for t := range g.Tables {
				g.ShardIDs = append(g.ShardIDs, 100000+coloc*10000+int64(t)*1000+int64(i))
			}
		}
		out = append(out, g)
	}
	return out, nil
}

func parseIDs(v string) ([]int64, error) {
	var out []int64
	for _, s := range strings.Split(v, ",") {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

func parseSize(v string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSuffix(v, u.suffix), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", v, err)
	}
	return int64(f * float64(mult)), nil
}

// TestGoldenGoals checks on the golden layouts of issue 14 what their
// plans must achieve, independently of the rendered text: every colocation
// group spread with per-node counts differing by at most one (all these
// nodes have capacity 1), and, with by_disk_size, every node's bytes
// within the band of the average.
func TestGoldenGoals(t *testing.T) {
	for _, name := range []string{"colocations", "colocations_few_shards", "drain_one_of_ten", "demo_small_groups", "bigger_run", "base_cost_small_groups", "waves", "demo_end"} {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", name+".txt"))
			require.NoError(t, err)
			text, _, _ := strings.Cut(string(raw), goldenSep)
			in, err := parseLayout(text)
			require.NoError(t, err)
			res, err := Plan(in)
			require.NoError(t, err)
			checkInvariants(t, in, res)
			final := finalNodes(res)
			nodeOf := func(g *Group) int64 {
				if n, ok := final[g.ID]; ok {
					return n
				}
				return g.Node
			}
			excess, width := colocSpread(in, nodeOf)
			assert.Zero(t, excess, "colocation groups outside their quotas")
			assert.LessOrEqual(t, width, 1, "a colocation's counts differ by more than one")
			if in.Strategy == ByDiskSize {
				assert.True(t, res.BytesBalanced, "bytes not balanced: %+v", res.BytesLimit)
				var total float64
				var n int
				for _, a := range res.After {
					if a.Eligible {
						total += float64(a.Bytes)
						n++
					}
				}
				avg := total / float64(n)
				for _, a := range res.After {
					if a.Eligible {
						assert.InDelta(t, avg, float64(a.Bytes), in.Threshold*avg+1, "node %s", a.Name)
					}
				}
			}
		})
	}
}
