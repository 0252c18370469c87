package linalg

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// BenchmarkFlatGradA times the in-projection's input gradient dX = dY·W
// (ViT-B/16: 788 rows, the GPT: 512, W 2304×768) as PermutedMatMul runs
// it (x viewed as [T, B, E], dX written back in x's layout) beside the
// same product as one Sgemm call on plain operands (what the kernel ran
// before it cut the rows itself: the GEMM splits the nine k blocks over
// the cores) and the 2048³ GEMM. Wall-clock GFLOP/s; run under the lock,
// with -cpu 2 (and ONNXTRAIN_NO_AVX512=1 for the AVX2 kernels).
func BenchmarkFlatGradA(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	ctx := &kern.Context{Opset: 17}
	b.Run("ref_gemm2048", func(b *testing.B) {
		const M = 2048
		x, y, z := randF32(r, M, M).Float32s(), randF32(r, M, M).Float32s(), make([]float32, M*M)
		for i := 0; i < b.N; i++ {
			gemm.Sgemm(false, false, M, M, M, 1, x, M, y, M, 0, z, M)
		}
		b.ReportMetric(float64(2*M*M*M)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	for _, s := range []struct{ B, T, E, F int }{{4, 197, 768, 2304}, {4, 128, 768, 2304}} {
		rows := s.B * s.T
		flop := float64(2 * rows * s.E * s.F)
		x, w, dy := randF32(r, s.B, s.T, s.E), randF32(r, s.F, s.E), randF32(r, s.T, s.B, s.F)
		b.Run(fmt.Sprintf("T%d/sgemm", s.T), func(b *testing.B) {
			c := make([]float32, rows*s.E)
			for i := 0; i < b.N; i++ {
				gemm.Sgemm(false, false, rows, s.E, s.F, 1, dy.Float32s(), s.F, w.Float32s(), s.E, 0, c, s.E)
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(fmt.Sprintf("T%d/kernel", s.T), func(b *testing.B) {
			n := permutedNode(1, []int64{1, 0, 2}, []*graph.Tensor{dy, x, w},
				[]viewSteps{{}, {perm: []int64{1, 0, 2}}, {perm: []int64{1, 0}}})
			kern.Bind(n, &kern.Binding{Allocator: &reuseAlloc{}}) // the output reused, as in a step
			defer kern.Unbind(n)
			for i := 0; i < b.N; i++ {
				if _, err := permutedMatMulKernel(ctx, n, []*graph.Tensor{dy, x, w}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
