package metadata

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// NodeChannel is the NOTIFY channel on which a compat coordinator
// announces every change to its node catalog (a statement trigger that
// Install creates).
const NodeChannel = "shardmover_nodes"

// WatchNodes returns a channel that receives a value soon after the node
// catalog changes, until ctx ends. It LISTENs on its own connection and
// reconnects after errors; a signal may stand for several changes, and
// spurious ones happen (after a reconnect, say), so the receiver re-reads
// the catalog. On Citus, whose catalog shardmover does not own, the channel
// never fires: callers keep polling, which they must do anyway.
func (c *Catalog) WatchNodes(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	if c.flavor == Citus {
		return out
	}
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		for ctx.Err() == nil {
			err := c.listen(ctx, signal)
			if ctx.Err() != nil {
				return
			}
			c.log.Debug("node catalog notifications lost; listening again", zap.Error(err))
			signal() // changes may have been missed meanwhile
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return out
}

// listen holds one LISTEN connection, of its own (not from the pool, whose
// connections the moves' leases need), until it fails or ctx ends.
func (c *Catalog) listen(ctx context.Context, signal func()) error {
	conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NodeChannel); err != nil {
		return err
	}
	signal() // listening now: whatever changed before is for a re-read
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal()
	}
}
