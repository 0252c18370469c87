package kern

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// whereChunker records, for every index, the goroutine that ran it and
// the pool that goroutine was bound to.
type whereChunker struct {
	g      []uintptr
	pool   []*Pool
	chunks atomic.Int32
}

func (w *whereChunker) Chunk(lo, hi int) {
	w.chunks.Add(1)
	g, p := curg(), Current()
	for i := lo; i < hi; i++ {
		w.g[i], w.pool[i] = g, p
	}
}

func newWhere(n int) *whereChunker {
	return &whereChunker{g: make([]uintptr, n), pool: make([]*Pool, n)}
}

// An unbound goroutine sees GOMAXPROCS workers and no pool; Enter binds it
// and Leave restores the binding before.
func TestPoolBinding(t *testing.T) {
	require.Nil(t, Current())
	require.Equal(t, runtime.GOMAXPROCS(0), Workers())
	a, b := NewPool(1), NewPool(3)
	prev := Enter(a)
	assert.Nil(t, prev)
	assert.Same(t, a, Current())
	assert.Equal(t, 1, Workers())
	inner := Enter(b)
	assert.Same(t, a, inner)
	assert.Equal(t, 3, Workers())
	Leave(inner)
	assert.Same(t, a, Current())
	Leave(prev)
	assert.Nil(t, Current())
	assert.Equal(t, runtime.GOMAXPROCS(0), Workers())
	// another goroutine is not bound by this one's Enter
	defer Leave(Enter(a))
	done := make(chan *Pool)
	go func() { done <- Current() }()
	assert.Nil(t, <-done)
}

// On a pool of one worker, a task asking for 8 chunks runs whole on the
// caller's goroutine; on a pool of 3, in at most 3 chunks, each on a
// goroutine bound to that pool (so a nested fan-out stays on it), every
// index exactly once.
func TestPoolRunTaskStaysOnItsWorkers(t *testing.T) {
	one := NewPool(1)
	func() {
		defer Leave(Enter(one))
		w := newWhere(1000)
		RunTask("test", 1000, 8, w)
		me := curg()
		for i := range w.g {
			require.Equal(t, me, w.g[i], "index %d ran on another goroutine", i)
		}
		assert.Equal(t, int32(1), w.chunks.Load())
		assert.Zero(t, one.Tasks())
	}()
	three := NewPool(3)
	func() {
		defer Leave(Enter(three))
		for rep := 0; rep < 20; rep++ {
			w := newWhere(999)
			RunTask("test", 999, 8, w)
			assert.LessOrEqual(t, int(w.chunks.Load()), 3)
			for i := range w.pool {
				require.Same(t, three, w.pool[i], "index %d ran outside the pool", i)
			}
		}
		assert.Equal(t, int64(20), three.Tasks())
		// nested: a chunk that fans out again
		var total atomic.Int64
		RunChunks("outer", 6, 8, func(lo, hi int) {
			require.Same(t, three, Current())
			for i := lo; i < hi; i++ {
				RunChunks("inner", 100, 8, func(lo, hi int) { total.Add(int64(hi - lo)) })
			}
		})
		assert.Equal(t, int64(600), total.Load())
	}()
	assert.LessOrEqual(t, int(three.size.Load()), 2, "a pool of 3 starts at most 2 goroutines")
}

// Two goroutines bound to two one-worker pools run their tasks at the same
// time, each on itself only.
func TestTwoPoolsRunConcurrently(t *testing.T) {
	pools := []*Pool{DevicePool("test:0", 1), DevicePool("test:1", 1)}
	require.Same(t, pools[0], DevicePool("test:0", 1))
	require.NotSame(t, pools[0], pools[1])
	var wg sync.WaitGroup
	bad := make([]int, 2)
	for d := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer Leave(Enter(pools[d]))
			me := curg()
			for rep := 0; rep < 200; rep++ {
				w := newWhere(4096)
				RunTask("test", 4096, 4, w)
				for i := range w.g {
					if w.g[i] != me || w.pool[i] != pools[d] {
						bad[d]++
					}
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, []int{0, 0}, bad)
}

// A panic in a pool's chunk comes back to the caller, labelled.
func TestPoolPanicReachesTheCaller(t *testing.T) {
	p := NewPool(2)
	defer Leave(Enter(p))
	assert.PanicsWithValue(t, "label: boom", func() {
		RunChunks("label", 100, 2, func(lo, hi int) {
			if lo > 0 {
				panic("boom")
			}
		})
	})
}
