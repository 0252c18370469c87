package elementwise

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
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

// TestReluGradPlaneBroadcast: ReluGrad with dY broadcast over X's planes
// (a global pool's gradient, [N, C, 1, 1] against [N, C, H, W], as the
// fold-expand-into-relu-grad pass leaves it) gives, bit for bit, what the
// unfused Where(Greater(X, 0), dY, 0) gives: dY's value (NaN, ±0 and ±inf
// included) where X > 0, +0 elsewhere (NaN X too); also planes longer
// than the kernel's fill buffer, dY of lower rank, and shapes that are
// not a plane broadcast (the unfused kernels).
func TestReluGradPlaneBroadcast(t *testing.T) {
	spec, ok := kern.Lookup(graph.FusedDomain, graph.ReluGrad, 14)
	require.True(t, ok)
	for _, c := range []struct{ dy, x []int }{
		{[]int{2, 3, 1, 1}, []int{2, 3, 7, 7}},
		{[]int{8, 40, 1, 1}, []int{8, 40, 7, 7}}, // over the parallel grain
		{[]int{2, 2, 1}, []int{2, 2, 300}},       // planes past the buffer
		{[]int{3, 1}, []int{1, 3, 5}},            // dY of lower rank
		{[]int{1}, []int{4, 6}},                  // one plane
		{[]int{2, 1, 5}, []int{2, 3, 5}},         // not a plane broadcast
	} {
		x := reluEdgeInputs(prodInts(c.x), 20)
		for i := range x { // zeros of both signs in every lane and plane tail
			switch {
			case i%7 == 3:
				x[i] = 0
			case i%11 == 5:
				x[i] = float32(math.Copysign(0, -1))
			}
		}
		dy := reluEdgeInputs(prodInts(c.dy), 21)
		n := &graph.Node{Name: "g", OpType: graph.ReluGrad, Domain: graph.FusedDomain, Outputs: []string{"dx"}}
		out, err := spec.Fn(&kern.Context{Opset: 14}, n, []*graph.Tensor{graph.FromFloat32(dy, c.dy...), graph.FromFloat32(x, c.x...)})
		require.NoError(t, err)
		require.Equal(t, c.x, out[0].Shape)
		got := out[0].Float32s()
		// The reference: dY's element for x's index, broadcast by hand.
		strides := make([]int, len(c.x))
		off := len(c.x) - len(c.dy)
		st := 1
		for a := len(c.x) - 1; a >= off; a-- {
			if c.dy[a-off] != 1 {
				strides[a] = st
			}
			st *= c.dy[a-off]
		}
		for i := range x {
			j, rem := 0, i
			for a := len(c.x) - 1; a >= 0; a-- {
				j += rem % c.x[a] * strides[a]
				rem /= c.x[a]
			}
			want := float32(0)
			if x[i] > 0 {
				want = dy[j]
			}
			require.Equal(t, math.Float32bits(want), math.Float32bits(got[i]), "%v: element %d: dY %v, X %v", c.x, i, dy[j], x[i])
		}
	}
	inner, ok := planeBroadcast([]int{2, 3, 1, 1}, []int{2, 3, 7, 7})
	assert.True(t, ok)
	assert.Equal(t, 49, inner)
	_, ok = planeBroadcast([]int{2, 1, 5}, []int{2, 3, 5})
	assert.False(t, ok)
	_, ok = planeBroadcast([]int{3, 1, 1}, []int{2, 3, 4, 4})
	assert.False(t, ok, "dY repeated over a leading axis")
}

func prodInts(s []int) int {
	p := 1
	for _, d := range s {
		p *= d
	}
	return p
}
