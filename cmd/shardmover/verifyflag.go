package main

import (
	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/mover"
)

// verifyFlag is --verify and --verify-throttle of move, rebalance, drain and
// the daemon: compare each group on source and target before its cutover.
type verifyFlag struct {
	on       bool
	throttle string
	rate     int64
}

const verifyHelp = "before each cutover, compare the group's tables on the source and the target read at one replication position " +
	"(row counts, checksums, and the first differing keys) while the application keeps writing, and fail the move, " +
	"leaving the group on its source, on any difference. It costs, per move: one more temporary replication slot and " +
	"WAL sender on the source for a moment, a read of the whole group on both nodes, and a REPEATABLE READ snapshot " +
	"held open on both while it reads (vacuum waits for it); the applier pauses for the moment the slot takes, the writes never"

func (v *verifyFlag) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&v.on, "verify", false, verifyHelp)
	fl.StringVar(&v.throttle, "verify-throttle", "", "read rate of --verify on each node, e.g. 20MB/s (default: none)")
}

// resolve checks the flags without connecting.
func (v *verifyFlag) resolve() error {
	rate, err := parseRate(v.throttle)
	if err != nil {
		return usagef("--verify-throttle %q is not a rate: write it like 20MB/s", v.throttle)
	}
	if v.throttle != "" && !v.on {
		return usagef("--verify-throttle paces --verify: give --verify too")
	}
	v.rate = rate
	return nil
}

func (v *verifyFlag) apply(cfg mover.Config) mover.Config {
	cfg.Verify, cfg.VerifyBytesPerSecond = v.on, v.rate
	return cfg
}
