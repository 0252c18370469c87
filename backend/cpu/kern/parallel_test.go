package kern

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every index is visited exactly once, in contiguous chunks.
func TestRunChunksCoversTheRange(t *testing.T) {
	for _, c := range []struct{ n, workers int }{{0, 2}, {1, 4}, {7, 2}, {10, 3}, {100, 1}, {5, 8}} {
		var mu sync.Mutex
		seen := make([]int, c.n)
		chunks := 0
		RunChunks("test", c.n, c.workers, func(lo, hi int) {
			mu.Lock()
			defer mu.Unlock()
			chunks++
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, v := range seen {
			require.Equal(t, 1, v, "n=%d workers=%d index %d", c.n, c.workers, i)
		}
		assert.LessOrEqual(t, chunks, max(c.workers, 1), "n=%d workers=%d", c.n, c.workers)
	}
}

// A panic in a worker reaches the caller, labelled.
func TestRunChunksRepanics(t *testing.T) {
	assert.PanicsWithValue(t, "pool: boom", func() {
		RunChunks("pool", 10, 2, func(lo, hi int) {
			if lo > 0 {
				panic("boom")
			}
		})
	})
}
