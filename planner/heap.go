package planner

import "iter"

// heap is the planner's one binary heap: a min-heap of T under less, which
// must be a strict total order (every tie broken, by node index say), so
// that every traversal is deterministic.
//
// When key is set the heap is indexed: each item has a distinct small
// integer key(x) in [0, keys), the heap remembers where each item sits, and
// contains, remove and fix work by item in O(log n). Pushing an item that is
// already in an indexed heap does nothing. An item whose order changed must
// be fixed before any other item's order changes.
type heap[T any] struct {
	items []T
	less  func(a, b T) bool
	key   func(T) int32
	pos   []int32 // pos[key(x)] = index of x in items, or -1; indexed heaps only
}

// newHeap returns an empty heap without an index.
func newHeap[T any](less func(a, b T) bool) *heap[T] {
	return &heap[T]{less: less}
}

// newIndexedHeap returns an empty indexed heap for items whose keys are in
// [0, keys).
func newIndexedHeap[T any](keys int, key func(T) int32, less func(a, b T) bool) *heap[T] {
	h := &heap[T]{less: less, key: key, pos: make([]int32, keys)}
	for i := range h.pos {
		h.pos[i] = -1
	}
	return h
}

// nodeHeap is an indexed heap of node indexes.
type nodeHeap = heap[int32]

func newNodeHeap(nodes int, less func(a, b int32) bool) *nodeHeap {
	return newIndexedHeap(nodes, func(n int32) int32 { return n }, less)
}

func (h *heap[T]) len() int { return len(h.items) }
func (h *heap[T]) top() T   { return h.items[0] }

func (h *heap[T]) push(x T) {
	if h.key != nil {
		if h.pos[h.key(x)] >= 0 {
			return
		}
		h.pos[h.key(x)] = int32(len(h.items))
	}
	h.items = append(h.items, x)
	h.up(len(h.items) - 1)
}

// pop removes and returns the least item.
func (h *heap[T]) pop() T {
	x := h.items[0]
	h.removeAt(0)
	return x
}

// remove takes x out of an indexed heap; nothing happens if it is not in.
func (h *heap[T]) remove(x T) {
	if i := h.pos[h.key(x)]; i >= 0 {
		h.removeAt(int(i))
	}
}

// fix restores an indexed heap after x's order changed.
func (h *heap[T]) fix(x T) {
	if i := h.pos[h.key(x)]; i >= 0 {
		if !h.down(int(i)) {
			h.up(int(i))
		}
	}
}

func (h *heap[T]) removeAt(i int) {
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	if h.key != nil {
		h.pos[h.key(h.items[last])] = -1
	}
	var zero T
	h.items[last] = zero
	h.items = h.items[:last]
	if i != last && !h.down(i) {
		h.up(i)
	}
}

func (h *heap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	if h.key != nil {
		h.pos[h.key(h.items[i])] = int32(i)
		h.pos[h.key(h.items[j])] = int32(j)
	}
}

func (h *heap[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts item i down and reports whether it moved.
func (h *heap[T]) down(i0 int) bool {
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

// inOrder yields the items from least to greatest without changing the
// heap: a best-first walk of the heap tree, O(k log k) for the first k,
// whose frontier is itself a heap (of positions). The heap must not change
// while the walk is in progress.
func (h *heap[T]) inOrder() iter.Seq[T] {
	return func(yield func(T) bool) {
		if len(h.items) == 0 {
			return
		}
		frontier := newHeap(func(a, b int) bool { return h.less(h.items[a], h.items[b]) })
		frontier.push(0)
		for frontier.len() > 0 {
			p := frontier.pop()
			if !yield(h.items[p]) {
				return
			}
			for _, c := range [2]int{2*p + 1, 2*p + 2} {
				if c < len(h.items) {
					frontier.push(c)
				}
			}
		}
	}
}
