package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecomputeGeluErfGrad: a GeluErfGrad reading its GeluErf's D and A
// becomes GeluErfGradX(dY, X, C1, C2, C3, K), the CastLike that read D for
// its dtype reads X, and the GeluErf keeps Y alone; a GeluErf whose A is
// also a graph output keeps its outputs, and a GeluErfGrad whose X is not
// its GeluErf's stays as it is.
func TestRecomputeGeluErfGrad(t *testing.T) {
	g := NewGraph("recompute")
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(4, 8)}, {Name: "z", Type: f32(4, 8)}, {Name: "dy", Type: f32(4, 8)}}
	g.Initializers = map[string]*Tensor{
		"c1": FromFloat32([]float32{1.4142135}), "c2": FromFloat32([]float32{1}),
		"c3": FromFloat32([]float32{0.5}), "k0": FromFloat32([]float32{1.1283792}),
	}
	gelu := func(p, x string) *Node {
		return &Node{Name: p + "gelu", OpType: GeluErf, Domain: FusedDomain, Inputs: []string{x, "c1", "c2", "c3"}, Outputs: []string{p + "y", p + "d", p + "a"}}
	}
	grad := func(p, x string) *Node {
		return &Node{Name: p + "grad", OpType: GeluErfGrad, Domain: FusedDomain, Inputs: []string{"dy", x, p + "d", p + "a", "c1", "c3", p + "k"}, Outputs: []string{p + "dx"}}
	}
	castK := func(p string) *Node {
		return &Node{Name: p + "k", OpType: "CastLike", Inputs: []string{"k0", p + "d"}, Outputs: []string{p + "k"}}
	}
	g.Nodes = []*Node{
		gelu("a/", "x"), castK("a/"), grad("a/", "x"),
		gelu("b/", "x"), castK("b/"), grad("b/", "x"), // b/a is also an output
		gelu("c/", "x"), castK("c/"), grad("c/", "z"), // reads another X
	}
	g.Outputs = []*ValueInfo{{Name: "a/y"}, {Name: "a/dx"}, {Name: "b/y"}, {Name: "b/dx"}, {Name: "b/a"}, {Name: "c/y"}, {Name: "c/dx"}}
	require.Equal(t, 2, RecomputeGeluErfGrad(g))
	byName := map[string]*Node{}
	for _, n := range g.Nodes {
		byName[n.Name] = n
	}
	assert.Equal(t, GeluErfGradX, byName["a/grad"].OpType)
	assert.Equal(t, []string{"dy", "x", "c1", "c2", "c3", "a/k"}, byName["a/grad"].Inputs)
	assert.Equal(t, []string{"k0", "x"}, byName["a/k"].Inputs)
	assert.Equal(t, []string{"a/y", "", ""}, byName["a/gelu"].Outputs)
	assert.Equal(t, GeluErfGradX, byName["b/grad"].OpType)
	assert.Equal(t, []string{"b/y", "b/d", "b/a"}, byName["b/gelu"].Outputs, "A is a graph output")
	assert.Equal(t, GeluErfGrad, byName["c/grad"].OpType)
	assert.Equal(t, []string{"c/y", "c/d", "c/a"}, byName["c/gelu"].Outputs, "its gradient still reads D and A")
	assert.Zero(t, RecomputeGeluErfGrad(g), "nothing left to rewrite")
}

