package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
)

func newSandboxCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "sandbox", Short: "Run a local multi-node PostgreSQL cluster for trying shardmover"}
	cmd.AddCommand(newSandboxUp(g), newSandboxDown(g), newSandboxStatus(g), newSandboxAddNode(g), newSandboxLoad(g))
	return cmd
}

func newSandboxUp(g *globals) *cobra.Command {
	cfg := sandbox.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start (or create) the sandbox: a coordinator and N workers on loopback",
		Long: "Start (or create) the sandbox: a coordinator and N workers on loopback.\n\n" +
			"By default the sandbox is a compat cluster (plain PostgreSQL, shardmover's catalogs). With --citus it is\n" +
			"a Citus cluster: every node preloads citus and has the extension, the coordinator is registered with\n" +
			"citus_set_coordinator_host and every worker with citus_add_node (metadata synced to the workers).\n" +
			"An existing sandbox keeps the flavor it was created with.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Dir = g.sandboxDir
			cfg.Logger = g.log
			if cfg.BasePort < 1024 || cfg.BasePort > 65000 {
				return usagef("--port must be between 1024 and 65000, got %d", cfg.BasePort)
			}
			ctx := cmd.Context()
			c, err := sandbox.Up(ctx, cfg)
			if errors.Is(err, sandbox.ErrNoCitus) {
				return usagef("sandbox up --citus: %v", err)
			}
			if err != nil {
				return err
			}
			if err := registerSandbox(ctx, g, c); err != nil {
				return err
			}
			return printSandbox(cmd, g, c)
		},
	}
	cmd.Flags().IntVar(&cfg.BasePort, "port", cfg.BasePort, "coordinator port; worker i uses port+i")
	cmd.Flags().IntVar(&cfg.Workers, "nodes", cfg.Workers, "number of workers besides the coordinator")
	cmd.Flags().BoolVar(&cfg.Citus, "citus", false, "create a Citus cluster (needs the Citus extension installed for the PostgreSQL server)")
	return cmd
}

func registerSandbox(ctx context.Context, g *globals, c *sandbox.Cluster) error {
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: c.Coordinator().DSN(), Logger: g.log})
	if err != nil {
		return err
	}
	defer cat.Close()
	return c.Register(ctx, cat)
}

func newSandboxDown(g *globals) *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the sandbox's servers (--purge also deletes its data)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := sandbox.Open(g.sandboxDir, g.log)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 2*time.Minute)
			defer cancel()
			if err := c.Down(ctx, purge); err != nil {
				return err
			}
			what := "stopped"
			if purge {
				what = "stopped and deleted"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sandbox in %s %s\n", g.sandboxDir, what)
			return nil
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the sandbox directory")
	return cmd
}

func newSandboxStatus(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the sandbox's nodes and whether each is running",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := sandbox.Open(g.sandboxDir, g.log)
			if err != nil {
				return err
			}
			return printSandbox(cmd, g, c)
		},
	}
}

func printSandbox(cmd *cobra.Command, g *globals, c *sandbox.Cluster) error {
	st := c.Status(cmd.Context())
	if g.output == "json" {
		return writeJSON(cmd.OutOrStdout(), map[string]any{"dir": c.Dir, "nodes": st})
	}
	t := newTable("NODE", "ADDRESS", "STATE", "DATA")
	for _, n := range st {
		state := "stopped"
		if n.Running {
			state = "running"
		}
		t.row(n.Name, n.Addr(), state, n.DataDir)
	}
	t.write(cmd.OutOrStdout())
	fmt.Fprintf(cmd.OutOrStdout(), "\ncoordinator: %s\n", c.Coordinator().DSN())
	return nil
}

func newSandboxAddNode(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "add-node",
		Short: "Start one more sandbox worker and register it (citus_add_node on a Citus sandbox)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := sandbox.Open(g.sandboxDir, g.log)
			if err != nil {
				return err
			}
			n, err := c.AddNode(cmd.Context())
			if err != nil {
				return err
			}
			if err := registerSandbox(cmd.Context(), g, c); err != nil {
				return err
			}
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), n)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "started and registered %s on %s\n", n.Name, n.Addr())
			return nil
		},
	}
}

func newSandboxLoad(g *globals) *cobra.Command {
	opts := workload.DefaultLoadOptions()
	shards := 32
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Create and distribute github_users and github_events, then load generated data through COPY",
		Long: "Create and distribute github_users and github_events (colocated by user_id), then load generated data\n" +
			"through COPY. On a compat cluster rows are copied straight into the shards the metadata names; on a\n" +
			"Citus cluster the tables are distributed with create_distributed_table and rows are copied through\n" +
			"the coordinator, which routes them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Users < 1 {
				return usagef("--users must be at least 1, got %d", opts.Users)
			}
			if opts.Events < 0 {
				return usagef("--events must not be negative, got %d", opts.Events)
			}
			if shards < 1 || shards > 128000 {
				return usagef("--shards must be between 1 and 128000, got %d", shards)
			}
			ctx := cmd.Context()
			cat, err := g.catalog(ctx)
			if err != nil {
				return err
			}
			defer cat.Close()
			if err := workload.Setup(ctx, cat, shards); err != nil {
				return err
			}
			r, err := workload.NewRouter(ctx, cat, 4)
			if err != nil {
				return err
			}
			defer r.Close()
			bar := newProgress(os.Stderr, g.log)
			start := time.Now()
			opts.Progress = func(table string, done, total int64) { bar.update(table, done, total) }
			res, err := workload.Load(ctx, r, opts)
			bar.finish()
			if err != nil {
				return err
			}
			el := time.Since(start)
			if g.output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"users": res.Users, "events": res.Events, "seconds": el.Seconds()})
			}
			via := ""
			if cat.Flavor() == metadata.Citus {
				via = " through the Citus coordinator"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "loaded %d users and %d events%s in %s (%.0f rows/s)\n",
				res.Users, res.Events, via, el.Round(time.Millisecond), float64(res.Users+res.Events)/el.Seconds())
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&opts.Users, "users", opts.Users, "number of github_users rows")
	f.Int64Var(&opts.Events, "events", opts.Events, "number of github_events rows")
	f.Uint64Var(&opts.Seed, "seed", opts.Seed, "generator seed (same seed, same data)")
	f.IntVar(&shards, "shards", shards, "shard count when the tables are distributed by this command")
	return cmd
}
