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
// skipped moves, and every node's fill before and after with ASCII bars.
// Fill is shown as a percentage of the average utilization, so 100% is
// exactly balanced whatever the strategy. The output depends only on r.
func (r Result) Render(w io.Writer) error {
	var b strings.Builder
	maxMoves := "unlimited"
	if r.MaxMoves >= 0 {
		maxMoves = strconv.Itoa(r.MaxMoves)
	}
	fmt.Fprintf(&b, "strategy %s, threshold %s, improvement threshold %s, max moves %s\n",
		r.Strategy, fnum(r.Threshold), fnum(r.ImprovementThreshold), maxMoves)
	avg := fnum(r.Average)
	if r.Strategy == ByDiskSize {
		avg = units.Bytes(int64(math.Round(r.Average)))
	}
	fmt.Fprintf(&b, "average %s per unit of capacity; balanced band %s..%s of average\n",
		avg, r.pct(r.Lower), r.pct(r.Upper))
	fmt.Fprintf(&b, "%s in %s, %s; balanced: %s; converged: %s\n",
		plural(len(r.Moves), "move"), plural(r.Waves, "wave"), units.Bytes(r.MovedBytes), yesNo(r.Balanced), yesNo(r.Converged))
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

	b.WriteString("\nnodes (fill = utilization as % of average):\n")
	scale := 0.0
	for i := range r.Before {
		scale = max(scale, r.fill(r.Before[i].Utilization))
		if i < len(r.After) {
			scale = max(scale, r.fill(r.After[i].Utilization))
		}
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\tcapacity\tgroups\tsize\tbefore\t\tafter")
	for i, bu := range r.Before {
		au := bu
		if i < len(r.After) {
			au = r.After[i]
		}
		label := nodeLabel(bu.Node, bu.Name)
		if !au.Eligible {
			label += " (no balancing)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d -> %d\t%s -> %s\t%s\t%s\t%s\t%s\n", label, fnum(bu.Capacity),
			bu.Groups, au.Groups, units.Bytes(bu.Bytes), units.Bytes(au.Bytes),
			bar(r.fill(bu.Utilization), scale), r.pct(bu.Utilization),
			bar(r.fill(au.Utilization), scale), r.pct(au.Utilization))
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
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

func bar(f, scale float64) string {
	n := 0
	if scale > 0 {
		n = int(math.Round(f / scale * barWidth))
	}
	n = min(max(n, 0), barWidth)
	return "|" + strings.Repeat("#", n) + strings.Repeat(".", barWidth-n) + "|"
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
