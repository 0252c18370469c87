package gemm

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// BenchmarkStreamColdC times products whose result is written once and
// is far larger than the caches (ResNet-50's 1×1 convolutions over a batch
// of 8 at 56×56: 256×25088×64 forward, 64×25088×256 input gradient;
// 28×28: 512×6272×128), each call into the next of a ring of result
// buffers (about 200 MB, cold as a training step's outputs are), with
// the non-temporal stores and without them, call by call interleaved.
// With -cpu 1 the rates are per CPU second of the one locked thread.
func BenchmarkStreamColdC(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range []struct {
		name    string
		m, n, k int
	}{
		{"56_64to256_fwd", 256, 25088, 64},
		{"56_256to64_dX", 64, 25088, 256},
		{"56_64to64_fwd", 64, 25088, 64},
		{"28_128to512_fwd", 512, 6272, 128},
	} {
		b.Run(s.name, func(b *testing.B) {
			oneThread := runtime.GOMAXPROCS(0) == 1
			if oneThread {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			clock := func() time.Duration {
				if oneThread {
					return threadCPUTime()
				}
				return time.Duration(time.Now().UnixNano())
			}
			a := randSlice(r, s.m*s.k)
			bm := randSlice(r, s.k*s.n)
			ring := make([][]float32, max(2, (200<<20)/(4*s.m*s.n)))
			for i := range ring {
				ring[i] = grow(nil, s.m*s.n)
			}
			run := func(c []float32, stream bool) time.Duration {
				saved := streamC
				streamC = stream
				pp := PackedProduct{M: s.m, N: s.n, K: s.k, A: a, LDA: s.k, B: bm, LDB: s.n, C: c, LDC: s.n}
				c0 := clock()
				pp.Run()
				d := clock() - c0
				streamC = saved
				return d
			}
			run(ring[0], true)
			var tOn, tOff time.Duration
			next := 0
			for i := 0; i < b.N; i++ {
				tOn += run(ring[next%len(ring)], true)
				next++
				tOff += run(ring[next%len(ring)], false)
				next++
			}
			flop := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
			unit := "GFLOP/s"
			if oneThread {
				unit = "cpu-GFLOP/s"
			}
			b.ReportMetric(flop/tOn.Seconds()/1e9, "stream-"+unit)
			b.ReportMetric(flop/tOff.Seconds()/1e9, "cached-"+unit)
			b.ReportMetric(tOff.Seconds()/tOn.Seconds(), "speedup")
		})
	}
}
