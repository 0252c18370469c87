package elementwise

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func geluNode(outputs ...string) *graph.Node {
	return &graph.Node{Name: "gelu", OpType: graph.GeluErf, Domain: graph.FusedDomain, Inputs: []string{"x", "c1", "c2", "c3"}, Outputs: outputs}
}

// TestGeluErfKernelFloat64AndErrors: float64 operands take the unfused
// kernels (math.Erf: within 1e-15 of the closed form), D and A come out
// beside Y, and a node without three outputs or with too few inputs is an
// error naming the node.
func TestGeluErfKernelFloat64AndErrors(t *testing.T) {
	x := []float64{-4, -1.5, -0.3, 0, 0.7, 2.5}
	in := []*graph.Tensor{
		tensorOf(graph.Float64, x, len(x)),
		graph.FromFloat64([]float64{math.Sqrt2}), graph.FromFloat64([]float64{1}), graph.FromFloat64([]float64{0.5}),
	}
	ctx := &kern.Context{Opset: 17}
	out, err := geluErfKernel(ctx, geluNode("y", "d", "a"), in)
	require.NoError(t, err)
	require.Len(t, out, 3)
	for i, v := range x {
		assert.InDelta(t, 0.5*v*(1+math.Erf(v/math.Sqrt2)), out[0].Data.([]float64)[i], 1e-15, "y(%g)", v)
		assert.Equal(t, v/math.Sqrt2, out[1].Data.([]float64)[i], "d(%g)", v)
		assert.InDelta(t, 1+math.Erf(v/math.Sqrt2), out[2].Data.([]float64)[i], 1e-15, "a(%g)", v)
	}

	_, err = geluErfKernel(ctx, geluNode("y"), in)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "gelu")
	assert.Contains(t, err.Error(), "want 3")
	_, err = geluErfKernel(ctx, geluNode("y", "d", "a"), in[:2])
	require.Error(t, err)
	assert.Contains(t, err.Error(), "gelu")
}

// TestGeluErfRangeRoundsLikeTheUnfusedOps: the float32 pass equals Div,
// Erf, Add, Mul, Mul run one after another (float32 rounding after each).
func TestGeluErfRangeRoundsLikeTheUnfusedOps(t *testing.T) {
	x := make([]float32, 1001) // not a multiple of the vector block
	for i := range x {
		x[i] = float32(i-500) / 97
	}
	c1, c2, c3 := float32(math.Sqrt2), float32(1), float32(0.5)
	y, d, a := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
	geluErfRange(y, d, a, x, c1, c2, c3)
	for i, v := range x {
		dv := v / c1
		av := fastErf32(dv) + c2
		yv := (v * av) * c3
		require.Equal(t, math.Float32bits(dv), math.Float32bits(d[i]), "d at x = %g", v)
		require.Equal(t, math.Float32bits(av), math.Float32bits(a[i]), "a at x = %g", v)
		require.Equal(t, math.Float32bits(yv), math.Float32bits(y[i]), "y at x = %g", v)
	}
}

// TestGeluErfGradXMatchesGeluErfThenGrad: GeluErfGradX's float32 pass
// (D and A recomputed in the same pass) gives the bits of GeluErf's kernel
// followed by GeluErfGrad's on its D and A, over a length that is no
// multiple of any vector width and both signs' tails.
func TestGeluErfGradXMatchesGeluErfThenGrad(t *testing.T) {
	const n = 4099
	x, dy := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(i-2049) / 211
		dy[i] = float32((i*37)%101-50) / 13
	}
	c1, c2, c3, k := float32(math.Sqrt2), float32(1), float32(0.5), float32(2/math.Sqrt(math.Pi))
	f := func(v float32) *graph.Tensor { return graph.FromFloat32([]float32{v}) }
	ctx := &kern.Context{Opset: 17}
	fw, err := geluErfKernel(ctx, geluNode("y", "d", "a"), []*graph.Tensor{tensorOf(graph.Float32, x, n), f(c1), f(c2), f(c3)})
	require.NoError(t, err)
	gradNode := &graph.Node{Name: "g", OpType: graph.GeluErfGrad, Domain: graph.FusedDomain, Inputs: []string{"dy", "x", "d", "a", "c1", "c3", "k"}, Outputs: []string{"dx"}}
	want, err := geluErfGradKernel(ctx, gradNode, []*graph.Tensor{tensorOf(graph.Float32, dy, n), tensorOf(graph.Float32, x, n), fw[1], fw[2], f(c1), f(c3), f(k)})
	require.NoError(t, err)
	xNode := &graph.Node{Name: "gx", OpType: graph.GeluErfGradX, Domain: graph.FusedDomain, Inputs: []string{"dy", "x", "c1", "c2", "c3", "k"}, Outputs: []string{"dx"}}
	got, err := geluErfGradXKernel(ctx, xNode, []*graph.Tensor{tensorOf(graph.Float32, dy, n), tensorOf(graph.Float32, x, n), f(c1), f(c2), f(c3), f(k)})
	require.NoError(t, err)
	w, g := want[0].Data.([]float32), got[0].Data.([]float32)
	require.Len(t, g, n)
	for i := range w {
		require.Equal(t, math.Float32bits(w[i]), math.Float32bits(g[i]), "dx at x = %g, dy = %g", x[i], dy[i])
	}
}
