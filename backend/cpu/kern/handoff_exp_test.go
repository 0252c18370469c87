package kern

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type spinChunker struct {
	caller uintptr
	other  atomic.Int32
	ran    atomic.Int32
	work   time.Duration
}

func (c *spinChunker) Chunk(lo, hi int) {
	c.ran.Add(int32(hi - lo))
	if curg() != c.caller {
		c.other.Add(1)
	}
	end := time.Now().Add(c.work)
	for time.Now().Before(end) {
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHandoffExperiment measures the pool's hand-off (docs/large-models.md,
// "Where the step-versus-isolated gap comes from"): whether the second
// chunk of a 2-chunk RunTask runs on a pool goroutine, back to back and
// after an idle gap longer than spinWait; the cost of an empty call; and
// process CPU against wall time at GOMAXPROCS 1 and 2. An experiment (its
// figures are logged, and depend on the machine's load): a benchmark, so
// that only `go test -bench HandoffExperiment -benchtime 1x -v` runs it;
// it checks only that every chunk ran once.
func BenchmarkHandoffExperiment(t *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, work := range []time.Duration{50 * time.Microsecond, 500 * time.Microsecond} {
		for _, gap := range []time.Duration{0, 100 * time.Microsecond, 2 * time.Millisecond} {
			const calls = 200
			c := &spinChunker{caller: curg(), work: work}
			var total time.Duration
			for range calls {
				if gap > 0 {
					end := time.Now().Add(gap)
					for time.Now().Before(end) {
					}
				}
				t0 := time.Now()
				RunTask("exp", 2, 2, c)
				total += time.Since(t0)
			}
			if got := c.ran.Load(); got != 2*calls {
				t.Fatalf("%d chunk elements ran, want %d", got, 2*calls)
			}
			t.Logf("GOMAXPROCS=2 chunk %v, idle gap %v: chunk 1 on a pool goroutine in %d/%d calls, %.1f µs per call (ideal %.1f)",
				work, gap, c.other.Load(), calls, float64(total.Microseconds())/calls, float64(work.Microseconds()))
		}
	}
	// Hand-off cost: two empty chunks, back to back.
	c := &spinChunker{caller: curg()}
	const calls = 100000
	t0 := time.Now()
	for range calls {
		RunTask("exp", 2, 2, c)
	}
	t.Logf("GOMAXPROCS=2 empty 2-chunk call: %.0f ns, chunk 1 elsewhere in %d/%d", float64(time.Since(t0).Nanoseconds())/calls, c.other.Load(), calls)
	// CPU against wall at each GOMAXPROCS, kernels sized by Workers().
	for _, procs := range []int{1, 2, 1} {
		runtime.GOMAXPROCS(procs)
		c := &spinChunker{caller: curg(), work: 200 * time.Microsecond}
		w0, u0 := time.Now(), cpuTime()
		for range 1000 {
			RunTask("exp", 2, Workers(), c)
		}
		wall, cpu := time.Since(w0), cpuTime()-u0
		t.Logf("GOMAXPROCS=%d Workers()=%d: wall %v, process CPU %v (%.2f×), chunks elsewhere %d", procs, Workers(), wall.Round(time.Millisecond), cpu.Round(time.Millisecond), cpu.Seconds()/wall.Seconds(), c.other.Load())
	}
}

// delayChunker records when a chunk that another goroutine runs starts,
// after the call's start, and spins for work.
type delayChunker struct {
	caller uintptr
	t0     time.Time
	start  atomic.Int64
	work   time.Duration
}

func (c *delayChunker) Chunk(lo, hi int) {
	if curg() != c.caller {
		c.start.Store(int64(time.Since(c.t0)))
	}
	end := time.Now().Add(c.work)
	for time.Now().Before(end) {
	}
}

// BenchmarkHandoffAfterWideTask measures (docs/large-models.md, "The
// memory-bound row ops and the shape ops on two threads") a 2-chunk call's
// hand-off after a task of ONNXTRAIN_HANDOFF_WIDE chunks (default 8, as a
// GEMM's pieces) has run: how often the second chunk runs on a pool
// goroutine, the median delay until it starts, and the median call time,
// back to back or after ONNXTRAIN_HANDOFF_GAP of idle time (a duration). An
// experiment: it checks nothing but logs; run it in a fresh process
// (`-bench HandoffAfterWideTask -benchtime 1x -v`), since the pool's
// goroutines live as long as the process.
func BenchmarkHandoffAfterWideTask(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	wide := 8
	if v, err := strconv.Atoi(os.Getenv("ONNXTRAIN_HANDOFF_WIDE")); err == nil {
		wide = v
	}
	gap, _ := time.ParseDuration(os.Getenv("ONNXTRAIN_HANDOFF_GAP"))
	RunTask("exp", wide, wide, &spinChunker{caller: curg(), work: time.Microsecond})
	for _, work := range []time.Duration{50 * time.Microsecond, 200 * time.Microsecond} {
		const calls = 400
		c := &delayChunker{caller: curg(), work: work}
		var starts, walls []time.Duration
		for range calls {
			if gap > 0 {
				end := time.Now().Add(gap)
				for time.Now().Before(end) {
				}
			}
			c.start.Store(-1)
			c.t0 = time.Now()
			RunTask("exp", 2, 2, c)
			walls = append(walls, time.Since(c.t0))
			if d := c.start.Load(); d >= 0 {
				starts = append(starts, time.Duration(d))
			}
		}
		slices.Sort(starts)
		slices.Sort(walls)
		med := time.Duration(-1)
		if len(starts) > 0 {
			med = starts[len(starts)/2]
		}
		b.Logf("after a %d-chunk task (%d pool goroutines), idle gap %v, chunks of %v: chunk 1 on a pool goroutine in %d/%d calls, starting a median %.1f µs into the call; call median %.1f µs",
			wide, poolSize.Load(), gap, work, len(starts), calls, float64(med.Nanoseconds())/1e3, float64(walls[len(walls)/2].Nanoseconds())/1e3)
	}
}
