package linalg_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/linalg"
	"github.com/onnxtrain/onnxtrain/graph"
)

// attentionGraph is the ViT's attention core as PyTorch exports it:
// qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4); q, k, v = qkv[0],
// qkv[1], qkv[2]; softmax(q·kᵀ·scale)·v transposed back to (B, N, H·D),
// with the gradient of the output (seeded with dy) with respect to x.
//
// With barrier set, every input of the products and of the Adds goes
// through an Identity, so that no view reaches them: the unfused graph,
// otherwise run by the same kernels.
func attentionGraph(t *testing.T, b, n, h, d int64, barrier bool) *graph.Model {
	t.Helper()
	return maskedAttentionGraph(t, b, n, h, d, barrier, nil)
}

// maskedAttentionGraph is attentionGraph with mask (if not nil, an
// initializer) added to the scaled scores before the Softmax.
func maskedAttentionGraph(t *testing.T, b, n, h, d int64, barrier bool, mask *graph.Tensor) *graph.Model {
	t.Helper()
	c := h * d
	g := graph.NewGraph("attention")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: f32Type(b, n, 3*c)}, {Name: "dy", Type: f32Type(b, n, c)}}
	scalar := func(v int64) *graph.Tensor {
		s := graph.FromInt64([]int64{v})
		s.Shape = []int{}
		return s
	}
	g.Initializers = map[string]*graph.Tensor{
		"shape5": graph.FromInt64([]int64{b, n, 3, h, d}, 5),
		"shape3": graph.FromInt64([]int64{b, n, c}, 3),
		"i0":     scalar(0), "i1": scalar(1), "i2": scalar(2),
		"scale": graph.FromFloat32([]float32{0.17677669}),
	}
	node := opNode
	axis0 := &graph.Attr{Name: "axis", Type: graph.AttrInt, I: 0}
	scores := "ss"
	if mask != nil {
		scores = "sm"
	}
	g.Nodes = []*graph.Node{
		node("Reshape", []string{"x", "shape5"}, "r"),
		node("Transpose", []string{"r"}, "p", graph.IntsAttr("perm", 2, 0, 3, 1, 4)),
		node("Gather", []string{"p", "i0"}, "q", axis0),
		node("Gather", []string{"p", "i1"}, "k", axis0),
		node("Gather", []string{"p", "i2"}, "v", axis0),
		node("Transpose", []string{"k"}, "kt", graph.IntsAttr("perm", 0, 1, 3, 2)),
		node("MatMul", []string{"q", "kt"}, "s"),
		node("Mul", []string{"s", "scale"}, "ss"),
		node("Softmax", []string{scores}, "a", &graph.Attr{Name: "axis", Type: graph.AttrInt, I: -1}),
		node("MatMul", []string{"a", "v"}, "o"),
		node("Transpose", []string{"o"}, "ot", graph.IntsAttr("perm", 0, 2, 1, 3)),
		node("Reshape", []string{"ot", "shape3"}, "y"),
	}
	if mask != nil {
		g.Initializers["mask"] = mask
		g.Nodes = slices.Insert(g.Nodes, 8, node("Add", []string{"ss", "mask"}, "sm"))
	}
	m := gradientModel(t, g)
	if barrier {
		var nodes []*graph.Node
		for _, nd := range g.Nodes {
			switch nd.OpType {
			case "MatMul", "MatMulGradA", "MatMulGradB", "Add":
				c := *nd
				c.Inputs = append([]string{}, nd.Inputs...)
				for i, in := range c.Inputs {
					id := in + "/barrier/" + nd.Name
					nodes = append(nodes, node("Identity", []string{in}, id))
					c.Inputs[i] = id
				}
				nd = &c
			}
			nodes = append(nodes, nd)
		}
		g.Nodes = nodes
	}
	return m
}

// f32Type is the float32 tensor type of a static shape.
func f32Type(dims ...int64) *graph.Type {
	ty := &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true}
	for _, v := range dims {
		ty.Shape = append(ty.Shape, graph.Dim{Value: v, Known: true})
	}
	return ty
}

// opNode is a node of the default domain named after its one output.
func opNode(op string, in []string, out string, attrs ...*graph.Attr) *graph.Node {
	nd := &graph.Node{Name: out, OpType: op, Inputs: in, Outputs: []string{out}}
	for _, a := range attrs {
		nd.SetAttr(a)
	}
	return nd
}

