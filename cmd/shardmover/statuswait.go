package main

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// How long `status` lets one node's statement wait: for a lock (a
// prepared fence holds the shards it moves), and in all (measuring every
// shard of a node holding many takes a while); and how long it reads a
// node's prepared fences.
const (
	statusLockWait      = 2 * time.Second
	statusStatementWait = time.Minute
	statusFenceRead     = 10 * time.Second
)

// settleOrphanedFences settles, by the recovery rule, the fences a dead
// mover left prepared (mover.Engine.SettleOrphans), within a bound: a
// failure is only logged, the command goes on.
func settleOrphanedFences(ctx context.Context, g *globals, cat *metadata.Catalog) {
	cfg := mover.DefaultConfig()
	cfg.Logger = g.log
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := mover.New(cfg, cat).SettleOrphans(sctx, mover.OrphanAge); err != nil {
		g.log.Warn("settling the fences of stopped movers failed", zap.Error(err))
	}
}
