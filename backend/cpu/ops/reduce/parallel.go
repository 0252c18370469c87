package reduce

import (
	"runtime"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
)

// parallelGrain is the fewest elements worth handing to a goroutine.
const parallelGrain = 1 << 15

// parallelRows splits rows rows of rowSize elements into at most GOMAXPROCS
// contiguous chunks of at least parallelGrain elements and runs fn on each
// row range, concurrently when there is more than one. A panic in a chunk
// is re-raised in the caller's goroutine, so the executor's recovery still
// turns it into an error naming the node.
func parallelRows(rows, rowSize int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if chunks := rows * max(rowSize, 1) / parallelGrain; chunks < workers {
		workers = chunks
	}
	if workers > rows {
		workers = rows
	}
	kern.RunChunks("reduce worker", rows, workers, fn)
}