// TestDropSameShapeSumToShape: SumToShape(G, Like) of one known shape
// becomes Identity(G), no longer reading Like; one that sums, or whose
// shapes are not both known, stays.
func TestDropSameShapeSumToShape(t *testing.T) {
	g := NewGraph("sums")
	g.Inputs = []*ValueInfo{{Name: "g", Type: f32(4, 8)}, {Name: "like", Type: f32(4, 8)}, {Name: "row", Type: f32(1, 8)},
		{Name: "unknown"}}
	for _, in := range g.Inputs[:3] { // as Specialize records them
		g.ValueInfo[in.Name] = in
	}
	sum := func(name, like string) *Node {
		return &Node{Name: name, OpType: "SumToShape", Domain: InternalDomain, Inputs: []string{"g", like}, Outputs: []string{name}}
	}
	g.Nodes = []*Node{sum("same", "like"), sum("sums", "row"), sum("open", "unknown")}
	g.Outputs = []*ValueInfo{{Name: "same"}, {Name: "sums"}, {Name: "open"}}
	require.Equal(t, 1, DropSameShapeSumToShape(g))
	assert.Equal(t, "Identity", g.Nodes[0].OpType)
	assert.Equal(t, "", g.Nodes[0].Domain)
	assert.Equal(t, []string{"g"}, g.Nodes[0].Inputs)
	assert.Equal(t, "SumToShape", g.Nodes[1].OpType)
	assert.Equal(t, []string{"g", "row"}, g.Nodes[1].Inputs)
	assert.Equal(t, "SumToShape", g.Nodes[2].OpType)
}

// TestDropSameShapeSumToShapeDropsCopies: a Transpose (after a Reshape)
// made only to give a SumToShape its shape goes with it, up the chain; one
// that something else reads, or that is a graph output, stays.
func TestDropSameShapeSumToShapeDropsCopies(t *testing.T) {
	for _, c := range []struct {
		name       string
		extra      *Node
		output     string
		transposes int
	}{
		{"only the SumToShape reads it", nil, "", 0},
		{"another reader", &Node{Name: "neg", OpType: "Neg", Inputs: []string{"xt"}, Outputs: []string{"neg"}}, "neg", 1},
		{"a graph output", nil, "xt", 1},
	} {
		g := NewGraph("copies")
		g.Inputs = []*ValueInfo{{Name: "g", Type: f32(3, 2, 4)}, {Name: "x", Type: f32(2, 12)}}
		g.Initializers = map[string]*Tensor{"shape": FromInt64([]int64{2, 3, 4})}
		g.ValueInfo["g"] = g.Inputs[0]
		g.ValueInfo["xt"] = &ValueInfo{Name: "xt", Type: f32(3, 2, 4)}
		g.Nodes = []*Node{
			{Name: "r", OpType: "Reshape", Inputs: []string{"x", "shape"}, Outputs: []string{"xr"}},
			{Name: "t", OpType: "Transpose", Inputs: []string{"xr"}, Outputs: []string{"xt"}, Attrs: map[string]*Attr{"perm": IntsAttr("perm", 1, 0, 2)}},
			{Name: "sum", OpType: "SumToShape", Domain: InternalDomain, Inputs: []string{"g", "xt"}, Outputs: []string{"dx"}},
		}
		g.Outputs = []*ValueInfo{{Name: "dx"}}
		if c.extra != nil {
			g.Nodes = append(g.Nodes, c.extra)
		}
		if c.output != "" {
			g.Outputs = append(g.Outputs, &ValueInfo{Name: c.output})
		}
		require.Equal(t, 1, DropSameShapeSumToShape(g), c.name)
		ops := map[string]int{}
		for _, nd := range g.Nodes {
			ops[nd.OpType]++
		}
		assert.Equal(t, 1, ops["Identity"], "%s: %v", c.name, ops)
		assert.Equal(t, c.transposes, ops["Transpose"], "%s: %v", c.name, ops)
		assert.Equal(t, c.transposes, ops["Reshape"], "%s: the Reshape goes with the Transpose: %v", c.name, ops)
	}
}

