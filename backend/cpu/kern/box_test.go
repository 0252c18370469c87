package kern

import (
	"sync/atomic"
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countTask counts the visits of each index (seen is shared by the box
// copies: a slice header).
type countTask struct {
	seen []atomic.Int32
	add  int32
}

func (t *countTask) Chunk(lo, hi int) {
	for i := lo; i < hi; i++ {
		t.seen[i].Add(t.add)
	}
}

// RunChunksOf visits every index once (inline and fanned out), and its
// boxes come back zeroed and reused: once warm, a call allocates nothing.
func TestRunChunksOf(t *testing.T) {
	for _, c := range []struct{ n, workers int }{{0, 2}, {1, 4}, {7, 2}, {10, 3}, {100, 1}, {65, 8}} {
		seen := make([]atomic.Int32, c.n)
		RunChunksOf("test", c.n, c.workers, countTask{seen: seen, add: 1})
		for i := range seen {
			require.Equal(t, int32(1), seen[i].Load(), "n=%d workers=%d index %d", c.n, c.workers, i)
		}
	}
	b := TakeBox[countTask]()
	b.add = 5
	PutBox(b)
	again := TakeBox[countTask]()
	assert.Same(t, b, again, "the box given back is handed out again")
	assert.Zero(t, again.add, "PutBox zeroes the box")
	PutBox(again)

	if raceEnabled {
		testutil.Skip(t, "the race detector changes allocation behaviour")
	}
	seen := make([]atomic.Int32, 1000)
	task := countTask{seen: seen, add: 1}
	for _, workers := range []int{1, 2} {
		allocs := testing.AllocsPerRun(50, func() { RunChunksOf("test", len(seen), workers, task) })
		assert.Zero(t, allocs, "heap objects per call, %d workers", workers)
	}
}
