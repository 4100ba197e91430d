package planner

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/shardmover/shardmover/internal/units"
)

const barWidth = 20

// Render writes the plan for people: a summary (with, when the nodes'
// bytes could not be balanced, the group that prevents it), the moves, the
// skipped moves, and for every node a small table of its shard groups,
// shards, bytes and load (by_load) before and after, with bars of bytes
// and load against the fullest node, and its fill (utilization as a
// percentage of the average, so 100% is exactly balanced whatever the
// strategy). The output depends only on r.
func (r Result) Render(w io.Writer) error {
	var b strings.Builder
	maxMoves := "unlimited"
	if r.MaxMoves >= 0 {
		maxMoves = strconv.Itoa(r.MaxMoves)
	}
	fmt.Fprintf(&b, "strategy %s, threshold %s, improvement threshold %s, max moves %s\n",
		r.Strategy, fnum(r.Threshold), fnum(r.ImprovementThreshold), maxMoves)
	avg := fnum(r.Average)
	switch r.Strategy {
	case ByDiskSize:
		avg = units.Bytes(int64(math.Round(r.Average)))
	case ByLoad:
		avg = loadRate(r.Average)
	}
	fmt.Fprintf(&b, "average %s per unit of capacity; balanced band %s..%s of average\n",
		avg, r.pct(r.Lower), r.pct(r.Upper))
	bytesBand := ""
	if r.Strategy == ByDiskSize {
		// The bytes alone, as an operator reads the status's bytes column.
		bytesBand = "; bytes within the band: " + yesNo(r.BytesBalanced)
	}
	fmt.Fprintf(&b, "%s in %s, %s; balanced: %s%s; converged: %s\n",
		plural(len(r.Moves), "move"), plural(r.Waves, "wave"), units.Bytes(r.MovedBytes), yesNo(r.Balanced), bytesBand, yesNo(r.Converged))
	if r.Strategy == ByLoad {
		fmt.Fprintf(&b, "load in weighted rows per second; base %s added to every group's load\n", loadRate(r.LoadBase))
	}
	if l := r.BytesLimit; l != nil {
		fmt.Fprintf(&b, "bytes not balanced: %s\n", l.Detail)
	}

	b.WriteString("\nmoves:\n")
	if len(r.Moves) == 0 {
		b.WriteString("  (none)\n")
	} else {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\twave\tgroup\ttables\tshards\tsize\tfrom\tto\treason\tfrom fill\tto fill")
		for _, m := range r.Moves {
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s -> %s\t%s -> %s\n",
				m.Order, m.Wave, m.GroupID, list(m.Tables), ids(m.ShardIDs), units.Bytes(m.Bytes),
				nodeLabel(m.From, m.FromName), nodeLabel(m.To, m.ToName), m.Reason,
				r.pct(m.FromBefore), r.pct(m.FromAfter), r.pct(m.ToBefore), r.pct(m.ToAfter))
		}
		tw.Flush()
	}

	if len(r.Skipped) > 0 {
		b.WriteString("\nskipped:\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  group\tsize\tfrom\tto\twhy\tdetail")
		for _, s := range r.Skipped {
			to := "-"
			if s.ToName != "" || s.To != 0 {
				to = nodeLabel(s.To, s.ToName)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", s.GroupID, units.Bytes(s.Bytes),
				nodeLabel(s.From, s.FromName), to, s.Why, s.Detail)
		}
		tw.Flush()
	}

	r.renderNodes(&b)
	r.renderSpread(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// renderNodes writes, for every node, a small table of what it holds
// before and after the plan: shard groups, shards, bytes with a bar of the
// node's bytes against the fullest node's (before or after), load (with
// by_load, or whenever some load was measured) with the same kind of bar,
// and fill, the utilization as a percentage of the average.
func (r Result) renderNodes(b *strings.Builder) {
	b.WriteString("\nnodes (bars: share of the fullest node; fill: utilization as % of average):\n")
	var maxBytes int64
	var maxLoad float64
	for _, set := range [][]NodeUtil{r.Before, r.After} {
		for _, u := range set {
			maxBytes = max(maxBytes, u.Bytes)
			maxLoad = max(maxLoad, u.Load)
		}
	}
	showLoad := r.Strategy == ByLoad || maxLoad > 0
	// Rows of every node, then one column width for all nodes, so the
	// tables line up down the page.
	type row struct{ name, before, beforeBar, after, afterBar string }
	tables := make([][]row, len(r.Before))
	wb, wa := len("before"), len("after")
	for i, bu := range r.Before {
		au := bu
		if i < len(r.After) {
			au = r.After[i]
		}
		rows := []row{
			{"groups", strconv.Itoa(bu.Groups), "", strconv.Itoa(au.Groups), ""},
			{"shards", strconv.Itoa(bu.Shards), "", strconv.Itoa(au.Shards), ""},
			{"bytes", units.Bytes(bu.Bytes), share(float64(bu.Bytes), float64(maxBytes)), units.Bytes(au.Bytes), share(float64(au.Bytes), float64(maxBytes))},
		}
		if showLoad {
			rows = append(rows, row{"load", loadRate(bu.Load), share(bu.Load, maxLoad), loadRate(au.Load), share(au.Load, maxLoad)})
		}
		rows = append(rows, row{"fill", r.pct(bu.Utilization), "", r.pct(au.Utilization), ""})
		for _, x := range rows {
			wb, wa = max(wb, len(x.before)), max(wa, len(x.after))
		}
		tables[i] = rows
	}
	pad := func(s string, w int) string { return s + strings.Repeat(" ", max(0, w-len(s))) }
	line := func(name, before, beforeBar, after, afterBar string) {
		l := "    " + pad(name, 8) + pad(before, wb) + "  " + pad(beforeBar, barWidth) + "  " + pad(after, wa) + "  " + afterBar
		b.WriteString(strings.TrimRight(l, " ") + "\n")
	}
	for i, bu := range r.Before {
		note := ""
		if i < len(r.After) && !r.After[i].Eligible {
			note = ", no balancing"
		}
		fmt.Fprintf(b, "  %s (capacity %s%s)\n", nodeLabel(bu.Node, bu.Name), fnum(bu.Capacity), note)
		line("", "before", "", "after", "")
		for _, x := range tables[i] {
			if x.beforeBar == "" {
				x.beforeBar = strings.Repeat(" ", barWidth)
			}
			line(x.name, x.before, x.beforeBar, x.after, x.afterBar)
		}
	}
}

// renderSpread writes, for every colocation group, its shard groups per
// node before and after the plan, nodes in the order of the node tables.
func (r Result) renderSpread(b *strings.Builder) {
	if len(r.Spread) == 0 {
		return
	}
	b.WriteString("\nshard groups per node, by colocation (nodes in the order above):\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	counts := func(c []int) string {
		s := make([]string, len(c))
		for i, v := range c {
			s[i] = strconv.Itoa(v)
		}
		return strings.Join(s, " ")
	}
	for _, sp := range r.Spread {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t-> %s\n", sp.ColocationID, list(sp.Tables), counts(sp.Before), counts(sp.After))
	}
	tw.Flush()
}

// share is a bar of v against the largest value m: full blocks for the
// share, light shade for the rest.
func share(v, m float64) string {
	n := 0
	if m > 0 {
		n = int(math.Round(v / m * barWidth))
	}
	n = min(max(n, 0), barWidth)
	return strings.Repeat("█", n) + strings.Repeat("░", barWidth-n)
}

// loadRate prints a load in weighted rows per second.
func loadRate(v float64) string {
	switch {
	case v == 0:
		return "0/s"
	case v >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64) + "/s"
	default:
		return strconv.FormatFloat(v, 'f', 1, 64) + "/s"
	}
}

func (r Result) fill(u float64) float64 {
	if r.Average <= 0 {
		return 0
	}
	return u / r.Average
}

func (r Result) pct(u float64) string {
	return strconv.FormatFloat(math.Round(r.fill(u)*100), 'f', 0, 64) + "%"
}

func nodeLabel(id int64, name string) string {
	if name == "" {
		return "node " + strconv.FormatInt(id, 10)
	}
	return name
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

// fnum prints a number briefly: integers without decimals.
func fnum(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	if len(s) > 3 {
		return strings.Join(s[:3], ",") + ",+" + strconv.Itoa(len(s)-3)
	}
	return strings.Join(s, ",")
}

func ids(s []int64) string {
	if len(s) == 0 {
		return "-"
	}
	parts := make([]string, 0, 4)
	for i, id := range s {
		if i == 3 {
			parts = append(parts, "+"+strconv.Itoa(len(s)-3))
			break
		}
		parts = append(parts, strconv.FormatInt(id, 10))
	}
	return strings.Join(parts, ",")
}