// TestRecomputeGeluErfOutput: a later reader of a Y-only GeluErf's output
// (through a ratio-0 Dropout, or a Reshape view) reads a copy made right
// before it; a reader after X's last reader does not (X would live
// longer), and a GeluErf that still writes D and A is left alone.
func TestRecomputeGeluErfOutput(t *testing.T) {
	g := NewGraph("recompute-y")
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(4, 8)}, {Name: "dy", Type: f32(4, 8)}, {Name: "w", Type: f32(8, 8)}}
	g.Initializers = map[string]*Tensor{
		"c1": FromFloat32([]float32{1.4142135}), "c2": FromFloat32([]float32{1}),
		"c3": FromFloat32([]float32{0.5}), "k": FromFloat32([]float32{1.1283792}),
		"zero": FromFloat32([]float32{0}), "shape": FromInt64([]int64{32}),
	}
	g.ValueInfo["a/y"] = &ValueInfo{Name: "a/y", Type: f32(4, 8)}
	node := func(name, op string, in []string, out ...string) *Node {
		return &Node{Name: name, OpType: op, Inputs: in, Outputs: out}
	}
	gelu := func(p string, y, d, a string) *Node {
		return &Node{Name: p + "gelu", OpType: GeluErf, Domain: FusedDomain, Inputs: []string{"x", "c1", "c2", "c3"}, Outputs: []string{y, d, a}}
	}
	gradX := func(p string) *Node {
		return &Node{Name: p + "gx", OpType: GeluErfGradX, Domain: FusedDomain, Inputs: []string{"dy", "x", "c1", "c2", "c3", "k"}, Outputs: []string{p + "dx"}}
	}
	g.Nodes = []*Node{
		gelu("a/", "a/y", "", ""),
		node("a/drop", "Dropout", []string{"a/y", "zero"}, "a/yd"),
		node("a/fwd", "MatMul", []string{"a/yd", "w"}, "a/z"),
		gelu("b/", "b/y", "", ""),
		node("b/view", "Reshape", []string{"b/y", "shape"}, "b/yv"),
		node("b/fwd", "Neg", []string{"b/yv"}, "b/z"),
		gelu("c/", "c/y", "c/d", "c/a"),
		node("c/fwd", "Neg", []string{"c/y"}, "c/z"),
		node("a/late", "MatMul", []string{"dy", "a/yd"}, "a/g"), // index 8
		node("b/late", "Neg", []string{"b/yv"}, "b/g"),
		node("c/late", "Neg", []string{"c/y"}, "c/g"),
		gradX("a/"), gradX("b/"),
		node("a/after", "Neg", []string{"a/yd"}, "a/h"), // after X's last reader
	}
	g.Outputs = []*ValueInfo{{Name: "a/z"}, {Name: "a/g"}, {Name: "b/z"}, {Name: "b/g"}, {Name: "c/z"}, {Name: "c/g"}, {Name: "c/d"}, {Name: "c/a"},
		{Name: "a/dx"}, {Name: "b/dx"}, {Name: "a/h"}}
	require.Equal(t, 2, RecomputeGeluErfOutput(g))
	at := map[string]int{}
	for i, n := range g.Nodes {
		at[n.Name] = i
	}
	aCopy := g.Nodes[at["a/late"]-1]
	assert.Equal(t, GeluErf, aCopy.OpType)
	assert.Equal(t, []string{"x", "c1", "c2", "c3"}, aCopy.Inputs)
	assert.Equal(t, []string{"dy", aCopy.Outputs[0]}, g.Nodes[at["a/late"]].Inputs, "reads the copy in place of the Dropout's output")
	assert.Equal(t, []string{"", ""}, aCopy.Outputs[1:])
	assert.Equal(t, f32(4, 8), g.ValueInfo[aCopy.Outputs[0]].Type)
	bView := g.Nodes[at["b/late"]-1]
	bCopy := g.Nodes[at["b/late"]-2]
	assert.Equal(t, "Reshape", bView.OpType)
	assert.Equal(t, []string{bCopy.Outputs[0], "shape"}, bView.Inputs)
	assert.Equal(t, GeluErf, bCopy.OpType)
	assert.Equal(t, []string{bView.Outputs[0]}, g.Nodes[at["b/late"]].Inputs)
	assert.Equal(t, []string{"c/y"}, g.Nodes[at["c/late"]].Inputs, "its GeluErf writes D and A")
	assert.Equal(t, []string{"a/yd"}, g.Nodes[at["a/after"]].Inputs, "after X's last reader")
	assert.Equal(t, []string{"a/yd", "w"}, g.Nodes[at["a/fwd"]].Inputs, "the forward reader keeps Y")
}
