package mover

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/shardmover/shardmover/metadata"
)

func mv(id int64, from, to int32) metadata.Move {
	return metadata.Move{ID: id, SourceGroup: from, TargetGroup: to, Phase: metadata.PhaseScheduled}
}

// TestJobSchedOverlapsStages: with Overlap and one copy stream, the second
// move into the same node prepares while the first copies, copies once the
// first has copied, and a third starts only when the first is past its
// copy.
func TestJobSchedOverlapsStages(t *testing.T) {
	s := newJobSched(Limits{Concurrency: 1, PerNode: 1, Overlap: true}, []metadata.Move{mv(1, 1, 3), mv(2, 2, 3), mv(3, 1, 3)})
	require.True(t, s.canStart(0))
	s.start(0)
	require.True(t, s.canStart(1), "the next move prepares while the first copies")
	s.start(1)
	assert.False(t, s.canStart(2), "two moves before their copy on node 3 already")
	require.True(t, s.canCopy(0))
	s.takeCopy(0)
	assert.False(t, s.canCopy(1), "one copy stream per node")
	s.pass(0)
	assert.True(t, s.canCopy(1))
	assert.True(t, s.canStart(2), "the first move is past its copy")
	s.takeCopy(1)
	s.start(2)
	assert.False(t, s.canCopy(2))
	s.end(0)
	s.end(1)
	assert.True(t, s.canCopy(2))
}

// TestJobSchedKeepsPlanOrder: a later move sharing a node never copies
// before an earlier one, even when the later one is ready first.
func TestJobSchedKeepsPlanOrder(t *testing.T) {
	s := newJobSched(Limits{Concurrency: 2, PerNode: 1, Overlap: true}, []metadata.Move{mv(1, 1, 3), mv(2, 2, 3)})
	s.start(0)
	s.start(1)
	assert.False(t, s.canCopy(1), "move 1 shares node 3 and has not copied")
	s.end(0) // failed in preflight
	assert.True(t, s.canCopy(1))
}

// TestJobSchedResumedPastCopy: a move resumed in catching_up does not
// count against copy streams and never blocks a later move's copy.
func TestJobSchedResumedPastCopy(t *testing.T) {
	first := mv(1, 1, 3)
	first.Phase = metadata.PhaseCatchingUp
	s := newJobSched(Limits{Concurrency: 1, PerNode: 1, Overlap: true}, []metadata.Move{first, mv(2, 1, 3)})
	s.start(0)
	s.start(1)
	assert.True(t, s.canCopy(1))
}

// TestJobSchedWholeMoves: without Overlap a move starts only when the
// moves running on its nodes (and in the cluster) are fewer than the
// limits, whatever their stage: the next move into node 3 waits for the
// first to end, not only to copy; a move on other nodes runs beside it
// when Concurrency allows.
func TestJobSchedWholeMoves(t *testing.T) {
	s := newJobSched(Limits{Concurrency: 2, PerNode: 1}, []metadata.Move{mv(1, 1, 3), mv(2, 2, 3), mv(3, 4, 5), mv(4, 6, 7)})
	require.True(t, s.canStart(0))
	s.start(0)
	assert.False(t, s.canStart(1), "node 3 runs a move")
	require.True(t, s.canCopy(0))
	s.takeCopy(0)
	s.pass(0)
	assert.False(t, s.canStart(1), "the first move is past its copy but still running on node 3")
	require.True(t, s.canStart(2), "nodes 4 and 5 are free and the cluster runs one move of two")
	s.start(2)
	assert.False(t, s.canStart(3), "two moves run in the cluster")
	s.end(0)
	require.True(t, s.canStart(1))
	s.start(1)
	assert.True(t, s.canCopy(1))
}

// TestJobSchedLimitsHold drives random jobs with random event orders and
// checks the limits at every step, and that every job runs to its end.
func TestJobSchedLimitsHold(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := rapid.Int32Range(2, 5).Draw(t, "nodes")
		lim := Limits{Concurrency: rapid.IntRange(1, 3).Draw(t, "conc"), PerNode: rapid.IntRange(1, 2).Draw(t, "pernode"),
			Overlap: rapid.Bool().Draw(t, "overlap")}
		n := rapid.IntRange(1, 12).Draw(t, "moves")
		var moves []metadata.Move
		for i := range n {
			from := rapid.Int32Range(1, nodes).Draw(t, "from")
			to := rapid.Int32Range(1, nodes-1).Draw(t, "to")
			if to >= from {
				to++
			}
			m := mv(int64(i+1), from, to)
			if rapid.IntRange(0, 5).Draw(t, "resumed") == 0 {
				m.Phase = metadata.PhaseCutover
			}
			moves = append(moves, m)
		}
		s := newJobSched(lim, moves)
		next := 0 // RunJob starts moves in order
		for steps := 0; ; steps++ {
			if steps > 10*n+10 {
				t.Fatalf("no progress: %+v", s)
			}
			// What can happen now: the next start, a copy, a pass, an end.
			type ev struct {
				kind string
				i    int
			}
			var evs []ev
			if next < n && s.canStart(next) {
				evs = append(evs, ev{"start", next})
			}
			for i := range n {
				switch {
				case !s.started[i] || s.ended[i]:
				case !s.passed[i] && !s.holding[i] && s.canCopy(i):
					evs = append(evs, ev{"copy", i}, ev{"end", i})
				case s.holding[i]:
					evs = append(evs, ev{"pass", i}, ev{"end", i})
				case s.passed[i]:
					evs = append(evs, ev{"end", i})
				}
			}
			if len(evs) == 0 {
				require.Equal(t, n, next, "nothing can happen but moves are left")
				for i := range n {
					require.True(t, s.ended[i] || !s.started[i] || (!s.passed[i] && !s.holding[i]), "move %d", i)
				}
				break
			}
			e := evs[rapid.IntRange(0, len(evs)-1).Draw(t, "event")]
			switch e.kind {
			case "start":
				s.start(e.i)
				next++
			case "copy":
				s.takeCopy(e.i)
			case "pass":
				s.pass(e.i)
			case "end":
				s.end(e.i)
			}
			require.LessOrEqual(t, s.copyAll, lim.Concurrency)
			for _, c := range s.copies {
				require.LessOrEqual(t, c, lim.PerNode)
			}
			require.LessOrEqual(t, s.running, 3*lim.Concurrency)
			if !lim.Overlap {
				require.LessOrEqual(t, s.running, lim.Concurrency)
				for node, c := range s.live {
					require.LessOrEqual(t, c, lim.PerNode, "moves running on node %d", node)
				}
			}
			// Plan order per node: no move holds or passed its copy
			// before an earlier move sharing a node started.
			for i := range n {
				if s.holding[i] {
					for j := 0; j < i; j++ {
						require.False(t, s.shares(i, j) && !s.started[j], "move %d copies before earlier move %d started", i, j)
					}
				}
			}
		}
	})
}
