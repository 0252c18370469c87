package linalg

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// BenchmarkFlatInProj times the in-projection's three products as
// PermutedMatMul runs them in nn.MultiheadAttention's step (x [B, T, E]
// viewed as [T, B, E], W [3E, E]; ViT-B/16: T = 197, the GPT: T = 128,
// batch 4, E = 768): the forward x·Wᵀ (its rows gathered first), the
// input gradient dX = dY·W (written back in x's layout) and the weight
// gradient dW = Σ xᵀ·dY, each with this package's cuts on ("new") and
// off ("old": dX as the GEMM splits it, nine k blocks over the cores;
// the gathers on one core), beside the 2048³ GEMM. Wall-clock GFLOP/s;
// run under the lock at -cpu 2 (and with ONNXTRAIN_NO_AVX512=1).
func BenchmarkFlatInProj(b *testing.B) {
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
	const B, E, F = 4, 768, 2304
	xT := viewSteps{perm: []int64{1, 0, 2}}
	wT := viewSteps{perm: []int64{1, 0}}
	for _, T := range []int{197, 128} {
		x, w, dy := randF32(r, B, T, E), randF32(r, F, E), randF32(r, T, B, F)
		flop := float64(2 * B * T * E * F)
		for _, c := range []struct {
			name  string
			grad  int64
			permY []int64
			bases []*graph.Tensor
			steps []viewSteps
		}{
			{"fwd", 0, nil, []*graph.Tensor{x, w}, []viewSteps{xT, wT}},
			{"dX", 1, []int64{1, 0, 2}, []*graph.Tensor{dy, x, w}, []viewSteps{{}, xT, wT}},
			{"dW", 2, []int64{1, 0}, []*graph.Tensor{dy, x, w}, []viewSteps{{}, xT, wT}},
		} {
			for _, on := range []bool{false, true} {
				label := map[bool]string{false: "old", true: "new"}[on]
				b.Run(fmt.Sprintf("T%d/%s/%s", T, c.name, label), func(b *testing.B) {
					defer func(r, g bool) { flatRowSplit, spreadGathers = r, g }(flatRowSplit, spreadGathers)
					flatRowSplit, spreadGathers = on, on
					n := permutedNode(c.grad, c.permY, c.bases, c.steps)
					bindReuse(b, n) // the output reused, as in a step
					for i := 0; i < b.N; i++ {
						if _, err := permutedMatMulKernel(ctx, n, c.bases); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
