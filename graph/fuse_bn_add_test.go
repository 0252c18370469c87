package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFuseBatchNormAddRelu: a ResNet block's end, with the residual made by
// a downsample BatchNormalization after bn3, becomes one BatchNormAddRelu
// at the Relu's place; the Relu's gradient and a CastLike read the Relu's
// output instead of the sum. Left alone: a second reader of Y or of the
// sum, a graph output among them, a broadcast or bfloat16 residual, and
// running statistics read before the Relu's place.
func TestFuseBatchNormAddRelu(t *testing.T) {
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("block")
		g.Inputs = []*ValueInfo{{Name: "x", Type: f32(2, 3, 4, 4)}, {Name: "xd", Type: f32(2, 3, 4, 4)}, {Name: "dy", Type: f32(2, 3, 4, 4)}}
		for _, p := range []string{"s", "b", "m", "v"} {
			g.Inputs = append(g.Inputs, &ValueInfo{Name: p, Type: f32(3)})
		}
		bn := func(name, x, y string) *Node {
			return &Node{Name: name, OpType: "BatchNormalization", Inputs: []string{x, "s", "b", "m", "v"},
				Outputs: []string{y, name + "_rm", name + "_rv"}, Attrs: map[string]*Attr{"training_mode": {Name: "training_mode", Type: AttrInt, I: 1}}}
		}
		g.Nodes = []*Node{
			bn("bn3", "x", "y"),
			bn("bnd", "xd", "r"),
			{Name: "add", OpType: "Add", Inputs: []string{"y", "r"}, Outputs: []string{"sum"}},
			{Name: "relu", OpType: "Relu", Inputs: []string{"sum"}, Outputs: []string{"o"}},
			{Name: "z", OpType: "CastLike", Inputs: []string{"zero", "sum"}, Outputs: []string{"z"}},
			{Name: "rg", OpType: ReluGrad, Domain: FusedDomain, Inputs: []string{"dy", "sum"}, Outputs: []string{"ds"}},
		}
		g.Initializers["zero"] = FromFloat32([]float32{0})
		g.Outputs = []*ValueInfo{{Name: "o"}, {Name: "ds"}, {Name: "z"}, {Name: "bn3_rm"}, {Name: "bn3_rv"}, {Name: "bnd_rm"}, {Name: "bnd_rv"}}
		for _, n := range []string{"x", "xd", "dy", "y", "r", "sum", "o", "ds"} {
			g.ValueInfo[n] = &ValueInfo{Name: n, Type: f32(2, 3, 4, 4)}
		}
		if edit != nil {
			edit(g)
		}
		return g
	}
	g := build(nil)
	assert.Equal(t, 1, FuseBatchNormAddRelu(g))
	var ops []string
	for _, n := range g.Nodes {
		ops = append(ops, n.OpType)
	}
	assert.Equal(t, []string{"BatchNormalization", BatchNormAddRelu, "CastLike", ReluGrad}, ops)
	f := g.Nodes[1]
	assert.Equal(t, FusedDomain, f.Domain)
	assert.Equal(t, []string{"x", "s", "b", "m", "v", "r"}, f.Inputs)
	assert.Equal(t, []string{"o", "bn3_rm", "bn3_rv"}, f.Outputs)
	assert.Equal(t, int64(1), f.AttrInt("training_mode", 0))
	assert.Equal(t, []string{"zero", "o"}, g.Nodes[2].Inputs, "CastLike reads the Relu's output")
	assert.Equal(t, []string{"dy", "o"}, g.Nodes[3].Inputs, "ReluGrad reads the Relu's output")

	// When bn3's Y has another reader, the downsample BatchNormalization
	// fuses instead, bn3's Y its residual.
	g = build(func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "y"}) })
	assert.Equal(t, 1, FuseBatchNormAddRelu(g))
	assert.Equal(t, BatchNormAddRelu, g.Nodes[1].OpType)
	assert.Equal(t, []string{"xd", "s", "b", "m", "v", "y"}, g.Nodes[1].Inputs)

	// The residual on the other side of the Add.
	g = build(func(g *Graph) { g.Nodes[2].Inputs = []string{"r", "y"} })
	assert.Equal(t, 1, FuseBatchNormAddRelu(g), "Add(R, Y)")

	refused := map[string]func(g *Graph){
		"Y read twice":      func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "y"}) },
		"the sum an output": func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "sum"}) },
		"the sum read by a Mul": func(g *Graph) {
			g.Nodes = append(g.Nodes, &Node{Name: "mul", OpType: "Mul", Inputs: []string{"sum", "sum"}, Outputs: []string{"sq"}})
		},
		"a broadcast residual": func(g *Graph) { g.ValueInfo["r"] = &ValueInfo{Name: "r", Type: f32(1, 3, 1, 1)} },
		"a bfloat16 residual": func(g *Graph) {
			bf := *f32(2, 3, 4, 4)
			bf.DType = BFloat16
			g.ValueInfo["r"] = &ValueInfo{Name: "r", Type: &bf}
		},
		"unknown shapes": func(g *Graph) { delete(g.ValueInfo, "sum") },
		"running mean read before the Relu": func(g *Graph) {
			g.Nodes = append(g.Nodes[:3], append([]*Node{{Name: "peek", OpType: "Identity", Inputs: []string{"bn3_rm"}, Outputs: []string{"peek"}}}, g.Nodes[3:]...)...)
		},
		"a mask read before the Relu": func(g *Graph) {
			g.Nodes[4], g.Nodes[3] = g.Nodes[3], g.Nodes[4] // CastLike of the sum ahead of the Relu
		},
		"no Add": func(g *Graph) { g.Nodes[2].OpType = "Sub" },
	}
	for name, edit := range refused {
		g := build(func(g *Graph) {
			// The downsample branch's Y an output too, so that it does not
			// fuse with bn3's Y as its residual instead.
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "r"})
			edit(g)
		})
		before := len(g.Nodes)
		assert.Equal(t, 0, FuseBatchNormAddRelu(g), name)
		assert.Len(t, g.Nodes, before, name)
	}
}

