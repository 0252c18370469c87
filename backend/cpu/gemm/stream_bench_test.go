package gemm

import (
	"fmt"
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

// BenchmarkShortKHeads runs ViT-B/16's attention scores as the step does,
// 48 heads of 197×197×64 (B transposed), one Sgemm per head on one
// locked thread, into 48 separate results (7.4 MB, as the step's output)
// or all into one (hot in L2), and the same with 192-row heads (no edge
// tiles), in CPU time per head against the 2048³ GEMM in the same run:
// how much of the short products' gap is the result's memory traffic.
func BenchmarkShortKHeads(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := rand.New(rand.NewPCG(9, 10))
	const heads, d = 48, 64
	const ref = 2048
	rx, ry, rz := randSlice(r, ref*ref), randSlice(r, ref*ref), make([]float32, ref*ref)
	for _, t := range []int{197, 192} {
		q, k := randSlice(r, heads*t*d), randSlice(r, heads*t*d)
		out := make([]float32, heads*t*t)
		for _, shared := range []bool{false, true} {
			name := fmt.Sprintf("T%d/separate", t)
			if shared {
				name = fmt.Sprintf("T%d/oneResult", t)
			}
			b.Run(name, func(b *testing.B) {
				var tp, tr time.Duration
				for i := 0; i < b.N; i++ {
					c0 := threadCPUTime()
					for h := 0; h < heads; h++ {
						c := out[h*t*t:]
						if shared {
							c = out
						}
						Sgemm(false, true, t, t, d, 1, q[h*t*d:], d, k[h*t*d:], d, 0, c, t)
					}
					c1 := threadCPUTime()
					Sgemm(false, false, ref, ref, ref, 1, rx, ref, ry, ref, 0, rz, ref)
					tp, tr = tp+c1-c0, tr+threadCPUTime()-c1
				}
				rate := 2 * float64(heads*t*t*d) * float64(b.N) / tp.Seconds() / 1e9
				refRate := 2 * float64(ref*ref*ref) * float64(b.N) / tr.Seconds() / 1e9
				b.ReportMetric(rate, "cpu-GFLOP/s")
				b.ReportMetric(rate/refRate, "of-ref")
			})
		}
	}
}
