package gradient

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TestMatMulGradsFloat32Batched checks the float32 MatMul gradients (tall,
// strided-batch and broadcast paths) against dA = Σ dY·Bᵀ and dB = Σ Aᵀ·dY
// computed here in float64 by their definition.
func TestMatMulGradsFloat32Batched(t *testing.T) {
	const m, k, n = 5, 4, 6
	for _, c := range []struct{ aBatch, bBatch []int }{
		{[]int{3, 2}, []int{3, 2}}, // attention: both batched, strided path
		{[]int{3, 2}, nil},         // B shared: tall path
		{[]int{3, 1}, []int{1, 2}}, // broadcast both ways: loop path
		{[]int{1, 2}, []int{3, 2}}, // A broadcast over the first dim
	} {
		rng := rand.New(rand.NewPCG(7, 8))
		batch, err := graphBroadcast(c.aBatch, c.bBatch)
		require.NoError(t, err)
		as := append(append([]int{}, c.aBatch...), m, k)
		bs := append(append([]int{}, c.bBatch...), k, n)
		ys := append(append([]int{}, batch...), m, n)
		a, b, dy := randomTensor32(rng, as), randomTensor32(rng, bs), randomTensor32(rng, ys)

		wantA, wantB := make([]float64, a.Size()), make([]float64, b.Size())
		total := product(batch)
		aIdx := broadcastIndexOf(c.aBatch, batch)
		bIdx := broadcastIndexOf(c.bBatch, batch)
		ad, bd, gd := a.Data.([]float32), b.Data.([]float32), dy.Data.([]float32)
		for i := 0; i < total; i++ {
			for r := 0; r < m; r++ {
				for q := 0; q < k; q++ {
					for j := 0; j < n; j++ {
						g := float64(gd[(i*m+r)*n+j])
						wantA[(aIdx[i]*m+r)*k+q] += g * float64(bd[(bIdx[i]*k+q)*n+j])
						wantB[(bIdx[i]*k+q)*n+j] += g * float64(ad[(aIdx[i]*m+r)*k+q])
					}
				}
			}
		}
		node := &graph.Node{Name: "g", OpType: "MatMulGrad", Outputs: []string{"d"}}
		gotA, err := matMulGradA(nil, node, []*graph.Tensor{dy, a, b})
		require.NoError(t, err)
		gotB, err := matMulGradB(nil, node, []*graph.Tensor{dy, a, b})
		require.NoError(t, err)
		assert.Equal(t, as, gotA[0].Shape)
		assert.Equal(t, bs, gotB[0].Shape)
		for i, w := range wantA {
			assert.InDelta(t, w, float64(gotA[0].Data.([]float32)[i]), 1e-5, "A %v B %v: dA[%d]", c.aBatch, c.bBatch, i)
		}
		for i, w := range wantB {
			assert.InDelta(t, w, float64(gotB[0].Data.([]float32)[i]), 1e-5, "A %v B %v: dB[%d]", c.aBatch, c.bBatch, i)
		}
	}
}

func randomTensor32(rng *rand.Rand, shape []int) *graph.Tensor {
	v := make([]float32, product(shape))
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return &graph.Tensor{DType: graph.Float32, Shape: shape, Data: v}
}

// graphBroadcast is the broadcast of two batch shapes of equal rank (or
// one empty), for the test cases above.
func graphBroadcast(a, b []int) ([]int, error) {
	if len(a) == 0 {
		return b, nil
	}
	if len(b) == 0 {
		return a, nil
	}
	out := make([]int, len(a))
	for i := range a {
		out[i] = max(a[i], b[i])
	}
	return out, nil
}

// broadcastIndexOf maps every index of batch to the flat index of the
// operand batch shape op (empty: always 0), by definition.
func broadcastIndexOf(op, batch []int) []int {
	idx := make([]int, product(batch))
	for i := range idx {
		if len(op) == 0 {
			continue
		}
		rem, flat, stride := i, 0, 1
		coords := make([]int, len(batch))
		for d := len(batch) - 1; d >= 0; d-- {
			coords[d] = rem % batch[d]
			rem /= batch[d]
		}
		for d := len(op) - 1; d >= 0; d-- {
			cd := coords[d]
			if op[d] == 1 {
				cd = 0
			}
			flat += cd * stride
			stride *= op[d]
		}
		idx[i] = flat
	}
	return idx
}
