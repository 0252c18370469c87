package graph

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// attentionSoftmaxGraph is attention's core and its gradient after
// specialisation, as torchvision's ViT exports it: S = Q·Kᵀ (alpha), P =
// Softmax(S), O = P·V written back as [T, B·H, D]; dP and dV from dO, dS =
// SoftmaxGrad(dP, P) · 0.5 through an Identity, dQ and dK from dS. Q, K
// and V are [T, B·H, D] read per head through views. edit changes the
// nodes before the graph is returned.
func attentionSoftmaxGraph(edit func(nodes map[string]*Node, g *Graph)) *Graph {
	g := NewGraph("attention")
	const T, BH, D = 5, 6, 4
	g.Inputs = []*ValueInfo{{Name: "q", Type: f32(T, BH, D)}, {Name: "k", Type: f32(T, BH, D)}, {Name: "v", Type: f32(T, BH, D)},
		{Name: "do", Type: f32(T, BH, D)}}
	g.Initializers = map[string]*Tensor{"half": FromFloat32([]float32{0.5})}
	heads := func(name string) *Attr { return IntsAttr(name, 1, 0, 2) }
	pmm := func(name string, in []string, out string, attrs ...*Attr) *Node {
		n := &Node{Name: name, OpType: PermutedMatMul, Domain: FusedDomain, Inputs: in, Outputs: []string{out}, Attrs: map[string]*Attr{}}
		for _, a := range attrs {
			n.Attrs[a.Name] = a
		}
		return n
	}
	alpha := &Attr{Name: "alpha", Type: AttrFloat, F: 0.125}
	g.Nodes = []*Node{
		pmm("qk", []string{"q", "k"}, "s", alpha, heads("axes0"), IntsAttr("axes1", 1, 2, 0)),
		{Name: "sm", OpType: "Softmax", Inputs: []string{"s"}, Outputs: []string{"p"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", -1)}},
		pmm("pv", []string{"p", "v"}, "o", heads("axes1"), heads("permY")),
		pmm("dp", []string{"do", "p", "v"}, "dP", heads("axes0"), heads("axes2"), IntAttr("grad", 1)),
		pmm("dv", []string{"do", "p", "v"}, "dv", heads("axes0"), heads("axes2"), IntAttr("grad", 2), heads("permY")),
		{Name: "sg", OpType: "SoftmaxGrad", Domain: InternalDomain, Inputs: []string{"dP", "p"}, Outputs: []string{"dS0"},
			Attrs: map[string]*Attr{"axis": IntAttr("axis", -1), "coerce": IntAttr("coerce", 0)}},
		{Name: "scale", OpType: "Mul", Inputs: []string{"dS0", "half"}, Outputs: []string{"dS1"}},
		{Name: "same", OpType: "Identity", Inputs: []string{"dS1"}, Outputs: []string{"dS"}},
		pmm("dq", []string{"dS", "q", "k"}, "dq", alpha, heads("axes1"), IntsAttr("axes2", 1, 2, 0), IntAttr("grad", 1), heads("permY")),
		pmm("dk", []string{"dS", "q", "k"}, "dk", alpha, heads("axes1"), IntsAttr("axes2", 1, 2, 0), IntAttr("grad", 2), IntsAttr("permY", 2, 0, 1)),
	}
	g.Outputs = []*ValueInfo{{Name: "o"}, {Name: "dq"}, {Name: "dk"}, {Name: "dv"}}
	if edit != nil {
		byName := map[string]*Node{}
		for _, n := range g.Nodes {
			byName[n.Name] = n
		}
		edit(byName, g)
	}
	return g
}

// TestFuseAttentionSoftmax: the forward becomes one AttentionSoftmax
// (inputs Q, K, V; outputs O and P) and the backward one
// AttentionSoftmaxGrad (dO, P, V, Q, K → dQ, dK, dV, the Mul's scalar as
// its scale), each product's attributes under its prefix; the nodes
// replaced are not changed, and inference gives every output the shape the
// products gave it. A mask added to the scores, a second reader of dP, a
// missing dV, or P read before the values' product leave the forward or
// the backward as they were.
func TestFuseAttentionSoftmax(t *testing.T) {
	g := attentionSoftmaxGraph(nil)
	before, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	orig := append([]*Node(nil), g.Nodes...)
	require.Equal(t, 2, FuseAttentionSoftmax(g, 17))
	require.Len(t, g.Nodes, 2)
	f, b := g.Nodes[0], g.Nodes[1]
	assert.Equal(t, AttentionSoftmax, f.OpType)
	assert.Equal(t, []string{"q", "k", "v"}, f.Inputs)
	assert.Equal(t, []string{"o", "p"}, f.Outputs)
	assert.Equal(t, float32(0.125), f.AttrFloat("qk.alpha", 0))
	assert.Equal(t, []int64{1, 2, 0}, f.AttrInts("qk.axes1", nil))
	assert.Equal(t, []int64{1, 0, 2}, f.AttrInts("pv.permY", nil))
	qk := AttentionProduct(f, AttnQK, []string{"q", "k"}, "s")
	assert.Equal(t, orig[0].Attrs, qk.Attrs, "the prefixed attributes give the product back")
	assert.Equal(t, AttentionSoftmaxGrad, b.OpType)
	assert.Equal(t, []string{"do", "p", "v", "q", "k"}, b.Inputs)
	assert.Equal(t, []string{"dq", "dk", "dv"}, b.Outputs)
	assert.Equal(t, float32(0.5), b.AttrFloat(AttnDSScale, 0))
	assert.Equal(t, []int64{2, 0, 1}, b.AttrInts("dk.permY", nil))
	assert.Equal(t, int64(2), b.AttrInt("dv.grad", 0))
	assert.Equal(t, "Softmax", orig[1].OpType, "the replaced nodes are not changed")
	assert.Equal(t, []string{"o"}, orig[2].Outputs)
	after, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	for _, name := range []string{"o", "p", "dq", "dk", "dv"} {
		require.NotNil(t, after[name], name)
		assert.Equal(t, before[name].String(), after[name].String(), name)
	}

	// Inference: P read by the values' product alone is not an output.
	fwd := attentionSoftmaxGraph(func(_ map[string]*Node, g *Graph) {
		g.Nodes = g.Nodes[:3]
		g.Outputs = g.Outputs[:1]
	})
	require.Equal(t, 1, FuseAttentionSoftmax(fwd, 17))
	assert.Equal(t, []string{"o", ""}, fwd.Nodes[0].Outputs)
	types, err := InferShapes(fwd, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, before["o"].String(), types["o"].String())
	assert.Nil(t, types["pv/attention-scores"], "the omitted P's name does not stay")

	stops := map[string]struct {
		edit func(map[string]*Node, *Graph)
		want int
	}{
		"a mask on the scores": {func(n map[string]*Node, g *Graph) {
			g.Inputs = append(g.Inputs, &ValueInfo{Name: "mask"})
			n["sm"].Inputs = []string{"sm_in"}
			g.Nodes = append(g.Nodes[:1], append([]*Node{{Name: "add", OpType: "Add", Inputs: []string{"s", "mask"}, Outputs: []string{"sm_in"}}}, g.Nodes[1:]...)...)
		}, 0},
		"dP read twice": {func(n map[string]*Node, g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "dP"}) }, 1},
		"no dV": {func(n map[string]*Node, g *Graph) {
			g.Nodes = append(g.Nodes[:4], g.Nodes[5:]...)
			g.Outputs = g.Outputs[:3]
		}, 1},
		"P read before the values' product": {func(n map[string]*Node, g *Graph) {
			g.Nodes = append(g.Nodes[:2], append([]*Node{{Name: "early", OpType: "Relu", Inputs: []string{"p"}, Outputs: []string{"r"}}}, g.Nodes[2:]...)...)
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "r"})
		}, 0},
		"a Softmax over another axis": {func(n map[string]*Node, g *Graph) { n["sm"].Attrs["axis"] = IntAttr("axis", 1) }, 0},
		"dS read by a third node":     {func(n map[string]*Node, g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "dS"}) }, 1},
	}
	for name, c := range stops {
		g := attentionSoftmaxGraph(c.edit)
		assert.Equal(t, c.want, FuseAttentionSoftmax(g, 17), name)
		ops := map[string]int{}
		for _, n := range g.Nodes {
			ops[n.OpType]++
		}
		if c.want == 0 {
			assert.Zero(t, ops[AttentionSoftmax]+ops[AttentionSoftmaxGrad], name)
		} else {
			assert.Equal(t, 1, ops[AttentionSoftmax], name)
			assert.Zero(t, ops[AttentionSoftmaxGrad], name)
			assert.Equal(t, 1, ops["SoftmaxGrad"], name)
		}
	}
}

