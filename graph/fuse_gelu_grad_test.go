package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// geluGradNodes is a GeluErf and its gradient chain as the rules emit it
// (Identities where same-shape SumToShapes were), with prefix p.
func geluGradNodes(p string) []*Node {
	mul := func(name, a, b string) *Node {
		return &Node{Name: p + name, OpType: "Mul", Inputs: []string{a, b}, Outputs: []string{p + name}}
	}
	id := func(name, a string) *Node {
		return &Node{Name: p + name, OpType: "Identity", Inputs: []string{a}, Outputs: []string{p + name}}
	}
	return []*Node{
		{Name: p + "gelu", OpType: GeluErf, Domain: FusedDomain, Inputs: []string{"x", "c1", "c2", "c3"}, Outputs: []string{p + "y", p + "d", p + "a"}},
		mul("m", "dy", "c3"),
		id("mi", p+"m"),
		mul("ma", p+"mi", p+"a"),
		mul("mx", "x", p+"mi"),
		id("mai", p+"ma"),
		id("mxi", p+"mx"),
		{Name: p + "eg", OpType: ErfGrad, Domain: FusedDomain, Inputs: []string{p + "mxi", p + "d", "k"}, Outputs: []string{p + "eg"}},
		{Name: p + "div", OpType: "Div", Inputs: []string{p + "eg", "c1"}, Outputs: []string{p + "div"}},
		{Name: p + "dx", OpType: "Add", Inputs: []string{p + "div", p + "mai"}, Outputs: []string{p + "dx"}},
	}
}

// TestFuseGeluErfGrad: the chain fuses into one GeluErfGrad(dY, X, D, A,
// C1, C3, K) at the Add, its Identities removed; a chain whose M·X is also
// a graph output does not.
func TestFuseGeluErfGrad(t *testing.T) {
	g := NewGraph("gelugrad")
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(4, 8)}, {Name: "dy", Type: f32(4, 8)}}
	g.Initializers = map[string]*Tensor{
		"c1": FromFloat32([]float32{1.4142135}), "c2": FromFloat32([]float32{1}),
		"c3": FromFloat32([]float32{0.5}), "k": FromFloat32([]float32{1.1283792}),
	}
	g.Nodes = append(geluGradNodes("a/"), geluGradNodes("b/")...)
	g.Outputs = []*ValueInfo{{Name: "a/y"}, {Name: "a/dx"}, {Name: "b/y"}, {Name: "b/dx"}, {Name: "b/mx"}}
	assert.Equal(t, 1, FuseGeluErfGrad(g))
	ops := map[string]int{}
	for _, n := range g.Nodes {
		ops[n.OpType]++
		if n.OpType == GeluErfGrad {
			assert.Equal(t, []string{"dy", "x", "a/d", "a/a", "c1", "c3", "k"}, n.Inputs)
			assert.Equal(t, []string{"a/dx"}, n.Outputs)
		}
	}
	assert.Equal(t, map[string]int{GeluErf: 2, GeluErfGrad: 1, "Mul": 3, "Identity": 3, ErfGrad: 1, "Div": 1, "Add": 1}, ops)
}
