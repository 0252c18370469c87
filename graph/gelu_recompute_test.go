package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecomputeGeluErfGrad: a GeluErfGrad reading its GeluErf's D and A
// becomes GeluErfGradX(dY, X, C1, C2, C3, K), the CastLike that read D for
// its dtype reads X, and the GeluErf keeps Y alone; a GeluErf whose A is
// also a graph output keeps its outputs, and a GeluErfGrad whose X is not
// its GeluErf's stays as it is.
func TestRecomputeGeluErfGrad(t *testing.T) {
	g := NewGraph("recompute")
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(4, 8)}, {Name: "z", Type: f32(4, 8)}, {Name: "dy", Type: f32(4, 8)}}
	g.Initializers = map[string]*Tensor{
		"c1": FromFloat32([]float32{1.4142135}), "c2": FromFloat32([]float32{1}),
		"c3": FromFloat32([]float32{0.5}), "k0": FromFloat32([]float32{1.1283792}),
	}
	gelu := func(p, x string) *Node {
		return &Node{Name: p + "gelu", OpType: GeluErf, Domain: FusedDomain, Inputs: []string{x, "c1", "c2", "c3"}, Outputs: []string{p + "y", p + "d", p + "a"}}
	}
	grad := func(p, x string) *Node {
		return &Node{Name: p + "grad", OpType: GeluErfGrad, Domain: FusedDomain, Inputs: []string{"dy", x, p + "d", p + "a", "c1", "c3", p + "k"}, Outputs: []string{p + "dx"}}
	}
	castK := func(p string) *Node {
		return &Node{Name: p + "k", OpType: "CastLike", Inputs: []string{"k0", p + "d"}, Outputs: []string{p + "k"}}
	}
	g.Nodes = []*Node{
		gelu("a/", "x"), castK("a/"), grad("a/", "x"),
		gelu("b/", "x"), castK("b/"), grad("b/", "x"), // b/a is also an output
		gelu("c/", "x"), castK("c/"), grad("c/", "z"), // reads another X
	}
	g.Outputs = []*ValueInfo{{Name: "a/y"}, {Name: "a/dx"}, {Name: "b/y"}, {Name: "b/dx"}, {Name: "b/a"}, {Name: "c/y"}, {Name: "c/dx"}}
	require.Equal(t, 2, RecomputeGeluErfGrad(g))
	byName := map[string]*Node{}
	for _, n := range g.Nodes {
		byName[n.Name] = n
	}
	assert.Equal(t, GeluErfGradX, byName["a/grad"].OpType)
	assert.Equal(t, []string{"dy", "x", "c1", "c2", "c3", "a/k"}, byName["a/grad"].Inputs)
	assert.Equal(t, []string{"k0", "x"}, byName["a/k"].Inputs)
	assert.Equal(t, []string{"a/y", "", ""}, byName["a/gelu"].Outputs)
	assert.Equal(t, GeluErfGradX, byName["b/grad"].OpType)
	assert.Equal(t, []string{"b/y", "b/d", "b/a"}, byName["b/gelu"].Outputs, "A is a graph output")
	assert.Equal(t, GeluErfGrad, byName["c/grad"].OpType)
	assert.Equal(t, []string{"c/y", "c/d", "c/a"}, byName["c/gelu"].Outputs, "its gradient still reads D and A")
	assert.Zero(t, RecomputeGeluErfGrad(g), "nothing left to rewrite")
}

// TestDropSameShapeSumToShape: SumToShape(G, Like) of one known shape
// becomes Identity(G), no longer reading Like; one that sums, or whose
// shapes are not both known, stays.
func TestDropSameShapeSumToShape(t *testing.T) {
	g := NewGraph("sums")
	g.Inputs = []*ValueInfo{{Name: "g", Type: f32(4, 8)}, {Name: "like", Type: f32(4, 8)}, {Name: "row", Type: f32(1, 8)},
		{Name: "unknown"}}
	for _, in := range g.Inputs[:3] { // as Specialize records them
		g.ValueInfo[in.Name] = in
	}
	sum := func(name, like string) *Node {
		return &Node{Name: name, OpType: "SumToShape", Domain: InternalDomain, Inputs: []string{"g", like}, Outputs: []string{name}}
	}
	g.Nodes = []*Node{sum("same", "like"), sum("sums", "row"), sum("open", "unknown")}
	g.Outputs = []*ValueInfo{{Name: "same"}, {Name: "sums"}, {Name: "open"}}
	require.Equal(t, 1, DropSameShapeSumToShape(g))
	assert.Equal(t, "Identity", g.Nodes[0].OpType)
	assert.Equal(t, "", g.Nodes[0].Domain)
	assert.Equal(t, []string{"g"}, g.Nodes[0].Inputs)
	assert.Equal(t, "SumToShape", g.Nodes[1].OpType)
	assert.Equal(t, []string{"g", "row"}, g.Nodes[1].Inputs)
	assert.Equal(t, "SumToShape", g.Nodes[2].OpType)
}
