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
// reconnects after errors. A signal may stand for several changes, and one
// also comes each time listening (re)starts, so the receiver re-reads the
// catalog on every signal and misses nothing from then on. On Citus, whose
// catalog shardmover does not own, the channel never fires: callers keep
// polling, which they must do anyway.
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
			c.log.Debug("node catalog notifications lost; listening again", zap.String("error", redact(err)))
			signal() // changes may have been missed meanwhile
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return out
}

// listen holds one LISTEN connection until it fails or ctx ends. The
// connection is its own, not the pool's: it stays busy for as long as the
// watch runs, and a connection that has LISTENed must not be reused.
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
