package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFuseMaxPoolArgmax: ResNet's stem pool and its gradient become
// MaxPoolArgmax (writing Y and the codes) and MaxPoolArgmaxGrad (reading
// the codes and X's shape, not X); X's other reader is untouched. Left
// alone: an Indices output, dilations, more than 255 taps, float64, a
// MaxPoolGrad with other attributes, a MaxPool without a gradient, and a
// 1-D pool.
func TestFuseMaxPoolArgmax(t *testing.T) {
	attrs := func() map[string]*Attr {
		return map[string]*Attr{
			"kernel_shape": {Name: "kernel_shape", Type: AttrInts, Ints: []int64{3, 3}},
			"strides":      {Name: "strides", Type: AttrInts, Ints: []int64{2, 2}},
			"pads":         {Name: "pads", Type: AttrInts, Ints: []int64{1, 1, 1, 1}},
		}
	}
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("stem")
		g.Inputs = []*ValueInfo{{Name: "x", Type: f32(2, 3, 9, 9)}, {Name: "dy", Type: f32(2, 3, 5, 5)}}
		g.Nodes = []*Node{
			{Name: "pool", OpType: "MaxPool", Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: attrs()},
			{Name: "other", OpType: "Relu", Inputs: []string{"x"}, Outputs: []string{"r"}},
			{Name: "pool_grad", OpType: "MaxPoolGrad", Domain: InternalDomain, Inputs: []string{"dy", "x"}, Outputs: []string{"dx"}, Attrs: attrs()},
		}
		g.Outputs = []*ValueInfo{{Name: "y"}, {Name: "r"}, {Name: "dx"}}
		g.ValueInfo["x"] = &ValueInfo{Name: "x", Type: f32(2, 3, 9, 9)}
		g.ValueInfo["y"] = &ValueInfo{Name: "y", Type: f32(2, 3, 5, 5)}
		if edit != nil {
			edit(g)
		}
		return g
	}
	g := build(nil)
	require.Equal(t, 1, FuseMaxPoolArgmax(g))
	f, r, b := g.Nodes[0], g.Nodes[1], g.Nodes[2]
	assert.Equal(t, MaxPoolArgmax, f.OpType)
	assert.Equal(t, FusedDomain, f.Domain)
	assert.Equal(t, []string{"x"}, f.Inputs)
	require.Len(t, f.Outputs, 2)
	assert.Equal(t, "y", f.Outputs[0])
	codes := f.Outputs[1]
	assert.Equal(t, []int64{3, 3}, f.AttrInts("kernel_shape", nil))
	assert.Equal(t, []string{"x"}, r.Inputs)
	assert.Equal(t, MaxPoolArgmaxGrad, b.OpType)
	assert.Equal(t, FusedDomain, b.Domain)
	require.Len(t, b.Inputs, 3)
	assert.Equal(t, "dy", b.Inputs[0])
	assert.Equal(t, codes, b.Inputs[1])
	assert.Equal(t, []int64{2, 3, 9, 9}, g.Initializers[b.Inputs[2]].Int64s(), "X's shape")
	assert.Equal(t, []string{"dx"}, b.Outputs)
	assert.Equal(t, []int64{1, 1, 1, 1}, b.AttrInts("pads", nil))
	s, d, ok := knownTensorType(g, codes)
	require.True(t, ok)
	assert.Equal(t, Uint8, d)
	assert.Equal(t, []int{2, 3, 5, 5}, s)
	// Shape inference gives the fused ops' outputs their types.
	sg, err := Specialize(g, 17, nil, nil)
	require.NoError(t, err)
	s, d, ok = knownTensorType(sg, codes)
	require.True(t, ok)
	assert.Equal(t, Uint8, d)
	assert.Equal(t, []int{2, 3, 5, 5}, s)
	s, d, ok = knownTensorType(sg, "dx")
	require.True(t, ok)
	assert.Equal(t, Float32, d)
	assert.Equal(t, []int{2, 3, 9, 9}, s)

	for name, edit := range map[string]func(g *Graph){
		"indices": func(g *Graph) { g.Nodes[0].Outputs = []string{"y", "idx"} },
		"dilations": func(g *Graph) {
			for _, n := range []*Node{g.Nodes[0], g.Nodes[2]} {
				n.Attrs["dilations"] = &Attr{Name: "dilations", Type: AttrInts, Ints: []int64{2, 1}}
			}
		},
		"taps": func(g *Graph) {
			for _, n := range []*Node{g.Nodes[0], g.Nodes[2]} {
				n.Attrs["kernel_shape"].Ints = []int64{16, 16}
			}
		},
		"float64": func(g *Graph) {
			g.ValueInfo["x"] = &ValueInfo{Name: "x", Type: &Type{Kind: KindTensor, DType: Float64, Shape: []Dim{knownDim(2), knownDim(3), knownDim(9), knownDim(9)}, HasShape: true}}
		},
		"unknown shape": func(g *Graph) { delete(g.ValueInfo, "x"); g.Inputs[0].Type = nil },
		"other attributes": func(g *Graph) {
			g.Nodes[2].Attrs["strides"] = &Attr{Name: "strides", Type: AttrInts, Ints: []int64{1, 1}}
		},
		"no gradient": func(g *Graph) { g.Nodes = g.Nodes[:2]; g.Outputs = g.Outputs[:2] },
		"gradient first": func(g *Graph) {
			g.Nodes[0], g.Nodes[2] = g.Nodes[2], g.Nodes[0]
		},
	} {
		g := build(edit)
		assert.Zero(t, FuseMaxPoolArgmax(g), name)
		for _, n := range g.Nodes {
			assert.NotEqual(t, FusedDomain, n.Domain, name)
		}
	}
}
