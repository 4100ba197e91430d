package mover

import "github.com/shardmover/shardmover/metadata"

// jobSched decides when a job's moves start and when each may copy
// (docs/design.md 5.6). It holds no lock and does no I/O: RunJob calls it
// under its mutex, and tests drive it directly.
//
// Without Limits.Overlap the limits count whole moves: a move starts only
// while fewer than Concurrency moves run in the cluster and fewer than
// PerNode on each of its nodes, and then copies when its turn in the plan
// order comes (the copy limits below then always hold).
//
// With Limits.Overlap the limits count copy streams, the heavy part of a move: from the slot's
// creation (the end of setup) through copying and indexing, a move holds a
// copy slot on its source and its target. At most Limits.Concurrency moves
// hold one in the cluster, and at most Limits.PerNode on any one node. The
// rest of a move does not count: the next move's preflight and setup run
// while one copies, and a move that finished copying catches up, cuts over
// and cleans up while the next one copies.
//
// So that the stages overlap without a pile-up, a move starts only while
// fewer than 2×Concurrency started moves are before or in their copy stage
// (2×PerNode per node: one copying, one preparing behind it) and fewer than
// 3×Concurrency are running at all.
//
// Order: the moves are in the plan's order (id order). A move starts only
// after every earlier move sharing a node with it has started, and takes
// its copy slot only after every such move has taken its own (or ended);
// the planner's waves (planner.Result.Waves) are this same per-node order
// with PerNode moves per node at a time, so a job runs the plan's waves
// without waiting for a whole wave to end before the next begins.
type jobSched struct {
	lim   Limits
	moves []metadata.Move

	started, holding, passed, ended []bool

	running           int
	live              map[int32]int // per node group: started and not ended
	early, copies     map[int32]int // per node group: started and not past the copy stage; holding a copy slot
	earlyAll, copyAll int
}

func newJobSched(lim Limits, moves []metadata.Move) *jobSched {
	n := len(moves)
	s := &jobSched{lim: lim, moves: moves,
		started: make([]bool, n), holding: make([]bool, n), passed: make([]bool, n), ended: make([]bool, n),
		live: map[int32]int{}, early: map[int32]int{}, copies: map[int32]int{}}
	for i, m := range moves {
		// A move resumed after its copy stage never asks for a slot.
		s.passed[i] = pastCopy(metadata.Phase(m.Phase))
	}
	return s
}

// pastCopy: a move in phase p has finished its copy stage.
func pastCopy(p metadata.Phase) bool {
	switch p {
	case metadata.PhaseScheduled, metadata.PhasePreflight, metadata.PhaseSetup, metadata.PhaseCopying, metadata.PhaseIndexing:
		return false
	}
	return true
}

func (s *jobSched) shares(i, j int) bool {
	a, b := s.moves[i], s.moves[j]
	return a.SourceGroup == b.SourceGroup || a.SourceGroup == b.TargetGroup ||
		a.TargetGroup == b.SourceGroup || a.TargetGroup == b.TargetGroup
}

// canStart: move i may start now.
func (s *jobSched) canStart(i int) bool {
	m := s.moves[i]
	if !s.lim.Overlap {
		if s.running >= s.lim.Concurrency || s.live[m.SourceGroup] >= s.lim.PerNode || s.live[m.TargetGroup] >= s.lim.PerNode {
			return false
		}
	} else if s.running >= 3*s.lim.Concurrency {
		return false
	}
	if s.lim.Overlap && !s.passed[i] && (s.earlyAll >= 2*s.lim.Concurrency ||
		s.early[m.SourceGroup] >= 2*s.lim.PerNode || s.early[m.TargetGroup] >= 2*s.lim.PerNode) {
		return false
	}
	for j := 0; j < i; j++ {
		if s.shares(i, j) && !s.started[j] && !s.ended[j] {
			return false
		}
	}
	return true
}

func (s *jobSched) start(i int) {
	m := s.moves[i]
	s.started[i] = true
	s.running++
	s.live[m.SourceGroup]++
	s.live[m.TargetGroup]++
	if !s.passed[i] {
		s.earlyAll++
		s.early[m.SourceGroup]++
		s.early[m.TargetGroup]++
	}
}

// canCopy: started move i may take its copy slot now.
func (s *jobSched) canCopy(i int) bool {
	m := s.moves[i]
	if s.copyAll >= s.lim.Concurrency || s.copies[m.SourceGroup] >= s.lim.PerNode || s.copies[m.TargetGroup] >= s.lim.PerNode {
		return false
	}
	for j := 0; j < i; j++ {
		if s.shares(i, j) && !s.holding[j] && !s.passed[j] && !s.ended[j] {
			return false
		}
	}
	return true
}

func (s *jobSched) takeCopy(i int) {
	m := s.moves[i]
	s.holding[i] = true
	s.copyAll++
	s.copies[m.SourceGroup]++
	s.copies[m.TargetGroup]++
}

// pass: move i's copy stage is over (or it ended before or during it).
func (s *jobSched) pass(i int) {
	if s.passed[i] {
		return
	}
	m := s.moves[i]
	if s.holding[i] {
		s.holding[i] = false
		s.copyAll--
		s.copies[m.SourceGroup]--
		s.copies[m.TargetGroup]--
	}
	s.passed[i] = true
	if s.started[i] {
		s.earlyAll--
		s.early[m.SourceGroup]--
		s.early[m.TargetGroup]--
	}
}

func (s *jobSched) end(i int) {
	s.pass(i)
	s.ended[i] = true
	if s.started[i] {
		m := s.moves[i]
		s.running--
		s.live[m.SourceGroup]--
		s.live[m.TargetGroup]--
	}
}
