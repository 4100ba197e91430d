package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/planner"
	"github.com/shardmover/shardmover/scheduler"
)

// jobFlags are the flags shared by rebalance, drain and daemon.
type jobFlags struct {
	plan                   scheduler.PlanOptions
	limits                 mover.Limits
	bandwidth              string
	threshold, improvement float64
	baseCost               baseCostFlag
	maxWAL                 maxWALFlag
	verify                 verifyFlag
	rules                  ruleFlags
	recheck                int
}

func (f *jobFlags) register(cmd *cobra.Command, withPlan bool) {
	f.plan = scheduler.DefaultPlanOptions()
	f.limits = mover.DefaultLimits()
	fl := cmd.Flags()
	fl.StringVar(&f.plan.Strategy, "strategy", f.plan.Strategy, strategyHelp)
	fl.DurationVar(&f.plan.LoadWindow, "load-window", f.plan.LoadWindow, loadWindowHelp)
	if withPlan {
		fl.Float64Var(&f.threshold, "threshold", 0, "balanced when every node is within (1 ± threshold) × average (default: the strategy's)")
		fl.Float64Var(&f.improvement, "improvement-threshold", 0, "skip moves whose gain is small for their size (default: the strategy's)")
		f.baseCost.register(cmd)
		fl.IntVar(&f.recheck, "recheck", scheduler.DefaultRecheck, "after a rebalance that finished every move, measure the nodes again and rebalance once more when they are still outside the threshold, up to this many times (0: never); a copied group is smaller on its new node, having none of the old copy's dead rows")
		fl.IntVar(&f.plan.MaxMoves, "max-moves", f.plan.MaxMoves, "most balancing moves; moves a drain, isolation or placement rule forces are not counted and always planned (unlike Citus's max_shard_moves, which counts them: a drain must empty its node)")
	}
	fl.BoolVar(&f.plan.AllowUnmeasured, "allow-unmeasured", false, allowUnmeasuredHelp)
	f.rules.register(cmd)
	registerLimits(cmd, &f.limits)
	fl.StringVar(&f.bandwidth, "max-bandwidth", "", "total copy bandwidth, e.g. 100MB/s (default: none)")
	f.maxWAL.register(cmd)
	f.verify.register(cmd)
}

func (f *jobFlags) resolve(cmd *cobra.Command) error {
	if err := checkLimits(f.limits); err != nil {
		return err
	}
	if f.recheck < 0 {
		return usagef("--recheck must be 0 or more, got %d", f.recheck)
	}
	f.plan.MaxPerNode = f.limits.PerNode
	if err := checkLoadWindowFlag(cmd, f.plan.Strategy); err != nil {
		return err
	}
	if cmd.Flags().Changed("threshold") {
		f.plan.Threshold = &f.threshold
	}
	if cmd.Flags().Changed("improvement-threshold") {
		f.plan.ImprovementThreshold = &f.improvement
	}
	if err := f.baseCost.apply(&f.plan); err != nil {
		return err
	}
	if err := f.rules.apply(&f.plan); err != nil {
		return err
	}
	// The plan's options (strategy, thresholds, base cost, --max-moves, the
	// placement rules' syntax) are checked against an empty cluster now,
	// before connecting.
	if _, err := scheduler.BuildInput(metadata.Status{SchemaVersion: 1}, f.plan); err != nil {
		return err
	}
	rate, err := parseRate(f.bandwidth)
	if err != nil {
		return usagef("--max-bandwidth %q is not a rate: write it like 100MB/s", f.bandwidth)
	}
	f.limits.BytesPerSecond = rate
	if err := f.verify.resolve(); err != nil {
		return err
	}
	return f.maxWAL.resolve()
}

// registerLimits adds --concurrency, --per-node, --overlap and
// --groups-per-stream, the limits of every command that runs a job's moves
// (rebalance, drain, daemon, move, jobs resume), with mover.DefaultLimits
// as defaults.
func registerLimits(cmd *cobra.Command, lim *mover.Limits) {
	def := mover.DefaultLimits()
	lim.Concurrency, lim.PerNode, lim.Overlap, lim.GroupsPerStream = def.Concurrency, def.PerNode, def.Overlap, def.GroupsPerStream
	fl := cmd.Flags()
	fl.IntVar(&lim.Concurrency, "concurrency", def.Concurrency, "moves running at once in the cluster (with --overlap: moves copying at once)")
	fl.IntVar(&lim.PerNode, "per-node", def.PerNode, "moves one node may take part in at once, sending or receiving (with --overlap: copying moves)")
	fl.BoolVar(&lim.Overlap, "overlap", def.Overlap, "overlap the stages of moves: the next move prepares, and the last one finishes, while one copies; sooner for many small groups, and the application's writes slow down more")
	fl.IntVar(&lim.GroupsPerStream, "groups-per-stream", def.GroupsPerStream, "shard groups moving between the same two nodes that may share one replication stream and one cutover (1: each group its own)")
}

