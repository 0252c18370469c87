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

// patchGradientGraph is patchEmbeddingGraph with the Conv's gradients as
// autodiff writes them, from dt (t's gradient, a graph input): dY =
// Reshape(Transpose(dt, [0, 2, 1]), [2, 5, 2, 3]), the filters' gradient
// ConvBackwardFilter(dY, x, Shape(w)) and the bias's ReduceSum(Reshape(dY,
// [2, 5, 6]), axes [0, 2]). edit changes it before the pass.
func patchGradientGraph(edit func(g *Graph)) *Graph {
	g := patchEmbeddingGraph(nil)
	g.Inputs = append(g.Inputs, &ValueInfo{Name: "dt", Type: f32(2, 6, 5)})
	g.Initializers["dyshape"] = FromInt64([]int64{2, 5, 2, 3}, 4)
	g.Initializers["wshape"] = FromInt64([]int64{5, 3, 4, 4}, 4)
	g.Initializers["axes"] = FromInt64([]int64{0, 2}, 2)
	conv := g.Nodes[0]
	g.Nodes = append(g.Nodes,
		&Node{Name: "dtr", OpType: "Transpose", Inputs: []string{"dt"}, Outputs: []string{"dtt"}, Attrs: map[string]*Attr{"perm": IntsAttr("perm", 0, 2, 1)}},
		&Node{Name: "dyr", OpType: "Reshape", Inputs: []string{"dtt", "dyshape"}, Outputs: []string{"dy"}},
		&Node{Name: "dw", OpType: "ConvBackwardFilter", Domain: InternalDomain, Inputs: []string{"dy", "x", "wshape"}, Outputs: []string{"dw"}, Attrs: conv.Attrs},
		&Node{Name: "dbr", OpType: "Reshape", Inputs: []string{"dy", "shape"}, Outputs: []string{"dy3"}},
		&Node{Name: "db", OpType: "ReduceSum", Inputs: []string{"dy3", "axes"}, Outputs: []string{"db"}, Attrs: map[string]*Attr{"keepdims": IntAttr("keepdims", 0)}},
	)
	for name, shape := range map[string][]int64{"dt": {2, 6, 5}, "dtt": {2, 5, 6}, "dy": {2, 5, 2, 3}, "dw": {5, 3, 4, 4}, "dy3": {2, 5, 6}, "db": {5}} {
		g.ValueInfo[name] = &ValueInfo{Name: name, Type: f32(shape...)}
	}
	g.Outputs = append(g.Outputs, &ValueInfo{Name: "dw"}, &ValueInfo{Name: "db"})
	if edit != nil {
		edit(g)
	}
	return g
}

// TestFusePatchEmbeddingGradients: with the forward rewritten, the
// filters' gradient becomes MatMulGradB(patches, dt, flat) (Σₙ dtᵀ·patches,
// one GEMM reading dt in place) reshaped to w's shape, and the bias's
// ReduceSum SumToShape(dt, b), its axes given as 0, 2 or negative; the
// Transpose and Reshapes of dt go. A dY read elsewhere keeps them (the
// gradients still rewritten); another permutation, or a ReduceSum over
// other axes, is left alone.
func TestFusePatchEmbeddingGradients(t *testing.T) {
	g := patchGradientGraph(nil)
	require.Equal(t, 1, FusePatchEmbedding(g))
	ops := map[string]*Node{}
	for _, n := range g.Nodes {
		ops[n.OpType] = n
	}
	require.Len(t, g.Nodes, 7, "Patchify, Flatten, MatMulAdd, Relu, MatMulGradB, Reshape, SumToShape")
	mm := ops["MatMulGradB"]
	require.NotNil(t, mm)
	assert.Equal(t, InternalDomain, mm.Domain)
	assert.Equal(t, []string{ops[Patchify].Outputs[0], "dt", ops["Flatten"].Outputs[0]}, mm.Inputs)
	assert.Equal(t, []int{5, 48}, knownShape(g, mm.Outputs[0]))
	rs := ops["Reshape"]
	assert.Equal(t, []string{mm.Outputs[0], "wshape"}, rs.Inputs)
	assert.Equal(t, []string{"dw"}, rs.Outputs)
	sum := ops["SumToShape"]
	assert.Equal(t, InternalDomain, sum.Domain)
	assert.Equal(t, []string{"dt", "b"}, sum.Inputs)
	assert.Equal(t, []string{"db"}, sum.Outputs)
	assert.Nil(t, ops["Transpose"])
	assert.Nil(t, ops["ConvBackwardFilter"])
	assert.Nil(t, ops["ReduceSum"])

	read := patchGradientGraph(func(g *Graph) {
		g.Nodes = append(g.Nodes, &Node{Name: "more", OpType: "Relu", Inputs: []string{"dy"}, Outputs: []string{"dy2"}})
		g.Outputs = append(g.Outputs, &ValueInfo{Name: "dy2"})
	})
	require.Equal(t, 1, FusePatchEmbedding(read))
	count := map[string]int{}
	for _, n := range read.Nodes {
		count[n.OpType]++
	}
	assert.Equal(t, map[string]int{Patchify: 1, "Flatten": 1, MatMulAdd: 1, "Relu": 2, "Transpose": 1, "Reshape": 2, "MatMulGradB": 1, "SumToShape": 1}, count)

	negative := patchGradientGraph(func(g *Graph) { g.Initializers["axes"] = FromInt64([]int64{-1, -3}, 2) })
	require.Equal(t, 1, FusePatchEmbedding(negative))
	count = map[string]int{}
	for _, n := range negative.Nodes {
		count[n.OpType]++
	}
	assert.Equal(t, 1, count["SumToShape"], "axes −1 and −3 are axes 2 and 0")
	assert.Zero(t, count["ReduceSum"])

	for name, edit := range map[string]func(g *Graph){
		"other permutation": func(g *Graph) {
			g.Nodes[4].Attrs = map[string]*Attr{"perm": IntsAttr("perm", 1, 0, 2)}
			g.ValueInfo["dtt"] = &ValueInfo{Name: "dtt", Type: f32(6, 2, 5)}
		},
		"other axes": func(g *Graph) { g.Initializers["axes"] = FromInt64([]int64{0, 1}, 2) },
	} {
		g := patchGradientGraph(edit)
		require.Equal(t, 1, FusePatchEmbedding(g), name)
		count := map[string]int{}
		for _, n := range g.Nodes {
			count[n.OpType]++
		}
		if name == "other axes" {
			assert.Equal(t, 1, count["MatMulGradB"], name)
			assert.Equal(t, 1, count["ReduceSum"], name)
			assert.Zero(t, count["SumToShape"], name)
			assert.Equal(t, 1, count["Transpose"], name, "dY is still read")
		} else {
			assert.Equal(t, 1, count["ConvBackwardFilter"], name)
			assert.Equal(t, 1, count["ReduceSum"], name)
			assert.Zero(t, count["MatMulGradB"], name)
		}
	}
}
