package elementwise

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
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
	workers := kern.Workers()
	if chunks := n / grain; chunks < workers {
		workers = chunks
	}
	kern.RunChunks("elementwise worker", n, workers, fn)
}

// parallelTask is parallelRange for a kern.Chunker (which a kernel can
// keep between calls, unlike a closure).
func parallelTask(n, grain int, t kern.Chunker) {
	if grain < 1 {
		grain = 1
	}
	workers := kern.Workers()
	if chunks := n / grain; chunks < workers {
		workers = chunks
	}
	kern.RunTask("elementwise worker", n, workers, t)
}