func checkLimits(lim mover.Limits) error {
	if lim.Concurrency < 1 {
		return usagef("--concurrency must be at least 1, got %d", lim.Concurrency)
	}
	if lim.PerNode < 1 {
		return usagef("--per-node must be at least 1, got %d", lim.PerNode)
	}
	if lim.GroupsPerStream < 1 {
		return usagef("--groups-per-stream must be at least 1, got %d", lim.GroupsPerStream)
	}
	return nil
}

func newRebalanceCmd(g *globals) *cobra.Command {
	var f jobFlags
	var dryRun, yes bool
	cmd := &cobra.Command{
		Use:   "rebalance",
		Short: "Plan and run a rebalance job online, moves in parallel within limits",
		Long:  "Plan and run a rebalance job online, moves in parallel within limits." + citusHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.resolve(cmd); err != nil {
				return err
			}
			ctx := cmd.Context()
			cat, err := g.catalog(ctx)
			if err != nil {
				return err
			}
			defer cat.Close()
			runner := scheduler.NewRunner(cat, f.verify.apply(f.maxWAL.apply(g.moverConfig())), nil)
			if dryRun {
				res, err := runner.Plan(ctx, f.plan)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return writeJSON(cmd.OutOrStdout(), res)
				}
				return res.Render(cmd.OutOrStdout())
			}
			var refused error
			req := scheduler.JobRequest{Kind: "rebalance", Plan: f.plan, Limits: f.limits, Recheck: f.recheck,
				Confirm: func(res planner.Result) bool {
					if g.output == "table" {
						_ = res.Render(cmd.ErrOrStderr())
					}
					if yes {
						return true
					}
					if !isTerminal(os.Stdin) {
						refused = usagef("the plan moves %d shard groups; run again with --yes to start it without a prompt", len(res.Moves))
						return false
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "start this rebalance (%d moves)? [y/N] ", len(res.Moves))
					line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
					if a := strings.TrimSpace(strings.ToLower(line)); a != "y" && a != "yes" {
						refused = usagef("not started: the answer was not yes")
						return false
					}
					return true
				},
				OnJob: func(j metadata.Job) { fmt.Fprintf(cmd.ErrOrStderr(), "job %d started\n", j.ID) },
			}
			out, err := runner.Run(ctx, req)
			if refused != nil {
				return refused
			}
			return reportJob(cmd, g, out, err)
		},
	}
	f.register(cmd, true)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and stop")
	cmd.Flags().BoolVar(&yes, "yes", false, "start without asking")
	return cmd
}

func reportJob(cmd *cobra.Command, g *globals, out scheduler.JobOutcome, err error) error {
	if out.Job == nil && err == nil {
		fmt.Fprintln(cmd.OutOrStdout(), "already balanced: nothing to move")
		return nil
	}
	if err != nil && out.Job == nil {
		return err
	}
	// The job, then those run after measuring again (--recheck).
	jobs := append([]scheduler.JobOutcome{out}, out.Rechecks...)
	last := jobs[len(jobs)-1]
	id := last.Job.ID
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted: job %d paused (%d moves done, %d unfinished); resume it with `shardmover jobs resume %d` or cancel it with `shardmover jobs cancel %d`",
			id, last.Result.Done, last.Result.Unfinished, id, id)
	}
	if g.output == "json" {
		if werr := writeJSON(cmd.OutOrStdout(), jobsJSON(jobs)); werr != nil {
			return werr
		}
	} else {
		for i, j := range jobs {
			if i > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "measured again after job %d: %d more moves planned\n", jobs[i-1].Job.ID, len(j.Plan.Moves))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %d: %d moves done, %d failed, %d cancelled, %d unfinished\n",
				j.Job.ID, j.Result.Done, j.Result.Failed, j.Result.Cancelled, j.Result.Unfinished)
		}
	}
	if err != nil && last.Result.Failed+last.Result.Unfinished > 0 {
		return fmt.Errorf("job %d finished with failed moves: %w; `shardmover jobs show %d` has the details (failed moves left their sources serving)", id, err, id)
	}
	return err
}