// causalAttentionGraph is attentionSoftmaxGraph with mask (an
// initializer) added to the scores before the Softmax, shapes inferred;
// edit changes the nodes first.
func causalAttentionGraph(t *testing.T, mask *Tensor, edit func(map[string]*Node, *Graph)) *Graph {
	t.Helper()
	g := attentionSoftmaxGraph(nil)
	g.Initializers["mask"] = mask
	g.Nodes[1].Inputs = []string{"sm_in"}
	g.Nodes = append(g.Nodes[:1], append([]*Node{{Name: "add", OpType: "Add", Inputs: []string{"s", "mask"}, Outputs: []string{"sm_in"}}}, g.Nodes[1:]...)...)
	return editAndInfer(t, g, edit)
}

// upperMask is T×T (with leading ones) holding neg strictly above the
// diagonal and 0 elsewhere.
func upperMask(T int, neg float32, lead ...int) *Tensor {
	d := make([]float32, T*T)
	for i := 0; i < T; i++ {
		for j := i + 1; j < T; j++ {
			d[i*T+j] = neg
		}
	}
	return FromFloat32(d, append(lead, T, T)...)
}

// TestFuseAttentionSoftmaxCausal: a constant causal mask added to the
// scores (either operand order, [T, T] or [1, T, T]) is taken into the
// AttentionSoftmax (causal 1, the Add gone) with the hints that
// MarkCausalAttention would give the unfused products: the scores' lowerY
// with fill −inf and P's lower on the forward; dP's lowerY with fill 0 and
// P's or dS's lower on the gradient's products; −0 for 0 too. A mask
// with a finite value on or below the diagonal, −1e9 for −inf, a mask of
// another size, or masked scores read twice are not fused.
func TestFuseAttentionSoftmaxCausal(t *testing.T) {
	const T = 5 // attentionSoftmaxGraph's heads: 6 of 5×5
	negInf := float32(math.Inf(-1))
	for name, edit := range map[string]func(map[string]*Node, *Graph){
		"mask second":      nil,
		"mask first":       func(n map[string]*Node, _ *Graph) { n["add"].Inputs = []string{"mask", "s"} },
		"mask of rank two": func(_ map[string]*Node, g *Graph) { g.Initializers["mask"] = upperMask(T, negInf) },
		"−0 below the diagonal": func(_ map[string]*Node, g *Graph) {
			g.Initializers["mask"].Float32s()[2*T+1] = float32(math.Copysign(0, -1))
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := causalAttentionGraph(t, upperMask(T, negInf, 1), edit)
			require.Equal(t, 2, FuseAttentionSoftmax(g, 17))
			require.Len(t, g.Nodes, 2)
			f, b := g.Nodes[0], g.Nodes[1]
			require.Equal(t, AttentionSoftmax, f.OpType)
			require.Equal(t, AttentionSoftmaxGrad, b.OpType)
			assert.Equal(t, []string{"q", "k", "v"}, f.Inputs)
			assert.Equal(t, int64(1), f.AttrInt(AttnCausal, 0))
			assert.Equal(t, int64(1), f.AttrInt("qk.lowerY", 0))
			assert.True(t, math.IsInf(float64(f.AttrFloat("qk.fillY", 0)), -1))
			assert.Equal(t, []int64{0}, f.AttrInts("pv.lower", nil))
			assert.Equal(t, int64(1), b.AttrInt("dp.lowerY", 0))
			assert.Equal(t, float32(0), b.AttrFloat("dp.fillY", 1))
			assert.Equal(t, []int64{1}, b.AttrInts("dv.lower", nil))
			assert.Equal(t, []int64{0}, b.AttrInts("dq.lower", nil))
			assert.Equal(t, []int64{0}, b.AttrInts("dk.lower", nil))
			assert.Nil(t, b.Attr(AttnCausal), "the gradient reads P: the mask is in it")
		})
	}
	finite := upperMask(T, negInf, 1)
	finite.Float32s()[3*T+3] = 0.25
	for name, c := range map[string]struct {
		mask *Tensor
		edit func(map[string]*Node, *Graph)
	}{
		"a finite value on the diagonal": {finite, nil},
		"−1e9 for −inf":                  {upperMask(T, -1e9, 1), nil},
		"a mask of another size": {upperMask(T, negInf, 1), func(_ map[string]*Node, g *Graph) {
			g.Initializers["mask"] = upperMask(1, negInf, 1)
		}},
		"masked scores read twice": {upperMask(T, negInf, 1), func(_ map[string]*Node, g *Graph) {
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "sm_in"})
		}},
	} {
		t.Run(name, func(t *testing.T) {
			g := causalAttentionGraph(t, c.mask, c.edit)
			assert.Zero(t, FuseAttentionSoftmax(g, 17))
		})
	}
}

