package linalg

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/elementwise" // GeluErf's kernel, geluY's general path
	"github.com/onnxtrain/onnxtrain/graph"
)

// geluY's general path (constants that are not scalars) runs the GeluErf
// kernel for the fused node, whose two outputs are not GeluErf's three,
// and gives the bits of its vmath pass.
func TestGeluYGeneralPath(t *testing.T) {
	n := &graph.Node{Name: "mm", OpType: graph.MatMulGeluErfGrad, Domain: graph.FusedDomain, Outputs: []string{"dx", "y"}}
	x := randF32(rand.New(rand.NewPCG(5, 6)), 3, 4)
	for i := range x.Float32s() {
		x.Float32s()[i] *= 3
	}
	c1, c2, c3 := float32(math.Sqrt2), float32(1), float32(0.5)
	ctx := &kern.Context{Opset: 17}
	want, err := geluY(ctx, n, x, graph.FromFloat32([]float32{c1}), graph.FromFloat32([]float32{c2}), graph.FromFloat32([]float32{c3}))
	require.NoError(t, err)
	row := func(v float32) *graph.Tensor { return graph.FromFloat32([]float32{v, v, v, v}, 4) }
	got, err := geluY(ctx, n, x, row(c1), row(c2), row(c3))
	require.NoError(t, err)
	require.Equal(t, []int{3, 4}, got.Shape)
	for i, w := range want.Float32s() {
		assert.Equal(t, math.Float32bits(w), math.Float32bits(got.Float32s()[i]), "y[%d]", i)
	}
}
