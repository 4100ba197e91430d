package mover

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/units"
	"github.com/shardmover/shardmover/metadata"
)

// defaultDiskFactor is how many times the shard group's size the target
// must have free: the copy, its WAL, and the indexes built afterwards.
const defaultDiskFactor = 1.5

// freeDiskBytes measures the free space of the filesystem holding the
// target's data directory, where the shard tables go (the default
// tablespace). PostgreSQL has no SQL for it, so it runs df on the server
// through COPY FROM PROGRAM, inside a transaction that is rolled back. ok
// is false, with the reason in err, when the server will not run it
// (COPY FROM PROGRAM needs superuser or pg_execute_server_program).
func freeDiskBytes(ctx context.Context, c *pgx.Conn) (free int64, ok bool, err error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only probe
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE shardmover_df (line text) ON COMMIT DROP"); err != nil {
		return 0, false, err
	}
	// A server process runs in its data directory: "." needs no setting
	// (data_directory is readable only with pg_read_all_settings).
	if _, err := tx.Exec(ctx, "COPY shardmover_df FROM PROGRAM 'df -Pk -- .'"); err != nil {
		return 0, false, err
	}
	rows, err := tx.Query(ctx, "SELECT line FROM shardmover_df")
	if err != nil {
		return 0, false, err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, false, err
	}
	free, err = parseDF(lines)
	return free, err == nil, err
}

// parseDF reads the available bytes from POSIX `df -Pk` output: a header,
// then "filesystem 1024-blocks used available capacity mountpoint".
func parseDF(lines []string) (int64, error) {
	if len(lines) < 2 {
		return 0, fmt.Errorf("df printed %d lines", len(lines))
	}
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 6 {
		return 0, fmt.Errorf("df printed %q", lines[len(lines)-1])
	}
	kb, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || kb < 0 {
		return 0, fmt.Errorf("df printed %q", lines[len(lines)-1])
	}
	return kb * 1024, nil
}

// checkRoom refuses a move whose shard group would not fit on the target
// with the configured headroom, counting what other moves into the same
// target still have to copy (the free space already reflects what they
// copied). A target that will not report its free space is logged and let
// through.
func (e *Engine) checkRoom(ctx context.Context, m metadata.Move, size int64, dc *pgx.Conn, dstAddr string) error {
	factor := e.cfg.DiskFactor
	if factor < 0 {
		return nil
	}
	free, ok, err := freeDiskBytes(ctx, dc)
	if !ok {
		e.log.Warn("cannot measure free disk space on the target; moving without that check",
			zap.String("target", dstAddr), zap.Error(err))
		return nil
	}
	need := int64(math.Ceil(float64(size) * factor))
	others, err := e.cat.Moves(ctx, metadata.MoveFilter{ActiveOnly: true})
	if err != nil {
		return err
	}
	var pending int64
	for _, o := range others {
		if o.ID == m.ID || o.TargetGroup != m.TargetGroup {
			continue
		}
		switch p, _ := ParsePhase(string(o.Phase)); p {
		case Setup, Copying, Indexing:
			if left := o.BytesTotal - o.BytesCopied; left > 0 {
				pending += int64(math.Ceil(float64(left) * factor))
			}
		}
	}
	g := groupRef{int64(m.ColocationID), int64(m.ShardIndex)}
	switch {
	case free < need+pending && pending > 0:
		return invalidf("the target %s has %s free for its data directory; moving shard group %s (%s) needs about %s, and moves already copying there need %s more; free space there, wait for them, or choose another target",
			dstAddr, units.Bytes(free), g, units.Bytes(size), units.Bytes(need), units.Bytes(pending))
	case free < need:
		return invalidf("the target %s has %s free for its data directory, and moving shard group %s (%s) needs about %s; free space there or choose another target",
			dstAddr, units.Bytes(free), g, units.Bytes(size), units.Bytes(need))
	}
	return nil
}

// groupRef names a shard group as the CLI does: colocation:index.
type groupRef struct{ colocation, index int64 }

func (g groupRef) String() string { return fmt.Sprintf("%d:%d", g.colocation, g.index) }
