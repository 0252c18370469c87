package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// attentionConcatGraph is attentionSoftmaxGraph after
// FuseAttentionSoftmax, with dQ, dK and dV reshaped from [T, B·H, D] to
// [T, B, H·D] and joined along the last axis, as nn.MultiheadAttention's
// packed in-projection reads them; edit changes the nodes (by name)
// before shapes are inferred into ValueInfo.
func attentionConcatGraph(t *testing.T, edit func(nodes map[string]*Node, g *Graph)) *Graph {
	t.Helper()
	g := attentionSoftmaxGraph(nil)
	require.Equal(t, 2, FuseAttentionSoftmax(g, 17))
	const T, B, HD = 5, 2, 12 // attentionSoftmaxGraph's [5, 6, 4] as 2 images × 3 heads
	g.Initializers["part"] = FromInt64([]int64{T, B, HD}, 3)
	for _, v := range []string{"dq", "dk", "dv"} {
		g.Nodes = append(g.Nodes, &Node{Name: "r" + v, OpType: "Reshape", Inputs: []string{v, "part"}, Outputs: []string{v + "r"}})
	}
	g.Nodes = append(g.Nodes, &Node{Name: "cat", OpType: "Concat", Inputs: []string{"dqr", "dkr", "dvr"}, Outputs: []string{"dqkv"},
		Attrs: map[string]*Attr{"axis": IntAttr("axis", 2)}})
	g.Outputs = []*ValueInfo{{Name: "o"}, {Name: "dqkv"}}
	return editAndInfer(t, g, edit)
}

// TestFuseAttentionGradConcat: the Concat of the three reshaped gradients
// becomes one AttentionSoftmaxGradConcat in the place of the
// AttentionSoftmaxGrad (its inputs and attributes, the Concat's output and
// shape), the nodes replaced unchanged, and inference gives its output the
// Concat's shape. Gradients in another order, a reshaped gradient read
// twice, a Concat along another axis or of two gradients are left alone.
func TestFuseAttentionGradConcat(t *testing.T) {
	g := attentionConcatGraph(t, nil)
	want := g.ValueInfo["dqkv"].Type.String()
	grad := g.Nodes[1]
	require.Equal(t, AttentionSoftmaxGrad, grad.OpType)
	require.Equal(t, 1, FuseAttentionGradConcat(g))
	require.Len(t, g.Nodes, 2)
	f := g.Nodes[1]
	assert.Equal(t, AttentionSoftmaxGradConcat, f.OpType)
	assert.Equal(t, FusedDomain, f.Domain)
	assert.Equal(t, grad.Inputs, f.Inputs)
	assert.Equal(t, []string{"dqkv"}, f.Outputs)
	assert.Equal(t, []int64{5, 2, 36}, f.AttrInts("shape", nil))
	assert.Equal(t, grad.AttrInts("dk.permY", nil), f.AttrInts("dk.permY", nil), "the gradient's attributes kept")
	assert.Equal(t, []string{"dq", "dk", "dv"}, grad.Outputs, "the replaced node is not changed")
	assert.Nil(t, grad.Attr("shape"))
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	require.NotNil(t, types["dqkv"])
	assert.Equal(t, want, types["dqkv"].String())

	for name, edit := range map[string]func(map[string]*Node, *Graph){
		"k before q": func(n map[string]*Node, g *Graph) {
			n["cat"].Inputs = []string{"dkr", "dqr", "dvr"}
		},
		"a reshaped gradient read twice": func(n map[string]*Node, g *Graph) {
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "dkr"})
		},
		"a gradient read twice": func(n map[string]*Node, g *Graph) {
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "dv"})
		},
		"another axis": func(n map[string]*Node, g *Graph) {
			n["cat"].Attrs = map[string]*Attr{"axis": IntAttr("axis", 1)}
		},
		"two gradients": func(n map[string]*Node, g *Graph) {
			n["cat"].Inputs = []string{"dqr", "dkr"}
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "dvr"})
		},
	} {
		g := attentionConcatGraph(t, edit)
		n := len(g.Nodes)
		assert.Zero(t, FuseAttentionGradConcat(g), name)
		assert.Len(t, g.Nodes, n, name)
	}
}

