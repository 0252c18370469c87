package linalg

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestGemmBiasRowBits: Gemm (and GemmRelu) with a bias row C of shape [n]
// or [1, n], which the GEMM writes into each block of Y (gemm.SgemmRowC),
// gives bit for bit what the separate broadcast pass followed by the GEMM
// with beta gave, on the GPT's out-projection shape (several k slices,
// split over workers) and a small one (the direct loops), for beta 1 and
// 0.5 and both transposes of B; and it matches a float64 reference.
func TestGemmBiasRowBits(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, sh := range [][3]int{{512, 768, 768}, {3, 5, 4}} {
		m, nn, k := sh[0], sh[1], sh[2]
		for _, tb := range []int64{0, 1} {
			for _, beta := range []float32{1, 0.5} {
				for _, cShape := range [][]int{{nn}, {1, nn}} {
					for _, relu := range []bool{false, true} {
						a := randF32(r, m, k)
						b := randF32(r, k, nn)
						if tb == 1 {
							b = randF32(r, nn, k)
						}
						c := randF32(r, cShape...)
						n := node("Gemm", graph.FloatAttr("beta", beta), graph.IntAttr("transB", tb))
						out, err := gemmRun(&kern.Context{Opset: 17}, n, []*graph.Tensor{a, b, c}, relu)
						require.NoError(t, err)
						got := out[0].Float32s()

						// The former path: C broadcast into Y, then
						// the GEMM with beta.
						want := make([]float32, m*nn)
						fillBroadcastRows(want, c.Float32s(), c.Shape, m, nn)
						gemm.SgemmEpilogue(false, tb == 1, m, nn, k, 1, a.Float32s(), k, b.Float32s(), b.Shape[1], beta, want, nn, gemm.Epilogue{Relu: relu})
						msg := []any{"m=%d n=%d k=%d transB=%d beta=%v C%v relu=%v", m, nn, k, tb, beta, cShape, relu}
						require.Equal(t, want, got, msg...)

						for i := 0; i < m; i += 97 {
							for j := 0; j < nn; j += 31 {
								var s float64
								for q := 0; q < k; q++ {
									bv := b.Float32s()[q*nn+j]
									if tb == 1 {
										bv = b.Float32s()[j*k+q]
									}
									s += float64(a.Float32s()[i*k+q]) * float64(bv)
								}
								s += float64(beta) * float64(c.Float32s()[j])
								if relu && s < 0 {
									s = 0
								}
								require.InDelta(t, s, float64(got[i*nn+j]), 1e-4, msg...)
							}
						}
					}
				}
			}
		}
	}
}
