package elementwise

import (
	"fmt"
	"runtime"
	"sync"
)

// parallelGrain is the fewest elements worth handing to a goroutine.
const parallelGrain = 1 << 15

// parallelRange splits [0, n) into at most GOMAXPROCS contiguous chunks of at
// least grain items and runs fn on each, concurrently when there is more
// than one. A panic in a chunk is re-raised in the caller's goroutine, so
// the executor's recovery still turns it into an error naming the node.
func parallelRange(n, grain int, fn func(lo, hi int)) {
	if grain < 1 {
		grain = 1
	}
	workers := runtime.GOMAXPROCS(0)
	if chunks := n / grain; chunks < workers {
		workers = chunks
	}
	if workers <= 1 {
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
		panic(fmt.Sprintf("elementwise worker: %v", panicked))
	}
}
