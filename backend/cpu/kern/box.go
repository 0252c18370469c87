package kern

import "sync"

// boxLists holds, per type T, the free list of TakeBox (key: a nil *T).
var boxLists sync.Map

// boxList is one type's free list of boxes.
type boxList struct {
	mu   sync.Mutex
	free []any
}

// boxesKept bounds the boxes kept of one type (the calls in flight at
// once: one per goroutine that fans out).
const boxesKept = 64

// TakeBox returns a *T from a free list kept per type (its contents are
// whatever PutBox left: the zero T), allocating one only when the list
// is empty. A kernel that hands its pool a task struct copies the task
// into a box instead of taking the address of a local, which would move
// the local to the heap on every call.
func TakeBox[T any]() *T {
	l := boxListOf[T]()
	l.mu.Lock()
	if k := len(l.free); k > 0 {
		b := l.free[k-1].(*T)
		l.free[k-1] = nil
		l.free = l.free[:k-1]
		l.mu.Unlock()
		return b
	}
	l.mu.Unlock()
	return new(T)
}

// PutBox zeroes b (dropping what it references) and gives it back to
// TakeBox's free list.
func PutBox[T any](b *T) {
	var zero T
	*b = zero
	l := boxListOf[T]()
	l.mu.Lock()
	if len(l.free) < boxesKept {
		l.free = append(l.free, b)
	}
	l.mu.Unlock()
}

func boxListOf[T any]() *boxList {
	key := any((*T)(nil))
	if l, ok := boxLists.Load(key); ok {
		return l.(*boxList)
	}
	l, _ := boxLists.LoadOrStore(key, new(boxList))
	return l.(*boxList)
}

// RunChunksOf is RunTask for a task given by value: the task is copied
// into a box (TakeBox) for the call, so that the call allocates nothing
// where a closure (RunChunks) would be allocated each time.
func RunChunksOf[T any, P interface {
	*T
	Chunker
}](label string, n, workers int, task T) {
	b := TakeBox[T]()
	*b = task
	RunTask(label, n, workers, P(b))
	PutBox(b)
}
