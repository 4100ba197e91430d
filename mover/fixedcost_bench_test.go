package mover_test

// BenchmarkMoveFixedCost: what one move costs besides its data, side by
// side with Citus's own move of other shard groups of the same tables, on
// one Citus cluster (github tables with 200 users and 2,000 events in 32
// colocated shards, about 0.1 MB per shard group on average, the events
// skewed towards a few users; two workers and a third added empty), with
// nothing else running.
//
//	go test ./mover -run '^$' -bench BenchmarkMoveFixedCost -benchtime=1x
//
// Each side first moves one group untimed (the first move onto the new
// worker also copies the reference tables there, and warms the caches);
// then each iteration moves fixedCostMoves shard groups, a different one
// each time, one after another, from their worker to the added one:
// shardmover with Engine.Run after Resolve, Preflight and Schedule (what
// `shardmover move` does), Citus with citus_move_shard_placement(...,
// 'force_logical'). Metrics, means over the moves: move_ms (the
// mean wall time of one move, from the request until it returned done),
// and for shardmover schedule_ms (the mean of what comes before the
// engine runs the move: Resolve's catalog snapshot, the refusals' checks,
// the journal rows; paid once per command, not per move of a rebalance),
// overhead_ms (the mean per move of the engine's time outside copying and
// catching up: preflight, setup, indexing, cutover and cleanup; the
// target is under 500 ms) with copy_ms and catchup_ms (the means of the
// other two).

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// fixedCostMoves: shard groups each side moves per iteration.
const fixedCostMoves = 4

func BenchmarkMoveFixedCost(b *testing.B) {
	c := newCitusCluster(b, 32, 200, 2000)
	target := c.newNode(b)
	ctx := context.Background()
	require.NoError(b, c.cat.InstallJournal(ctx))
	cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(b, err)
	// The github groups, each moved once, by either side.
	var groups []metadata.ShardGroup
	for _, g := range cl.Groups {
		if g.GroupID != target.GroupID && len(g.ShardIDs) == 2 {
			groups = append(groups, g)
		}
	}
	next := func(b *testing.B) metadata.ShardGroup {
		if len(groups) == 0 {
			b.Fatal("no shard group left to move: lower -benchtime")
		}
		g := groups[0]
		groups = groups[1:]
		return g
	}

	var phases phaseTimes
	cfg := mover.DefaultConfig()
	cfg.Logger = zap.NewNop()
	cfg.AfterPhase = phases.after
	eng := mover.New(cfg, c.cat)
	// moveOurs moves g with shardmover and returns how long the engine ran
	// it (Run); total is from the request on.
	moveOurs := func(b *testing.B, g metadata.ShardGroup) (total, running time.Duration) {
		start := time.Now()
		specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: g.ShardIDs[0], Target: target}})
		require.NoError(b, err)
		require.NoError(b, eng.Preflight(ctx, specs[0]))
		_, moves, err := eng.Schedule(ctx, "move", specs)
		require.NoError(b, err)
		run := time.Now()
		phases.begin(run)
		require.NoError(b, eng.Run(ctx, moves[0].ID))
		return time.Since(start), time.Since(run)
	}
	nodes := map[int32]metadata.Node{}
	all, err := c.cat.Nodes(ctx)
	require.NoError(b, err)
	for _, n := range all {
		nodes[n.GroupID] = n
	}
	moveCitus := func(b *testing.B, g metadata.ShardGroup) time.Duration {
		src := nodes[g.GroupID]
		start := time.Now()
		_, err := c.cat.Pool().Exec(ctx, `SELECT citus_move_shard_placement($1, $2, $3, $4, $5, 'force_logical')`,
			g.ShardIDs[0], src.Host, src.Port, target.Host, target.Port)
		require.NoError(b, err)
		return time.Since(start)
	}
	var warmOurs, warmCitus sync.Once

	b.Run("shardmover", func(b *testing.B) {
		warmOurs.Do(func() { moveOurs(b, next(b)) })
		b.ResetTimer()
		phases = phaseTimes{}
		var total, running time.Duration
		for range b.N {
			for range fixedCostMoves {
				t, r := moveOurs(b, next(b))
				total += t
				running += r
			}
		}
		n := float64(b.N * fixedCostMoves)
		b.ReportMetric(ms(total)/n, "move_ms")
		b.ReportMetric(ms(total-running)/n, "schedule_ms")
		b.ReportMetric(ms(running-phases.copying-phases.catchingUp)/n, "overhead_ms")
		b.ReportMetric(ms(phases.copying)/n, "copy_ms")
		b.ReportMetric(ms(phases.catchingUp)/n, "catchup_ms")
	})
	b.Run("citus", func(b *testing.B) {
		warmCitus.Do(func() { moveCitus(b, next(b)) })
		b.ResetTimer()
		var total time.Duration
		for range b.N {
			for range fixedCostMoves {
				total += moveCitus(b, next(b))
			}
		}
		b.ReportMetric(ms(total)/float64(b.N*fixedCostMoves), "move_ms")
	})
}

// phaseTimes adds up, over one move at a time, the time spent in copying
// and in catching_up (Config.AfterPhase runs as a move leaves a phase).
type phaseTimes struct {
	last                time.Time
	copying, catchingUp time.Duration
}

func (p *phaseTimes) begin(t time.Time) { p.last = t }

func (p *phaseTimes) after(_ int64, ph mover.Phase) error {
	now := time.Now()
	switch ph {
	case mover.Copying:
		p.copying += now.Sub(p.last)
	case mover.CatchingUp:
		p.catchingUp += now.Sub(p.last)
	}
	p.last = now
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
