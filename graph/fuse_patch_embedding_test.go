package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// patchEmbeddingGraph is a specialised graph of a patch embedding: x [2,
// 3, 8, 12] through a 4×4 stride-4 Conv with 5 filters and a bias, its
// output [2, 5, 2, 3] reshaped to [2, 5, 6] and transposed to [2, 6, 5],
// then a Relu (the graph output). edit changes it before the pass.
func patchEmbeddingGraph(edit func(g *Graph)) *Graph {
	g := NewGraph("patches")
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(2, 3, 8, 12)}}
	g.Initializers["w"] = FromFloat32(make([]float32, 5*3*4*4), 5, 3, 4, 4)
	g.Initializers["b"] = FromFloat32(make([]float32, 5), 5)
	g.Initializers["shape"] = FromInt64([]int64{2, 5, 6}, 3)
	g.Nodes = []*Node{
		{Name: "conv", OpType: "Conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"y"}, Attrs: map[string]*Attr{
			"kernel_shape": IntsAttr("kernel_shape", 4, 4), "strides": IntsAttr("strides", 4, 4),
			"pads": IntsAttr("pads", 0, 0, 0, 0), "dilations": IntsAttr("dilations", 1, 1), "group": IntAttr("group", 1)}},
		{Name: "flat", OpType: "Reshape", Inputs: []string{"y", "shape"}, Outputs: []string{"r"}},
		{Name: "tr", OpType: "Transpose", Inputs: []string{"r"}, Outputs: []string{"t"}, Attrs: map[string]*Attr{"perm": IntsAttr("perm", 0, 2, 1)}},
		{Name: "act", OpType: "Relu", Inputs: []string{"t"}, Outputs: []string{"out"}},
	}
	g.ValueInfo["x"] = &ValueInfo{Name: "x", Type: f32(2, 3, 8, 12)} // as Specialize records inputs
	g.ValueInfo["y"] = &ValueInfo{Name: "y", Type: f32(2, 5, 2, 3)}
	g.ValueInfo["r"] = &ValueInfo{Name: "r", Type: f32(2, 5, 6)}
	g.ValueInfo["t"] = &ValueInfo{Name: "t", Type: f32(2, 6, 5)}
	g.Outputs = []*ValueInfo{{Name: "out"}}
	if edit != nil {
		edit(g)
	}
	return g
}

// TestFusePatchEmbedding: the Conv, Reshape and Transpose become
// Patchify(x), Flatten(w) and MatMulAdd(patches, flat, b) with transB,
// writing t for the Relu; without a bias, TransposedMatMul. Left alone:
// overlapping or strided windows, padding, dilation, groups, a tiling
// that misses rows, the Conv's or the Reshape's output read elsewhere, a
// Reshape to another shape, another permutation, unknown shapes, float64.
func TestFusePatchEmbedding(t *testing.T) {
	g := patchEmbeddingGraph(nil)
	require.Equal(t, 1, FusePatchEmbedding(g))
	require.Len(t, g.Nodes, 4)
	p, f, mm := g.Nodes[0], g.Nodes[1], g.Nodes[2]
	assert.Equal(t, Patchify, p.OpType)
	assert.Equal(t, FusedDomain, p.Domain)
	assert.Equal(t, []string{"x"}, p.Inputs)
	assert.Equal(t, []int64{4, 4}, p.AttrInts("kernel_shape", nil))
	assert.Equal(t, []int{2, 6, 48}, knownShape(g, p.Outputs[0]), "the patches' shape is recorded")
	assert.Equal(t, "Flatten", f.OpType)
	assert.Equal(t, []string{"w"}, f.Inputs)
	assert.Equal(t, int64(1), f.AttrInt("axis", 0))
	assert.Equal(t, []int{5, 48}, knownShape(g, f.Outputs[0]))
	assert.Equal(t, MatMulAdd, mm.OpType)
	assert.Equal(t, []string{p.Outputs[0], f.Outputs[0], "b"}, mm.Inputs)
	assert.Equal(t, []string{"t"}, mm.Outputs)
	assert.Equal(t, int64(1), mm.AttrInt("transB", 0))
	assert.Equal(t, int64(0), mm.AttrInt("transA", 1))
	assert.Equal(t, "Relu", g.Nodes[3].OpType)

	noBias := patchEmbeddingGraph(func(g *Graph) { g.Nodes[0].Inputs = g.Nodes[0].Inputs[:2] })
	require.Equal(t, 1, FusePatchEmbedding(noBias))
	assert.Equal(t, TransposedMatMul, noBias.Nodes[2].OpType)
	assert.Len(t, noBias.Nodes[2].Inputs, 2)

	for name, edit := range map[string]func(g *Graph){
		"stride 2": func(g *Graph) { g.Nodes[0].Attrs["strides"] = IntsAttr("strides", 2, 2) },
		"padded":   func(g *Graph) { g.Nodes[0].Attrs["pads"] = IntsAttr("pads", 0, 0, 0, 1) },
		"dilated":  func(g *Graph) { g.Nodes[0].Attrs["dilations"] = IntsAttr("dilations", 2, 1) },
		"grouped": func(g *Graph) {
			g.Nodes[0].Attrs["group"] = IntAttr("group", 3)
			g.Initializers["w"] = FromFloat32(make([]float32, 5*1*4*4), 5, 1, 4, 4)
		},
		"rows left over":   func(g *Graph) { g.ValueInfo["x"].Type = f32(2, 3, 9, 12) },
		"Conv output read": func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "y"}) },
		"Reshape output read": func(g *Graph) {
			g.Nodes = append(g.Nodes, &Node{Name: "more", OpType: "Relu", Inputs: []string{"r"}, Outputs: []string{"r2"}})
		},
		"other reshape":        func(g *Graph) { g.ValueInfo["r"] = &ValueInfo{Name: "r", Type: f32(2, 30)} },
		"other permutation":    func(g *Graph) { g.Nodes[2].Attrs["perm"] = IntsAttr("perm", 1, 0, 2) },
		"unknown shape":        func(g *Graph) { delete(g.ValueInfo, "t") },
		"float64":              func(g *Graph) { g.ValueInfo["x"].Type = withDType(f32(2, 3, 8, 12), Float64) },
		"kernel attribute off": func(g *Graph) { g.Nodes[0].Attrs["kernel_shape"] = IntsAttr("kernel_shape", 2, 2) },
		"auto_pad SAME_UPPER":  func(g *Graph) { g.Nodes[0].Attrs["auto_pad"] = StringAttr("auto_pad", "SAME_UPPER") },
	} {
		g := patchEmbeddingGraph(edit)
		before := len(g.Nodes)
		assert.Zero(t, FusePatchEmbedding(g), name)
		assert.Len(t, g.Nodes, before, name)
		assert.Equal(t, "Conv", g.Nodes[0].OpType, name)
	}
}
