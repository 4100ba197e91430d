package main

import (
	"context"
	"fmt"
	"slices"

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
		vf       verifyFlag
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
			if err := vf.resolve(); err != nil {
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
			out, err := scheduler.NewRunner(cat, vf.apply(maxWAL.apply(g.moverConfig())), nil).Move(ctx, req)
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
	vf.register(cmd)
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
