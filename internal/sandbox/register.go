package sandbox

import (
	"context"
	"errors"

	"github.com/shardmover/shardmover/metadata"
)

// Register installs the compat catalogs on the coordinator and registers
// every worker that is not yet a node (add-node and up both call it). On a
// Citus sandbox it installs shardmover's journal and adds every worker that
// is not yet in Citus's node catalog with citus_add_node.
func (c *Cluster) Register(ctx context.Context, cat *metadata.Catalog) error {
	if err := cat.Install(ctx); err != nil {
		return err
	}
	if cat.Flavor() == metadata.Citus {
		return c.setupCitus(ctx)
	}
	for _, n := range c.Workers() {
		_, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
		if err != nil && !errors.Is(err, metadata.ErrExists) {
			return err
		}
	}
	return nil
}
