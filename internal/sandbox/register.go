package sandbox

import (
	"context"
	"errors"

	"github.com/shardmover/shardmover/metadata"
)

// Register installs the compat catalogs on the coordinator and registers
// every worker that is not yet a node (add-node and up both call it).
func (c *Cluster) Register(ctx context.Context, cat *metadata.Catalog) error {
	if err := cat.Install(ctx); err != nil {
		return err
	}
	for _, n := range c.Workers() {
		_, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
		if err != nil && !errors.Is(err, metadata.ErrExists) {
			return err
		}
	}
	return nil
}
