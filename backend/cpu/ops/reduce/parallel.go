package reduce

import (
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
	kern.RunChunks("reduce worker", rows, rowWorkers(rows, rowSize), fn)
}

// parallelRowsOf is parallelRows for work given as a value whose Chunk
// method runs a row range: no closure, so the call allocates nothing
// (see kern.RunChunksOf).
func parallelRowsOf[T any, P interface {
	*T
	kern.Chunker
}](rows, rowSize int, task T) {
	kern.RunChunksOf[T, P]("reduce worker", rows, rowWorkers(rows, rowSize), task)
}

// rowWorkers is how many chunks parallelRows makes.
func rowWorkers(rows, rowSize int) int {
	workers := kern.Workers()
	if chunks := rows * max(rowSize, 1) / parallelGrain; chunks < workers {
		workers = chunks
	}
	if workers > rows {
		workers = rows
	}
	return workers
}
