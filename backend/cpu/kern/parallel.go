package kern

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Chunker is work over a range [0, n) that can be split into contiguous
// chunks run concurrently (RunTask). A kernel that keeps its Chunker in
// per-node state (State) fans out without allocating.
type Chunker interface {
	Chunk(lo, hi int)
}

// funcChunker adapts a function to Chunker (a func value converts to an
// interface without allocating).
type funcChunker func(lo, hi int)

func (f funcChunker) Chunk(lo, hi int) { f(lo, hi) }

// RunChunks splits [0, n) into workers contiguous chunks of equal size
// (the last one shorter) and runs fn on each, concurrently; with at most one
// worker it runs fn(0, n) inline. A panic in a chunk is re-raised in the
// caller's goroutine, prefixed with label, so that the executor's recovery
// still turns it into an error naming the node. Kernel packages decide
// workers from their own grain (elementwise by elements, reduce by rows).
//
// The chunks run on a pool of long-lived goroutines (RunTask); the only
// allocation left is fn's closure, made by the caller.
func RunChunks(label string, n, workers int, fn func(lo, hi int)) {
	if workers <= 1 || n <= 1 {
		fn(0, n)
		return
	}
	RunTask(label, n, workers, funcChunker(fn))
}

// maxChunks bounds the chunks of one RunTask call (more workers than that
// are clamped).
const maxChunks = 64

// chunkJob is one chunk of a RunTask call, handed to the pool.
type chunkJob struct {
	b      *chunkBatch
	lo, hi int
	// state: 0 waiting, 1 claimed (by a pool goroutine or the caller).
	state atomic.Int32
}

// chunkBatch is one RunTask call in flight. Batches are recycled through
// a free list, so a steady stream of calls allocates nothing. Every job of
// a batch that is not in flight has state 1 (or was never used).
type chunkBatch struct {
	t        Chunker
	jobs     [maxChunks]chunkJob
	pending  atomic.Int32 // chunks handed out and not finished
	wg       sync.WaitGroup
	mu       sync.Mutex
	panicked any
}

// run runs job j's chunk, recording a panic.
func (b *chunkBatch) run(j *chunkJob) {
	defer func() {
		if r := recover(); r != nil {
			b.mu.Lock()
			if b.panicked == nil {
				b.panicked = r
			}
			b.mu.Unlock()
		}
	}()
	b.t.Chunk(j.lo, j.hi)
}

var (
	batchMu   sync.Mutex
	freeBatch []*chunkBatch
	// poolJobs feeds the pool's goroutines; poolSize counts them.
	poolJobs = make(chan *chunkJob, 4*maxChunks)
	poolSize atomic.Int32
	poolMu   sync.Mutex
)

// maxPool bounds the pool's goroutines.
const maxPool = 256

func getBatch() *chunkBatch {
	batchMu.Lock()
	defer batchMu.Unlock()
	if k := len(freeBatch); k > 0 {
		b := freeBatch[k-1]
		freeBatch = freeBatch[:k-1]
		return b
	}
	return &chunkBatch{}
}

func putBatch(b *chunkBatch) {
	b.t, b.panicked = nil, nil
	batchMu.Lock()
	freeBatch = append(freeBatch, b)
	batchMu.Unlock()
}

// ensurePool starts pool goroutines until there are at least n, and never
// more than GOMAXPROCS-1 (so never more than may spin at once, spinPoll's
// limit). More would cost a hand-off its spinning worker: a channel send
// gives the job to a goroutine parked in the receive, not to the one
// polling the queue, and the parked one waits to be woken (it is readied
// on the sender's own P, which is busy with its chunk) while the poller
// spins on an empty queue. With as many goroutines as may spin, an idle
// pool's goroutines are all spinning (for spinWait) or all parked.
// A task of more chunks than that runs them in turn on the same goroutines
// (the caller takes any no worker has started), as nested tasks did.
func ensurePool(n int) {
	n = min(n, maxPool, runtime.GOMAXPROCS(0)-1)
	if int(poolSize.Load()) >= n {
		return
	}
	poolMu.Lock()
	defer poolMu.Unlock()
	for int(poolSize.Load()) < n {
		poolSize.Add(1)
		go poolWorker()
	}
}

func poolWorker() {
	for {
		j := pollJob()
		if j == nil {
			j = <-poolJobs
		}
		// A job the caller claimed first stays in the queue: its state
		// is 1 until a later call reuses the batch, and then it is a
		// chunk of that call, set up before its state went back to 0.
		if j.state.CompareAndSwap(0, 1) {
			b := j.b
			b.run(j)
			b.pending.Add(-1)
			b.wg.Done()
		}
	}
}

// spinWait is how long an idle pool goroutine polls for the next chunk,
// and a caller for its chunks' end, before blocking. A training step runs
// its kernels back to back: a parked goroutine takes tens of microseconds
// to wake (futex, scheduler), which on a product of a few hundred
// microseconds is a fifth of the second core. Spinning costs an idle core
// at most this long after the last kernel.
//
// At 50 µs, a third of the split calls of a real-size step found the pool
// parked (ViT-B/16: 160–200 of 410 a step, the GPT 150–175 of 543,
// ResNet-50 85–120), nearly all right after another split op: the
// worker's chunk of that op had ended more than 50 µs before the caller's,
// and the next op's second chunk then waited for a wake-up (~75–130 µs on
// a 2-vCPU KVM guest) or ran after the caller's on the same thread. At
// 1 ms, 0–12 a step are cold and the steps are about 2% faster on the
// 2-vCPU Intel Xeon host (12 alternations of the three models, AVX-512
// and AVX2: 11 faster by 0.9–4.8%, one 0.4% slower; docs/large-models.md,
// "The pool spins for 1 ms"). OpenMP runtimes spin longer by default
// (libgomp ~300,000 polls, Intel's 200 ms).
const spinWait = time.Millisecond

