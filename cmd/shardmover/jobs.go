package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/internal/units"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

func newJobsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "List, inspect, cancel and resume jobs recorded in the journal"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List recent jobs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := g.catalog(cmd.Context())
			if err != nil {
				return err
			}
			defer cat.Close()
			jobs, err := cat.Jobs(cmd.Context(), 50)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), nonNil(jobs))
			}
			t := newTable("JOB", "KIND", "STATE", "CREATED", "MOVES", "ERROR")
			for _, j := range jobs {
				moves, err := cat.Moves(cmd.Context(), metadata.MoveFilter{JobID: j.ID})
				if err != nil {
					return err
				}
				t.row(j.ID, j.Kind, j.State, j.CreatedAt.Format(time.DateTime), movesSummary(moves), j.Error)
			}
			t.write(cmd.OutOrStdout())
			return nil
		},
	}
	show := &cobra.Command{
		Use:   "show JOB",
		Short: "Show a job's moves with their phases, progress and history",
		Args:  exactArgs(1, "give the job id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			cat, err := g.catalog(cmd.Context())
			if err != nil {
				return err
			}
			defer cat.Close()
			job, err := cat.Job(cmd.Context(), id)
			if err != nil {
				return err
			}
			moves, err := cat.Moves(cmd.Context(), metadata.MoveFilter{JobID: id})
			if err != nil {
				return err
			}
			if g.output == "json" {
				type moveWithLog struct {
					metadata.Move
					History []metadata.MoveLog `json:"history"`
				}
				out := struct {
					Job   metadata.Job  `json:"job"`
					Moves []moveWithLog `json:"moves"`
				}{Job: job, Moves: []moveWithLog{}}
				for _, m := range moves {
					h, err := cat.MoveHistory(cmd.Context(), m.ID)
					if err != nil {
						return err
					}
					out.Moves = append(out.Moves, moveWithLog{m, h})
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "job %d (%s): %s, created %s\n", job.ID, job.Kind, job.State, job.CreatedAt.Format(time.DateTime))
			if job.Error != "" {
				fmt.Fprintf(w, "error: %s\n", job.Error)
			}
			t := newTable("MOVE", "STREAM", "SHARDS", "FROM GROUP", "TO GROUP", "PHASE", "COPIED", "ATTEMPTS", "ERROR")
			for _, m := range moves {
				t.row(m.ID, m.StreamID(), fmt.Sprint(m.ShardIDs), m.SourceGroup, m.TargetGroup, m.Phase,
					units.Bytes(m.BytesCopied)+"/"+units.Bytes(m.BytesTotal), m.Attempts, m.Error)
			}
			t.write(w)
			return nil
		},
	}
	cancel := &cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel a job's unfinished moves (moves past their cutover decision complete instead)",
		Args:  exactArgs(1, "give the job id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return jobAction(cmd, g, args[0], func(ctx context.Context, r *scheduler.Runner, id int64) (scheduler.JobRun, error) {
				return r.CancelJob(ctx, id)
			})
		},
	}
	var (
		lim      mover.Limits
		throttle string
	)
	resume := &cobra.Command{
		Use:   "resume JOB",
		Short: "Resume a job's unfinished moves from their journal phase",
		Args:  exactArgs(1, "give the job id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkLimits(lim); err != nil {
				return err
			}
			rate, err := parseRate(throttle)
			if err != nil {
				return err
			}
			lim.BytesPerSecond = rate
			return jobAction(cmd, g, args[0], func(ctx context.Context, r *scheduler.Runner, id int64) (scheduler.JobRun, error) {
				return r.ResumeJob(ctx, id, lim)
			})
		},
	}
	registerLimits(resume, &lim)
	resume.Flags().StringVar(&throttle, "throttle", "", "copy bandwidth limit shared by the job's copies, e.g. 50MB/s (default: none)")
	cmd.AddCommand(list, show, cancel, resume)
	return cmd
}

// jobAction runs `jobs cancel` or `jobs resume` through the scheduler and
// prints each move that was unfinished with its phase now.
func jobAction(cmd *cobra.Command, g *globals, arg string, fn func(context.Context, *scheduler.Runner, int64) (scheduler.JobRun, error)) error {
	id, err := parseID(arg)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	cat, err := g.catalog(ctx)
	if err != nil {
		return err
	}
	defer cat.Close()
	out, err := fn(ctx, scheduler.NewRunner(cat, g.moverConfig(), nil), id)
	if out.Job.ID == 0 {
		return err // the job could not be read
	}
	w := cmd.OutOrStdout()
	for _, m := range out.Moves {
		switch {
		case m.Held && cmd.Name() == "resume":
			// The error names it.
		case m.PastDecision && cmd.Name() == "cancel" && m.Phase == metadata.PhaseDone:
			fmt.Fprintf(w, "move %d: done (past its decision: it completed instead)\n", m.ID)
		case m.PastDecision && cmd.Name() == "cancel" && !m.Terminal():
			fmt.Fprintf(w, "move %d: past its decision: resume the job to finish it\n", m.ID)
		default:
			fmt.Fprintf(w, "move %d: %s\n", m.ID, m.Phase)
		}
	}
	if len(out.Moves) == 0 && err == nil {
		fmt.Fprintf(w, "job %d has no unfinished moves\n", id)
	}
	return err
}

func movesSummary(moves []metadata.Move) string {
	counts := map[string]int{}
	for _, m := range moves {
		counts[string(m.Phase)]++
	}
	s := fmt.Sprintf("%d", len(moves))
	for _, p := range metadata.TerminalPhases {
		if counts[string(p)] > 0 {
			s += fmt.Sprintf(" %s:%d", p, counts[string(p)])
		}
	}
	return s
}

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("%q is not a job id (a positive number; `shardmover jobs list` shows them)", s)
	}
	return id, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func newCleanupCmd(g *globals) *cobra.Command {
	opts := mover.SweepOptions{KeepOldFor: 10 * time.Minute}
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Drop old shards past their grace period and anything moves left behind",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.KeepOldFor < 0 {
				return usagef("--keep-old-for must not be negative, got %s", opts.KeepOldFor)
			}
			cat, err := g.catalog(cmd.Context())
			if err != nil {
				return err
			}
			defer cat.Close()
			cfg := mover.DefaultConfig()
			cfg.Logger = g.log
			rep, err := mover.New(cfg, cat).Sweep(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if g.output == "json" {
				rep.Dropped, rep.Kept = nonNil(rep.Dropped), nonNil(rep.Kept)
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			verb := "dropped"
			if opts.DryRun {
				verb = "would drop"
			}
			w := cmd.OutOrStdout()
			for _, it := range rep.Dropped {
				fmt.Fprintf(w, "%s %s %s on %s (%s)\n", verb, it.Object, it.Name, it.Node, it.Why)
			}
			for _, it := range rep.Kept {
				fmt.Fprintf(w, "kept %s %s on %s (%s)\n", it.Object, it.Name, it.Node, it.Why)
			}
			if len(rep.Dropped)+len(rep.Kept) == 0 {
				fmt.Fprintln(w, "nothing to clean up")
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&opts.KeepOldFor, "keep-old-for", opts.KeepOldFor, "grace period before old shards of finished moves are dropped")
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "list what would be dropped")
	return cmd
}
