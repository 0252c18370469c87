package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// mlpGeluNodes is a specialised MLP block with prefix p as the pipeline
// leaves it before the epilogue fusions: MatMulAdd → GeluErf (Y alone) →
// the second layer, and in backward the product making dY, the GeluErf
// copy the weight gradient reads, the weight gradient and GeluErfGradX.
func mlpGeluNodes(p string) []*Node {
	tm := func(name string, a, b string, tb int64) *Node {
		return &Node{Name: p + name, OpType: TransposedMatMul, Domain: FusedDomain, Inputs: []string{a, b}, Outputs: []string{p + name},
			Attrs: map[string]*Attr{"transA": {Name: "transA", Type: AttrInt}, "transB": {Name: "transB", Type: AttrInt, I: tb}}}
	}
	gelu := func(name, x string) *Node {
		return &Node{Name: p + name, OpType: GeluErf, Domain: FusedDomain, Inputs: []string{x, "c1", "c2", "c3"}, Outputs: []string{p + name, "", ""}}
	}
	return []*Node{
		{Name: p + "h", OpType: MatMulAdd, Domain: FusedDomain, Inputs: []string{"x", "w1", "b1"}, Outputs: []string{p + "h"},
			Attrs: map[string]*Attr{"transA": {Name: "transA", Type: AttrInt}, "transB": {Name: "transB", Type: AttrInt, I: 1}}},
		gelu("y", p+"h"),
		{Name: p + "k", OpType: "CastLike", Inputs: []string{"k0", p + "h"}, Outputs: []string{p + "k"}},
		tm("o", p+"y", "w2", 1),
		tm("dg", "dy", "w2", 0),
		gelu("yr", p+"h"),
		{Name: p + "dw2", OpType: "MatMulGradB", Domain: InternalDomain, Inputs: []string{p + "yr", "dy", "w2"}, Outputs: []string{p + "dw2"}},
		{Name: p + "dh", OpType: GeluErfGradX, Domain: FusedDomain, Inputs: []string{p + "dg", p + "h", "c1", "c2", "c3", p + "k"}, Outputs: []string{p + "dh"}},
	}
}

// TestFuseMatMulGelu: the forward GELU joins its MatMulAdd (outputs P and
// Y, at the GeluErf's place), and the GELU's gradient and the recomputed
// Y join the product that makes dY (at the product's place); the CastLike
// K and the weight gradient read what they read before.
func TestFuseMatMulGelu(t *testing.T) {
	g := NewGraph("mlp")
	g.Initializers = map[string]*Tensor{
		"c1": FromFloat32([]float32{1.4142135}), "c2": FromFloat32([]float32{1}),
		"c3": FromFloat32([]float32{0.5}), "k0": FromFloat32([]float32{1.1283792}),
	}
	g.Inputs = []*ValueInfo{{Name: "x"}, {Name: "w1"}, {Name: "b1"}, {Name: "w2"}, {Name: "dy"}}
	g.Nodes = mlpGeluNodes("a/")
	g.Outputs = []*ValueInfo{{Name: "a/o"}, {Name: "a/dw2"}, {Name: "a/dh"}}
	typeAll(g)
	assert.Equal(t, 1, FuseMatMulAddGeluErf(g))
	assert.Equal(t, 1, FuseMatMulGeluErfGrad(g))
	var ops []string
	for _, n := range g.Nodes {
		ops = append(ops, n.OpType)
	}
	assert.Equal(t, []string{MatMulAddGeluErf, "CastLike", TransposedMatMul, MatMulGeluErfGrad, "MatMulGradB"}, ops)
	f := g.Nodes[0]
	assert.Equal(t, []string{"x", "w1", "b1", "c1", "c2", "c3"}, f.Inputs)
	assert.Equal(t, []string{"a/h", "a/y"}, f.Outputs)
	assert.Equal(t, int64(1), f.AttrInt("transB", 0))
	b := g.Nodes[3]
	assert.Equal(t, []string{"dy", "w2", "a/h", "c1", "c2", "c3", "a/k"}, b.Inputs)
	assert.Equal(t, []string{"a/dh", "a/yr"}, b.Outputs)
	assert.Equal(t, []string{"a/yr", "dy", "w2"}, g.Nodes[4].Inputs)
}

