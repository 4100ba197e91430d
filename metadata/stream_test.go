package metadata_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
)

// TestStreamJournalRules checks the journal's side of a stream: who may
// ride, that a rider's phase follows its lead's and cannot be changed on
// its own, that the decision flips exactly the riders it was prepared
// for and refuses a rider asked to cancel, that a rider taken out ends
// cancelled and sends the lead back to setup, and that each group's old
// shards are recorded under its own move.
func TestStreamJournalRules(t *testing.T) {
	ctx := context.Background()
	_, cat := sandboxtest.NewCompat(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, 8))
	require.NoError(t, cat.InstallJournal(ctx))
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	x := cl.Groups[0].GroupID
	var y int32
	var onX, onY []metadata.ShardGroup
	for _, g := range cl.Groups {
		if g.GroupID == x {
			onX = append(onX, g)
		} else {
			y = g.GroupID
			onY = append(onY, g)
		}
	}
	require.GreaterOrEqual(t, len(onX), 3)
	require.NotEmpty(t, onY)
	spec := func(g metadata.ShardGroup, from, to int32, bytes int64) metadata.MoveSpec {
		var tables []string
		for _, id := range g.ShardIDs {
			for _, s := range cl.Shards {
				if s.ID == id {
					tables = append(tables, metadata.QualifiedName(s.Ident()))
				}
			}
		}
		g.Bytes = bytes
		return metadata.MoveSpec{Group: g, ShardTables: tables, SourceGroup: from, TargetGroup: to}
	}
	_, ms, err := cat.CreateJob(ctx, "rebalance", "", []metadata.MoveSpec{
		spec(onX[0], x, y, 100), spec(onX[1], x, y, 20), spec(onX[2], x, y, 3), spec(onY[0], y, x, 4)})
	require.NoError(t, err)
	lead, r1, r2, back := ms[0], ms[1], ms[2], ms[3]
	read := func(id int64) metadata.Move {
		t.Helper()
		m, err := cat.Move(ctx, id)
		require.NoError(t, err)
		return m
	}

	// Who may ride.
	require.ErrorIs(t, cat.Carry(ctx, lead.ID, []int64{r1.ID, back.ID}), metadata.ErrPhaseConflict, "another pair")
	assert.Zero(t, read(r1.ID).CarriedBy, "a refused stream changes nothing")
	require.NoError(t, cat.Carry(ctx, lead.ID, []int64{r1.ID, r2.ID}))
	assert.Equal(t, lead.ID, read(r2.ID).CarriedBy)
	assert.Equal(t, lead.ID, read(r2.ID).StreamID())
	assert.Equal(t, read(lead.ID).Name(), read(r2.ID).Name(), "a rider's artifacts are its stream's")
	assert.Equal(t, int64(123), read(lead.ID).BytesTotal, "the lead's row holds the stream's bytes")
	require.ErrorIs(t, cat.Carry(ctx, r1.ID, []int64{back.ID}), metadata.ErrPhaseConflict, "a rider leads nothing")
	st, err := cat.Stream(ctx, lead.ID)
	require.NoError(t, err)
	require.Len(t, st, 3)
	assert.Equal(t, []int64{lead.ID, r1.ID, r2.ID}, []int64{st[0].ID, st[1].ID, st[2].ID})

	// Phases follow the lead's; a rider's own change is refused.
	walk := func(phases ...metadata.Phase) {
		t.Helper()
		for i := 1; i < len(phases); i++ {
			require.NoError(t, cat.SetPhase(ctx, lead.ID, string(phases[i-1]), string(phases[i]), "test", ""))
		}
	}
	walk(metadata.PhaseScheduled, metadata.PhasePreflight, metadata.PhaseSetup, metadata.PhaseCopying,
		metadata.PhaseIndexing, metadata.PhaseCatchingUp, metadata.PhaseCutover)
	assert.Equal(t, metadata.PhaseCutover, read(r1.ID).Phase)
	assert.Equal(t, metadata.PhaseCutover, read(r2.ID).Phase)
	require.ErrorIs(t, cat.SetPhase(ctx, r1.ID, "cutover", "cleanup", "test", ""), metadata.ErrPhaseConflict)
	hist, err := cat.MoveHistory(ctx, r1.ID)
	require.NoError(t, err)
	assert.Len(t, hist, 7, "the carry and each of the lead's six steps are in the rider's history")

	lease, ok, err := cat.TryLease(ctx, lead.ID)
	require.NoError(t, err)
	require.True(t, ok)
	defer lease.Release(ctx)
	flip := func(riders ...metadata.Move) metadata.CutoverFlip {
		f := metadata.CutoverFlip{MoveID: lead.ID, SourceGroup: x, TargetGroup: y, Lease: lease}
		for _, m := range append([]metadata.Move{lead}, riders...) {
			f.ShardIDs = append(f.ShardIDs, m.ShardIDs...)
			for _, tb := range m.ShardTables {
				f.OldTables = append(f.OldTables, tb+"_old")
				f.OldTableMoves = append(f.OldTableMoves, m.ID)
			}
			if m.ID != lead.ID {
				f.Riders = append(f.Riders, m.ID)
			}
		}
		return f
	}
	placedOn := func(g metadata.ShardGroup) int32 {
		t.Helper()
		now, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
		require.NoError(t, err)
		p, ok := now.PlacementOf(g.ShardIDs[0])
		require.True(t, ok)
		return p.GroupID
	}

	// The decision flips exactly the riders it was prepared for.
	require.ErrorIs(t, cat.CommitCutover(ctx, flip(r1)), metadata.ErrPhaseConflict, "a rider left out")
	assert.Equal(t, x, placedOn(onX[0]), "a refused decision flips nothing")
	_, err = cat.RequestCancel(ctx, r2.ID)
	require.NoError(t, err)
	require.ErrorIs(t, cat.CommitCutover(ctx, flip(r1, r2)), metadata.ErrPhaseConflict, "a rider asked to cancel")
	assert.Equal(t, x, placedOn(onX[2]))

	// Taking the rider out: it ends cancelled, the others go back to setup.
	require.ErrorIs(t, cat.DropRiders(ctx, lease, lead.ID, metadata.PhaseCatchingUp, []int64{r2.ID}, "test"), metadata.ErrPhaseConflict, "the lead is not in that phase")
	require.NoError(t, cat.DropRiders(ctx, lease, lead.ID, metadata.PhaseCutover, []int64{r2.ID}, "test"))
	assert.Equal(t, metadata.PhaseCancelled, read(r2.ID).Phase)
	assert.Equal(t, metadata.PhaseSetup, read(lead.ID).Phase)
	assert.Equal(t, metadata.PhaseSetup, read(r1.ID).Phase)
	st, err = cat.Stream(ctx, lead.ID)
	require.NoError(t, err)
	assert.Len(t, st, 2, "the cancelled rider is out of the stream")

	walk(metadata.PhaseSetup, metadata.PhaseCopying, metadata.PhaseIndexing, metadata.PhaseCatchingUp, metadata.PhaseCutover)
	require.NoError(t, cat.CommitCutover(ctx, flip(r1)))
	for _, m := range []metadata.Move{read(lead.ID), read(r1.ID)} {
		assert.True(t, m.CutoverCommitted, "move %d decided", m.ID)
		assert.Equal(t, metadata.PhaseCleanup, m.Phase)
		recs, err := cat.Cleanups(ctx, m.ID)
		require.NoError(t, err)
		var old []string
		for _, r := range recs {
			if r.Policy == metadata.CleanupDeferred {
				old = append(old, r.Name)
			}
		}
		assert.Len(t, old, len(m.ShardTables), "move %d's old shards are recorded under it", m.ID)
	}
	assert.Equal(t, y, placedOn(onX[0]))
	assert.Equal(t, y, placedOn(onX[1]))
	assert.Equal(t, x, placedOn(onX[2]), "the cancelled rider's group stays")
	require.ErrorIs(t, cat.DropRiders(ctx, lease, lead.ID, metadata.PhaseCleanup, []int64{r1.ID}, "test"), metadata.ErrPhaseConflict, "past the decision")
	walk(metadata.PhaseCleanup, metadata.PhaseDone)
	assert.Equal(t, metadata.PhaseDone, read(r1.ID).Phase)
	assert.Equal(t, read(r1.ID).BytesTotal, read(r1.ID).BytesCopied, "a rider done counts its bytes copied")
}
