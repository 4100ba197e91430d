package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/internal/workload"
)

func newWorkloadCmd(g *globals) *cobra.Command {
	opts := workload.DefaultRunOptions()
	cmd := &cobra.Command{
		Use:   "workload",
		Short: "Run routed inserts, updates and deletes with a ledger, then check every acknowledged write",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Clients < 1 {
				return usagef("--clients must be at least 1, got %d", opts.Clients)
			}
			if opts.Duration <= 0 {
				return usagef("--duration must be positive, got %s", opts.Duration)
			}
			ctx := cmd.Context()
			cat, err := g.catalog(ctx)
			if err != nil {
				return err
			}
			defer cat.Close()
			r, err := workload.NewRouter(ctx, cat, int32(opts.Clients))
			if err != nil {
				return err
			}
			defer r.Close()
			if _, err := r.Cluster().Table(workload.EventsTable); err != nil {
				return usagef("github_events is not distributed here; run `shardmover sandbox load` first")
			}
			res, err := workload.Run(ctx, r, opts)
			if err != nil {
				return err
			}
			// Interrupted (Ctrl-C, SIGTERM) or not, check what was acknowledged.
			v, err := workload.Check(context.WithoutCancel(ctx), r, res.Ledger)
			if err != nil {
				return err
			}
			if g.output == "json" {
				if err := writeJSON(cmd.OutOrStdout(), map[string]any{"verdict": v, "errors": res.Errors,
					"ops_per_second": float64(res.Ops()) / res.Elapsed.Seconds(), "retries": res.Retries,
					"p50_ms": ms(workload.Percentile(res.Latencies, 50, time.Time{}, time.Time{})),
					"p99_ms": ms(workload.Percentile(res.Latencies, 99, time.Time{}, time.Time{}))}); err != nil {
					return err
				}
			} else {
				printVerdict(cmd, res, v)
			}
			if !v.OK() {
				return errors.New("the ledger check failed: acknowledged writes are missing or wrong (listed above)")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.Duration, "duration", opts.Duration, "how long to run")
	f.IntVar(&opts.Clients, "clients", opts.Clients, "concurrent clients")
	f.Uint64Var(&opts.Seed, "seed", opts.Seed, "random seed")
	f.Int64Var(&opts.Users, "users", opts.Users, "user ids to write for (1..N)")
	return cmd
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func printVerdict(cmd *cobra.Command, res workload.RunResult, v workload.Verdict) {
	w := cmd.OutOrStdout()
	l := res.Ledger
	fmt.Fprintf(w, "workload: %d acknowledged writes in %s (%.0f/s): %d inserts, %d updates, %d deletes\n",
		res.Ops(), res.Elapsed.Round(time.Millisecond), float64(res.Ops())/res.Elapsed.Seconds(), l.Inserts, l.Updates, l.Deletes)
	fmt.Fprintf(w, "latency: p50 %.2f ms, p99 %.2f ms; routing retries %d, metadata refreshes %d\n",
		ms(workload.Percentile(res.Latencies, 50, time.Time{}, time.Time{})), ms(workload.Percentile(res.Latencies, 99, time.Time{}, time.Time{})),
		res.Retries, res.Refreshes)
	if len(res.Errors) > 0 {
		keys := make([]string, 0, len(res.Errors))
		for k := range res.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "errors %s: %d\n", k, res.Errors[k])
		}
	}
	verdict := "PASS"
	if !v.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "ledger: %s: %d rows checked, %d in doubt; lost %d, resurrected %d, wrong value %d, duplicated %d, misplaced %d\n",
		verdict, v.Checked, v.InDoubt, v.Lost, v.Resurrected, v.WrongValue, v.Duplicated, v.Misplaced)
	for _, s := range v.Violations {
		fmt.Fprintln(w, "  "+s)
	}
}
