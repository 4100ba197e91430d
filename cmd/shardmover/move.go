package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/internal/units"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

func newMoveCmd(g *globals) *cobra.Command {
	var (
		shards   []int64
		to       string
		toNode   int32
		dryRun   bool
		throttle string
		maxWAL   maxWALFlag
		lim      = mover.DefaultLimits()
	)
	cmd := &cobra.Command{
		Use:   "move --shard ID (--to HOST:PORT | --to-node ID)",
		Short: "Move the shard group holding a shard to another node, online",
		Long:  "Move the shard group holding a shard to another node, online." + citusHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(shards) == 0 {
				return usagef("--shard is required: give the id of any shard of the group to move")
			}
			if i := slices.IndexFunc(shards, func(id int64) bool { return id <= 0 }); i >= 0 {
				return usagef("--shard must be a positive shard id, got %d; `shardmover status -o json` lists the shards", shards[i])
			}
			toGiven, toNodeGiven := cmd.Flags().Changed("to"), cmd.Flags().Changed("to-node")
			if toGiven == toNodeGiven {
				return usagef("give exactly one of --to host:port and --to-node ID")
			}
			if toGiven {
				if err := checkAddrFlag("--to", to); err != nil {
					return err
				}
			}
			if toNodeGiven && toNode <= 0 {
				return usagef("--to-node must be a positive node id, got %d; `shardmover node list` shows the nodes", toNode)
			}
			if err := checkLimits(lim); err != nil {
				return err
			}
			rate, err := parseRate(throttle)
			if err != nil {
				return err
			}
			lim.BytesPerSecond = rate
			if err := maxWAL.resolve(); err != nil {
				return err
			}
			ctx := cmd.Context()
			cat, err := g.catalog(ctx)
			if err != nil {
				return err
			}
			defer cat.Close()
			target, err := findNode(ctx, cat, to, toNode)
			if err != nil {
				return err
			}
			req := scheduler.MoveRequest{ShardIDs: shards, Target: target, Limits: lim, DryRun: dryRun,
				OnJob: func(job metadata.Job, moves []metadata.Move) {
					for _, m := range moves {
						fmt.Fprintf(cmd.ErrOrStderr(), "job %d: move %d: shard group %d:%d (shards %v) to %s\n",
							job.ID, m.ID, m.ColocationID, m.ShardIndex, m.ShardIDs, target.Addr())
					}
				}}
			out, err := scheduler.NewRunner(cat, maxWAL.apply(g.moverConfig()), nil).Move(ctx, req)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if dryRun {
				for _, s := range out.Specs {
					fmt.Fprintf(w, "preflight passed: shard group %s (shards %v, %s) can move to %s\n",
						s.Group.Key(), s.Group.ShardIDs, units.Bytes(s.Group.Bytes), target.Addr())
				}
				return nil
			}
			if g.output == "json" {
				if len(out.Moves) == 1 {
					return writeJSON(w, out.Moves[0])
				}
				return writeJSON(w, out.Moves)
			}
			for i, m := range out.Moves {
				fmt.Fprintf(w, "moved shard group %s (shards %v, %s) to %s; old shards are dropped by `shardmover cleanup` after the grace period\n",
					out.Specs[i].Group.Key(), m.ShardIDs, units.Bytes(m.BytesTotal), target.Addr())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64SliceVar(&shards, "shard", nil, "any shard id of the group to move (repeatable: several groups move as one job, within --concurrency and --per-node)")
	f.StringVar(&to, "to", "", "target node as host:port")
	f.Int32Var(&toNode, "to-node", 0, "target node id")
	f.BoolVar(&dryRun, "dry-run", false, "run the preflight checks only")
	f.StringVar(&throttle, "throttle", "", "copy bandwidth limit, e.g. 50MB/s (default: none)")
	registerLimits(cmd, &lim)
	maxWAL.register(cmd)
	return cmd
}

func findNode(ctx context.Context, cat *metadata.Catalog, addr string, id int32) (metadata.Node, error) {
	if addr != "" {
		return cat.NodeByAddr(ctx, addr)
	}
	nodes, err := cat.Nodes(ctx)
	if err != nil {
		return metadata.Node{}, err
	}
	for _, n := range nodes {
		if n.ID == id {
			return n, nil
		}
	}
	return metadata.Node{}, usagef("no node has id %d; `shardmover node list` shows the nodes", id)
}

// parseRate reads "50MB/s", "1GiB/s", "500KB/s" or a plain byte count.
func parseRate(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	t := strings.TrimSpace(s)
	if strings.HasSuffix(strings.ToLower(t), "/s") {
		t = t[:len(t)-2]
	}
	v, ok := parseSize(t)
	if !ok || v <= 0 {
		return 0, usagef("--throttle %q is not a rate: write it like 50MB/s or 1GiB/s", s)
	}
	return v, nil
}

// parseSize reads a byte count with an optional unit, in either case:
// "100MiB", "1GB", "512KB", "200kB", "1tib", "0". Units are bytes
// (KB = 1000, KiB = 1024), whatever their case.
func parseSize(s string) (int64, bool) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10}, {"tb", 1e12}, {"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3}, {"b", 1}}
	mult := int64(1)
	lower := strings.ToLower(t)
	for _, u := range units {
		if strings.HasSuffix(lower, u.suffix) {
			mult = u.mult
			t = t[:len(t)-len(u.suffix)]
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v < 0 || v*float64(mult) > 1<<62 {
		return 0, false
	}
	return int64(v * float64(mult)), true
}

// baseCostFlag is --base-cost of plan, rebalance and daemon.
type baseCostFlag struct{ raw string }

func (b *baseCostFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&b.raw, "base-cost", "", "by_disk_size: cost added to every shard group's bytes, like citus.rebalancer_by_disk_size_base_cost (default 100MiB)")
}

// apply sets o.BaseCost when the flag was given.
func (b *baseCostFlag) apply(o *scheduler.PlanOptions) error {
	if b.raw == "" {
		return nil
	}
	v, ok := parseSize(b.raw)
	if !ok {
		return usagef("--base-cost %q is not a size: write it like 100MiB, 1GB or 0", b.raw)
	}
	o.BaseCost = &v
	return nil
}

// maxWALFlag is --max-retained-wal of move, rebalance, drain and daemon.
type maxWALFlag struct {
	raw   string
	bytes int64
}

func (w *maxWALFlag) register(cmd *cobra.Command) {
	w.raw = "10GB"
	cmd.Flags().StringVar(&w.raw, "max-retained-wal", w.raw,
		"fail a move whose replication slot retains more WAL than this on the source (and never more than half of the source's free disk), e.g. 10GB or 512MiB")
}

// resolve parses the flag; it runs before any connection is made.
func (w *maxWALFlag) resolve() error {
	v, ok := parseSize(w.raw)
	if !ok || v <= 0 {
		return usagef("--max-retained-wal %q is not a size: write it like 10GB or 512MiB", w.raw)
	}
	w.bytes = v
	return nil
}

// apply sets the limit on a mover configuration.
func (w *maxWALFlag) apply(cfg mover.Config) mover.Config {
	if w.bytes > 0 {
		cfg.MaxRetainedWAL = w.bytes
	}
	return cfg
}

// moveDisplay shows live progress of moves: one redrawn line per move on a
// terminal, a log line every few seconds otherwise.
type moveDisplay struct {
	mu    sync.Mutex
	w     *os.File
	tty   bool
	last  map[int64]mover.Progress
	start map[int64]time.Time
	lines int
	shown time.Time
}

func newMoveDisplay(w *os.File) *moveDisplay {
	return &moveDisplay{w: w, tty: isTerminal(w), last: map[int64]mover.Progress{}, start: map[int64]time.Time{}}
}

func (d *moveDisplay) update(p mover.Progress) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.start[p.MoveID]; !ok {
		d.start[p.MoveID] = time.Now()
	}
	prev := d.last[p.MoveID]
	d.last[p.MoveID] = p
	phaseChanged := prev.Phase != p.Phase
	if !phaseChanged && time.Since(d.shown) < 500*time.Millisecond && d.tty {
		return
	}
	if !d.tty && !phaseChanged && time.Since(d.shown) < 5*time.Second {
		return
	}
	d.shown = time.Now()
	if !d.tty {
		fmt.Fprintln(d.w, d.line(p.MoveID))
		return
	}
	if d.lines > 0 {
		fmt.Fprintf(d.w, "\033[%dA", d.lines)
	}
	d.lines = 0
	ids := sortedIDs(d.last)
	done := 0
	for _, id := range ids {
		if d.last[id].Phase.Terminal() {
			done++
		}
		fmt.Fprint(d.w, d.line(id)+"\033[K\n")
		d.lines++
	}
	if len(ids) > 1 {
		frac := float64(done) / float64(len(ids))
		eta := ""
		if done > 0 && done < len(ids) {
			var first time.Time
			for _, t := range d.start {
				if first.IsZero() || t.Before(first) {
					first = t
				}
			}
			per := time.Since(first) / time.Duration(done)
			eta = " eta " + (per * time.Duration(len(ids)-done)).Round(time.Second).String()
		}
		fmt.Fprintf(d.w, "overall %s %d/%d moves ended%s\033[K\n", bar(frac, 30), done, len(ids), eta)
		d.lines++
	}
}

func (d *moveDisplay) line(id int64) string {
	p := d.last[id]
	el := time.Since(d.start[id]).Seconds()
	s := fmt.Sprintf("%s move %d %-11s", time.Now().Format(time.TimeOnly), id, p.Phase)
	switch {
	case p.Phase == mover.Copying && p.BytesTotal > 0:
		frac := float64(p.BytesDone) / float64(p.BytesTotal)
		rate := float64(p.BytesDone) / max(el, 0.001)
		s += fmt.Sprintf(" %s %3.0f%% %s/%s %s/s", bar(frac, 20), frac*100, units.Bytes(p.BytesDone), units.Bytes(p.BytesTotal), units.Bytes(int64(rate)))
		if rate > 0 {
			eta := time.Duration(float64(p.BytesTotal-p.BytesDone)/rate) * time.Second
			s += fmt.Sprintf(" eta %s", eta.Round(time.Second))
		}
	case p.BytesDone > 0:
		s += fmt.Sprintf(" copied %s", units.Bytes(p.BytesDone))
	}
	if p.Phase == mover.CatchingUp || p.Phase == mover.Cutover {
		s += fmt.Sprintf(" lag %s %s", units.Bytes(int64(p.LagBytes)), p.Lag.Round(time.Millisecond))
	}
	return s
}

func sortedIDs(m map[int64]mover.Progress) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && ids[j] < ids[j-1]; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
	return ids
}

// citusHelp ends the --help of every command that moves shards.
const citusHelp = `

On a Citus cluster (12 or later) the move cooperates with Citus: Citus keeps routing every
query, the placements flip on the coordinator and on every worker with metadata in one
two-phase commit, and Citus's own deferred cleanup drops the old shards. shardmover refuses
to start while Citus itself rebalances or moves shards. Citus offers no lock a client can
take to make its own moves wait, so do not start citus_rebalance_start,
citus_move_shard_placement or citus_rebalance_table_shards while shardmover moves: Citus's
move would win and shardmover's move of that group would fail, leaving the group where
Citus put it.`
