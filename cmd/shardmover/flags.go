package main

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// Flag values that need parsing beyond what cobra does, shared by several
// commands.

// parseRate reads "50MB/s", "1GiB/s", "500KB/s" or a plain byte count.
func parseRate(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	t := strings.TrimSpace(s)
	if strings.HasSuffix(strings.ToLower(t), "/s") {
		t = t[:len(t)-2]
	}
	v, ok := parseSize(t)
	if !ok || v <= 0 {
		return 0, usagef("--throttle %q is not a rate: write it like 50MB/s or 1GiB/s", s)
	}
	return v, nil
}

// parseSize reads a byte count with an optional unit, in either case:
// "100MiB", "1GB", "512KB", "200kB", "1tib", "0". Units are bytes
// (KB = 1000, KiB = 1024), whatever their case.
func parseSize(s string) (int64, bool) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"tib", 1 << 40}, {"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10}, {"tb", 1e12}, {"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3}, {"b", 1}}
	mult := int64(1)
	lower := strings.ToLower(t)
	for _, u := range units {
		if strings.HasSuffix(lower, u.suffix) {
			mult = u.mult
			t = t[:len(t)-len(u.suffix)]
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v < 0 || v*float64(mult) > 1<<62 {
		return 0, false
	}
	return int64(v * float64(mult)), true
}

// baseCostFlag is --base-cost of plan, rebalance and daemon.
type baseCostFlag struct{ raw string }

func (b *baseCostFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&b.raw, "base-cost", "", "by_disk_size: cost added to every shard group's bytes, like citus.rebalancer_by_disk_size_base_cost (default 100MiB)")
}

// apply sets o.BaseCost when the flag was given.
func (b *baseCostFlag) apply(o *scheduler.PlanOptions) error {
	if b.raw == "" {
		return nil
	}
	v, ok := parseSize(b.raw)
	if !ok {
		return usagef("--base-cost %q is not a size: write it like 100MiB, 1GB or 0", b.raw)
	}
	o.BaseCost = &v
	return nil
}

// maxWALFlag is --max-retained-wal of move, rebalance, drain and daemon.
type maxWALFlag struct {
	raw   string
	bytes int64
}

func (w *maxWALFlag) register(cmd *cobra.Command) {
	w.raw = "10GB"
	cmd.Flags().StringVar(&w.raw, "max-retained-wal", w.raw,
		"fail a move whose replication slot retains more WAL than this on the source (and never more than half of the source's free disk), e.g. 10GB or 512MiB")
}

// resolve parses the flag; it runs before any connection is made.
func (w *maxWALFlag) resolve() error {
	v, ok := parseSize(w.raw)
	if !ok || v <= 0 {
		return usagef("--max-retained-wal %q is not a size: write it like 10GB or 512MiB", w.raw)
	}
	w.bytes = v
	return nil
}

// apply sets the limit on a mover configuration.
func (w *maxWALFlag) apply(cfg mover.Config) mover.Config {
	if w.bytes > 0 {
		cfg.MaxRetainedWAL = w.bytes
	}
	return cfg
}
