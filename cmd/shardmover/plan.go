package main

import (
	"fmt"
	"math"
	"os"

	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/planner"
	"github.com/shardmover/shardmover/scheduler"
)

func newPlanCmd(g *globals) *cobra.Command {
	opts := scheduler.DefaultPlanOptions()
	var (
		threshold, improvement float64
		capacity               []string
		snapshot               string
		baseCost               baseCostFlag
		rules                  ruleFlags
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Compute a rebalance plan (moves, reasons, before/after per node) without moving anything",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("threshold") {
				opts.Threshold = &threshold
			}
			if cmd.Flags().Changed("improvement-threshold") {
				opts.ImprovementThreshold = &improvement
			}
			if err := baseCost.apply(&opts); err != nil {
				return err
			}
			var err error
			if opts.Capacity, err = scheduler.ParseCapacity(capacity); err != nil {
				return err
			}
			if err := rules.apply(&opts); err != nil {
				return err
			}
			if err := checkLoadWindowFlag(cmd, opts.Strategy); err != nil {
				return err
			}
			if err := checkPlanFlags(opts); err != nil {
				return err
			}
			if snapshot != "" && opts.AllowUnmeasured {
				return usagef("--allow-unmeasured applies to a live cluster; a --snapshot file is planned as it was written")
			}
			var res planner.Result
			if snapshot != "" {
				res, err = planSnapshot(snapshot, opts)
			} else {
				res, err = planLive(cmd, g, opts)
			}
			if err != nil {
				return err
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			return res.Render(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Strategy, "strategy", opts.Strategy, strategyHelp)
	f.DurationVar(&opts.LoadWindow, "load-window", opts.LoadWindow, loadWindowHelp)
	f.Float64Var(&threshold, "threshold", 0, "balanced when every node is within (1 ± threshold) × average (default: the strategy's)")
	f.Float64Var(&improvement, "improvement-threshold", 0, "skip moves whose balance gain is small for their size (default: the strategy's)")
	baseCost.register(cmd)
	f.IntVar(&opts.MaxMoves, "max-moves", opts.MaxMoves, "most balancing moves; moves a drain, isolation or placement rule forces are not counted and always planned (unlike Citus's max_shard_moves, which counts them: a drain must empty its node)")
	f.IntVar(&opts.MaxPerNode, "per-node", opts.MaxPerNode, "moves one node may take part in at once (sets the waves)")
	f.BoolVar(&opts.DrainOnly, "drain-only", false, "only move groups off nodes that must be emptied")
	f.StringArrayVar(&opts.Drain, "drain", nil, "node host:port to empty (repeatable)")
	f.StringArrayVar(&capacity, "capacity", nil, "relative capacity host:port=N (repeatable)")
	f.Int64SliceVar(&opts.Exclude, "exclude", nil, "shard id whose group must not move (repeatable)")
	f.StringVar(&snapshot, "snapshot", "", "plan from a `shardmover status -o json` file instead of a live cluster")
	f.StringArrayVar(&opts.AddNodes, "add-node", nil, "simulate a node not yet added: host:port[=capacity] (repeatable)")
	f.BoolVar(&opts.AllowUnmeasured, "allow-unmeasured", false, allowUnmeasuredHelp)
	rules.register(cmd)
	return cmd
}

// checkPlanFlags checks plan's options before the cluster is read: what
// needs no cluster against an empty one, and the syntax of the rest.
func checkPlanFlags(opts scheduler.PlanOptions) error {
	for _, addr := range opts.Drain {
		if err := checkAddrFlag("--drain", addr); err != nil {
			return err
		}
	}
	for addr, c := range opts.Capacity {
		if err := checkAddrFlag("--capacity", addr); err != nil {
			return err
		}
		if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			return usagef("--capacity %s=%v: a capacity is a number of 0 or more", addr, c)
		}
	}
	for _, id := range opts.Exclude {
		if id <= 0 {
			return usagef("--exclude must be a positive shard id, got %d", id)
		}
	}
	empty := opts
	empty.Drain, empty.Capacity, empty.Exclude = nil, nil, nil
	_, err := scheduler.BuildInput(metadata.Status{SchemaVersion: 1}, empty)
	return err
}

// planSnapshot plans from a `shardmover status -o json` file, as written.
func planSnapshot(file string, opts scheduler.PlanOptions) (planner.Result, error) {
	f, err := os.Open(file)
	if err != nil {
		return planner.Result{}, usagef("--snapshot %s cannot be read: %v", file, err)
	}
	defer f.Close()
	st, err := metadata.ReadStatus(f)
	if err != nil {
		return planner.Result{}, err
	}
	in, err := scheduler.BuildInput(st, opts)
	if err != nil {
		return planner.Result{}, err
	}
	res, err := planner.Plan(in)
	if err != nil {
		return res, usagef("%v", err)
	}
	return res, nil
}