// TestFuseAddReluGrad: ReluGrad(Add(A, B), X) becomes AddReluGrad(A, B, X)
// at the ReluGrad's place; not when the sum has another reader or is an
// output, when an operand broadcasts, or for the unfused Relu gradient.
func TestFuseAddReluGrad(t *testing.T) {
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("grad")
		g.Inputs = []*ValueInfo{{Name: "a", Type: f32(2, 5, 3)}, {Name: "b", Type: f32(2, 5, 3)}, {Name: "x", Type: f32(2, 5, 3)}}
		g.Nodes = []*Node{
			{Name: "sum", OpType: "Add", Inputs: []string{"a", "b"}, Outputs: []string{"g"}},
			{Name: "other", OpType: "Neg", Inputs: []string{"a"}, Outputs: []string{"na"}},
			{Name: "rg", OpType: ReluGrad, Domain: FusedDomain, Inputs: []string{"g", "x"}, Outputs: []string{"d"}},
		}
		g.Outputs = []*ValueInfo{{Name: "d"}, {Name: "na"}}
		for _, n := range []string{"a", "b", "x", "g", "d"} {
			g.ValueInfo[n] = &ValueInfo{Name: n, Type: f32(2, 5, 3)}
		}
		if edit != nil {
			edit(g)
		}
		return g
	}
	g := build(nil)
	assert.Equal(t, 1, FuseAddReluGrad(g))
	assert.Len(t, g.Nodes, 2)
	f := g.Nodes[1]
	assert.Equal(t, AddReluGrad, f.OpType)
	assert.Equal(t, FusedDomain, f.Domain)
	assert.Equal(t, []string{"a", "b", "x"}, f.Inputs)
	assert.Equal(t, []string{"d"}, f.Outputs)

	refused := map[string]func(g *Graph){
		"the sum an output":       func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "g"}) },
		"the sum read twice":      func(g *Graph) { g.Nodes[1].Inputs = []string{"g"} },
		"B broadcasts":            func(g *Graph) { g.ValueInfo["b"] = &ValueInfo{Name: "b", Type: f32(5, 3)} },
		"X of another shape":      func(g *Graph) { g.ValueInfo["x"] = &ValueInfo{Name: "x", Type: f32(1, 5, 3)} },
		"unknown shapes":          func(g *Graph) { delete(g.ValueInfo, "a") },
		"a Relu gradient unfused": func(g *Graph) { g.Nodes[2].Domain = "" },
	}
	for name, edit := range refused {
		g := build(edit)
		assert.Equal(t, 0, FuseAddReluGrad(g), name)
		assert.Len(t, g.Nodes, 3, name)
	}
}

