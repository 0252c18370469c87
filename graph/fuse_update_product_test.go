package graph

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFuseUpdateProduct: a weight's SGD update whose gradient is a
// MatMulGradB over the batch behind an Identity becomes SGDUpdateProduct
// reading A and dY (the product and the Identity gone; the momentum buffer
// kept), an Adam update AdamUpdateProduct, and through the per-tensor
// ClipGradNorm with an infinite max_norm the fused node takes it in
// (norm=1); left alone when the weight is under the size given, the
// max_norm is finite, the gradient has another reader, A and dY have
// different rows, the product's operand is updated in place before the
// update, the product is another weight's, or X is not a matrix.
func TestFuseUpdateProduct(t *testing.T) {
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("lin")
		g.Inputs = []*ValueInfo{{Name: "w", Type: f32(6, 4)}, {Name: "b", Type: f32(6, 4)}, {Name: "c", Type: f32(2)}, {Name: "h", Type: f32(1, 3)}}
		for name, ty := range map[string]*Type{"w": f32(6, 4), "a": f32(2, 3, 6), "dy": f32(2, 3, 4), "v": f32(6, 4)} {
			g.ValueInfo[name] = &ValueInfo{Name: name, Type: ty}
		}
		g.Initializers["max"] = Scalar(Float32, math.Inf(1))
		g.Nodes = []*Node{
			{Name: "pa", OpType: "Relu", Inputs: []string{"x0"}, Outputs: []string{"a"}},
			{Name: "pd", OpType: "Relu", Inputs: []string{"y0"}, Outputs: []string{"dy"}},
			{Name: "gb", OpType: "MatMulGradB", Domain: InternalDomain, Inputs: []string{"dy", "a", "w"}, Outputs: []string{"gw"}},
			{Name: "id", OpType: "Identity", Inputs: []string{"gw"}, Outputs: []string{"grad/w"}},
			{Name: "upd", OpType: SGDUpdateOp, Domain: InternalDomain, Inputs: []string{"c", "h", "w", "grad/w", "b"}, Outputs: []string{"w1", "b1"},
				Attrs: map[string]*Attr{"tensors": IntAttr("tensors", 1), "momentum": IntAttr("momentum", 1)}},
		}
		g.Outputs = []*ValueInfo{{Name: "w1"}, {Name: "b1"}}
		if edit != nil {
			edit(g)
		}
		return g
	}
	g := build(nil)
	require.Equal(t, 1, FuseUpdateProduct(g, 0))
	require.Len(t, g.Nodes, 3)
	n := g.Nodes[2]
	assert.Equal(t, SGDUpdateProductOp, n.OpType)
	assert.Equal(t, []string{"c", "h", "a", "w", "dy", "b"}, n.Inputs)
	assert.Equal(t, []int{3, 5}, UpdatedInput(n), "X' replaces X, B' replaces B")
	assert.True(t, IsParamUpdate(n))

	g = build(func(g *Graph) {
		u := g.Nodes[4]
		u.OpType = AdamUpdateOp
		u.Inputs = []string{"c", "h", "w", "grad/w", "m", "v"}
		u.Outputs = []string{"w1", "m1", "v1"}
		u.Attrs = map[string]*Attr{"tensors": IntAttr("tensors", 1)}
	})
	require.Equal(t, 1, FuseUpdateProduct(g, 0))
	assert.Equal(t, AdamUpdateProductOp, g.Nodes[2].OpType)
	assert.Equal(t, []string{"c", "h", "a", "w", "dy", "m", "v"}, g.Nodes[2].Inputs)

	clipped := func(max string) func(g *Graph) {
		return func(g *Graph) {
			g.Nodes[4].Inputs[3] = "grad/w/normed"
			clip := &Node{Name: "norm", OpType: ClipGradNormOp, Domain: InternalDomain, Inputs: []string{max, "grad/w"},
				Outputs: []string{"norm/w", "grad/w/normed"}, Attrs: map[string]*Attr{"tensors": IntAttr("tensors", 1)}}
			g.Nodes = []*Node{g.Nodes[0], g.Nodes[1], g.Nodes[2], g.Nodes[3], clip, g.Nodes[4]}
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "norm/w"})
			g.Initializers["one"] = Scalar(Float32, 1)
		}
	}
	g = build(clipped("max"))
	require.Equal(t, 1, FuseUpdateProduct(g, 0))
	n = g.Nodes[len(g.Nodes)-1]
	assert.Equal(t, []string{"c", "h", "max", "a", "w", "dy", "b"}, n.Inputs)
	assert.Equal(t, []string{"norm/w", "w1", "b1"}, n.Outputs)
	assert.Equal(t, int64(1), n.AttrInt("norm", 0))

	for name, c := range map[string]struct {
		min  int64
		edit func(g *Graph)
	}{
		"under the size": {6*4*4 + 1, nil},
		"a finite max":   {0, clipped("one")},
		"another reader": {0, func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "gw"}) }},
		"rows differ":    {0, func(g *Graph) { g.ValueInfo["dy"].Type = f32(3, 2, 4) }},
		"another weight": {0, func(g *Graph) { g.Nodes[2].Inputs[2] = "v" }},
		"not a matrix":   {0, func(g *Graph) { g.ValueInfo["w"].Type = f32(6, 4, 1) }},
		"A updated before": {0, func(g *Graph) {
			u := &Node{Name: "ua", OpType: SGDUpdateOp, Domain: InternalDomain, Inputs: []string{"c", "h", "a", "dy"}, Outputs: []string{"a1"},
				Attrs: map[string]*Attr{"tensors": IntAttr("tensors", 1)}}
			g.Nodes = []*Node{g.Nodes[0], g.Nodes[1], g.Nodes[2], u, g.Nodes[3], g.Nodes[4]}
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "a1"})
		}},
	} {
		g := build(c.edit)
		nodes := len(g.Nodes)
		assert.Zero(t, FuseUpdateProduct(g, c.min), name)
		assert.Len(t, g.Nodes, nodes, name)
	}
}
