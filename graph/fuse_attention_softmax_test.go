package graph

import (
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
