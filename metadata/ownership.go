package metadata

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrPlacedThere: a table of a shard was not dropped because a placement of
// the shard points at the node group holding it: whatever created it, it is
// live now (on Citus, Citus's own move of the group may have put it there).
var ErrPlacedThere = errors.New("a placement of the shard points at the table")

// citusShareLock is the lock mode number lock_shard_metadata takes for
// ShareLock: it conflicts with the ExclusiveLock Citus's moves, splits and
// shardmover's decisions take before they change a placement, and not with
// the ShareLock of Citus-routed writes.
const citusShareLock = 5

// DropUnlessPlaced runs drop, which drops a table of shard on node group
// group, only while no placement of the shard points at that group, and
// returns ErrPlacedThere (drop not run) when one does. The check and the
// drop run inside one coordinator transaction that holds what every
// placement change takes first, so no placement can be pointed at the
// table between them: the catalog-write lock (shardmover's decisions) and,
// on Citus, the shard group's metadata lock in SHARE mode (Citus's own
// moves take it EXCLUSIVE before they flip). A shard the catalog no longer
// has (its table was dropped) has nothing to protect: drop runs.
func (c *Catalog) DropUnlessPlaced(ctx context.Context, shard int64, group int32, drop func(context.Context) error) error {
	return c.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+c.t("pg_dist_shard")+" WHERE shardid = $1)", shard).Scan(&exists); err != nil {
			return fmt.Errorf("read shard %d: %w", shard, err)
		}
		if exists && c.flavor == Citus {
			if _, err := tx.Exec(ctx, lockMetadataSQL, citusShareLock, []int64{shard}); err != nil {
				return fmt.Errorf("lock the metadata of shard %d: %w", shard, err)
			}
		}
		var placed bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+c.t("pg_dist_placement")+" WHERE shardid = $1 AND groupid = $2)", shard, group).Scan(&placed); err != nil {
			return fmt.Errorf("read the placements of shard %d: %w", shard, err)
		}
		if placed {
			return fmt.Errorf("%w: shard %d is placed on node group %d", ErrPlacedThere, shard, group)
		}
		return drop(ctx)
	})
}

// ShardIDOfTable reads the shard id from a shard table's name
// (<table>_<shardid>). A fenced old shard (<shard>_moved_<moveid>, see
// FencedName) is no shard table: ok is false, as for any other name.
func ShardIDOfTable(rel string) (id int64, ok bool) {
	if fencedRE.MatchString(rel) {
		return 0, false
	}
	i := strings.LastIndexByte(rel, '_')
	if i < 0 || i == len(rel)-1 || strings.Trim(rel[i+1:], "0123456789") != "" {
		return 0, false
	}
	id, err := strconv.ParseInt(rel[i+1:], 10, 64)
	return id, err == nil
}
