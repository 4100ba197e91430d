package planner

import "iter"

// nodeHeap is a binary heap of node indexes with a position index, so a
// node whose key changed can be fixed in O(log n) (one key at a time). less must be a strict total order (ties broken by node index),
// which keeps every traversal deterministic.
type nodeHeap struct {
	items []int32
	pos   []int32 // pos[node] = index in items, or -1
	less  func(a, b int32) bool
}

func newNodeHeap(nodes int, less func(a, b int32) bool) *nodeHeap {
	h := &nodeHeap{pos: make([]int32, nodes), less: less}
	for i := range h.pos {
		h.pos[i] = -1
	}
	return h
}

func (h *nodeHeap) len() int              { return len(h.items) }
func (h *nodeHeap) top() int32            { return h.items[0] }
func (h *nodeHeap) contains(n int32) bool { return h.pos[n] >= 0 }

func (h *nodeHeap) push(n int32) {
	if h.pos[n] >= 0 {
		return
	}
	h.items = append(h.items, n)
	h.pos[n] = int32(len(h.items) - 1)
	h.up(len(h.items) - 1)
}

func (h *nodeHeap) remove(n int32) {
	i := int(h.pos[n])
	if i < 0 {
		return
	}
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items = h.items[:last]
	h.pos[n] = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// fix restores the heap after n's key changed. Only one key may change
// between fixes.
func (h *nodeHeap) fix(n int32) {
	i := int(h.pos[n])
	if i < 0 {
		return
	}
	if !h.down(i) {
		h.up(i)
	}
}

func (h *nodeHeap) pop() int32 {
	n := h.items[0]
	h.remove(n)
	return n
}

func (h *nodeHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i]] = int32(i)
	h.pos[h.items[j]] = int32(j)
}

func (h *nodeHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *nodeHeap) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(h.items[r], h.items[l]) {
			j = r
		}
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// inOrder yields the nodes from least to greatest without changing the
// heap: a best-first walk of the heap tree, O(k log k) for the first k.
// The heap must not change while the walk is in progress.
func (h *nodeHeap) inOrder() iter.Seq[int32] {
	return func(yield func(int32) bool) {
		if len(h.items) == 0 {
			return
		}
		// frontier is a small binary heap of positions in h.items.
		frontier := []int{0}
		lessPos := func(a, b int) bool { return h.less(h.items[a], h.items[b]) }
		for len(frontier) > 0 {
			p := frontier[0]
			last := len(frontier) - 1
			frontier[0] = frontier[last]
			frontier = frontier[:last]
			siftDownInts(frontier, 0, lessPos)
			if !yield(h.items[p]) {
				return
			}
			for _, c := range [2]int{2*p + 1, 2*p + 2} {
				if c < len(h.items) {
					frontier = append(frontier, c)
					siftUpInts(frontier, len(frontier)-1, lessPos)
				}
			}
		}
	}
}

func siftUpInts(a []int, j int, less func(a, b int) bool) {
	for j > 0 {
		i := (j - 1) / 2
		if !less(a[j], a[i]) {
			break
		}
		a[i], a[j] = a[j], a[i]
		j = i
	}
}

func siftDownInts(a []int, i int, less func(a, b int) bool) {
	n := len(a)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && less(a[r], a[l]) {
			j = r
		}
		if !less(a[j], a[i]) {
			return
		}
		a[i], a[j] = a[j], a[i]
		i = j
	}
}
