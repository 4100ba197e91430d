package mover_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// TestCitusJobPreflightDuringReferenceCopy: in a job into a node that lacks
// the reference tables, copying them (replicate_reference_tables(), which
// holds Citus's move locks on the coordinator) overlapped another move's
// preflight, whose "is Citus moving shards?" check then took shardmover's
// own copy for a Citus rebalance and failed that move for good. The job
// now copies them once before any move starts.
func TestCitusJobPreflightDuringReferenceCopy(t *testing.T) {
	c := newCitusCluster(t, 8, 200, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// A reference table large enough that copying it takes a while.
	_, err := c.cat.Pool().Exec(ctx, `INSERT INTO countries SELECT 'x' || g, repeat(md5(g::text), 8) FROM generate_series(1, 150000) g`)
	require.NoError(t, err)
	target := newestNode(t, c)

	var specs []metadata.MoveSpec
	eng := mover.New(testConfig(t), c.cat)
	for i := range 2 {
		g := citusGroup(t, c, "github_events", i)
		s, err := eng.Resolve(ctx, []mover.Request{{ShardID: g.ShardIDs[0], Target: target}})
		require.NoError(t, err)
		specs = append(specs, s...)
	}
	job, moves, err := eng.Schedule(ctx, "move", specs)
	require.NoError(t, err)

	// When the moves start, the reference table is on the new node
	// already: the job copied it before them, so no move's setup holds
	// Citus's move locks (copying it) while another move's preflight asks
	// whether Citus is moving shards.
	var before atomic.Int32
	before.Store(-1)
	cfg := testConfig(t)
	cfg.AfterPhase = func(id int64, p mover.Phase) error {
		if id != moves[0].ID || p != mover.Scheduled {
			return nil
		}
		var n int32
		err := c.cat.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_dist_placement pl JOIN pg_dist_shard s USING (shardid)
			WHERE s.logicalrelid = 'countries'::regclass AND pl.groupid = $1`, target.GroupID).Scan(&n)
		before.Store(n)
		return err
	}
	res, err := mover.New(cfg, c.cat).RunJob(ctx, job.ID, mover.Limits{Concurrency: 2, PerNode: 2})
	require.NoError(t, err)
	assert.Equal(t, mover.JobResult{Done: 2}, res)
	assert.Equal(t, int32(1), before.Load(), "the reference table was on the new node before the first move's preflight")
}

// newestNode is the node added last (the one citus_add_node gave the
// cluster in newCitusCluster).
func newestNode(t *testing.T, c *cluster) metadata.Node {
	t.Helper()
	nodes, err := c.cat.Nodes(context.Background())
	require.NoError(t, err)
	newest := nodes[0]
	for _, n := range nodes {
		if n.ID > newest.ID {
			newest = n
		}
	}
	return newest
}
