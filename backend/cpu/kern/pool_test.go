package kern

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// countChunker counts the visits of every index.
type countChunker struct {
	seen   []atomic.Int32
	chunks atomic.Int32
}

func (c *countChunker) Chunk(lo, hi int) {
	c.chunks.Add(1)
	for i := lo; i < hi; i++ {
		c.seen[i].Add(1)
	}
}

// RunTask visits every index exactly once in at most workers chunks, and
// once the pool and the batches exist, allocates nothing.
func TestRunTaskCoversTheRangeWithoutAllocating(t *testing.T) {
	for _, c := range []struct{ n, workers int }{{0, 2}, {1, 4}, {7, 2}, {10, 3}, {100, 1}, {5, 8}, {1000, 100}} {
		ck := &countChunker{seen: make([]atomic.Int32, c.n)}
		RunTask("test", c.n, c.workers, ck)
		for i := range ck.seen {
			require.Equal(t, int32(1), ck.seen[i].Load(), "n=%d workers=%d index %d", c.n, c.workers, i)
		}
		assert.LessOrEqual(t, int(ck.chunks.Load()), max(min(c.workers, maxChunks), 1), "n=%d workers=%d", c.n, c.workers)
	}
	ck := &countChunker{seen: make([]atomic.Int32, 4096)}
	run := func() { RunTask("test", len(ck.seen), 4, ck) }
	run()
	// At most one: the caller's wait may take a fresh runtime waiter when
	// the machine is loaded and the runtime's per-P caches are empty (seen
	// under load); RunTask itself allocates nothing.
	assert.LessOrEqual(t, testing.AllocsPerRun(50, run), 1.0, "allocations per RunTask")
	for i := range ck.seen {
		require.Equal(t, int32(52), ck.seen[i].Load(), "the warm-up, AllocsPerRun's own and its 50 runs")
	}
}

// A chunk that itself fans out (more deeply than the pool has goroutines
// free) finishes: callers run the chunks no pool goroutine took.
func TestRunTaskNested(t *testing.T) {
	var total atomic.Int64
	var nest func(depth int) func(lo, hi int)
	nest = func(depth int) func(lo, hi int) {
		return func(lo, hi int) {
			if depth == 0 {
				total.Add(int64(hi - lo))
				return
			}
			for i := lo; i < hi; i++ {
				RunChunks("nested", 8, 8, nest(depth-1))
			}
		}
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			RunChunks("outer", 4, 4, nest(2))
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(4*4*8*8), total.Load())
}

// A panic in the caller's own chunk is labelled too, and the batch is
// usable again afterwards.
func TestRunTaskRepanicsFromEveryChunk(t *testing.T) {
	for bad := 0; bad < 3; bad++ {
		assert.PanicsWithValue(t, "pool: boom", func() {
			RunChunks("pool", 30, 3, func(lo, hi int) {
				if lo == bad*10 {
					panic("boom")
				}
			})
		}, "chunk %d", bad)
	}
	ck := &countChunker{seen: make([]atomic.Int32, 30)}
	RunTask("after", 30, 3, ck)
	for i := range ck.seen {
		require.Equal(t, int32(1), ck.seen[i].Load())
	}
}

type testState struct{ calls int }

type otherState struct{ calls int }

// Results, View and State hand a bound node the same objects on every run
// (View's again after Begin), and an unbound node fresh ones.
func TestNodeScratch(t *testing.T) {
	x := &graph.Tensor{DType: graph.Float32, Shape: []int{2, 3}, Data: make([]float32, 6)}
	free := &graph.Node{OpType: "Reshape"}
	v1, v2 := View(free, x, []int{3, 2}), View(free, x, []int{6})
	assert.NotSame(t, v1, v2)
	assert.Equal(t, []int{3, 2}, v1.Shape)
	assert.NotSame(t, State[testState](free), State[testState](free))
	r1 := Results(free, v1)
	r2 := Results(free, v2)
	assert.Equal(t, []*graph.Tensor{v1}, r1, "an unbound node's results are its own")

	n := &graph.Node{OpType: "Reshape"}
	b := &Binding{}
	Bind(n, b)
	defer Unbind(n)
	shape := []int{3, 2}
	b.Begin()
	w1 := View(n, x, shape)
	w2 := View(n, x, []int{6})
	shape[0] = 7 // View copied it
	assert.Equal(t, []int{3, 2}, w1.Shape)
	assert.Equal(t, []int{6}, w2.Shape)
	assert.NotSame(t, w1, w2, "two views of one run are distinct")
	assert.Same(t, &x.Data.([]float32)[0], &w1.Data.([]float32)[0], "a view shares the data")
	b.Begin()
	assert.Same(t, w1, View(n, x, []int{6}), "the next run reuses the header")
	s := State[testState](n)
	s.calls++
	assert.Same(t, s, State[testState](n))
	assert.Equal(t, 1, State[testState](n).calls)
	o := State[otherState](n)
	assert.Zero(t, o.calls)
	assert.Same(t, s, State[testState](n), "states of two types live side by side")
	assert.Same(t, o, State[otherState](n))
	res := Results(n, w1, w2)
	assert.Equal(t, []*graph.Tensor{w1, w2}, res)
	assert.Same(t, &res[0], &Results(n, w2)[0], "the result slice is the node's")
	assert.Equal(t, []*graph.Tensor{v2}, r2)
	b.Begin()
	assert.Zero(t, testing.AllocsPerRun(20, func() {
		b.Begin()
		_ = Results(n, View(n, x, []int{2, 3}))
		State[testState](n).calls++
	}), "allocations of a bound node's scratch")
	runtime.KeepAlive(b) // the binding is weak
}

// The process-wide pool never has more goroutines than may spin at once
// (GOMAXPROCS-1), however many chunks a task asks for: a goroutine parked
// in the queue's receive would take each hand-off from the spinning one
// (a channel send goes to a waiting receiver first) and start the chunk
// only once woken, long after the spinner could have.
func TestPoolGoroutinesAtMostSpinners(t *testing.T) {
	// (Other tests of this package set GOMAXPROCS to 1 or 2 only.)
	procs := max(runtime.GOMAXPROCS(0), 2)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	for _, chunks := range []int{2, 8, maxChunks} {
		ck := &countChunker{seen: make([]atomic.Int32, 1000)}
		RunTask("test", len(ck.seen), chunks, ck)
		for i := range ck.seen {
			require.Equal(t, int32(1), ck.seen[i].Load(), "chunks %d index %d", chunks, i)
		}
		assert.LessOrEqual(t, int(poolSize.Load()), procs-1, "pool goroutines after a task of %d chunks at GOMAXPROCS=%d", chunks, procs)
	}
	// Nested fan-out finishes without extra goroutines.
	var total atomic.Int64
	RunChunks("outer", 8, 8, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			RunChunks("inner", 8, 8, func(lo, hi int) { total.Add(int64(hi - lo)) })
		}
	})
	assert.Equal(t, int64(64), total.Load())
	assert.LessOrEqual(t, int(poolSize.Load()), procs-1)
}
