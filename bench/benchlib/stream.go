package benchlib

import (
	"fmt"
	"runtime"
	"sync"
	"time"
)

// StreamOptions configure RunStream.
type StreamOptions struct {
	// Elements per array (float64; default 1<<24: three arrays of 128 MiB,
	// far past any cache).
	Elements int
	// Reps timed repetitions (default 10); the best is reported, as
	// STREAM does.
	Reps int
	// Threads (default GOMAXPROCS: all cores).
	Threads int
}

// StreamResult is RunStream's measurement (`onnxtrain bench --stream
// --log-format json`).
type StreamResult struct {
	// TriadGBps is STREAM's triad bandwidth, a[i] = b[i] + s*c[i]: 24 bytes
	// per element (two arrays read, one written) over the best repetition's
	// time, in GB/s (1e9 bytes).
	TriadGBps float64 `json:"triad_gbps"`
	Threads   int     `json:"threads"`
	ArrayMiB  float64 `json:"array_mib"`
}

// RunStream measures the machine's memory bandwidth with STREAM's triad
// kernel on every core: each thread owns a contiguous part of the arrays
// (which it also initialised, so that its pages are local).
func RunStream(o StreamOptions) (*StreamResult, error) {
	if o.Elements == 0 {
		o.Elements = 1 << 24
	}
	if o.Reps == 0 {
		o.Reps = 10
	}
	if o.Threads == 0 {
		o.Threads = runtime.GOMAXPROCS(0)
	}
	if o.Elements < o.Threads || o.Reps < 1 || o.Threads < 1 {
		return nil, fmt.Errorf("benchlib: stream: invalid sizes (elements %d, reps %d, threads %d)", o.Elements, o.Reps, o.Threads)
	}
	// In huge pages, as the step's operands are (hugeFloats).
	mem, free := hugeFloats[float64](3 * o.Elements)
	defer free()
	n := o.Elements
	a, b, c := mem[:n:n], mem[n:2*n:2*n], mem[2*n:]
	gbps, err := triadGBps(a, b, c, o.Threads, o.Reps+1) // the first repetition warms up
	if err != nil {
		return nil, err
	}
	return &StreamResult{TriadGBps: gbps, Threads: o.Threads, ArrayMiB: 8 * float64(o.Elements) / (1 << 20)}, nil
}

// triadGBps fills a, b and c (each thread its own part, so that its pages
// are local), runs the triad over them reps times on threads goroutines
// and returns the best repetition's bandwidth: 24 bytes per element (two
// arrays read, one written), in GB/s (1e9 bytes).
func triadGBps(a, b, c []float64, threads, reps int) (float64, error) {
	n := len(a)
	b, c = b[:n], c[:n]
	ParallelParts(n, threads, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a[i], b[i], c[i] = 1, 2, 0.5
		}
	})
	const s = 3.0
	best := bestOf(reps, func() {
		ParallelParts(n, threads, func(lo, hi int) { triad(a[lo:hi], b[lo:hi], c[lo:hi], s) })
	})
	if a[n/2] != 2+s*0.5 {
		return 0, fmt.Errorf("benchlib: stream: triad computed %v, want %v", a[n/2], 2+s*0.5)
	}
	return 24 * float64(n) / best.Seconds() / 1e9, nil
}

// bestOf runs f reps times (at least once) and returns its shortest time.
func bestOf(reps int, f func()) time.Duration {
	best := time.Duration(0)
	for range max(reps, 1) {
		t0 := time.Now()
		f()
		if d := time.Since(t0); best == 0 || d < best {
			best = d
		}
	}
	return best
}

// triad sets a[i] = b[i] + s*c[i], four elements per iteration.
func triad(a, b, c []float64, s float64) {
	b, c = b[:len(a)], c[:len(a)]
	i := 0
	for ; i+4 <= len(a); i += 4 {
		a[i] = b[i] + s*c[i]
		a[i+1] = b[i+1] + s*c[i+1]
		a[i+2] = b[i+2] + s*c[i+2]
		a[i+3] = b[i+3] + s*c[i+3]
	}
	for ; i < len(a); i++ {
		a[i] = b[i] + s*c[i]
	}
}

// ParallelParts runs f over threads contiguous parts of [0, n), each on a
// goroutine of its own, and waits for them: the triad's split (RunStream,
// the op profile's references, the kernels' triad benchmark).
func ParallelParts(n, threads int, f func(lo, hi int)) {
	var wg sync.WaitGroup
	for t := range threads {
		lo, hi := t*n/threads, (t+1)*n/threads
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}
