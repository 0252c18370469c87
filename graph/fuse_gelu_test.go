package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// geluChain is PyTorch's export of nn.GELU() on x, with a reader of D
// (as the gradient's CastLike) between the Div and the Erf; c3 is defined by
// a Constant node after the Div when lateConst is set.
func geluChain(lateConst bool) *Graph {
	g := NewGraph("gelu")
	g.Inputs = []*ValueInfo{{Name: "x"}}
	g.Initializers = map[string]*Tensor{
		"c1": FromFloat32([]float32{1.4142135}),
		"c2": FromFloat32([]float32{1}),
	}
	c3 := &Node{Name: "c3", OpType: "Constant", Outputs: []string{"c3"}}
	c3.SetAttr(&Attr{Name: "value", Type: AttrTensor, T: FromFloat32([]float32{0.5})})
	nodes := []*Node{
		{Name: "d", OpType: "Div", Inputs: []string{"x", "c1"}, Outputs: []string{"d"}},
		{Name: "early", OpType: "CastLike", Inputs: []string{"c2", "d"}, Outputs: []string{"early"}},
		{Name: "e", OpType: "Erf", Inputs: []string{"d"}, Outputs: []string{"e"}},
		{Name: "a", OpType: "Add", Inputs: []string{"e", "c2"}, Outputs: []string{"a"}},
		{Name: "m", OpType: "Mul", Inputs: []string{"x", "a"}, Outputs: []string{"m"}},
		{Name: "y", OpType: "Mul", Inputs: []string{"m", "c3"}, Outputs: []string{"y"}},
		{Name: "late", OpType: "Mul", Inputs: []string{"a", "d"}, Outputs: []string{"late"}},
	}
	if lateConst {
		g.Nodes = append([]*Node{nodes[0], c3}, nodes[1:]...)
	} else {
		g.Nodes = append([]*Node{c3}, nodes...)
	}
	g.Outputs = []*ValueInfo{{Name: "y"}, {Name: "early"}, {Name: "late"}}
	return g
}

// TestFuseGeluErfPlacement: the fused node takes the Div's place when its
// scalars are defined by then (a reader of D in between is fine); when C3
// comes after the Div and D is read before the final Mul, the chain stays.
func TestFuseGeluErfPlacement(t *testing.T) {
	g := geluChain(false)
	require.Equal(t, 1, FuseGeluErf(g))
	var ops []string
	for _, n := range g.Nodes {
		ops = append(ops, n.OpType)
	}
	assert.Equal(t, []string{"Constant", GeluErf, "CastLike", "Mul"}, ops)
	f := g.Nodes[1]
	assert.Equal(t, FusedDomain, f.Domain)
	assert.Equal(t, []string{"x", "c1", "c2", "c3"}, f.Inputs)
	assert.Equal(t, []string{"y", "d", "a"}, f.Outputs)

	g = geluChain(true)
	assert.Equal(t, 0, FuseGeluErf(g))
	assert.Len(t, g.Nodes, 8)
}