// spinners counts the pool goroutines polling now; at most GOMAXPROCS-1
// poll, so that they never hold every P.
var spinners atomic.Int32

// pollJob polls the queue for up to spinWait and returns a job, or nil.
func pollJob() *chunkJob {
	return spinPoll(poolJobs, &spinners, int32(runtime.GOMAXPROCS(0)-1))
}

// spinPoll polls jobs for up to spinWait and returns a job, or nil; at most
// limit goroutines counted in spinning poll at once (the others return nil
// at once and block on the queue instead).
func spinPoll(jobs <-chan *chunkJob, spinning *atomic.Int32, limit int32) *chunkJob {
	if spinning.Add(1) > limit {
		spinning.Add(-1)
		return nil
	}
	defer spinning.Add(-1)
	var deadline time.Time
	for i := 0; ; i++ {
		select {
		case j := <-jobs:
			return j
		default:
		}
		if i&255 == 255 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(spinWait)
			} else if now.After(deadline) {
				return nil
			}
			runtime.Gosched()
		}
	}
}

// awaitPending spins until b's handed-out chunks have ended or spinWait
// has passed; the caller then waits on b.wg, which returns at once in the
// first case.
func (b *chunkBatch) awaitPending() {
	var deadline time.Time
	for i := 0; b.pending.Load() > 0; i++ {
		if i&255 == 255 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(spinWait)
			} else if now.After(deadline) {
				return
			}
			runtime.Gosched()
		}
	}
}

// RunTask is RunChunks for a Chunker: [0, n) in workers contiguous chunks
// of equal size, the first run by the caller and the others by a pool of
// long-lived goroutines. Chunks that no pool goroutine has started when the
// caller finishes its own are run by the caller, so nested calls (a chunk
// that itself fans out) cannot deadlock. A panic in a chunk is re-raised in
// the caller's goroutine, prefixed with label, once every chunk has ended.
func RunTask(label string, n, workers int, t Chunker) {
	if p := current(); p != nil { // a device's pool (pool.go)
		p.runTask(label, n, workers, t)
		return
	}
	if workers <= 1 || n <= 1 {
		t.Chunk(0, n)
		return
	}
	workers = min(workers, n, maxChunks)
	step := (n + workers - 1) / workers
	chunks := (n + step - 1) / step
	ensurePool(chunks - 1)
	if spinners.Load() == 0 {
		coldCalls.Add(1)
	}
	b := getBatch()
	panicked := b.dispatch(t, n, step, chunks, poolJobs)
	putBatch(b)
	if panicked != nil {
		panic(fmt.Sprintf("%s: %v", label, panicked))
	}
}

// Hand-off counters (HandoffStats, ColdHandoffs), process-wide.
var splitCalls, handedChunks, reclaimedChunks, coldCalls atomic.Int64

// ColdHandoffs reports, since the process started, the split RunTask calls
// of the process-wide pool that found none of its goroutines polling the
// queue: each of their chunks went to a parked goroutine (or one busy with
// another task's chunk), which starts it only once woken (~75 µs on a
// 2-vCPU KVM guest). For profiles and experiments: one atomic load a split
// call, and an add for a cold one.
func ColdHandoffs() int64 { return coldCalls.Load() }

// HandoffStats reports, since the process started, the RunTask calls split
// into several chunks, the chunks they handed to pool goroutines, and how
// many of those the caller ran itself because no pool goroutine had
// started them when its own chunk ended (a parked or descheduled worker:
// that call ran on fewer threads than it asked for). For profiles and
// experiments; each split call costs two atomic adds.
func HandoffStats() (calls, handed, reclaimed int64) {
	return splitCalls.Load(), handedChunks.Load(), reclaimedChunks.Load()
}

// dispatch runs t over [0, n) in chunks chunks of step elements on b: chunks
// 1.. go to jobs (or stay with the caller when the queue is full), the
// caller takes chunk 0 and then any chunk no worker has started, and waits
// for the rest. It returns what a chunk panicked with, if one did.
func (b *chunkBatch) dispatch(t Chunker, n, step, chunks int, jobs chan<- *chunkJob) any {
	b.t = t
	// Add before any job's state goes back to 0: a pool goroutine may
	// still hold a stale queue entry for one of this batch's jobs (claimed
	// by an earlier caller) and run it, and call Done, as soon as it is.
	b.wg.Add(chunks - 1)
	b.pending.Store(int32(chunks - 1))
	for c := 0; c < chunks; c++ {
		j := &b.jobs[c]
		j.b, j.lo, j.hi = b, c*step, min((c+1)*step, n)
		j.state.Store(0)
	}
	for c := 1; c < chunks; c++ {
		select {
		case jobs <- &b.jobs[c]:
		default:
		}
	}
	b.jobs[0].state.Store(1)
	b.run(&b.jobs[0])
	reclaimed := int64(0)
	for c := 1; c < chunks; c++ {
		if j := &b.jobs[c]; j.state.CompareAndSwap(0, 1) {
			reclaimed++
			b.run(j)
			b.pending.Add(-1)
			b.wg.Done()
		}
	}
	splitCalls.Add(1)
	handedChunks.Add(int64(chunks - 1))
	if reclaimed > 0 {
		reclaimedChunks.Add(reclaimed)
	}
	b.awaitPending()
	b.wg.Wait()
	return b.panicked
}
