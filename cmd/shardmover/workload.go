package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
)

func newWorkloadCmd(g *globals) *cobra.Command {
	opts := workload.DefaultRunOptions()
	cmd := &cobra.Command{
		Use:   "workload",
		Short: "Run routed inserts, updates and deletes with a ledger, then check every acknowledged write",
		Long: "Run inserts, updates and deletes on github_events from --clients clients for --duration, keeping a\n" +
			"ledger of every acknowledged write, then check that the cluster holds exactly what was acknowledged.\n\n" +
			"On a compat cluster each statement is routed by the client: it goes to the shard table on the node the\n" +
			"metadata places the row on, and is retried after a metadata refresh when that shard is gone (42P01).\n" +
			"On a Citus cluster the statements are plain SQL on github_events and Citus routes them: even clients\n" +
			"connect to the coordinator, odd clients to the metadata-synced workers in turn. The check then reads\n" +
			"through the Citus coordinator, and also every shard on the node Citus's metadata places it on.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Clients < 1 {
				return usagef("--clients must be at least 1, got %d", opts.Clients)
			}
			if opts.Users < 1 {
				return usagef("--users must be at least 1, got %d", opts.Users)
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
			// Each invocation is a new run: its rows and its check are
			// apart from earlier runs' on the same cluster.
			if opts.RunID, err = workload.NextRunID(ctx, r); err != nil {
				return err
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
				lat := res.Summarize()
				if err := writeJSON(cmd.OutOrStdout(), map[string]any{"verdict": v, "errors": res.Errors,
					"flavor": r.Flavor().String(), "writes_by_node": res.Via,
					"ops_per_second": float64(res.Ops()) / res.Elapsed.Seconds(), "retries": res.Retries,
					"p50_ms": ms(lat.P50), "p99_ms": ms(lat.P99), "max_ms": ms(lat.Max),
					"writes_over_100ms": lat.Over100ms, "writes_over_1s": lat.Over1s}); err != nil {
					return err
				}
			} else {
				printVerdict(cmd, r, res, v)
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

func printVerdict(cmd *cobra.Command, r *workload.Router, res workload.RunResult, v workload.Verdict) {
	w := cmd.OutOrStdout()
	l := res.Ledger
	fmt.Fprintf(w, "workload: %d acknowledged writes in %s (%.0f/s): %d inserts, %d updates, %d deletes\n",
		res.Ops(), res.Elapsed.Round(time.Millisecond), float64(res.Ops())/res.Elapsed.Seconds(), l.Inserts, l.Updates, l.Deletes)
	lat := res.Summarize()
	fmt.Fprintf(w, "latency: p50 %.2f ms, p99 %.2f ms, max %.2f ms; %d writes over 100 ms, %d over 1 s; routing retries %d, metadata refreshes %d\n",
		ms(lat.P50), ms(lat.P99), ms(lat.Max), lat.Over100ms, lat.Over1s, res.Retries, res.Refreshes)
	if r.Flavor() == metadata.Citus {
		coord, _ := r.Entry(workload.Coordinator)
		addrs := make([]string, 0, len(res.Via))
		for a := range res.Via {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		parts := make([]string, 0, len(addrs))
		for _, a := range addrs {
			role := "worker"
			if a == coord.Addr() {
				role = "coordinator"
			}
			parts = append(parts, fmt.Sprintf("%s (%s) %d", a, role, res.Via[a]))
		}
		fmt.Fprintf(w, "routed by Citus; writes sent through %s\n", strings.Join(parts, ", "))
	}
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