// planLive plans from the live cluster, as rebalance does
// (scheduler.Runner.Plan): a node that could not be measured makes it
// refuse unless --allow-unmeasured, and with --strategy by_load every
// group's load is measured over --load-window first.
func planLive(cmd *cobra.Command, g *globals, opts scheduler.PlanOptions) (planner.Result, error) {
	ctx := cmd.Context()
	cat, err := g.catalog(ctx)
	if err != nil {
		return planner.Result{}, err
	}
	defer cat.Close()
	// As status does: a fence a dead mover left prepared is settled first,
	// and each node's reads are bounded, so that a node whose shards a
	// live mover's fence holds is named unmeasured instead of hanging the
	// plan.
	settleOrphanedFences(ctx, g, cat)
	cat = cat.WithNodeTimeouts(statusLockWait, statusStatementWait)
	if isByLoad(opts.Strategy) {
		fmt.Fprintf(cmd.ErrOrStderr(), "measuring load for %s (--load-window)...\n", opts.LoadWindow)
	}
	cfg := mover.DefaultConfig()
	cfg.Logger = g.log
	return scheduler.NewRunner(cat, cfg, nil).Plan(ctx, opts)
}

// allowUnmeasuredHelp is the --allow-unmeasured flag's help of plan,
// rebalance, drain and the daemon.
const allowUnmeasuredHelp = "plan even when a node could not be measured (stopped, or refused the --node-conninfo credentials): its shard groups stay where they are and no move goes to or from it (default: refuse, naming the node)"

// isByLoad reports whether the --strategy value names by_load.
func isByLoad(strategy string) bool {
	s, err := planner.ParseStrategy(strategy)
	return err == nil && s == planner.ByLoad
}

// strategyHelp is the --strategy flag's help of plan, rebalance, drain and
// the daemon.
const strategyHelp = "by_disk_size, by_shard_count or by_load (measured reads and writes per shard group, see --load-window) (default: on Citus the cluster's default rebalance strategy from its strategy catalog, else by_disk_size as in Citus 12+)"

// loadWindowHelp is the --load-window flag's help.
const loadWindowHelp = "with --strategy by_load: how long to watch the nodes' table statistics (pg_stat_user_tables) before planning; a group's load is (4 × written rows + read rows) per second over it"

// checkLoadWindowFlag refuses --load-window without --strategy by_load,
// where it would do nothing. Its value is checked by scheduler.BuildInput.
func checkLoadWindowFlag(cmd *cobra.Command, strategy string) error {
	if cmd.Flags().Changed("load-window") && !isByLoad(strategy) {
		return usagef("--load-window applies only to --strategy by_load; add --strategy by_load or drop --load-window")
	}
	return nil
}

// ruleFlags are the placement-rule flags of plan, rebalance, drain and the
// daemon: --pin, --avoid, --isolate, --allow and the --rules file, merged
// into the plan options.
type ruleFlags struct {
	pin, avoid, isolate, allow []string
	file                       string
}

func (r *ruleFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&r.pin, "pin", nil, "keep a shard group (COLOCATION:INDEX or a shard id) only on these nodes: GROUP=host:port[,host:port...] (repeatable)")
	f.StringArrayVar(&r.avoid, "avoid", nil, "keep a shard group off these nodes: GROUP=host:port[,host:port...] (repeatable)")
	f.StringArrayVar(&r.isolate, "isolate", nil, "give a shard group (COLOCATION:INDEX or a shard id) a node of its own (repeatable)")
	f.StringArrayVar(&r.allow, "allow", nil, "place a distributed table's shard groups only on these nodes: TABLE=host:port[,host:port...], TABLE as schema.name or name (repeatable)")
	f.StringVar(&r.file, "rules", "", `placement rules file (JSON): {"pin": {GROUP: [host:port...]}, "avoid": {...}, "isolate": [GROUP...], "allow": {TABLE: [host:port...]}}; merged with the flags`)
}

// apply reads the flags and the rules file into o and checks their syntax;
// nothing connects. Whether the groups, tables and nodes exist is checked
// against the cluster by scheduler.BuildInput.
func (r *ruleFlags) apply(o *scheduler.PlanOptions) error {
	var err error
	if o.Pin, err = scheduler.ParseNodeRules("pin", r.pin); err != nil {
		return err
	}
	if o.Avoid, err = scheduler.ParseNodeRules("avoid", r.avoid); err != nil {
		return err
	}
	if o.Allow, err = scheduler.ParseNodeRules("allow", r.allow); err != nil {
		return err
	}
	o.Isolate = scheduler.IsolateRules(r.isolate)
	if r.file != "" {
		f, err := os.Open(r.file)
		if err != nil {
			return usagef("--rules %s cannot be read: %s", r.file, message(err))
		}
		defer f.Close()
		pin, avoid, isolate, allow, err := scheduler.ReadRules(f, r.file)
		if err != nil {
			return err
		}
		o.Pin, o.Avoid = append(o.Pin, pin...), append(o.Avoid, avoid...)
		o.Isolate, o.Allow = append(o.Isolate, isolate...), append(o.Allow, allow...)
	}
	return scheduler.CheckRules(*o)
}
