package kern

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// callerChunker counts the chunks after the first that ran on the calling
// goroutine.
type callerChunker struct {
	caller uintptr
	mine   atomic.Int64
}

func (c *callerChunker) Chunk(lo, hi int) {
	if lo > 0 && curg() == c.caller {
		c.mine.Add(1)
	}
}

// HandoffStats counts every split call, every chunk handed out, and exactly
// the handed chunks the caller ended up running itself.
func TestHandoffStatsCountReclaimedChunks(t *testing.T) {
	c := &callerChunker{caller: curg()}
	calls0, handed0, reclaimed0 := HandoffStats()
	const n = 300
	for range n {
		RunTask("test", 4, 4, c)
	}
	RunTask("test", 4, 1, c) // not split
	calls, handed, reclaimed := HandoffStats()
	assert.Equal(t, int64(n), calls-calls0)
	assert.Equal(t, int64(3*n), handed-handed0)
	assert.Equal(t, c.mine.Load(), reclaimed-reclaimed0, "chunks the caller ran itself")
	t.Logf("the caller ran %d of %d handed chunks itself", reclaimed-reclaimed0, handed-handed0)
}

// A split call made when no pool goroutine has polled the queue for
// longer than spinWait counts as cold; a call that is not split never does.
func TestColdHandoffsCountCallsToAParkedPool(t *testing.T) {
	c := &callerChunker{caller: curg()}
	RunTask("test", 2, 2, c) // the pool has a goroutine (where GOMAXPROCS > 1)
	for range 3 {
		// Every goroutine gives up polling (within spinWait, unless the
		// machine is loaded) and stays parked: the queue holds no job a
		// caller claimed first (the test before leaves hundreds), which
		// a goroutine would take and then poll again for another
		// spinWait, and the pool is still quiet 2·spinWait later (a
		// goroutine that had just taken one when the queue emptied has
		// polled and parked by then).
		quiet := func() bool { return spinners.Load() == 0 && len(poolJobs) == 0 }
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			if quiet() {
				time.Sleep(2 * spinWait)
				if quiet() {
					break
				}
			}
			time.Sleep(spinWait)
		}
		require.Zero(t, spinners.Load(), "goroutines still polling")
		require.Zero(t, len(poolJobs), "jobs left in the queue")
		cold0 := ColdHandoffs()
		RunTask("test", 2, 1, c) // not split
		assert.Equal(t, cold0, ColdHandoffs(), "a call that is not split")
		RunTask("test", 2, 2, c)
		assert.Equal(t, cold0+1, ColdHandoffs(), "a split call to a parked pool")
	}
}
