package nn

import (
	"sync"
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// nnWorkers is how many goroutines share items work items of about cost
// scalar operations each: one per core, fewer when the work is small.
func nnWorkers(items int, cost int) int {
	p := kern.Workers()
	if p > items {
		p = items
	}
	// Below ~64k operations per worker the goroutine handoff costs more
	// than it saves.
	if total := items * cost; total < p*(1<<16) {
		p = total / (1 << 16)
	}
	if p < 1 {
		p = 1
	}
	return p
}

// parallelFor is ParallelItems with items handed out as workers free up.
func parallelFor(items, workers int, fn func(worker, item int)) {
	ParallelItems(items, workers, false, fn)
}

// ParallelItems runs fn(worker, item) for item in [0, items) on workers
// chunks of kern's persistent pool (worker in [0, workers), the caller
// being one of them). With static set, worker w gets the contiguous block
// of items w·⌈items/workers⌉ onwards (so per-worker partial sums are
// reproducible); otherwise items are handed out as workers free up. With
// one worker it runs inline. A panic in a worker is re-raised in the
// caller's goroutine, where the executor turns it into an error. The
// fan-out itself allocates nothing (its task comes from a pool).
//
// fn is a closure that the fan-out keeps, so it is allocated on every call
// when it captures anything: a kernel in a training step's hot path uses
// ParallelItemsOf instead.
func ParallelItems(items, workers int, static bool, fn func(worker, item int)) {
	if workers <= 1 || items <= 1 {
		for i := 0; i < items; i++ {
			fn(0, i)
		}
		return
	}
	runItems(items, workers, static, itemFunc(fn))
}

// ItemRunner is the work of ParallelItemsOf: Item runs one item on one
// worker.
type ItemRunner interface {
	Item(worker, item int)
}

// itemFunc adapts a ParallelItems function to ItemRunner (a func value
// converts to an interface without allocating).
type itemFunc func(worker, item int)

func (f itemFunc) Item(worker, item int) { f(worker, item) }

// ParallelItemsOf is ParallelItems for work given as a value whose Item
// method (on *T) runs one item: the task struct holds what a closure
// would capture, and is copied into a pooled box for the call (see
// kern.TakeBox), so the call allocates nothing.
func ParallelItemsOf[T any, P interface {
	*T
	ItemRunner
}](items, workers int, static bool, task T) {
	b := kern.TakeBox[T]()
	*b = task
	if workers <= 1 || items <= 1 {
		r := P(b)
		for i := 0; i < items; i++ {
			r.Item(0, i)
		}
	} else {
		runItems(items, workers, static, P(b))
	}
	kern.PutBox(b)
}

// runItems fans items out over workers chunks of kern's pool.
func runItems(items, workers int, static bool, r ItemRunner) {
	workers = min(workers, items)
	t := itemTaskPool.Get().(*itemTask)
	t.next.Store(0)
	t.items, t.per, t.static, t.r = items, (items+workers-1)/workers, static, r
	kern.RunTask("nn", workers, workers, t)
	t.r = nil
	itemTaskPool.Put(t)
}

// itemTask is one ParallelItems call in flight; chunk w is worker w.
type itemTask struct {
	next       atomic.Int64
	items, per int
	static     bool
	r          ItemRunner
}

var itemTaskPool = sync.Pool{New: func() any { return new(itemTask) }}

// Chunk runs workers [lo, hi).
func (t *itemTask) Chunk(lo, hi int) {
	for w := lo; w < hi; w++ {
		if t.static {
			for i := w * t.per; i < min((w+1)*t.per, t.items); i++ {
				t.r.Item(w, i)
			}
			continue
		}
		for {
			i := int(t.next.Add(1) - 1)
			if i >= t.items {
				break
			}
			t.r.Item(w, i)
		}
	}
}

// f32Bufs keeps a few float32 scratch matrices alive between calls (a
// free list, not a sync.Pool: the pool is emptied at every garbage
// collection, and megabytes of fresh garbage per call would let the heap
// grow to twice the live activations before the collector runs). At most
// 6 buffers are kept; they grow to the largest request and stay.
var f32Bufs struct {
	mu   sync.Mutex
	free [][]float32
}

// scratch returns a buffer of n elements with unspecified contents; give it
// back with release.
func scratch[T convElem](n int) []T {
	var zero T
	if _, ok := any(zero).(float32); !ok {
		return make([]T, n)
	}
	f32Bufs.mu.Lock()
	best := -1
	for i, b := range f32Bufs.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(f32Bufs.free[best])) {
			best = i
		}
	}
	if best < 0 {
		f32Bufs.mu.Unlock()
		return any(make([]float32, n)).([]T)
	}
	b := f32Bufs.free[best]
	last := len(f32Bufs.free) - 1
	f32Bufs.free[best] = f32Bufs.free[last]
	f32Bufs.free = f32Bufs.free[:last]
	f32Bufs.mu.Unlock()
	return any(b[:n]).([]T)
}

// release returns a buffer from scratch, replacing the smallest kept one
// when the list is full.
func release[T convElem](buf []T) {
	b, ok := any(buf).([]float32)
	if !ok || cap(b) == 0 {
		return
	}
	f32Bufs.mu.Lock()
	defer f32Bufs.mu.Unlock()
	if len(f32Bufs.free) < 6 {
		f32Bufs.free = append(f32Bufs.free, b)
		return
	}
	small := 0
	for i, f := range f32Bufs.free {
		if cap(f) < cap(f32Bufs.free[small]) {
			small = i
		}
	}
	if cap(b) > cap(f32Bufs.free[small]) {
		f32Bufs.free[small] = b
	}
}
