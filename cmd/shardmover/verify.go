package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/verify"
)

// errVerifyFailed is verify's "something does not match": exit code 1,
// after the list was printed.
var errVerifyFailed = errors.New("verify found problems")

func newVerifyCmd(g *globals) *cobra.Command {
	var (
		shard    int64
		group    string
		all      bool
		throttle string
	)
	cmd := &cobra.Command{
		Use:   "verify [--shard ID | --group C:I | --all] [--throttle RATE]",
		Short: "Check the catalogs against the nodes and, for a shard or group, its data against the old copy a move kept",
		Long: `verify checks, for the whole cluster: one placement per shard on an active node; hash ranges
covering the int32 space without gap or overlap; every shard table where its placement says
and nowhere else; no tables of unknown shards and no orphaned _moved_ copies; every shard with
the triggers, foreign keys, policies, statistics, storage parameters, access method and row-level
security the other shards of its table have.
With --shard or --group it also compares each shard's data (row count and an order-independent
checksum) with the fenced old copy a finished move left behind, and lists the first differing
primary keys. Writes made since that move also make them differ. --all (the default) checks the
catalogs only. Exit 0 when everything matches, 1 when not, 2 on bad input.`,
		Args: exactArgs(0, "verify takes flags only: --shard ID, --group COLOCATION:INDEX or --all"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := verify.Options{All: all}
			flags := cmd.Flags()
			if flags.Changed("shard") {
				if shard <= 0 {
					return usagef("--shard must be a positive shard id, got %d", shard)
				}
				opts.ShardID = shard
			}
			if flags.Changed("group") {
				k, err := verify.ParseGroup(group)
				if err != nil {
					return err
				}
				opts.Group = &k
			}
			if opts.ShardID == 0 && opts.Group == nil && !flags.Changed("all") {
				opts.All = true
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			if err := parseVerifyThrottle(throttle, &opts); err != nil {
				return err
			}
			ctx := cmd.Context()
			cat, err := g.catalog(ctx)
			if err != nil {
				return err
			}
			defer cat.Close()
			// A fence a dead mover left prepared holds its shards (on
			// compat even against reads): settled first, as status and
			// plan do, so that the reads below do not wait on it.
			settleOrphanedFences(ctx, g, cat)
			rep, err := verify.Run(ctx, cat, opts)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if g.output == "json" {
				if err := writeJSON(w, rep); err != nil {
					return err
				}
			} else {
				printVerify(cmd, rep)
			}
			if !rep.OK {
				return errVerifyFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&shard, "shard", 0, "verify this shard: catalogs, and its data against the old copy a move kept")
	f.StringVar(&group, "group", "", "verify every shard of this shard group, COLOCATION:INDEX")
	f.BoolVar(&all, "all", false, "verify the catalogs of the whole cluster (the default; compares no data)")
	f.StringVar(&throttle, "throttle", "", "read limit for the data comparison, e.g. 20MB/s or 5000rows/s (default: none)")
	return cmd
}

// parseVerifyThrottle reads --throttle as bytes/s (like move's) or rows/s.
func parseVerifyThrottle(s string, opts *verify.Options) error {
	t := strings.ToLower(strings.TrimSpace(s))
	if rest, ok := strings.CutSuffix(t, "rows/s"); ok {
		v, ok := parseSize(rest)
		if !ok || v <= 0 || strings.ContainsAny(rest, "bB") {
			return usagef("--throttle %q is not a rate: write it like 20MB/s or 5000rows/s", s)
		}
		opts.RowsPerSecond = v
		return nil
	}
	v, err := parseRate(s)
	if err != nil {
		return usagef("--throttle %q is not a rate: write it like 20MB/s or 5000rows/s", s)
	}
	opts.BytesPerSecond = v
	return nil
}

func printVerify(cmd *cobra.Command, rep verify.Report) {
	w := cmd.OutOrStdout()
	problems := rep.Catalog.Problems()
	fmt.Fprintf(w, "catalogs: %d shards on %d nodes checked, %d problem(s)\n", rep.Catalog.Shards, rep.Catalog.Nodes, len(problems))
	for _, f := range rep.Catalog.Findings {
		mark := "  ok   "
		if f.Problem {
			mark = "  FAIL "
		}
		fmt.Fprintf(w, "%s%s: %s\n", mark, f.Kind, f.Message)
	}
	if !rep.DataCompared {
		fmt.Fprintln(w, "data: not compared (give --shard or --group to compare a shard with the old copy a move kept)")
	} else {
		fmt.Fprintln(w, "data:")
		for _, s := range rep.Shards {
			mark := "  ok   "
			if s.Problem() {
				mark = "  FAIL "
			}
			fmt.Fprintf(w, "%sshard %d (%s): %s\n", mark, s.ShardID, s.Table, s.Message)
			for _, d := range s.Differing {
				fmt.Fprintf(w, "         %s key (%s)\n", d.What, d.Key)
			}
		}
	}
	if rep.OK {
		fmt.Fprintln(w, "verify: everything matches")
	} else {
		fmt.Fprintln(w, "verify: found problems (listed above)")
	}
}
