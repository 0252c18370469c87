package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// permutedTransposeGraph is the queries' gradient after specialisation: a
// PermutedMatMul (grad 1, alpha) → Identity (the Div's same-shape
// SumToShape, dropped) → Transpose(1, 0, 2) → out. extra nodes are added
// at the end.
func permutedTransposeGraph(extra ...*Node) *Graph {
	g := NewGraph("dq")
	f32 := func(dims ...int64) *Type {
		t := &Type{Kind: KindTensor, DType: Float32, HasShape: true}
		for _, d := range dims {
			t.Shape = append(t.Shape, knownDim(d))
		}
		return t
	}
	g.Inputs = []*ValueInfo{{Name: "ds", Type: f32(6, 5, 5)}, {Name: "q", Type: f32(5, 6, 4)}, {Name: "k", Type: f32(5, 6, 4)}}
	g.Nodes = []*Node{
		{Name: "dq", OpType: PermutedMatMul, Domain: FusedDomain, Inputs: []string{"ds", "q", "k"}, Outputs: []string{"dq"},
			Attrs: map[string]*Attr{"grad": IntAttr("grad", 1), "alpha": {Name: "alpha", Type: AttrFloat, F: 0.125},
				"axes1": IntsAttr("axes1", 1, 0, 2), "axes2": IntsAttr("axes2", 1, 2, 0)}},
		{Name: "same", OpType: "Identity", Inputs: []string{"dq"}, Outputs: []string{"dq_id"}},
		{Name: "back", OpType: "Transpose", Inputs: []string{"dq_id"}, Outputs: []string{"out"}, Attrs: map[string]*Attr{"perm": IntsAttr("perm", 1, 0, 2)}},
	}
	g.Nodes = append(g.Nodes, extra...)
	g.Outputs = []*ValueInfo{{Name: "out"}}
	return g
}

// TestFusePermutedTranspose: the Transpose and the Identity before it go,
// a copy of the product takes the Transpose's perm as its permY and writes
// the Transpose's output (the node it replaces, which the graph it was
// specialised from may share, is not changed). A second reader of the Identity, a product that has a permY
// already, or a product's result read twice leave the graph as it was.
func TestFusePermutedTranspose(t *testing.T) {
	g := permutedTransposeGraph()
	orig := g.Nodes[0]
	require.Equal(t, 1, FusePermutedTranspose(g))
	require.Len(t, g.Nodes, 1)
	p := g.Nodes[0]
	assert.NotSame(t, orig, p, "a new node: the graph specialised from may share the old one")
	assert.Equal(t, []string{"dq"}, orig.Outputs)
	assert.Equal(t, []string{"out"}, p.Outputs)
	assert.Equal(t, []int64{1, 0, 2}, p.AttrInts("permY", nil))
	assert.Equal(t, float32(0.125), p.AttrFloat("alpha", 1))
	assert.Nil(t, orig.Attrs["permY"], "the attribute map the node came with is not changed")
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[5,6,4]", types["out"].String(), "permY gives the Transpose's shape")

	stops := map[string]*Graph{
		"a second reader":       permutedTransposeGraph(&Node{Name: "other", OpType: "Relu", Inputs: []string{"dq_id"}, Outputs: []string{"r"}}),
		"the result read twice": permutedTransposeGraph(&Node{Name: "other", OpType: "Relu", Inputs: []string{"dq"}, Outputs: []string{"r"}}),
	}
	has := permutedTransposeGraph()
	has.Nodes[0].Attrs["permY"] = IntsAttr("permY", 1, 0, 2)
	stops["a permY already"] = has
	for name, g := range stops {
		n := len(g.Nodes)
		assert.Zero(t, FusePermutedTranspose(g), name)
		assert.Len(t, g.Nodes, n, name)
	}
}
