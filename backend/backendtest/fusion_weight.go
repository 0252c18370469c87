package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedWeightTranspose: a Linear layer on a rank-3 input as PyTorch
// exports it, MatMul(X, Transpose(W)) + b, with the gradients the autodiff
// emits, runs without any Transpose (the forward product, dX and dW read W
// as it is stored); Y, dX and dW equal the unfused graph's and a float64
// reference.
func (kc checker) fusedWeightTranspose(t *testing.T) {
	g := graph.NewGraph("linear")
	g.Inputs = []*graph.ValueInfo{
		{Name: "x", Type: F32Type(3, 5, 7)}, {Name: "w", Type: F32Type(4, 7)}, {Name: "b", Type: F32Type(4)}, {Name: "dy", Type: F32Type(3, 5, 4)},
	}
	g.Nodes = []*graph.Node{
		{Name: "t", OpType: "Transpose", Inputs: []string{"w"}, Outputs: []string{"wt"},
			Attrs: map[string]*graph.Attr{"perm": {Name: "perm", Type: graph.AttrInts, Ints: []int64{1, 0}}}},
		{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "wt"}, Outputs: []string{"p"}},
		{Name: "add", OpType: "Add", Inputs: []string{"p", "b"}, Outputs: []string{"y"}},
	}
	grads, err := graph.Gradients(g, "y", []string{"x", "w"}, "dy", 17)
	require.NoError(t, err)
	g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: grads[0]}, {Name: grads[1]}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
	inputs := NormalInputs(g, rand.New(rand.NewPCG(31, 32)), 1)
	run := func(disable bool) map[string]*graph.Tensor {
		out, ops := kc.runPlanned(t, m, inputs, disable)
		if !kc.fuses(disable, graph.TransposedMatMul) {
			assert.Positive(t, ops["Transpose"], "%v", ops)
		} else {
			assert.Zero(t, ops["Transpose"], "%v", ops)
		}
		return out
	}
	fused, plain := run(false), run(true)
	x, w, b, dy := inputs["x"].Float32s(), inputs["w"].Float32s(), inputs["b"].Float32s(), inputs["dy"].Float32s()
	near := func(name string, i int, want float64) {
		t.Helper()
		got, ref := float64(fused[name].Float32s()[i]), float64(plain[name].Float32s()[i])
		assert.InDelta(t, want, got, 1e-5*math.Max(1, math.Abs(want)), "%s[%d]", name, i)
		assert.InDelta(t, ref, got, 1e-6*math.Max(1, math.Abs(ref)), "%s[%d] against the unfused graph", name, i)
	}
	for r := 0; r < 15; r++ {
		for o := 0; o < 4; o++ {
			s := float64(b[o])
			for k := 0; k < 7; k++ {
				s += float64(x[r*7+k]) * float64(w[o*7+k])
			}
			near("y", r*4+o, s)
		}
		for k := 0; k < 7; k++ {
			var s float64
			for o := 0; o < 4; o++ {
				s += float64(dy[r*4+o]) * float64(w[o*7+k])
			}
			near(grads[0], r*7+k, s)
		}
	}
	for o := 0; o < 4; o++ {
		for k := 0; k < 7; k++ {
			var s float64
			for r := 0; r < 15; r++ {
				s += float64(dy[r*4+o]) * float64(x[r*7+k])
			}
			near(grads[1], o*7+k, s)
		}
	}
}