// TestMarkCausalAttentionAfterForwardFused: where the causal forward is
// fused but its gradient is not (here without dV), MarkCausalAttention
// reads the fused node's P as zero above the diagonal and gives the
// unfused gradient's products their hints: dP's lowerY with fill 0, dS's
// products lower.
func TestMarkCausalAttentionAfterForwardFused(t *testing.T) {
	g := causalAttentionGraph(t, upperMask(5, float32(math.Inf(-1)), 1), func(n map[string]*Node, g *Graph) {
		for i, nd := range g.Nodes {
			if nd == n["dv"] {
				g.Nodes = append(g.Nodes[:i], g.Nodes[i+1:]...)
				break
			}
		}
		g.Outputs = g.Outputs[:3]
	})
	require.Equal(t, 1, FuseAttentionSoftmax(g, 17), "the forward alone")
	require.Equal(t, 3, MarkCausalAttention(g, 17))
	byName := map[string]*Node{}
	for _, n := range g.Nodes {
		byName[n.Name] = n
	}
	assert.Equal(t, int64(1), byName["dp"].AttrInt(CausalLowerYAttr, 0))
	assert.Equal(t, float32(0), byName["dp"].AttrFloat(CausalFillYAttr, 1))
	assert.Equal(t, []int64{0}, byName["dq"].AttrInts(CausalLowerAttr, nil))
	assert.Equal(t, []int64{0}, byName["dk"].AttrInts(CausalLowerAttr, nil))
}
