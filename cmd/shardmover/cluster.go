package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/internal/units"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

func newNodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Register and list nodes (compat clusters)"}
	var noShards bool
	add := &cobra.Command{
		Use:   "add HOST:PORT",
		Short: "Register a worker after checking it is reachable and has wal_level = logical",
		Args:  exactArgs(1, "give the node as host:port"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkAddrFlag("the node", args[0]); err != nil {
				return err
			}
			host, port, err := metadata.ParseAddr(args[0])
			if err != nil {
				return err
			}
			// The first worker registered makes a compat cluster.
			cat, err := g.openCatalog(cmd.Context())
			if err != nil {
				return err
			}
			defer cat.Close()
			opts := metadata.DefaultAddNodeOptions()
			opts.ShouldHaveShards = !noShards
			n, err := cat.AddNode(cmd.Context(), host, port, opts)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), n)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "registered %s as node %d (group %d)\n", n.Addr(), n.ID, n.GroupID)
			return nil
		},
	}
	add.Flags().BoolVar(&noShards, "no-shards", false, "register with shouldhaveshards = false")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the registered nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := g.catalog(cmd.Context())
			if err != nil {
				return err
			}
			defer cat.Close()
			nodes, err := cat.Nodes(cmd.Context())
			if err != nil {
				return err
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), nodes)
			}
			t := newTable("ID", "GROUP", "ADDRESS", "ROLE", "ACTIVE", "SHOULDHAVESHARDS")
			for _, n := range nodes {
				role := "worker"
				if n.IsCoordinator() {
					role = "coordinator"
				}
				t.row(n.ID, n.GroupID, n.Addr(), role, n.IsActive, n.ShouldHaveShards)
			}
			t.write(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.AddCommand(add, list)
	return cmd
}

func newTableCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "table", Short: "Distribute tables (compat clusters)"}
	var opts metadata.DistributeOptions
	create := &cobra.Command{
		Use:   "create TABLE --column COL [--shards N] [--colocate-with T|none]",
		Short: "Distribute an existing, empty coordinator table by hash, like create_distributed_table",
		Args:  exactArgs(1, "name the table to distribute"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Table = args[0]
			if opts.Column == "" {
				return usagef("--column is required: name the distribution column")
			}
			if opts.ShardCount < 0 || opts.ShardCount > 128000 {
				return usagef("--shards must be between 1 and 128000, got %d", opts.ShardCount)
			}
			cat, err := g.catalog(cmd.Context())
			if err != nil {
				return err
			}
			defer cat.Close()
			t, err := cat.CreateDistributedTable(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), t)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "distributed %s on %s into %d shards (colocation %d)\n", t.DisplayName(), t.Column, t.ShardCount, t.ColocationID)
			return nil
		},
	}
	create.Flags().StringVar(&opts.Column, "column", "", "distribution column")
	create.Flags().IntVar(&opts.ShardCount, "shards", 0, "shard count (default 32, or the colocated table's)")
	create.Flags().StringVar(&opts.ColocateWith, "colocate-with", "", "distributed table to colocate with, or none (default: an existing group with the same shard count and column type)")
	cmd.AddCommand(create)
	return cmd
}

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show nodes, what each holds, the distributed tables, and the WAL each shardmover slot retains",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cat, err := g.catalog(ctx)
			if err != nil {
				return err
			}
			defer cat.Close()
			// A fence a dead mover left prepared holds its shards locked
			// (on compat even reads wait): settled first, as every command
			// that touches the cluster does (docs/design.md 5.1).
			settleOrphanedFences(ctx, g, cat)
			// Each node's reads are bounded: a node whose shards are
			// locked (a live mover's fence) answers within statusLockWait
			// with an error, which the status then names.
			scat := cat.WithNodeTimeouts(statusLockWait, statusStatementWait)
			cl, err := scat.Snapshot(ctx, metadata.SnapshotOptions{})
			if err != nil {
				return err
			}
			st := scat.ClusterStatus(ctx, cl)
			slots, warns := mover.RetainedWAL(ctx, scat, cl.Nodes)
			st.Slots = slots
			st.Warnings = append(append([]string{}, st.Warnings...), warns...)
			st.NoteFences(scat.NodeFences(ctx, cl.Nodes, statusFenceRead))
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			printStatus(cmd, st)
			return nil
		},
	}
}

func printStatus(cmd *cobra.Command, st metadata.Status) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "cluster: %s, coordinator %s\n\n", st.Flavor, st.Coordinator)
	var total int64
	for _, n := range st.Nodes {
		total += n.Bytes
	}
	t := newTable("NODE", "ADDRESS", "ROLE", "SHARDS?", "GROUPS", "SHARDS", "BYTES", "SHARE OF DATA")
	for _, n := range st.Nodes {
		share := 0.0
		if total > 0 {
			share = float64(n.Bytes) / float64(total)
		}
		flag := "yes"
		if !n.ShouldHaveShards {
			flag = "no"
		}
		if !n.IsActive {
			flag += " (inactive)"
		}
		t.row(n.ID, n.Addr, n.Role, flag, n.ShardGroups, n.Shards, units.Bytes(n.Bytes), fmt.Sprintf("%s %3.0f%%", bar(share, 20), share*100))
	}
	t.write(w)
	fmt.Fprintln(w)
	tt := newTable("TABLE", "COLUMN", "TYPE", "SHARDS", "COLOCATION")
	for _, x := range st.Tables {
		tt.row(x.Name, x.Column, x.ColumnType, x.ShardCount, x.ColocationID)
	}
	tt.write(w)
	fmt.Fprintln(w)
	printSlots(w, st.Slots)
	for _, warn := range st.Warnings {
		fmt.Fprintln(w, "warning: "+warn)
	}
}

// printSlots lists the shardmover_* replication slots and the WAL each
// keeps on its node.
func printSlots(w io.Writer, slots []metadata.StatusSlot) {
	if len(slots) == 0 {
		fmt.Fprintln(w, "replication slots: no shardmover slot retains WAL on any node")
		return
	}
	var total int64
	t := newTable("SLOT", "NODE", "ADDRESS", "MOVE", "ACTIVE", "RETAINED WAL", "WAL STATUS")
	for _, s := range slots {
		move, retained := "-", "-"
		if s.MoveID > 0 {
			move = strconv.FormatInt(s.MoveID, 10)
		}
		if s.RetainedKnown {
			retained = units.Bytes(s.RetainedWALBytes)
			total += s.RetainedWALBytes
		}
		t.row(s.Name, s.NodeID, s.Addr, move, s.Active, retained, s.WALStatus)
	}
	t.write(w)
	fmt.Fprintf(w, "replication slots: %d, retaining %s of WAL in all\n", len(slots), units.Bytes(total))
}

// exactArgs is cobra.ExactArgs with a sentence that says what to give.
func exactArgs(n int, hint string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("expected %d argument(s), got %d: %s", n, len(args), hint)
		}
		if n == 1 && strings.TrimSpace(args[0]) == "" {
			return usagef("the argument is empty: %s", hint)
		}
		return nil
	}
}
