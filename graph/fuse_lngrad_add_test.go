package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFuseLayerNormGradAdd: Add(R, dX) of a LayerNormalizationGrad's dX
// becomes one LayerNormGradAdd at the LayerNormalizationGrad's place (its
// dScale/dBias readers unchanged); not when dX is read twice, when R is
// made after the LayerNormalizationGrad, or when the shapes differ.
func TestFuseLayerNormGradAdd(t *testing.T) {
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("lngrad")
		g.Inputs = []*ValueInfo{{Name: "dy", Type: f32(4, 8)}, {Name: "x", Type: f32(4, 8)}, {Name: "s", Type: f32(8)}, {Name: "r0", Type: f32(4, 8)}}
		g.Nodes = []*Node{
			{Name: "r", OpType: "Identity", Inputs: []string{"r0"}, Outputs: []string{"r"}},
			{Name: "lg", OpType: "LayerNormalizationGrad", Domain: InternalDomain, Inputs: []string{"dy", "x", "s"}, Outputs: []string{"dx", "ds", "db"},
				Attrs: map[string]*Attr{"axis": {Name: "axis", Type: AttrInt, I: -1}}},
			{Name: "ds2", OpType: "Identity", Inputs: []string{"ds"}, Outputs: []string{"ds2"}},
			{Name: "sum", OpType: "Add", Inputs: []string{"r", "dx"}, Outputs: []string{"sum"}},
		}
		g.Outputs = []*ValueInfo{{Name: "sum"}, {Name: "ds2"}, {Name: "db"}}
		for _, n := range []string{"r", "dx", "sum", "dy", "x"} {
			g.ValueInfo[n] = &ValueInfo{Name: n, Type: f32(4, 8)}
		}
		if edit != nil {
			edit(g)
		}
		return g
	}
	g := build(nil)
	assert.Equal(t, 1, FuseLayerNormGradAdd(g))
	var ops []string
	for _, n := range g.Nodes {
		ops = append(ops, n.OpType)
	}
	assert.Equal(t, []string{"Identity", LayerNormGradAdd, "Identity"}, ops)
	f := g.Nodes[1]
	assert.Equal(t, []string{"dy", "x", "s", "r"}, f.Inputs)
	assert.Equal(t, []string{"sum", "ds", "db"}, f.Outputs)
	assert.Equal(t, int64(-1), f.AttrInt("axis", 0))

	g = build(func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "dx"}) })
	assert.Equal(t, 0, FuseLayerNormGradAdd(g), "dX also an output")
	g = build(func(g *Graph) { g.Nodes[0], g.Nodes[1] = g.Nodes[1], g.Nodes[0] })
	assert.Equal(t, 0, FuseLayerNormGradAdd(g), "R made after the gradient")
	g = build(func(g *Graph) { g.ValueInfo["r"] = &ValueInfo{Name: "r", Type: f32(1, 8)} })
	assert.Equal(t, 0, FuseLayerNormGradAdd(g), "R broadcasts")
	g = build(func(g *Graph) {
		bf := *f32(4, 8)
		bf.DType = BFloat16
		g.ValueInfo["r"] = &ValueInfo{Name: "r", Type: &bf}
	})
	assert.Equal(t, 0, FuseLayerNormGradAdd(g), "a bfloat16 R beside a float32 LayerNorm (autocast)")
}

