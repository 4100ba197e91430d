package planner

// assignWaves sets Move.Wave and returns the number of waves. Moves are
// taken in order; each goes into the earliest wave that is not before the
// last wave of either of its nodes and in which both nodes still take part
// in fewer than perNode moves. So a node never has more than perNode moves
// in a wave, and the moves of one node keep their order.
func assignWaves(moves []Move, perNode int) int {
	if perNode <= 0 {
		perNode = 1
	}
	type slot struct{ wave, used int }
	last := map[int64]slot{} // node id -> its latest wave; lookups only
	waves := 0
	next := func(id int64) int {
		s, ok := last[id]
		switch {
		case !ok:
			return 1
		case s.used < perNode:
			return s.wave
		default:
			return s.wave + 1
		}
	}
	take := func(id int64, w int) {
		s := last[id]
		if s.wave == w {
			s.used++
		} else {
			s = slot{w, 1}
		}
		last[id] = s
	}
	for i := range moves {
		m := &moves[i]
		w := max(next(m.From), next(m.To))
		take(m.From, w)
		take(m.To, w)
		m.Wave = w
		waves = max(waves, w)
	}
	return waves
}
