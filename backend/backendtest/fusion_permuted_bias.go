package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedPermutedMatMulBias: nn.MultiheadAttention's in-projection as
// PyTorch exports it, the batch-first activations transposed to [T, B, E],
// times the weight's transpose, plus the 3E-wide bias, with autodiff's
// gradients. Where the backend declares it, the product and the bias run
// as one PermutedMatMulAdd (no Add of their own); the output and every
// gradient equal the unfused graph's bit for bit, and the output agrees
// with a float64 product.
func (kc checker) fusedPermutedMatMulBias(t *testing.T) {
	const batch, seq, width, out = 3, 41, 64, 3 * 64
	g := graph.NewGraph("inproj")
	g.Inputs = []*graph.ValueInfo{
		{Name: "x", Type: F32Type(batch, seq, width)}, {Name: "w", Type: F32Type(out, width)}, {Name: "b", Type: F32Type(out)},
		{Name: "dy", Type: F32Type(seq, batch, out)},
	}
	g.Nodes = []*graph.Node{
		{Name: "xt", OpType: "Transpose", Inputs: []string{"x"}, Outputs: []string{"xt"},
			Attrs: map[string]*graph.Attr{"perm": graph.IntsAttr("perm", 1, 0, 2)}},
		{Name: "wt", OpType: "Transpose", Inputs: []string{"w"}, Outputs: []string{"wt"},
			Attrs: map[string]*graph.Attr{"perm": graph.IntsAttr("perm", 1, 0)}},
		{Name: "p", OpType: "MatMul", Inputs: []string{"xt", "wt"}, Outputs: []string{"p"}},
		{Name: "y", OpType: "Add", Inputs: []string{"b", "p"}, Outputs: []string{"y"}},
	}
	m, grads := trainingStepModel(t, g, "y", []string{"x", "w", "b"})
	inputs := NormalInputs(g, rand.New(rand.NewPCG(61, 62)), 1)
	fused, ops := kc.runPlanned(t, m, inputs, false)
	plain, plainOps := kc.runPlanned(t, m, inputs, true)
	assert.Zero(t, plainOps[graph.PermutedMatMulAdd], "%v", plainOps)
	if kc.fuses(false, graph.PermutedMatMulAdd, graph.PermutedMatMul) {
		assert.Equal(t, 1, ops[graph.PermutedMatMulAdd], "%v", ops)
		assert.Zero(t, ops["Add"], "%v", ops)
	} else {
		assert.Zero(t, ops[graph.PermutedMatMulAdd], "%v", ops)
	}
	for _, name := range append([]string{"y"}, grads...) {
		require.NotNil(t, fused[name], name)
		assert.True(t, sameBits(plain[name], fused[name]), "%s: fused and unfused differ", name)
	}
	require.Equal(t, []int{seq, batch, out}, fused["y"].Shape)
	x, w, b, y := inputs["x"].Float32s(), inputs["w"].Float32s(), inputs["b"].Float32s(), fused["y"].Float32s()
	for s := 0; s < seq; s += 5 {
		for n := 0; n < batch; n++ {
			for j := 0; j < out; j++ {
				want := float64(b[j])
				for k := 0; k < width; k++ {
					want += float64(x[(n*seq+s)*width+k]) * float64(w[j*width+k])
				}
				assert.InDelta(t, want, float64(y[(s*batch+n)*out+j]), 1e-4*math.Max(1, math.Abs(want)), "y[%d,%d,%d]", s, n, j)
			}
		}
	}
}
