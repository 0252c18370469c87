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
