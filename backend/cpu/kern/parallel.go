package kern

import (
	"fmt"
	"sync"
)

// RunChunks splits [0, n) into workers contiguous chunks of equal size
// (the last one shorter) and runs fn on each, concurrently; with at most one
// worker it runs fn(0, n) inline. A panic in a chunk is re-raised in the
// caller's goroutine, prefixed with label, so that the executor's recovery
// still turns it into an error naming the node. Kernel packages decide
// workers from their own grain (elementwise by elements, reduce by rows).
func RunChunks(label string, n, workers int, fn func(lo, hi int)) {
	if workers <= 1 || n <= 1 {
		fn(0, n)
		return
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		panicked any
	)
	step := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					panicked = r
					mu.Unlock()
				}
			}()
			fn(lo, hi)
		}()
	}
	wg.Wait()
	if panicked != nil {
		panic(fmt.Sprintf("%s: %v", label, panicked))
	}
}
