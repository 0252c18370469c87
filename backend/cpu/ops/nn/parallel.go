package nn

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// nnWorkers is how many goroutines share items work items of about cost
// scalar operations each: one per core, fewer when the work is small.
func nnWorkers(items int, cost int) int {
	p := runtime.GOMAXPROCS(0)
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

// parallelFor runs fn(worker, item) for item in [0, items) on workers
// goroutines (worker in [0, workers)); items are handed out dynamically.
// With one worker it runs inline. A panic in a worker is re-raised in the
// caller's goroutine, where the executor turns it into an error.
func parallelFor(items, workers int, fn func(worker, item int)) {
	if workers <= 1 || items <= 1 {
		for i := 0; i < items; i++ {
			fn(0, i)
		}
		return
	}
	if workers > items {
		workers = items
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var panicked any
	wg.Add(workers)
	for w := 0; w < workers; w++ {
		go func(w int) {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					once.Do(func() { panicked = r })
					next.Store(int64(items)) // stop handing out work
				}
			}()
			for {
				i := int(next.Add(1) - 1)
				if i >= items {
					return
				}
				fn(w, i)
			}
		}(w)
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}

// f32Bufs recycles float32 scratch buffers (im2col columns) between calls,
// so a network's convolutions do not allocate a fresh buffer each.
var f32Bufs sync.Pool

// scratch returns a buffer of n elements with unspecified contents; give it
// back with release.
func scratch[T convElem](n int) []T {
	var zero T
	if _, ok := any(zero).(float32); ok {
		if p, _ := f32Bufs.Get().(*[]float32); p != nil && cap(*p) >= n {
			return any((*p)[:n]).([]T)
		}
	}
	return make([]T, n)
}

// release returns a buffer from scratch to the pool.
func release[T convElem](buf []T) {
	if b, ok := any(buf).([]float32); ok && b != nil {
		f32Bufs.Put(&b)
	}
}
