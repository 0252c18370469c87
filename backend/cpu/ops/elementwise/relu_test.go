package elementwise

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// reluEdgeInputs returns n float32 values, split over goroutines by the
// kernels, that start with the edge cases (±0, ±Inf, NaNs of both signs,
// the smallest subnormals) followed by random normals.
func reluEdgeInputs(n int, seed uint64) []float32 {
	negNaN := math.Float32frombits(0xffc00001)
	edge := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), negNaN, math.Float32frombits(1), math.Float32frombits(0x80000001)}
	rng := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, n)
	for i := range v {
		if i < len(edge) {
			v[i] = edge[i]
		} else {
			v[i] = float32(rng.NormFloat64())
		}
	}
	return v
}

// TestReluFloat32Bits checks the float32 Relu bit for bit against its
// definition, x < 0 ? +0 : x (so -0 and NaNs of either sign pass through),
// on more elements than one goroutine takes.
func TestReluFloat32Bits(t *testing.T) {
	x := reluEdgeInputs(3*parallelGrain+5, 9)
	y := mustRun(t, "Relu", 14, nil, graph.FromFloat32(x, len(x)))
	got := y.Data.([]float32)
	require.Len(t, got, len(x))
	for i, v := range x {
		want := v
		if v < 0 {
			want = 0
		}
		require.Equal(t, math.Float32bits(want), math.Float32bits(got[i]), "element %d: Relu(%v)", i, v)
	}
}

// TestReluGradFloat32Bits checks the fused float32 ReluGrad bit for bit
// against its definition Where(X > 0, dY, +0): dY's bits (NaN payloads
// included) where X > 0, +0 where X is ≤ 0 or NaN.
func TestReluGradFloat32Bits(t *testing.T) {
	x := reluEdgeInputs(3*parallelGrain+5, 10)
	dy := reluEdgeInputs(len(x), 11)
	// Line dY's edge values up against positive, zero and NaN X too.
	for i := 0; i < 8; i++ {
		dy[len(dy)-1-i] = dy[i]
		x[len(x)-1-i] = float32(i%3) - 0.5
	}
	spec, ok := kern.Lookup(graph.FusedDomain, graph.ReluGrad, 14)
	require.True(t, ok)
	n := &graph.Node{Name: "g", OpType: graph.ReluGrad, Domain: graph.FusedDomain, Outputs: []string{"dx"}}
	out, err := spec.Fn(&kern.Context{Opset: 14}, n, []*graph.Tensor{graph.FromFloat32(dy, len(dy)), graph.FromFloat32(x, len(x))})
	require.NoError(t, err)
	got := out[0].Data.([]float32)
	require.Len(t, got, len(x))
	for i := range x {
		want := float32(0)
		if x[i] > 0 {
			want = dy[i]
		}
		require.Equal(t, math.Float32bits(want), math.Float32bits(got[i]), "element %d: dY %v, X %v", i, dy[i], x[i])
	}
}