// jobsJSON is reportJob's JSON: the first job's id, result and plan as
// before, and the jobs run after measuring again under "rechecks".
func jobsJSON(jobs []scheduler.JobOutcome) map[string]any {
	one := func(j scheduler.JobOutcome) map[string]any {
		return map[string]any{"job_id": j.Job.ID, "result": j.Result, "plan": j.Plan}
	}
	doc := one(jobs[0])
	if len(jobs) > 1 {
		more := make([]map[string]any, 0, len(jobs)-1)
		for _, j := range jobs[1:] {
			more = append(more, one(j))
		}
		doc["rechecks"] = more
	}
	return doc
}

func newDrainCmd(g *globals) *cobra.Command {
	var f jobFlags
	var node string
	cmd := &cobra.Command{
		Use:   "drain --node HOST:PORT",
		Short: "Set shouldhaveshards = false on a node and move every shard group off it, as one job",
		Long:  "Set shouldhaveshards = false on a node and move every shard group off it, as one job." + citusHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				return usagef("--node is required: name the node to drain as host:port")
			}
			if err := checkAddrFlag("--node", node); err != nil {
				return err
			}
			if err := f.resolve(cmd); err != nil {
				return err
			}
			ctx := cmd.Context()
			cat, err := g.catalog(ctx)
			if err != nil {
				return err
			}
			defer cat.Close()
			out, err := scheduler.NewRunner(cat, f.verify.apply(f.maxWAL.apply(g.moverConfig())), nil).Drain(ctx, node, f.plan, f.limits)
			if out.Job == nil && err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%s holds no shard groups; it is marked shouldhaveshards = false\n", node)
				return nil
			}
			return reportJob(cmd, g, out, err)
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&node, "node", "", "node to drain, host:port")
	return cmd
}

func newDaemonCmd(g *globals) *cobra.Command {
	var f jobFlags
	cfg := scheduler.DefaultDaemonConfig()
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Keep the cluster balanced: rebalance after nodes are added and on cron schedules; serve metrics",
		Long: `Keep the cluster balanced: rebalance after nodes are added and on cron schedules; serve metrics.

One daemon per cluster leads (a session lock on the coordinator, with an epoch
recorded in shardmover.leader); the others stand by and take over when it loses
the lock. /readyz answers 200 with {"state":"leader"} or {"state":"standby"}, and
503 while the coordinator is unreachable or after the lock was lost.

` + scheduler.ScheduleHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.resolve(cmd); err != nil {
				return err
			}
			cfg.Plan, cfg.Limits, cfg.Recheck = f.plan, f.limits, f.recheck
			if err := checkListen(cfg.Listen); err != nil {
				return err
			}
			if cmd.Flags().Changed("poll") && cfg.Poll <= 0 {
				return usagef("--poll must be positive, got %s; write it like 1s or 500ms", cfg.Poll)
			}
			// Bad schedules, zones and limits are refused before connecting.
			if err := cfg.Validate(); err != nil {
				return err
			}
			// The daemon logs JSON lines at info.
			zc := zap.NewProductionConfig()
			zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
			if lvl, err := zapcore.ParseLevel(g.logLevel); err == nil && cmd.Flags().Changed("log-level") {
				zc.Level = zap.NewAtomicLevelAt(lvl)
			}
			log, err := zc.Build()
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			cfg.Mover = f.verify.apply(f.maxWAL.apply(mover.DefaultConfig()))
			cfg.Mover.Logger = log
			ctx := cmd.Context()
			cat, err := g.catalog(ctx)
			if err != nil {
				return err
			}
			defer cat.Close()
			d, err := scheduler.NewDaemon(cfg, cat)
			if err != nil {
				return err
			}
			err = d.Start(ctx)
			log.Info("daemon stopped")
			return err
		},
	}
	f.register(cmd, true)
	fl := cmd.Flags()
	fl.StringVar(&cfg.Listen, "listen", cfg.Listen, "HTTP address for /metrics, /healthz, /readyz, /status")
	fl.DurationVar(&cfg.Settle, "settle", cfg.Settle, "quiet time after a node is added before rebalancing")
	fl.DurationVar(&cfg.Poll, "poll", cfg.Poll, "how often the node catalog is read")
	fl.StringArrayVar(&cfg.Schedules, "schedule", nil, `cron schedule for rebalancing, e.g. "0 3 * * *" or "@every 6h" (repeatable; 6 fields for seconds)`)
	fl.StringVar(&cfg.Timezone, "timezone", "", "time zone of the schedules (IANA name; default local); wall-clock times, see daylight saving time above")
	fl.DurationVar(&cfg.KeepOldFor, "keep-old-for", cfg.KeepOldFor, "grace period before the old shards of finished moves are dropped")

	return cmd
}
