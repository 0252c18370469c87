package kern

import (
	"runtime"
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