// attentionPackedGraph is attentionSoftmaxGraph after FuseAttentionSoftmax
// with q, k and v cut from one input x [5, 2, 36] as nn.MultiheadAttention
// exports them: three Slices of the last axis, each reshaped to [5, 6, 4];
// edit changes the nodes (by name) before shapes are inferred into
// ValueInfo.
func attentionPackedGraph(t *testing.T, edit func(nodes map[string]*Node, g *Graph)) *Graph {
	t.Helper()
	g := attentionSoftmaxGraph(nil)
	require.Equal(t, 2, FuseAttentionSoftmax(g, 17))
	g.Inputs = append([]*ValueInfo{{Name: "x", Type: f32(5, 2, 36)}}, g.Inputs[3:]...) // x, do
	g.Initializers["heads"] = FromInt64([]int64{5, 6, 4}, 3)
	g.Initializers["axis"] = FromInt64([]int64{-1}, 1)
	var cut []*Node
	for i, v := range []string{"q", "k", "v"} {
		g.Initializers[v+"0"] = FromInt64([]int64{int64(12 * i)}, 1)
		g.Initializers[v+"1"] = FromInt64([]int64{int64(12 * (i + 1))}, 1)
		cut = append(cut,
			&Node{Name: "slice" + v, OpType: "Slice", Inputs: []string{"x", v + "0", v + "1", "axis"}, Outputs: []string{v + "s"}},
			&Node{Name: "reshape" + v, OpType: "Reshape", Inputs: []string{v + "s", "heads"}, Outputs: []string{v}})
	}
	g.Nodes = append(cut, g.Nodes...)
	return editAndInfer(t, g, edit)
}

// TestFuseAttentionPackedQKV: the Slices and Reshapes of q, k and v go,
// the AttentionSoftmax and its gradient read x in their place with the
// parts' shape as packed_qkv (copies: the replaced nodes are unchanged),
// and inference gives every output the shape it had. Slices out of order,
// of two tensors, with a step, a part read by a third node, or parts
// whose rows would cross x's thirds leave the graph alone.
func TestFuseAttentionPackedQKV(t *testing.T) {
	g := attentionPackedGraph(t, nil)
	before := map[string]string{}
	for _, name := range []string{"o", "p", "dq", "dk", "dv"} {
		before[name] = g.ValueInfo[name].Type.String()
	}
	fwd, grad := g.Nodes[6], g.Nodes[7]
	require.Equal(t, AttentionSoftmax, fwd.OpType)
	require.Equal(t, AttentionSoftmaxGrad, grad.OpType)
	require.Equal(t, 1, FuseAttentionPackedQKV(g))
	require.Len(t, g.Nodes, 2)
	f, b := g.Nodes[0], g.Nodes[1]
	assert.Equal(t, []string{"x", "x", "x"}, f.Inputs)
	assert.Equal(t, []string{"do", "p", "x", "x", "x"}, b.Inputs)
	for _, n := range []*Node{f, b} {
		assert.Equal(t, []int64{5, 6, 4}, n.AttrInts(AttnPackedQKV, nil))
	}
	assert.Equal(t, []string{"q", "k", "v"}, fwd.Inputs, "the replaced node is not changed")
	assert.Nil(t, grad.Attr(AttnPackedQKV))
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	for name, want := range before {
		require.NotNil(t, types[name], name)
		assert.Equal(t, want, types[name].String(), name)
	}
	assert.Nil(t, types[f.Name+"/packed-part"], "the parts' name does not stay")

	for name, edit := range map[string]func(map[string]*Node, *Graph){
		"k and q swapped": func(n map[string]*Node, g *Graph) {
			n["sliceq"].Inputs[1], n["sliceq"].Inputs[2] = "k0", "k1"
			n["slicek"].Inputs[1], n["slicek"].Inputs[2] = "q0", "q1"
		},
		"v cut from another tensor": func(n map[string]*Node, g *Graph) {
			g.Inputs = append(g.Inputs, &ValueInfo{Name: "x2", Type: f32(5, 2, 36)})
			n["slicev"].Inputs[0] = "x2"
		},
		"a step of 2": func(n map[string]*Node, g *Graph) {
			g.Initializers["two"] = FromInt64([]int64{2}, 1)
			g.Initializers["k1"] = FromInt64([]int64{36}, 1)
			n["slicek"].Inputs = append(n["slicek"].Inputs, "two")
		},
		"q read by a third node": func(n map[string]*Node, g *Graph) {
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "q"})
		},
		"rows across the thirds": func(n map[string]*Node, g *Graph) {
			// x [5, 4, 18]: thirds of 6, rows of 4.
			g.Inputs[0] = &ValueInfo{Name: "x", Type: f32(5, 4, 18)}
			for i, v := range []string{"q", "k", "v"} {
				g.Initializers[v+"0"] = FromInt64([]int64{int64(6 * i)}, 1)
				g.Initializers[v+"1"] = FromInt64([]int64{int64(6 * (i + 1))}, 1)
			}
		},
	} {
		g := attentionPackedGraph(t, edit)
		n := len(g.Nodes)
		assert.Zero(t, FuseAttentionPackedQKV(g), name)
		assert.Len(t, g.Nodes, n, name)
	}
}

// editAndInfer applies edit to g's nodes (by name) and records the
// inferred shapes in g.ValueInfo, as specialisation leaves them.
func editAndInfer(t *testing.T, g *Graph, edit func(nodes map[string]*Node, g *Graph)) *Graph {
	t.Helper()
	byName := map[string]*Node{}
	for _, n := range g.Nodes {
		byName[n.Name] = n
	}
	if edit != nil {
		edit(byName, g)
	}
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	for name, ty := range types {
		g.ValueInfo[name] = &ValueInfo{Name: name, Type: ty}
	}
	return g
}