// TestFuseBatchNormAddReluGrad: an AddReluGrad whose output a
// BatchNormalizationGrad reads through an Identity (the same-shape
// SumToShape) joins it as one BatchNormAddReluGrad at the AddReluGrad's
// place, writing dS for the residual path's reader; the Identity goes.
// Left alone: X of another shape, a scale defined after the AddReluGrad,
// and an Identity with a second reader.
func TestFuseBatchNormAddReluGrad(t *testing.T) {
	build := func(edit func(g *Graph)) *Graph {
		g := NewGraph("bngrad")
		g.Inputs = []*ValueInfo{{Name: "a", Type: f32(2, 3, 4, 4)}, {Name: "b", Type: f32(2, 3, 4, 4)},
			{Name: "o", Type: f32(2, 3, 4, 4)}, {Name: "x", Type: f32(2, 3, 4, 4)}, {Name: "s0", Type: f32(3)}}
		g.Nodes = []*Node{
			{Name: "s", OpType: "Identity", Inputs: []string{"s0"}, Outputs: []string{"s"}},
			{Name: "arg", OpType: AddReluGrad, Domain: FusedDomain, Inputs: []string{"a", "b", "o"}, Outputs: []string{"ds"}},
			{Name: "id1", OpType: "Identity", Inputs: []string{"ds"}, Outputs: []string{"g1"}},
			{Name: "id2", OpType: "Identity", Inputs: []string{"ds"}, Outputs: []string{"g2"}},
			{Name: "bng", OpType: "BatchNormalizationGrad", Domain: InternalDomain, Inputs: []string{"g1", "x", "s", "s", "s"},
				Outputs: []string{"dx", "dsc", "db"}, Attrs: map[string]*Attr{"training_mode": {Name: "training_mode", Type: AttrInt, I: 1}}},
			{Name: "res", OpType: "Neg", Inputs: []string{"g2"}, Outputs: []string{"r"}},
		}
		g.Outputs = []*ValueInfo{{Name: "dx"}, {Name: "dsc"}, {Name: "db"}, {Name: "r"}}
		for _, n := range []string{"a", "b", "o", "x", "ds", "g1", "g2", "dx", "r"} {
			g.ValueInfo[n] = &ValueInfo{Name: n, Type: f32(2, 3, 4, 4)}
		}
		if edit != nil {
			edit(g)
		}
		return g
	}
	g := build(nil)
	assert.Equal(t, 1, FuseBatchNormAddReluGrad(g))
	var ops []string
	for _, n := range g.Nodes {
		ops = append(ops, n.OpType)
	}
	assert.Equal(t, []string{"Identity", BatchNormAddReluGrad, "Identity", "Neg"}, ops)
	f := g.Nodes[1]
	assert.Equal(t, []string{"a", "b", "o", "x", "s", "s", "s"}, f.Inputs)
	assert.Equal(t, []string{"ds", "dx", "dsc", "db"}, f.Outputs)
	assert.Equal(t, int64(1), f.AttrInt("training_mode", 0))
	assert.Equal(t, []string{"ds"}, g.Nodes[2].Inputs, "the residual path still reads dS")

	// Directly, without the Identity.
	g = build(func(g *Graph) { g.Nodes[4].Inputs[0] = "ds" })
	assert.Equal(t, 1, FuseBatchNormAddReluGrad(g))
	assert.Len(t, g.Nodes, 5, "the unread Identity stays for dead-code removal")

	refused := map[string]func(g *Graph){
		"X of another shape":           func(g *Graph) { g.ValueInfo["x"] = &ValueInfo{Name: "x", Type: f32(2, 3, 4, 1)} },
		"scale made after":             func(g *Graph) { g.Nodes[0], g.Nodes[1] = g.Nodes[1], g.Nodes[0] },
		"the Identity read twice":      func(g *Graph) { g.Nodes[5].Inputs = []string{"g1"} },
		"the Identity an output":       func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "g1"}) },
		"dS of unknown shape":          func(g *Graph) { delete(g.ValueInfo, "ds") },
		"an unfused Relu gradient sum": func(g *Graph) { g.Nodes[1].OpType = ReluGrad; g.Nodes[1].Inputs = []string{"a", "o"} },
	}
	for name, edit := range refused {
		g := build(edit)
		assert.Equal(t, 0, FuseBatchNormAddReluGrad(g), name)
		assert.Len(t, g.Nodes, 6, name)
	}
}
