package mover_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/reliability"
	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	verifypkg "github.com/shardmover/shardmover/verify"
)

// streamLimits lets up to 8 groups of a pair ride one stream.
var streamLimits = mover.Limits{Concurrency: 1, PerNode: 1, GroupsPerStream: 8}

// groupsOn returns the indexes (in the snapshot's order) of the first n
// shard groups placed on node group src, skipping those in skip.
func groupsOn(t *testing.T, c *cluster, src int32, n int, skip map[int]bool) []int {
	t.Helper()
	cl, err := c.cat.Snapshot(context.Background(), metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	var out []int
	for i, g := range cl.Groups {
		if g.GroupID == src && !skip[i] && len(out) < n {
			out = append(out, i)
		}
	}
	require.Len(t, out, n, "groups on node group %d", src)
	return out
}

// holders returns the node groups that hold shard groups, in the order of
// the first group each holds.
func holders(t *testing.T, c *cluster) []int32 {
	t.Helper()
	cl, err := c.cat.Snapshot(context.Background(), metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	var out []int32
	for _, g := range cl.Groups {
		if !slices.Contains(out, g.GroupID) {
			out = append(out, g.GroupID)
		}
	}
	return out
}

// scheduleJob schedules one job moving the groups (snapshot indexes) to
// target.
func scheduleJob(t *testing.T, c *cluster, eng *mover.Engine, groups []int, target metadata.Node) (metadata.Job, []metadata.Move) {
	t.Helper()
	return scheduleShards(t, eng, "rebalance", groupShards(t, c, groups), target)
}

// groupShards returns a shard of each group (snapshot indexes).
func groupShards(t *testing.T, c *cluster, groups []int) []int64 {
	t.Helper()
	cl, err := c.cat.Snapshot(context.Background(), metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	out := make([]int64, len(groups))
	for i, g := range groups {
		out[i] = cl.Groups[g].ShardIDs[0]
	}
	return out
}

// scheduleShards schedules one job of kind moving the groups of shards to
// target.
func scheduleShards(t *testing.T, eng *mover.Engine, kind string, shards []int64, target metadata.Node) (metadata.Job, []metadata.Move) {
	t.Helper()
	ctx := context.Background()
	reqs := make([]mover.Request, len(shards))
	for i, s := range shards {
		reqs[i] = mover.Request{ShardID: s, Target: target}
	}
	specs, err := eng.Resolve(ctx, reqs)
	require.NoError(t, err)
	job, moves, err := eng.Schedule(ctx, kind, specs)
	require.NoError(t, err)
	return job, moves
}

// jobMoves reads a job's moves, by id.
func jobMoves(t *testing.T, c *cluster, job int64) []metadata.Move {
	t.Helper()
	ms, err := c.cat.Moves(context.Background(), metadata.MoveFilter{JobID: job})
	require.NoError(t, err)
	return ms
}

// assertPlaced checks that each group (snapshot index) is placed on node
// group group.
func assertPlaced(t *testing.T, c *cluster, groups []int, group int32) {
	t.Helper()
	cl, err := c.cat.Snapshot(context.Background(), metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	for _, i := range groups {
		assert.Equal(t, group, cl.Groups[i].GroupID, "shard group %s", cl.Groups[i].Key())
	}
}

// tableExists reports whether the qualified table exists on node n.
func tableExists(t *testing.T, c *cluster, n metadata.Node, qualified string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := c.cat.ConnectNode(ctx, n.Host, n.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	id, err := metadata.ParseQualifiedName(qualified)
	require.NoError(t, err)
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", id.Sanitize()).Scan(&ok))
	return ok
}

// assertNoCopy checks that none of the tables of cancelled move m is on
// target.
func assertNoCopy(t *testing.T, c *cluster, target metadata.Node, m metadata.Move) {
	t.Helper()
	for _, tbl := range m.ShardTables {
		assert.False(t, tableExists(t, c, target, tbl), "the cancelled group's copy %s is dropped from the target", tbl)
	}
}

// TestStreamUnderWorkload moves three groups from each of the two workers
// to the new node in one job, the groups of each pair riding one stream,
// while 8 clients write, with verify before cutover on: every move is
// done, one slot per pair was made, each stream was verified equal before
// its cutover, the ledger holds, and each group's old copy is recorded
// under its own move.
func TestStreamUnderWorkload(t *testing.T) {
	c := newCluster(t, 16, 400, 6000)
	target := c.newNode(t)
	ctx := context.Background()
	srcs := holders(t, c)
	require.Len(t, srcs, 2)
	a := groupsOn(t, c, srcs[0], 3, nil)
	b := groupsOn(t, c, srcs[1], 3, nil)
	groups := append(slices.Clone(a), b...)

	cfg := testConfig(t)
	cfg.Verify = true
	slots := map[int64]int{}
	cfg.AfterPhase = func(id int64, p mover.Phase) error {
		if p == mover.Setup {
			slots[id]++
		}
		return nil
	}
	eng := mover.New(cfg, c.cat)
	bg := startWorkload(c, 8, 400, 0)
	time.Sleep(300 * time.Millisecond)
	job, _ := scheduleJob(t, c, eng, groups, target)
	res, err := eng.RunJob(ctx, job.ID, streamLimits)
	require.NoError(t, err)
	assert.Equal(t, mover.JobResult{Done: 6}, res)
	time.Sleep(300 * time.Millisecond)
	verify(t, c, bg.stop(t))
	assertPlaced(t, c, groups, target.GroupID)

	moves := jobMoves(t, c, job.ID)
	leads := map[int64][]int64{}
	for _, m := range moves {
		assert.Equal(t, "done", string(m.Phase))
		assert.True(t, m.CutoverCommitted)
		leads[m.StreamID()] = append(leads[m.StreamID()], m.ID)
	}
	assert.Len(t, leads, 2, "one stream per source and target: %v", leads)
	for lead, members := range leads {
		assert.Len(t, members, 3, "stream of move %d", lead)
		assert.Equal(t, 1, slots[lead], "the stream of move %d was set up once", lead)
	}
	assert.Len(t, slots, 2, "only the leads set anything up: %v", slots)
	for lead := range leads {
		hist, err := c.cat.MoveHistory(ctx, lead)
		require.NoError(t, err)
		verified := false
		for _, h := range hist {
			if h.To == "cutover" {
				verified = verified || strings.Contains(h.Message, "verified equal at") && strings.Contains(h.Message, "(6 tables,")
			}
		}
		assert.True(t, verified, "the stream of move %d was verified, all 6 tables, before its cutover: %v", lead, hist)
	}

	// Each group's old copy stays on its source, fenced under its stream's
	// name, recorded under its own move.
	kept, err := c.cat.KeptOldCopies(ctx)
	require.NoError(t, err)
	cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	for _, m := range moves {
		key := metadata.ShardGroup{ColocationID: m.ColocationID, Index: m.ShardIndex}.Key()
		assert.Equal(t, []int32{m.SourceGroup}, kept[key], "old copy of group %s", key)
		src, ok := cl.NodeByGroup(m.SourceGroup)
		require.True(t, ok)
		for _, tbl := range m.ShardTables {
			id, err := metadata.ParseQualifiedName(tbl)
			require.NoError(t, err)
			fenced := metadata.QualifiedName(append(id[:len(id)-1:len(id)-1], metadata.FencedName(id[len(id)-1], m.StreamID())))
			assert.True(t, tableExists(t, c, src, fenced), "fenced old copy %s on the source", fenced)
		}
		// verify --group finds each group's old copy through its own move.
		rep, err := verifypkg.Run(ctx, c.cat, verifypkg.Options{Group: &verifypkg.GroupKey{ColocationID: m.ColocationID, Index: m.ShardIndex}})
		require.NoError(t, err)
		require.Len(t, rep.Shards, len(m.ShardIDs))
		for _, sr := range rep.Shards {
			assert.True(t, sr.Compared, "verify compared shard %d with its old copy: %s", sr.ShardID, sr.Message)
			assert.Equal(t, m.ID, sr.MoveID, "shard %d's old copy is move %d's", sr.ShardID, m.ID)
		}
	}
}

// streamKillCase records a case of TestStreamKilledAtEveryPhase (point as
// killCase's).
func streamKillCase(t *testing.T, point string) {
	t.Helper()
	where := "after phase " + point
	if step, ok := strings.CutPrefix(point, "cutover:"); ok {
		where = "cutover step " + step
	}
	faultCase(t, reliability.FamilyProcessKill, "mover of a two-group stream killed", where,
		"a new mover recovered the stream and finished both of its moves")
}

// TestStreamKilledAtEveryPhase kills the stream's run after each phase and
// at each step of the cutover, under a workload; a new engine recovers
// and resumes the job, and every group of the stream ends on the target
// with nothing lost.
func TestStreamKilledAtEveryPhase(t *testing.T) {
	c := newCluster(t, 32, 300, 3000)
	target := c.newNode(t)
	srcs := holders(t, c)
	killPoints := []string{"scheduled", "preflight", "setup", "copying", "indexing", "catching_up",
		"cutover:locked", "cutover:caught_up", "cutover:prepared", "cutover:decided", "cutover"}
	used := map[int]bool{}
	for i, point := range killPoints {
		t.Run(point, func(t *testing.T) {
			streamKillCase(t, point)
			ctx := context.Background()
			groups := groupsOn(t, c, srcs[i%2], 2, used)
			for _, g := range groups {
				used[g] = true
			}
			bg := startWorkload(c, 4, 300, uint8(i))
			killed := false
			kill := func(at string) error {
				if !killed && at == point {
					killed = true
					return errors.New("kill")
				}
				return nil
			}
			cfg := testConfig(t)
			cfg.AfterPhase = func(_ int64, p mover.Phase) error { return kill(p.String()) }
			cfg.CutoverStep = func(_ int64, step string) error { return kill("cutover:" + step) }
			job, _ := scheduleJob(t, c, mover.New(cfg, c.cat), groups, target)
			_, err := mover.New(cfg, c.cat).RunJob(ctx, job.ID, streamLimits)
			require.ErrorIs(t, err, mover.ErrKilled)

			// A new mover process: recovery, then resume (without the
			// stream limit: the stream is in the journal).
			eng := mover.New(testConfig(t), c.cat)
			require.NoError(t, eng.Recover(ctx))
			res, err := eng.RunJob(ctx, job.ID, mover.DefaultLimits())
			require.NoError(t, err)
			assert.Equal(t, mover.JobResult{Done: 2}, res)
			ms := jobMoves(t, c, job.ID)
			require.Len(t, ms, 2)
			assert.Equal(t, ms[0].ID, ms[1].CarriedBy, "the second move rode the first's stream")
			verify(t, c, bg.stop(t))
			assertPlaced(t, c, groups, target.GroupID)
		})
	}
}

// TestStreamRiderCancelled cancels riders of one stream, under a
// workload: the first while the stream copies (its run takes it out and
// sets the stream up again without it), the second while no mover runs
// (Cancel takes it out itself), the third between the fence's prepare and
// the decision (the decision refuses, the attempt is settled and rolled
// back, and the run takes it out). The cancelled groups stay on their
// source with no copy left on the target, the others move, and nothing
// written is lost.
func TestStreamRiderCancelled(t *testing.T) {
	c := newCluster(t, 16, 300, 3000)
	target := c.newNode(t)
	ctx := context.Background()
	src := holders(t, c)[0]
	groups := groupsOn(t, c, src, 5, nil)
	bg := startWorkload(c, 4, 300, 0)

	cfg := testConfig(t)
	var lead int64
	var riders []metadata.Move
	cancelled := false
	cfg.AfterPhase = func(id int64, p mover.Phase) error {
		if p == mover.Copying && !cancelled {
			cancelled = true
			ms, err := c.cat.Stream(ctx, id)
			if err != nil {
				return err
			}
			lead, riders = id, ms[1:]
			_, err = c.cat.RequestCancel(ctx, riders[0].ID)
			return err
		}
		if p == mover.Indexing && lead != 0 {
			// The stream was set up again without the first: stop the run
			// here (a mover that died) to cancel the second with no mover.
			ms, err := c.cat.Stream(ctx, id)
			if err != nil || len(ms) != 4 {
				return fmt.Errorf("stream after the first cancel: %d moves, %v", len(ms), err)
			}
			return errors.New("kill")
		}
		return nil
	}
	job, _ := scheduleJob(t, c, mover.New(cfg, c.cat), groups, target)
	_, err := mover.New(cfg, c.cat).RunJob(ctx, job.ID, streamLimits)
	require.ErrorIs(t, err, mover.ErrKilled)
	require.Len(t, riders, 4)
	first, err := c.cat.Move(ctx, riders[0].ID)
	require.NoError(t, err)
	assert.Equal(t, "cancelled", string(first.Phase))
	hist, err := c.cat.MoveHistory(ctx, lead)
	require.NoError(t, err)
	backToSetup := false
	for _, h := range hist {
		backToSetup = backToSetup || (h.To == "setup" && h.From == "indexing")
	}
	assert.True(t, backToSetup, "the lead went back to setup: %v", hist)

	// The second: cancelled while nobody runs the stream.
	got, err := mover.New(testConfig(t), c.cat).Cancel(ctx, riders[1].ID)
	require.NoError(t, err)
	assert.Equal(t, "cancelled", string(got.Phase))

	// The third: asked to cancel once the fence is prepared.
	cfg = testConfig(t)
	asked := false
	cfg.CutoverStep = func(_ int64, step string) error {
		if step == string(mover.CutoverPrepared) && !asked {
			asked = true
			_, err := c.cat.RequestCancel(ctx, riders[2].ID)
			return err
		}
		return nil
	}
	eng := mover.New(cfg, c.cat)
	require.NoError(t, eng.Recover(ctx))
	res, err := eng.RunJob(ctx, job.ID, mover.DefaultLimits())
	require.NoError(t, err)
	assert.True(t, asked, "the third cancel was asked at the prepare")
	assert.Equal(t, mover.JobResult{Done: 2, Cancelled: 3}, res)
	verify(t, c, bg.stop(t))

	var moved, stayed []int
	for i, g := range groups {
		if i >= 1 && i <= 3 {
			stayed = append(stayed, g)
		} else {
			moved = append(moved, g)
		}
	}
	assertPlaced(t, c, moved, target.GroupID)
	assertPlaced(t, c, stayed, src)
	for _, r := range riders[:3] {
		got, err := c.cat.Move(ctx, r.ID)
		require.NoError(t, err)
		assert.Equal(t, "cancelled", string(got.Phase), "move %d", r.ID)
		assert.False(t, got.CutoverCommitted)
		assertNoCopy(t, c, target, r)
	}
}

// TestStreamSchemaChangeFailsCleanly: DDL is not replicated. A column
// added to one table of a rider, and written, while the stream catches up
// fails the stream (every move of it, with a sentence naming the table), leaves
// every group serving on its source with nothing lost and nothing left,
// and the groups then move in a new job.
func TestStreamSchemaChangeFailsCleanly(t *testing.T) {
	c := newCluster(t, 8, 100, 1000)
	target := c.newNode(t)
	ctx := context.Background()
	src := holders(t, c)[0]
	groups := groupsOn(t, c, src, 3, nil)
	bg := startWorkload(c, 2, 100, 0)
	cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	srcNode, ok := cl.NodeByGroup(src)
	require.True(t, ok)
	cfg := testConfig(t)
	cfg.RetryFor = 10 * time.Second
	altered := ""
	cfg.AfterPhase = func(id int64, p mover.Phase) error {
		if p != mover.Indexing || altered != "" {
			return nil
		}
		ms, err := c.cat.Stream(ctx, id)
		if err != nil {
			return err
		}
		conn, err := c.cat.ConnectNode(ctx, srcNode.Host, srcNode.Port)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		ident, err := metadata.ParseQualifiedName(ms[len(ms)-1].ShardTables[0])
		if err != nil {
			return err
		}
		altered = ident.Sanitize()
		if _, err := conn.Exec(ctx, "ALTER TABLE "+altered+" ADD COLUMN extra int DEFAULT 7"); err != nil {
			return err
		}
		// A row written with the new column reaches the stream, which
		// must fail on it; without one only the cutover's comparison of
		// definitions would notice (TestSchemaChangeDuringMoveFailsCleanly
		// has that case).
		tag, err := conn.Exec(ctx, "UPDATE "+altered+" SET extra = 8")
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("%s has no row to write", altered)
		}
		return err
	}
	eng := mover.New(cfg, c.cat)
	job, _ := scheduleJob(t, c, eng, groups, target)
	res, err := eng.RunJob(ctx, job.ID, streamLimits)
	require.Error(t, err)
	t.Logf("the stream failed as it should: %v", err)
	assert.Contains(t, err.Error(), "schema change made during the move is not replicated")
	assert.Equal(t, mover.JobResult{Failed: 3}, res)
	for _, m := range jobMoves(t, c, job.ID) {
		assert.Equal(t, "failed", string(m.Phase), "move %d", m.ID)
		assert.Contains(t, m.Error, "extra", "move %d says what changed", m.ID)
	}
	assertPlaced(t, c, groups, src)

	job2, _ := scheduleJob(t, c, mover.New(testConfig(t), c.cat), groups, target)
	res, err = mover.New(testConfig(t), c.cat).RunJob(ctx, job2.ID, streamLimits)
	require.NoError(t, err)
	assert.Equal(t, mover.JobResult{Done: 3}, res)
	verify(t, c, bg.stop(t))
	assertPlaced(t, c, groups, target.GroupID)
}

// TestCitusStreamUnderWorkload moves shard groups of a real Citus cluster
// in streams of two onto the added worker while the ledger workload
// writes through Citus: one stream plain, and one killed at each cutover
// step (after the metadata locks, after the applier caught up under them,
// after the prepares on every node, right after the decision), each
// recovered by a new mover. Citus keeps routing every write, every node's
// placements agree, and after Citus's own cleanup nothing old or ours is
// left.
func TestCitusStreamUnderWorkload(t *testing.T) {
	ctx := context.Background()
	c := newCitusCluster(t, 20, 300, 4000)
	target := c.newNode(t)
	srcs := holders(t, c)
	moved := map[int64]int32{}
	used := map[int]bool{}
	for i, kill := range []string{"", "locked", "caught_up", "prepared", "decided"} {
		name := "plain"
		if kill != "" {
			name = "killed at " + kill
		}
		t.Run(name, func(t *testing.T) {
			if kill == "" {
				faultCase(t, reliability.FamilyProcessKillCitus, "none (a plain stream of two groups)", "-", "both moves finished; Citus routed every write")
			} else {
				faultCase(t, reliability.FamilyProcessKillCitus, "mover of a two-group stream killed", "cutover step "+kill,
					"a new mover recovered the stream and finished both moves; Citus routed every write")
			}
			bg := startWorkload(c, 4, 300, uint8(i))
			time.Sleep(200 * time.Millisecond)
			groups := groupsOn(t, c, srcs[i%len(srcs)], 2, used)
			cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
			require.NoError(t, err)
			for _, g := range groups {
				used[g] = true
				for _, id := range cl.Groups[g].ShardIDs {
					moved[id] = cl.Groups[g].GroupID
				}
			}
			cfg := testConfig(t)
			killed := false
			cfg.CutoverStep = func(_ int64, step string) error {
				if !killed && step == kill {
					killed = true
					return errors.New("kill")
				}
				return nil
			}
			job, _ := scheduleJob(t, c, mover.New(cfg, c.cat), groups, target)
			_, err = mover.New(cfg, c.cat).RunJob(ctx, job.ID, streamLimits)
			if kill != "" {
				require.ErrorIs(t, err, mover.ErrKilled)
				_, err = mover.New(testConfig(t), c.cat).RunJob(ctx, job.ID, mover.DefaultLimits())
			}
			require.NoError(t, err)
			ms := jobMoves(t, c, job.ID)
			require.Len(t, ms, 2)
			for _, m := range ms {
				assertDone(t, c, m.ID)
				assert.Equal(t, ms[0].ID, m.StreamID())
			}
			time.Sleep(200 * time.Millisecond)
			verifyCitus(t, c, bg.stop(t), moved)
		})
	}
}

// scheduleStream schedules one job moving the groups of shards to target;
// with more than one, the first move's stream carries the others. It
// returns the moves' ids, the lead first.
func scheduleStream(t *testing.T, c *cluster, eng *mover.Engine, shards []int64, target metadata.Node) []int64 {
	t.Helper()
	_, moves := scheduleShards(t, eng, "move", shards, target)
	ids := make([]int64, len(moves))
	for i, m := range moves {
		ids[i] = m.ID
	}
	if len(ids) > 1 {
		require.NoError(t, c.cat.Carry(context.Background(), ids[0], ids[1:]))
	}
	return ids
}

// TestStreamNodeFaults restarts each node while a stream of two groups
// catches up (the coordinator, which takes the stream's lease with it;
// the source; the target), under a paced workload: the stream's run takes
// what it lost again and both moves finish, with no livelock, no slot
// left and the ledger intact.
func TestStreamNodeFaults(t *testing.T) {
	c := newCluster(t, 16, 300, 3000)
	target := c.newNode(t)
	t.Cleanup(func() { _ = startAll(c) })
	durableCommits(t, c, c.sb.Workers()...)
	srcs := holders(t, c)
	used := map[int]bool{}
	for i, down := range []string{"coordinator", "source", "target"} {
		t.Run(down+" restarted while the stream catches up", func(t *testing.T) {
			nodeCase(t, "catching_up (a stream of two groups)", "the stream's mover took what it lost again and both moves finished; no slot left")
			groups := groupsOn(t, c, srcs[i%2], 2, used)
			for _, g := range groups {
				used[g] = true
			}
			shards := groupShards(t, c, groups)
			source := sbNode(t, c, srcs[i%2])
			node := map[string]sandbox.Node{"coordinator": c.sb.Coordinator(), "source": source, "target": sbNode(t, c, target.GroupID)}[down]
			restartDuringCatchUp(t, c, target, shards, source, node, uint8(10+i))
			assertPlaced(t, c, groups, target.GroupID)
		})
	}
}

// TestStreamJobCancelled cancels a whole job whose moves ride one stream
// (as `jobs cancel` does: every move asked, then the job run), after a
// mover died with the stream catching up: every move ends cancelled, the
// groups stay on their source, and nothing is left on the target.
func TestStreamJobCancelled(t *testing.T) {
	c := newCluster(t, 8, 200, 2000)
	target := c.newNode(t)
	ctx := context.Background()
	src := holders(t, c)[0]
	groups := groupsOn(t, c, src, 3, nil)
	bg := startWorkload(c, 4, 200, 0)
	cfg := testConfig(t)
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p == mover.Indexing {
			return errors.New("kill")
		}
		return nil
	}
	job, moves := scheduleJob(t, c, mover.New(cfg, c.cat), groups, target)
	_, err := mover.New(cfg, c.cat).RunJob(ctx, job.ID, streamLimits)
	require.ErrorIs(t, err, mover.ErrKilled)
	for _, m := range moves {
		_, err := c.cat.RequestCancel(ctx, m.ID)
		require.NoError(t, err)
	}
	res, err := mover.New(testConfig(t), c.cat).RunJob(ctx, job.ID, mover.DefaultLimits())
	require.ErrorContains(t, err, "cancelled", "a cancelled move's run says so")
	assert.Equal(t, mover.JobResult{Cancelled: 3}, res)
	verify(t, c, bg.stop(t))
	assertPlaced(t, c, groups, src)
	for _, m := range jobMoves(t, c, job.ID) {
		assert.Equal(t, "cancelled", string(m.Phase), "move %d", m.ID)
		assert.Equal(t, moves[0].ID, m.StreamID())
		assertNoCopy(t, c, target, m)
	}
}