// TestFusePermutedMatMulBias: the in-projection's bias joins its
// PermutedMatMul (attributes kept); not when the product is read twice,
// when the bias is not a row vector, or for a gradient product.
func TestFusePermutedMatMulBias(t *testing.T) {
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("inproj")
		g.Inputs = []*ValueInfo{{Name: "x", Type: f32(2, 5, 4)}, {Name: "w", Type: f32(6, 4)}, {Name: "b", Type: f32(6)}}
		g.Nodes = []*Node{
			{Name: "p", OpType: PermutedMatMul, Domain: FusedDomain, Inputs: []string{"x", "w"}, Outputs: []string{"p"},
				Attrs: map[string]*Attr{"axes0": IntsAttr("axes0", 1, 0, 2), "axes1": IntsAttr("axes1", 1, 0)}},
			{Name: "y", OpType: "Add", Inputs: []string{"b", "p"}, Outputs: []string{"y"}},
		}
		g.Outputs = []*ValueInfo{{Name: "y"}}
		for _, n := range []string{"p", "y"} {
			g.ValueInfo[n] = &ValueInfo{Name: n, Type: f32(5, 2, 6)}
		}
		for _, in := range g.Inputs {
			g.ValueInfo[in.Name] = in
		}
		if edit != nil {
			edit(g)
		}
		return g
	}
	g := build(nil)
	assert.Equal(t, 1, FusePermutedMatMulBias(g))
	assert.Len(t, g.Nodes, 1)
	f := g.Nodes[0]
	assert.Equal(t, PermutedMatMulAdd, f.OpType)
	assert.Equal(t, []string{"x", "w", "b"}, f.Inputs)
	assert.Equal(t, []string{"y"}, f.Outputs)
	assert.Equal(t, []int64{1, 0, 2}, f.AttrInts("axes0", nil))

	g = build(func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "p"}) })
	assert.Equal(t, 0, FusePermutedMatMulBias(g), "the product is an output too")
	g = build(func(g *Graph) { g.ValueInfo["b"] = &ValueInfo{Name: "b", Type: f32(5, 1, 6)} })
	assert.Equal(t, 0, FusePermutedMatMulBias(g), "a bias that is not a row vector")
	g = build(func(g *Graph) { g.Nodes[0].SetAttr(&Attr{Name: "grad", Type: AttrInt, I: 1}) })
	assert.Equal(t, 0, FusePermutedMatMulBias(g), "a gradient product")
}

// TestFuseMatMulAddResidual: Add(R, Dropout0(MatMulAdd(...))) becomes one
// MatMulAddAdd at the Add's place, the zero-ratio Dropout dropped; not
// when the product is read twice or R is made after the product.
func TestFuseMatMulAddResidual(t *testing.T) {
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("residual")
		g.Inputs = []*ValueInfo{{Name: "x", Type: f32(3, 4)}, {Name: "w", Type: f32(4, 4)}, {Name: "b", Type: f32(4)}, {Name: "r0", Type: f32(3, 4)}}
		g.Initializers = map[string]*Tensor{"ratio": FromFloat32([]float32{0})}
		g.Nodes = []*Node{
			{Name: "r", OpType: "Relu", Inputs: []string{"r0"}, Outputs: []string{"r"}},
			{Name: "p", OpType: MatMulAdd, Domain: FusedDomain, Inputs: []string{"x", "w", "b"}, Outputs: []string{"p"},
				Attrs: map[string]*Attr{"transB": {Name: "transB", Type: AttrInt, I: 1}}},
			{Name: "d", OpType: "Dropout", Inputs: []string{"p", "ratio"}, Outputs: []string{"d"}},
			{Name: "y", OpType: "Add", Inputs: []string{"r", "d"}, Outputs: []string{"y"}},
		}
		g.Outputs = []*ValueInfo{{Name: "y"}}
		for _, n := range []string{"r", "p", "d", "y"} {
			g.ValueInfo[n] = &ValueInfo{Name: n, Type: f32(3, 4)}
		}
		if edit != nil {
			edit(g)
		}
		return g
	}
	g := build(nil)
	assert.Equal(t, 1, FuseMatMulAddResidual(g))
	assert.Len(t, g.Nodes, 2)
	f := g.Nodes[1]
	assert.Equal(t, MatMulAddAdd, f.OpType)
	assert.Equal(t, []string{"x", "w", "b", "r"}, f.Inputs)
	assert.Equal(t, []string{"y"}, f.Outputs)
	assert.Equal(t, int64(1), f.AttrInt("transB", 0))

	g = build(func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "p"}) })
	assert.Equal(t, 0, FuseMatMulAddResidual(g), "the product is an output too")
	g = build(func(g *Graph) { g.Nodes[0], g.Nodes[1] = g.Nodes[1], g.Nodes[0] })
	assert.Equal(t, 0, FuseMatMulAddResidual(g), "R made after the product")
	g = build(func(g *Graph) { g.Initializers["ratio"] = FromFloat32([]float32{0.1}) })
	assert.Equal(t, 0, FuseMatMulAddResidual(g), "a Dropout that drops")
}
