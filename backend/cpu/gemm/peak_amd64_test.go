//go:build amd64 && !purego

package gemm

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkFMAPeak compares the micro-kernels with the FMA units' ceiling
// on one core: "ymm" and "zmm" are register-only FMAs (no loads, enough
// independent accumulators; zmm only with AVX-512), "kernel" the 6×16
// AVX2 kernel and "pair" the AVX-512 pair kernel on L1-resident panels at
// kc = 256 (C updated with beta 1, as BenchmarkMicroKernel), in GFLOP/s.
// Their ratio is what the kernels' loads, broadcasts and C updates cost
// (docs/large-models.md, "The pool spins for 1 ms"). Run with -cpu 1;
// the turbo clock moves between runs, so compare rows of one run.
func BenchmarkFMAPeak(b *testing.B) {
	if !hasAVX2FMA {
		b.Skip("no AVX2/FMA")
	}
	const iters = 1 << 20
	b.Run("ymm", func(b *testing.B) {
		for b.Loop() {
			fmaPeakYmm(iters)
		}
		b.ReportMetric(14*8*2*iters*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	if hasAVX512 {
		b.Run("zmm", func(b *testing.B) {
			for b.Loop() {
				fmaPeakZmm(iters)
			}
			b.ReportMetric(16*16*2*iters*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	const kc = 256
	r := rand.New(rand.NewPCG(1, 1))
	mk := avx2Kernel6x16
	ap := randSlice(r, mk.mr*kc)
	bp := randSlice(r, 2*mk.nr*kc)
	c := make([]float32, mk.mr*2*mk.nr)
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			mk.fn(kc, ap, bp, c, mk.nr, 1, 1)
		}
		b.ReportMetric(2*float64(mk.mr*mk.nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	if mk.pair != nil {
		b.Run("pair", func(b *testing.B) {
			for b.Loop() {
				mk.pair(kc, ap, bp, c, 2*mk.nr, 1, 1)
			}
			b.ReportMetric(2*float64(mk.mr*2*mk.nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
