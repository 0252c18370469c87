package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dropoutGradient differentiates y = Dropout(x, ratio, training_mode) with
// the seed dy, ratio and training_mode from the given makers, and returns
// the gradient's name and the backward nodes.
func dropoutGradient(t *testing.T, ratio, training func(g *Graph) string) (string, []*Node) {
	t.Helper()
	g := NewGraph("dropout")
	f32 := &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{{Value: 2, Known: true}, {Value: 3, Known: true}}}
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32}, {Name: "dy", Type: f32}, {Name: "r_in", Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true}}}
	r, tm := ratio(g), training(g) // may add Constant nodes
	g.Nodes = append(g.Nodes, &Node{Name: "drop", OpType: "Dropout", Inputs: []string{"x", r, tm}, Outputs: []string{"y", "mask"}})
	forward := len(g.Nodes)
	grads, err := Gradients(g, "y", []string{"x"}, "dy", 17)
	require.NoError(t, err)
	require.Len(t, grads, 1)
	return grads[0], g.Nodes[forward:]
}

func constNode(g *Graph, name string, v *Tensor) string {
	g.Nodes = append(g.Nodes, &Node{Name: name, OpType: "Constant", Outputs: []string{name}, Attrs: map[string]*Attr{"value": TensorAttr("value", v)}})
	return name
}

// TestDropoutGradientOfZeroRatioIsDY: a Dropout whose ratio is a constant 0
// (torchvision's ViT, nn.TransformerEncoderLayer(dropout=0)), or whose
// training_mode is a constant false, passes dY on as its gradient, without
// the mask pass; a non-zero or non-constant ratio keeps the masked rule.
func TestDropoutGradientOfZeroRatioIsDY(t *testing.T) {
	on := func(g *Graph) string { return constNode(g, "training", FromBool([]bool{true})) }
	off := func(g *Graph) string { return constNode(g, "training", FromBool([]bool{false})) }
	zeroNode := func(g *Graph) string { return constNode(g, "ratio", FromFloat32([]float32{0})) }
	zeroInit := func(g *Graph) string { g.Initializers["ratio"] = FromFloat32([]float32{0}); return "ratio" }
	zeroIdentity := func(g *Graph) string { // how the importer leaves a Constant node
		g.Initializers["ratio_value"] = FromFloat32([]float32{0})
		g.Nodes = append(g.Nodes, &Node{Name: "ratio", OpType: "Identity", Inputs: []string{"ratio_value"}, Outputs: []string{"ratio"}})
		return "ratio"
	}
	half := func(g *Graph) string { return constNode(g, "ratio", FromFloat32([]float32{0.5})) }
	fed := func(*Graph) string { return "r_in" }

	for _, tc := range []struct {
		name            string
		ratio, training func(*Graph) string
		passesDY        bool
	}{
		{"ratio 0 (Constant node), training", zeroNode, on, true},
		{"ratio 0 (initializer), training", zeroInit, on, true},
		{"ratio 0 (Identity of an initializer), training", zeroIdentity, on, true},
		{"ratio 0.5, training off", half, off, true},
		{"ratio 0.5, training", half, on, false},
		{"ratio fed at run time, training", fed, on, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dx, backward := dropoutGradient(t, tc.ratio, tc.training)
			wheres := 0
			for _, n := range backward {
				if n.OpType == "Where" {
					wheres++
				}
			}
			if tc.passesDY {
				assert.Equal(t, "dy", dx)
				assert.Zero(t, wheres, "no mask pass")
			} else {
				assert.NotEqual(t, "dy", dx)
				assert.Positive(t, wheres, "the masked rule")
			}
		})
	}
}

// TestPruneUnreadDropoutMasks: a Dropout's mask that nothing reads is no
// longer an output (its kernel then writes none); a mask a node reads, or
// that is a graph output, stays.
func TestPruneUnreadDropoutMasks(t *testing.T) {
	g := NewGraph("masks")
	g.Nodes = []*Node{
		{Name: "unread", OpType: "Dropout", Inputs: []string{"x", "r", "tm"}, Outputs: []string{"y1", "m1"}},
		{Name: "read", OpType: "Dropout", Inputs: []string{"x", "r", "tm"}, Outputs: []string{"y2", "m2"}},
		{Name: "out", OpType: "Dropout", Inputs: []string{"x", "r", "tm"}, Outputs: []string{"y3", "m3"}},
		{Name: "use", OpType: "Not", Inputs: []string{"m2"}, Outputs: []string{"n2"}},
	}
	g.Outputs = []*ValueInfo{{Name: "y1"}, {Name: "y2"}, {Name: "y3"}, {Name: "m3"}, {Name: "n2"}}
	require.Equal(t, 1, PruneUnreadDropoutMasks(g))
	assert.Equal(t, []string{"y1"}, g.Nodes[0].Outputs)
	assert.Equal(t, []string{"y2", "m2"}, g.Nodes[1].Outputs)
	assert.Equal(t, []string{"y3", "m3"}, g.Nodes[2].Outputs)
}
