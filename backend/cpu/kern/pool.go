package kern

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// Device worker pools.
//
// By default every kernel sizes its work by runtime.GOMAXPROCS and fans
// out over the process's one pool (RunTask). A Pool is a device's own share
// of the cores: a goroutine bound to it (Enter, which the executable's Run
// does for its whole run when it was compiled with backend.Tuning.Workers)
// sees Workers() = the pool's size, and its RunTask calls use at most that
// many chunks, run by the caller and the pool's own goroutines, which are
// bound to the pool too (so a chunk that fans out again stays on it). Two
// goroutines bound to two pools of one worker each therefore run their
// kernels on one core each, concurrently, and neither waits for the
// other's chunks. An unbound goroutine behaves exactly as before (the
// lookup finds no poolBinding and falls through to the process-wide pool).

// Pool is a fixed number of workers: the bound caller and up to workers-1
// long-lived goroutines of its own.
type Pool struct {
	workers  int
	jobs     chan *chunkJob
	size     atomic.Int32
	mu       sync.Mutex
	spinners atomic.Int32
	// tasks counts the RunTask calls this pool split into several
	// chunks (for tests and profiles).
	tasks atomic.Int64
	// free recycles the pool's batches: its own, so that a stale queue
	// entry (a job its caller claimed first) can only ever run a chunk of
	// this pool's tasks.
	freeMu sync.Mutex
	free   []*chunkBatch
}

func (p *Pool) getBatch() *chunkBatch {
	p.freeMu.Lock()
	defer p.freeMu.Unlock()
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free = p.free[:k-1]
		return b
	}
	return &chunkBatch{}
}

func (p *Pool) putBatch(b *chunkBatch) {
	b.t, b.panicked = nil, nil
	p.freeMu.Lock()
	p.free = append(p.free, b)
	p.freeMu.Unlock()
}

// NewPool makes a pool of workers workers (at least 1). Its goroutines
// start when a task first needs them and live as long as the process, so
// a program keeps a few pools (DevicePool), not one per run.
func NewPool(workers int) *Pool {
	return &Pool{workers: max(1, workers), jobs: make(chan *chunkJob, 4*maxChunks)}
}

// Workers is the pool's size.
func (p *Pool) Workers() int { return p.workers }

// Tasks is how many RunTask calls the pool has split into several chunks.
func (p *Pool) Tasks() int64 { return p.tasks.Load() }

var (
	devicePoolsMu sync.Mutex
	devicePools   = map[string]*Pool{}
)

// DevicePool returns the process's pool for device with workers workers,
// making it on first use: every executable compiled for that device and
// size shares its goroutines.
func DevicePool(device string, workers int) *Pool {
	workers = max(1, workers)
	key := fmt.Sprintf("%s/%d", device, workers)
	devicePoolsMu.Lock()
	defer devicePoolsMu.Unlock()
	p := devicePools[key]
	if p == nil {
		p = NewPool(workers)
		devicePools[key] = p
	}
	return p
}

// poolBinding ties a goroutine (curg) to a pool.
type poolBinding struct {
	g uintptr
	p *Pool
}

var (
	bindMu sync.Mutex
	// bound is copied on every change, so a lookup reads it without a
	// lock; nil or empty while no goroutine is bound (the default path
	// then costs one atomic load).
	bound atomic.Pointer[[]poolBinding]
)

// current returns the pool the calling goroutine is bound to, or nil.
func current() *Pool {
	bs := bound.Load()
	if bs == nil || len(*bs) == 0 {
		return nil
	}
	g := curg()
	for _, b := range *bs {
		if b.g == g {
			return b.p
		}
	}
	return nil
}

// Current returns the pool the calling goroutine is bound to (nil: the
// process-wide one).
func Current() *Pool { return current() }

// Workers is how many chunks a kernel running on the calling goroutine
// may split its work into: its device pool's size when it is bound to one,
// else Workers(), as every kernel used before device pools.
func Workers() int {
	if p := current(); p != nil {
		return p.workers
	}
	return runtime.GOMAXPROCS(0)
}

// Enter binds the calling goroutine to p (nil: to none) and returns its
// previous pool, which Leave restores: `defer kern.Leave(kern.Enter(p))`.
// A goroutine must Leave before it exits.
func Enter(p *Pool) (prev *Pool) {
	g := curg()
	bindMu.Lock()
	defer bindMu.Unlock()
	prev = setBinding(g, p)
	return prev
}

// Leave restores the poolBinding Enter replaced.
func Leave(prev *Pool) {
	g := curg()
	bindMu.Lock()
	defer bindMu.Unlock()
	setBinding(g, prev)
}

// setBinding sets g's pool (nil removes it) and returns the old one;
// bindMu is held.
func setBinding(g uintptr, p *Pool) (old *Pool) {
	var next []poolBinding
	if bs := bound.Load(); bs != nil {
		next = make([]poolBinding, 0, len(*bs)+1)
		for _, b := range *bs {
			if b.g == g {
				old = b.p
				continue
			}
			next = append(next, b)
		}
	}
	if p != nil {
		next = append(next, poolBinding{g, p})
	}
	bound.Store(&next)
	return old
}

// ensure starts the pool's goroutines until there are at least n (at most
// workers-1).
func (p *Pool) ensure(n int) {
	n = min(n, p.workers-1)
	if int(p.size.Load()) >= n {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for int(p.size.Load()) < n {
		p.size.Add(1)
		go p.worker()
	}
}

func (p *Pool) worker() {
	Enter(p) // for the process's lifetime: a chunk that fans out stays on p
	for {
		j := p.poll()
		if j == nil {
			j = <-p.jobs
		}
		if j.state.CompareAndSwap(0, 1) {
			b := j.b
			b.run(j)
			b.pending.Add(-1)
			b.wg.Done()
		}
	}
}

// poll is pollJob for the pool's queue: at most workers-1 goroutines spin.
func (p *Pool) poll() *chunkJob {
	return spinPoll(p.jobs, &p.spinners, int32(p.workers-1))
}

// runTask is RunTask on p: at most p's workers chunks, the caller running
// the first and any that p's goroutines have not started when it is done.
func (p *Pool) runTask(label string, n, workers int, t Chunker) {
	workers = min(workers, p.workers, n, maxChunks)
	if workers <= 1 {
		t.Chunk(0, n)
		return
	}
	p.tasks.Add(1)
	step := (n + workers - 1) / workers
	chunks := (n + step - 1) / step
	p.ensure(chunks - 1)
	b := p.getBatch()
	panicked := b.dispatch(t, n, step, chunks, p.jobs)
	p.putBatch(b)
	if panicked != nil {
		panic(fmt.Sprintf("%s: %v", label, panicked))
	}
}