// TestFuseMatMulGeluLeavesOthers: no forward fusion when a node between
// the MatMulAdd and the GeluErf reads P; no backward fusion when dY is
// also read elsewhere or is a graph output, or when K is made after the
// product; and without a recomputed copy the fused gradient's Y output is
// unnamed.
func TestFuseMatMulGeluLeavesOthers(t *testing.T) {
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("mlp")
		g.Initializers = map[string]*Tensor{
			"c1": FromFloat32([]float32{1.4142135}), "c2": FromFloat32([]float32{1}),
			"c3": FromFloat32([]float32{0.5}), "k0": FromFloat32([]float32{1.1283792}),
		}
		g.Inputs = []*ValueInfo{{Name: "x"}, {Name: "w1"}, {Name: "b1"}, {Name: "w2"}, {Name: "dy"}}
		g.Nodes = mlpGeluNodes("a/")
		g.Outputs = []*ValueInfo{{Name: "a/o"}, {Name: "a/dw2"}, {Name: "a/dh"}}
		typeAll(g)
		edit(g)
		return g
	}
	// A reader of P between the two.
	g := build(func(g *Graph) {
		r := &Node{Name: "peek", OpType: "Relu", Inputs: []string{"a/h"}, Outputs: []string{"peek"}}
		g.Nodes = append([]*Node{g.Nodes[0], r}, g.Nodes[1:]...)
		g.Outputs = append(g.Outputs, &ValueInfo{Name: "peek"})
	})
	assert.Equal(t, 0, FuseMatMulAddGeluErf(g))
	// dY also a graph output.
	g = build(func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "a/dg"}) })
	assert.Equal(t, 0, FuseMatMulGeluErfGrad(g))
	// dY read by another node too.
	g = build(func(g *Graph) {
		g.Nodes = append(g.Nodes, &Node{Name: "twice", OpType: "Relu", Inputs: []string{"a/dg"}, Outputs: []string{"twice"}})
	})
	assert.Equal(t, 0, FuseMatMulGeluErfGrad(g))
	// K made after the product.
	g = build(func(g *Graph) {
		k := g.Nodes[2]
		g.Nodes = append(append([]*Node{g.Nodes[0], g.Nodes[1], g.Nodes[3], g.Nodes[4]}, k), g.Nodes[5:]...)
	})
	assert.Equal(t, 0, FuseMatMulGeluErfGrad(g))
	// A bfloat16 dY (autocast).
	g = build(func(g *Graph) {
		bf := *f32(2, 3)
		bf.DType = BFloat16
		g.ValueInfo["a/dg"] = &ValueInfo{Name: "a/dg", Type: &bf}
	})
	assert.Equal(t, 0, FuseMatMulGeluErfGrad(g))
	// No recomputed copy: the weight gradient reads the forward Y.
	g = build(func(g *Graph) {
		g.Nodes = append(g.Nodes[:5:5], g.Nodes[6:]...)
		g.Nodes[5] = &Node{Name: "a/dw2", OpType: "MatMulGradB", Domain: InternalDomain, Inputs: []string{"a/y", "dy", "w2"}, Outputs: []string{"a/dw2"}}
	})
	assert.Equal(t, 1, FuseMatMulGeluErfGrad(g))
	for _, n := range g.Nodes {
		if n.OpType == MatMulGeluErfGrad {
			assert.Equal(t, []string{"a/dh", ""}, n.Outputs)
		}
		assert.NotEqual(t, GeluErfGradX, n.OpType)
	}
}

// typeAll gives every value g's nodes read or write a float32 type (the
// specialised graph's ValueInfo), where it has none.
func typeAll(g *Graph) {
	for _, n := range g.Nodes {
		for _, v := range append(append([]string{}, n.Inputs...), n.Outputs...) {
			if v != "" && g.ValueInfo[v] == nil {
				g.ValueInfo[v] = &ValueInfo{Name: v, Type: f32(2, 3)}
			}
		}
	}
}
