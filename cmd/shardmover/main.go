package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/shardmover/shardmover/internal/procs"
	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/planner"
)

// globals are the persistent flags.
type globals struct {
	coordinator  string
	nodeConninfo string
	sandboxDir   string
	output       string
	logLevel     string
	log          *zap.Logger
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &globals{}
	root := newRoot(g)
	// The mover's threads for Go code: half the CPUs, unless GOMAXPROCS
	// is set (internal/procs). Not for workload, which stands in for the
	// application and its many clients.
	if c, _, err := root.Find(os.Args[1:]); err != nil || c.Name() != "workload" {
		procs.Apply()
	}
	err := root.ExecuteContext(ctx)
	if g.log != nil {
		_ = g.log.Sync()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shardmover: "+scrub(message(err), g))
		os.Exit(exitCode(err))
	}
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "shardmover",
		Short:         "Online shard rebalancer for sharded PostgreSQL (Citus catalogs)",
		Long:          "shardmover plans, moves and rebalances shard groups of sharded PostgreSQL clusters online,\nusing logical replication and an atomic placement flip.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if g.output != "table" && g.output != "json" {
				return usagef("-o must be table or json, got %q", g.output)
			}
			lvl, err := zapcore.ParseLevel(g.logLevel)
			if err != nil {
				return usagef("--log-level must be debug, info, warn or error, got %q", g.logLevel)
			}
			cfg := zap.NewProductionConfig()
			cfg.Level = zap.NewAtomicLevelAt(lvl)
			cfg.Encoding = "console"
			cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
			cfg.DisableStacktrace = true
			cfg.DisableCaller = true
			g.log, err = cfg.Build()
			return err
		},
	}
	root.SetFlagErrorFunc(flagError)
	pf := root.PersistentFlags()
	// No default from the environment here: cobra prints a flag's default
	// in --help, and the connection string may hold a password.
	pf.StringVar(&g.coordinator, "coordinator", "",
		"coordinator connection string (env SHARDMOVER_COORDINATOR; default: the sandbox in --dir if running, else libpq's PG* environment)")
	pf.StringVar(&g.nodeConninfo, "node-conninfo", "", "extra 'k=v ...' connection parameters for connections to other nodes")
	pf.StringVar(&g.sandboxDir, "dir", ".sandbox", "sandbox directory")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&g.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	root.AddCommand(newSandboxCmd(g), newNodeCmd(g), newTableCmd(g), newStatusCmd(g), newWorkloadCmd(g),
		newPlanCmd(g), newMoveCmd(g), newRebalanceCmd(g), newDrainCmd(g), newDaemonCmd(g), newJobsCmd(g), newCleanupCmd(g), newVerifyCmd(g),
		newVersionCmd(g))
	strictArgs(root)
	return root
}

// catalog opens the coordinator's catalog with the resolution order of
// docs/design.md section 11, and refuses (exit 2, having created nothing)
// a database that is not a cluster's coordinator (metadata.ErrNotCluster).
// Only `node add`, which makes a compat cluster, opens one with
// openCatalog.
func (g *globals) catalog(ctx context.Context) (*metadata.Catalog, error) {
	cat, err := g.openCatalog(ctx)
	if err != nil {
		return nil, err
	}
	if err := cat.RequireCluster(ctx); err != nil {
		cat.Close()
		return nil, err
	}
	return cat, nil
}

// openCatalog opens the coordinator's catalog, cluster or not.
func (g *globals) openCatalog(ctx context.Context) (*metadata.Catalog, error) {
	dsn := g.coordinator
	if dsn == "" {
		dsn = os.Getenv("SHARDMOVER_COORDINATOR")
	}
	if err := checkConninfo(dsn, g.nodeConninfo); err != nil {
		return nil, err
	}
	if dsn == "" {
		if c, err := sandbox.Open(g.sandboxDir, g.log); err == nil {
			st := c.Status(ctx)
			if len(st) > 0 && st[0].Running {
				dsn = c.Coordinator().DSN()
			}
		}
	}
	return metadata.Open(ctx, metadata.Config{Coordinator: dsn, NodeConninfo: g.nodeConninfo, Logger: g.log})
}

// usageError is bad input: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitCode maps errors to the exit codes of docs/design.md section 11.
func exitCode(err error) int {
	var u *usageError
	switch {
	case errors.As(err, &u),
		errors.Is(err, metadata.ErrInvalid),
		errors.Is(err, metadata.ErrNotFound),
		errors.Is(err, metadata.ErrExists),
		errors.Is(err, metadata.ErrUnreachable),
		errors.Is(err, metadata.ErrGroupBusy),
		errors.Is(err, planner.ErrInvalidInput),
		errors.Is(err, sandbox.ErrBadConfig),
		errors.Is(err, sandbox.ErrPortInUse),
		errors.Is(err, sandbox.ErrNoBinaries),
		errors.Is(err, sandbox.ErrNotRunning):
		return 2
	}
	return 1
}

// optionFlags names the flag that sets each library option, so that a
// refused value (metadata.OptionError, which names the option as the
// library knows it) is reported under the flag the user typed.
var optionFlags = map[string]string{
	"KeepOldFor": "--keep-old-for", "Recheck": "--recheck", "Settle": "--settle", "Poll": "--poll",
	"Limits.Concurrency": "--concurrency", "Limits.PerNode": "--per-node",
	"Timezone": "--timezone", "Schedules": "--schedule", "Listen": "--listen", "node": "--node",
	"Strategy": "--strategy", "Threshold": "--threshold", "ImprovementThreshold": "--improvement-threshold",
	"BaseCost": "--base-cost", "MaxMoves": "--max-moves", "MaxPerNode": "--per-node",
	"AddNodes": "--add-node", "Drain": "--drain", "Capacity": "--capacity", "Exclude": "--exclude",
	"LoadWindow": "--load-window",
}

// message is the error as one line for people; sentinel prefixes that add
// nothing are dropped, and an option's name becomes its flag's.
func message(err error) string {
	msg := err.Error()
	var oe *metadata.OptionError
	if errors.As(err, &oe) {
		if flag, ok := optionFlags[oe.Option]; ok {
			msg = strings.Replace(msg, oe.Error(), flag+" "+oe.Msg, 1)
		}
	}
	for _, s := range []error{metadata.ErrInvalid, metadata.ErrUnreachable, metadata.ErrNotFound, metadata.ErrExists,
		sandbox.ErrBadConfig, sandbox.ErrPortInUse} {
		prefix := s.Error() + ": "
		if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
			msg = msg[len(prefix):]
		}
	}
	return msg
}

// moverConfig is the mover configuration of one-shot commands: the CLI's
// logger, and live progress on stderr.
func (g *globals) moverConfig() mover.Config {
	cfg := mover.DefaultConfig()
	cfg.Logger = g.log
	cfg.OnProgress = newMoveDisplay(os.Stderr).update
	return cfg
}
