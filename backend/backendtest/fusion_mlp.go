package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedMLPGelu: a transformer MLP as PyTorch exports it, Linear → exact
// GELU → Linear (x·W1ᵀ + b1, the GELU chain, ·W2ᵀ + b2), with autodiff's
// gradients of every operand, as train.Build leaves them (same-shape
// SumToShapes read for their shape only). Where the backend declares
// them, the forward GELU runs in the first product's epilogue
// (MatMulAddGeluErf) and the GELU's gradient, with the copy of its output
// the second weight gradient reads, in the epilogue of the product that
// makes the gradient of that output (MatMulGeluErfGrad); no separate GELU
// or GELU-gradient pass is left. Every output equals the unfused graph's
// bit for bit, and the output and dX agree with a float64 evaluation of
// the formulas. The shapes are large enough that the products run
// blocked and split over the workers, with row blocks that do not divide
// the rows. The second layer's output is added to the block's input (a
// residual connection), which runs in its GEMM's epilogue (MatMulAddAdd).
func (kc checker) fusedMLPGelu(t *testing.T) {
	const rows, in, hidden, out = 4 * 53, 72, 300, 72
	g := graph.NewGraph("mlpgelu")
	g.Inputs = []*graph.ValueInfo{
		{Name: "x", Type: F32Type(4, 53, in)},
		{Name: "w1", Type: F32Type(hidden, in)}, {Name: "b1", Type: F32Type(hidden)},
		{Name: "w2", Type: F32Type(out, hidden)}, {Name: "b2", Type: F32Type(out)},
		{Name: "dy", Type: F32Type(4, 53, out)},
	}
	g.Initializers = map[string]*graph.Tensor{
		"c1": graph.FromFloat32([]float32{float32(math.Sqrt2)}),
		"c2": graph.FromFloat32([]float32{1}),
		"c3": graph.FromFloat32([]float32{0.5}),
	}
	perm := map[string]*graph.Attr{"perm": {Name: "perm", Type: graph.AttrInts, Ints: []int64{1, 0}}}
	g.Nodes = []*graph.Node{
		{Name: "t1", OpType: "Transpose", Inputs: []string{"w1"}, Outputs: []string{"w1t"}, Attrs: perm},
		{Name: "m1", OpType: "MatMul", Inputs: []string{"x", "w1t"}, Outputs: []string{"p1"}},
		{Name: "a1", OpType: "Add", Inputs: []string{"b1", "p1"}, Outputs: []string{"h"}},
		{Name: "d", OpType: "Div", Inputs: []string{"h", "c1"}, Outputs: []string{"d"}},
		{Name: "e", OpType: "Erf", Inputs: []string{"d"}, Outputs: []string{"e"}},
		{Name: "a", OpType: "Add", Inputs: []string{"e", "c2"}, Outputs: []string{"a"}},
		{Name: "m", OpType: "Mul", Inputs: []string{"h", "a"}, Outputs: []string{"m"}},
		{Name: "y", OpType: "Mul", Inputs: []string{"m", "c3"}, Outputs: []string{"g"}},
		{Name: "t2", OpType: "Transpose", Inputs: []string{"w2"}, Outputs: []string{"w2t"}, Attrs: perm},
		{Name: "m2", OpType: "MatMul", Inputs: []string{"g", "w2t"}, Outputs: []string{"p2"}},
		{Name: "a2", OpType: "Add", Inputs: []string{"p2", "b2"}, Outputs: []string{"o"}},
		{Name: "res", OpType: "Add", Inputs: []string{"x", "o"}, Outputs: []string{"res"}},
	}
	wrt := []string{"x", "w1", "b1", "w2", "b2"}
	m, grads := trainingStepModel(t, g, "res", wrt)
	rng := rand.New(rand.NewPCG(31, 32))
	inputs := NormalInputs(g, rng, 1)
	// Weights at PyTorch's Linear scale, so the pre-activations spread
	// over the GELU's curve (|h| up to a few units).
	for _, w := range []string{"w1", "w2", "b1", "b2"} {
		fan := float32(in)
		if w == "w2" || w == "b2" {
			fan = hidden
		}
		for i, v := range inputs[w].Float32s() {
			inputs[w].Float32s()[i] = v * 2 / float32(math.Sqrt(float64(fan)))
		}
	}

	fused, ops := kc.runPlanned(t, m, inputs, false)
	plain, plainOps := kc.runPlanned(t, m, inputs, true)
	assert.Zero(t, plainOps[graph.MatMulAddGeluErf]+plainOps[graph.MatMulGeluErfGrad]+plainOps[graph.MatMulAddAdd], "no fused op under DisableFused: %v", plainOps)
	if kc.fuses(false, graph.MatMulAddAdd, graph.MatMulAdd) {
		assert.Equal(t, 1, ops[graph.MatMulAddAdd], "the residual in the second layer's epilogue: %v", ops)
	} else {
		assert.Zero(t, ops[graph.MatMulAddAdd], "%v", ops)
	}
	switch {
	case kc.fuses(false, graph.MatMulAddGeluErf, graph.MatMulGeluErfGrad, graph.MatMulAdd, graph.GeluErf, graph.GeluErfGradX, graph.ErfGrad, graph.GeluErfGrad):
		assert.Equal(t, 1, ops[graph.MatMulAddGeluErf], "%v", ops)
		assert.Equal(t, 1, ops[graph.MatMulGeluErfGrad], "%v", ops)
		assert.Zero(t, ops[graph.GeluErf]+ops[graph.GeluErfGradX]+ops[graph.GeluErfGrad]+ops["Erf"], "no GELU pass of its own left: %v", ops)
	case !kc.fuses(false, graph.MatMulAddGeluErf):
		assert.Zero(t, ops[graph.MatMulAddGeluErf], "%v", ops)
	}
	if !kc.fuses(false, graph.MatMulGeluErfGrad) {
		assert.Zero(t, ops[graph.MatMulGeluErfGrad], "%v", ops)
	}
	for _, name := range append([]string{"res"}, grads...) {
		require.NotNil(t, fused[name], name)
		assert.True(t, sameBits(plain[name], fused[name]), "%s: fused and unfused differ", name)
	}

	// float64: h = x·W1ᵀ + b1, g = gelu(h), o = g·W2ᵀ + b2; dG = dY·W2,
	// dH = dG·gelu'(h), dX = dH·W1.
	x, w1, b1 := inputs["x"].Float32s(), inputs["w1"].Float32s(), inputs["b1"].Float32s()
	w2, b2, dy := inputs["w2"].Float32s(), inputs["b2"].Float32s(), inputs["dy"].Float32s()
	dx := fused[grads[0]].Float32s()
	h, dh := make([]float64, hidden), make([]float64, hidden)
	for r := 0; r < rows; r += 7 {
		for j := range h {
			s := float64(b1[j])
			for k := 0; k < in; k++ {
				s += float64(x[r*in+k]) * float64(w1[j*in+k])
			}
			h[j] = s
		}
		for j := 0; j < out; j++ {
			s := float64(b2[j]) + float64(x[r*in+j])
			for k, v := range h {
				s += 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) * float64(w2[j*hidden+k])
			}
			assert.InDelta(t, s, float64(fused["res"].Float32s()[r*out+j]), 1e-4*math.Max(1, math.Abs(s)), "res[%d,%d]", r, j)
		}
		for k, v := range h {
			var dg float64
			for j := 0; j < out; j++ {
				dg += float64(dy[r*out+j]) * float64(w2[j*hidden+k])
			}
			dh[k] = dg * (0.5*(1+math.Erf(v/math.Sqrt2)) + v*math.Exp(-v*v/2)/math.Sqrt(2*math.Pi))
		}
		for i := 0; i < in; i++ {
			var s float64
			for k := range dh {
				s += dh[k] * float64(w1[k*in+i])
			}
			s += float64(dy[r*out+i]) // the residual's gradient
			assert.InDelta(t, s, float64(dx[r*in+i]), 1e-4*math.Max(1, math.Abs(s)), "dx[%d,%d]", r, i)
		}
	}
}
