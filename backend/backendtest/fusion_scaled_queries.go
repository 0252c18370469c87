package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// fusedScaledQueries: the scores of torch's scaled dot-product attention as
// PyTorch 1.13 exports nn.MultiheadAttention, the queries [T, B·H, D]
// moved to [B·H, T, D] and divided by √D before their product with the
// keys' [B·H, D, T] view, with autodiff's gradients. Where the backend
// declares PermutedMatMul, a divisor that is a power of two (√16 = 4)
// becomes the products' alpha: no Div runs, forward or backward, and the
// scores and both gradients equal the unfused graph's bit for bit. A
// divisor that is not (3) stays a Div, with the same results as unfused.
// The scores agree with a float64 product.
func (kc checker) fusedScaledQueries(t *testing.T) {
	const seq, heads, d = 19, 6, 16
	for _, c := range []struct {
		name    string
		divisor float32
		folded  bool
	}{{"power of two", 4, true}, {"other", 3, false}} {
		t.Run(c.name, func(t *testing.T) {
			g := graph.NewGraph("scaled-queries")
			g.Inputs = []*graph.ValueInfo{
				{Name: "q", Type: F32Type(seq, heads, d)}, {Name: "k", Type: F32Type(seq, heads, d)},
				{Name: "dy", Type: F32Type(heads, seq, seq)},
			}
			div := graph.FromFloat32([]float32{c.divisor})
			div.Shape = []int{} // a scalar, as the export's Constant
			g.Initializers = map[string]*graph.Tensor{"sqrt_d": div}
			perm := func(p ...int64) map[string]*graph.Attr {
				return map[string]*graph.Attr{"perm": graph.IntsAttr("perm", p...)}
			}
			g.Nodes = []*graph.Node{
				{Name: "qt", OpType: "Transpose", Inputs: []string{"q"}, Outputs: []string{"qt"}, Attrs: perm(1, 0, 2)},
				{Name: "qs", OpType: "Div", Inputs: []string{"qt", "sqrt_d"}, Outputs: []string{"qs"}},
				{Name: "kt", OpType: "Transpose", Inputs: []string{"k"}, Outputs: []string{"kt"}, Attrs: perm(1, 2, 0)},
				{Name: "s", OpType: "MatMul", Inputs: []string{"qs", "kt"}, Outputs: []string{"s"}},
			}
			m, grads := trainingStepModel(t, g, "s", []string{"q", "k"})
			inputs := NormalInputs(g, rand.New(rand.NewPCG(71, 72)), 1)
			fused, ops := kc.runPlanned(t, m, inputs, false)
			plain, plainOps := kc.runPlanned(t, m, inputs, true)
			assert.Equal(t, 2, plainOps["Div"], "unfused: the scaling and its gradient: %v", plainOps)
			if kc.fuses(false, graph.PermutedMatMul) {
				assert.Equal(t, 3, ops[graph.PermutedMatMul], "the scores and both gradients: %v", ops)
				if c.folded {
					assert.Zero(t, ops["Div"], "the scale rides on alpha: %v", ops)
				} else {
					assert.Positive(t, ops["Div"], "%v", ops)
				}
			}
			for _, name := range append([]string{"s"}, grads...) {
				require.NotNil(t, fused[name], name)
				assert.True(t, sameBits(plain[name], fused[name]), "%s: fused and unfused differ", name)
			}
			q, k, s := inputs["q"].Float32s(), inputs["k"].Float32s(), fused["s"].Float32s()
			for h := 0; h < heads; h++ {
				for i := 0; i < seq; i += 3 {
					for j := 0; j < seq; j++ {
						want := 0.0
						for e := 0; e < d; e++ {
							want += float64(q[(i*heads+h)*d+e]) / float64(c.divisor) * float64(k[(j*heads+h)*d+e])
						}
						assert.InDelta(t, want, float64(s[(h*seq+i)*seq+j]), 1e-5*math.Max(1, math.Abs(want)), "s[%d,%d,%d]", h, i, j)
					}
				}
			}
		})
	}
}