// gradientModel adds to g the gradient of its output y for its input x,
// given dy, with backward's reads of shape and type only rewritten as
// train.Build does (the scale's Mul then no longer keeps the scores), and
// returns the model whose outputs are y and that gradient.
func gradientModel(t *testing.T, g *graph.Graph) *graph.Model {
	t.Helper()
	grads, err := graph.Gradients(g, "y", []string{"x"}, "dy", 17)
	require.NoError(t, err)
	_, err = graph.Recompute(g, 5, 17, graph.RecomputeOptions{ReadsOnly: true})
	require.NoError(t, err)
	g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: grads[0]}}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
}

// TestAttentionViewsFused: the attention core and its gradient run with
// PermutedMatMul and GatherGradSum nodes and no Transpose, Gather or
// GatherGrad, and give the unfused graph's outputs bit for bit when every
// product is big enough for the packed GEMM (whose sums run in the same
// order whichever way an operand is stored), else within float32 rounding.
func TestAttentionViewsFused(t *testing.T) {
	t.Run("packed", func(t *testing.T) { testAttentionViews(t, 3, 17, 2, 16, 0) })
	t.Run("small", func(t *testing.T) { testAttentionViews(t, 2, 5, 2, 4, 1e-5) })
}

func testAttentionViews(t *testing.T, B, N, H, D int64, tol float64) {
	fusedModel, plainModel := attentionGraph(t, B, N, H, D, false), attentionGraph(t, B, N, H, D, true)
	rng := rand.New(rand.NewPCG(9, 10))
	inputs := attentionInputs(rng, int(B), int(N), int(H), int(D))
	// The products as PermutedMatMul nodes: without the attention
	// fusion that takes them in (attention_softmax_test.go).
	run := func(m *graph.Model) (map[string]*graph.Tensor, map[string]int) {
		return runCounting(t, withoutAttentionSoftmax(), m, inputs)
	}
	before := linalg.PermutedFallbacks.Load()
	fused, fops := run(fusedModel)
	assert.Equal(t, before, linalg.PermutedFallbacks.Load(), "every product took the strided path")
	plain, pops := run(plainModel)
	assert.Equal(t, 6, fops[graph.PermutedMatMul], "%v", fops)
	assert.Equal(t, 1, fops[graph.GatherGradSum], "%v", fops)
	for _, op := range []string{"Transpose", "Gather", "GatherGrad", "MatMul", "MatMulGradA", "MatMulGradB"} {
		assert.Zero(t, fops[op], "%s left in the fused plan: %v", op, fops)
	}
	assert.Zero(t, pops[graph.PermutedMatMul]+pops[graph.GatherGradSum], "the barriers keep the plan unfused: %v", pops)
	assert.Positive(t, pops["Transpose"], "the unfused plan transposes")
	assert.Equal(t, pops["Mul"]-1, fops["Mul"], "the scores' scale is the product's alpha")
	require.Len(t, fused, 2)
	for name, want := range plain {
		got := fused[name]
		require.NotNil(t, got, name)
		require.Equal(t, want.Shape, got.Shape, name)
		if tol == 0 {
			assert.Equal(t, want.Float32s(), got.Float32s(), "%s: fused and unfused differ", name)
			continue
		}
		for i, w := range want.Float32s() {
			g := got.Float32s()[i]
			require.InDelta(t, w, g, tol*math.Max(1, math.Abs(float64(w))), "%s[%d]", name, i)
		}
	}
}

// withoutAttentionSoftmax is the CPU backend without the attention ops
// (fuse-attention-softmax does not run).
func withoutAttentionSoftmax() *cpu.Backend {
	return backendWithout(graph.AttentionSoftmax, graph.AttentionSoftmaxGrad, graph.AttentionSoftmaxGradConcat)
}

// backendWithout is the CPU backend without the fused ops named.
func backendWithout(drop ...string) *cpu.Backend {
	var ops []string
	for _, op := range (&cpu.Backend{}).FusedOps() {
		if !slices.Contains(drop, op) {
			ops = append(ops, op)
		}
	}
	return &cpu.Backend{FusedOnly: ops}
}

// attentionInputs are attentionGraph's inputs, x [b, n, 3·h·d] and dy
// [b, n, h·d], normal random values from rng.
func attentionInputs(rng *rand.Rand, b, n, h, d int) map[string]*graph.Tensor {
	x, dy := graph.Zeros(graph.Float32, b, n, 3*h*d), graph.Zeros(graph.Float32, b, n, h*d)
	for _, t := range []*graph.Tensor{x, dy} {
		s := t.Float32s()
		for i := range s {
			s[i] = float32(rng.NormFloat64())
		}
	}
	return map[string]*graph.Tensor{"x": x, "dy": dy}
}
