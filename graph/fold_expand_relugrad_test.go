package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFoldExpandIntoReluGrad: the Expand of a global pool's gradient read
// only by a ReluGrad is dropped, the ReluGrad reading its input; not when
// the Expand is read twice or is an output, when it makes a shape other
// than X's, when G does not broadcast to X, or when a dtype differs.
func TestFoldExpandIntoReluGrad(t *testing.T) {
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("gapgrad")
		g.Inputs = []*ValueInfo{{Name: "g", Type: f32(2, 3, 1, 1)}, {Name: "x", Type: f32(2, 3, 4, 5)}}
		g.Initializers["s"] = FromInt64([]int64{2, 3, 4, 5}, 4)
		g.Nodes = []*Node{
			{Name: "e", OpType: "Expand", Inputs: []string{"g", "s"}, Outputs: []string{"e"}},
			{Name: "r", OpType: ReluGrad, Domain: FusedDomain, Inputs: []string{"e", "x"}, Outputs: []string{"dx"}},
		}
		g.Outputs = []*ValueInfo{{Name: "dx"}}
		g.ValueInfo["g"] = &ValueInfo{Name: "g", Type: f32(2, 3, 1, 1)}
		for _, n := range []string{"x", "e", "dx"} {
			g.ValueInfo[n] = &ValueInfo{Name: n, Type: f32(2, 3, 4, 5)}
		}
		if edit != nil {
			edit(g)
		}
		return g
	}
	g := build(nil)
	orig := g.Nodes[1]
	assert.Equal(t, 1, FoldExpandIntoReluGrad(g))
	if assert.Len(t, g.Nodes, 1) {
		assert.Equal(t, ReluGrad, g.Nodes[0].OpType)
		assert.Equal(t, []string{"g", "x"}, g.Nodes[0].Inputs)
		assert.Equal(t, []string{"dx"}, g.Nodes[0].Outputs)
	}
	assert.Equal(t, []string{"e", "x"}, orig.Inputs, "the original node is not changed")

	g = build(func(g *Graph) {
		g.Nodes = append(g.Nodes, &Node{Name: "i", OpType: "Identity", Inputs: []string{"e"}, Outputs: []string{"e2"}})
		g.Outputs = append(g.Outputs, &ValueInfo{Name: "e2"})
	})
	assert.Equal(t, 0, FoldExpandIntoReluGrad(g), "Expand read twice")
	g = build(func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "e"}) })
	assert.Equal(t, 0, FoldExpandIntoReluGrad(g), "Expand an output")
	g = build(func(g *Graph) {
		g.ValueInfo["x"] = &ValueInfo{Name: "x", Type: f32(2, 3, 4, 1)}
		g.ValueInfo["e"] = &ValueInfo{Name: "e", Type: f32(2, 3, 4, 5)}
	})
	assert.Equal(t, 0, FoldExpandIntoReluGrad(g), "Expand wider than X")
	g = build(func(g *Graph) { g.ValueInfo["g"] = &ValueInfo{Name: "g", Type: f32(2, 2, 1, 1)} })
	assert.Equal(t, 0, FoldExpandIntoReluGrad(g), "G does not broadcast to X")
	g = build(func(g *Graph) {
		bf := *f32(2, 3, 1, 1)
		bf.DType = BFloat16
		g.ValueInfo["g"] = &ValueInfo{Name: "g", Type: &bf}
	})
	assert.Equal(t, 0, FoldExpandIntoReluGrad(g), "G of another dtype")
	g = build(func(g *Graph) { delete(g.ValueInfo, "e") })
	assert.Equal(t, 0, FoldExpandIntoReluGrad(g), "Expand's shape unknown")
}
