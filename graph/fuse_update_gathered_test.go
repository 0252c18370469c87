package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFuseUpdateGathered: an embedding table's SGD update whose
// gradient is a GatherGrad behind an Identity becomes SGDUpdateGathered
// reading the indices and dY (GatherGrad and the Identity gone; momentum
// and gated layouts kept), an Adam update AdamUpdateGathered; left alone when the gradient has another
// reader, is a graph output, gathers along another axis, is gathered into
// a different tensor than the one updated, or the update covers two
// tensors.
func TestFuseUpdateGathered(t *testing.T) {
	attrs := func(kv ...int64) map[string]*Attr {
		a := map[string]*Attr{}
		for i := 0; i+1 < len(kv); i += 2 {
			name := []string{"tensors", "momentum", "gated", "axis"}[kv[i]]
			a[name] = &Attr{Name: name, Type: AttrInt, I: kv[i+1]}
		}
		return a
	}
	build := func(momentum, gated bool, edit func(g *Graph)) *Graph {
		g := NewGraph("emb")
		g.Inputs = []*ValueInfo{{Name: "dy", Type: f32(2, 3, 4)}, {Name: "ids", Type: &Type{Kind: KindTensor, DType: Int64, HasShape: true, Shape: []Dim{{Known: true, Value: 2}, {Known: true, Value: 3}}}},
			{Name: "w", Type: f32(10, 4)}, {Name: "b", Type: f32(10, 4)}, {Name: "c", Type: f32(2)}, {Name: "h", Type: f32(1, 3)}, {Name: "skip"}}
		g.ValueInfo["w"] = &ValueInfo{Name: "w", Type: f32(10, 4)}
		g.ValueInfo["dy"] = &ValueInfo{Name: "dy", Type: f32(2, 3, 4)}
		ins := []string{"c", "h"}
		a := attrs(0, 1)
		if gated {
			ins = append(ins, "skip")
			a["gated"] = &Attr{Name: "gated", Type: AttrInt, I: 1}
		}
		ins = append(ins, "w", "grad/w")
		outs := []string{"w1"}
		if momentum {
			ins, outs = append(ins, "b"), append(outs, "b1")
			a["momentum"] = &Attr{Name: "momentum", Type: AttrInt, I: 1}
		}
		g.Nodes = []*Node{
			{Name: "gg", OpType: "GatherGrad", Domain: InternalDomain, Inputs: []string{"dy", "w", "ids"}, Outputs: []string{"gw"}, Attrs: attrs(3, 0)},
			{Name: "id", OpType: "Identity", Inputs: []string{"gw"}, Outputs: []string{"grad/w"}},
			{Name: "upd", OpType: SGDUpdateOp, Domain: InternalDomain, Inputs: ins, Outputs: outs, Attrs: a},
		}
		for _, o := range outs {
			g.Outputs = append(g.Outputs, &ValueInfo{Name: o})
		}
		if edit != nil {
			edit(g)
		}
		return g
	}
	for _, v := range []struct {
		momentum, gated bool
		want            []string
	}{
		{false, false, []string{"c", "h", "ids", "w", "dy"}},
		{true, false, []string{"c", "h", "ids", "w", "dy", "b"}},
		{true, true, []string{"c", "h", "skip", "ids", "w", "dy", "b"}},
	} {
		g := build(v.momentum, v.gated, nil)
		require.Equal(t, 1, FuseUpdateGathered(g))
		require.Len(t, g.Nodes, 1)
		n := g.Nodes[0]
		assert.Equal(t, SGDUpdateGatheredOp, n.OpType)
		assert.Equal(t, InternalDomain, n.Domain)
		assert.Equal(t, v.want, n.Inputs)
		lay, err := optimizerLayout(n)
		require.NoError(t, err)
		assert.Equal(t, 1, lay.tensors)
		wantUpd := []int{len(v.want) - 2}
		if v.momentum {
			wantUpd = []int{len(v.want) - 3, len(v.want) - 1}
		}
		assert.Equal(t, wantUpd, UpdatedInput(n), "X' replaces X, B' replaces B")
	}
	// Adam (amsgrad): AdamUpdateGathered, the moments after dY.
	g := build(false, false, func(g *Graph) {
		u := g.Nodes[2]
		u.OpType = AdamUpdateOp
		u.Inputs = []string{"c", "h", "w", "grad/w", "m", "v", "mx"}
		u.Outputs = []string{"w1", "m1", "v1", "mx1"}
		u.Attrs = map[string]*Attr{"amsgrad": {Name: "amsgrad", Type: AttrInt, I: 1}}
	})
	require.Equal(t, 1, FuseUpdateGathered(g))
	require.Len(t, g.Nodes, 1)
	assert.Equal(t, AdamUpdateGatheredOp, g.Nodes[0].OpType)
	assert.Equal(t, []string{"c", "h", "ids", "w", "dy", "m", "v", "mx"}, g.Nodes[0].Inputs)
	assert.Equal(t, []int{3, 5, 6, 7}, UpdatedInput(g.Nodes[0]))

	// Through the per-tensor ClipGradNorm that reports the norm: the
	// fused node takes max_norm, writes the norm first, has norm=1.
	g = build(true, false, func(g *Graph) {
		g.Nodes[2].Inputs[3] = "grad/w/normed"
		clip := &Node{Name: "norm", OpType: ClipGradNormOp, Domain: InternalDomain, Inputs: []string{"max", "grad/w"},
			Outputs: []string{"norm/w", "grad/w/normed"}, Attrs: attrs(0, 1)}
		g.Nodes = []*Node{g.Nodes[0], g.Nodes[1], clip, g.Nodes[2]}
		g.Outputs = append(g.Outputs, &ValueInfo{Name: "norm/w"})
	})
	require.Equal(t, 1, FuseUpdateGathered(g))
	require.Len(t, g.Nodes, 1)
	n := g.Nodes[0]
	assert.Equal(t, []string{"c", "h", "max", "ids", "w", "dy", "b"}, n.Inputs)
	assert.Equal(t, []string{"norm/w", "w1", "b1"}, n.Outputs)
	assert.Equal(t, int64(1), n.AttrInt("norm", 0))
	assert.Equal(t, []int{-1, 4, 6}, UpdatedInput(n), "the norm replaces no input")

	// Without the Identity: GatherGrad's output read by the update itself.
	g = build(true, false, func(g *Graph) {
		g.Nodes = append(g.Nodes[:1], g.Nodes[2:]...)
		g.Nodes[0].Outputs[0] = "grad/w"
	})
	assert.Equal(t, 1, FuseUpdateGathered(g))

	for name, edit := range map[string]func(g *Graph){
		"another reader": func(g *Graph) {
			g.Nodes = append(g.Nodes, &Node{Name: "norm", OpType: "ReduceSumSquare", Inputs: []string{"grad/w"}, Outputs: []string{"n"}})
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "n"})
		},
		"a graph output": func(g *Graph) { g.Outputs = append(g.Outputs, &ValueInfo{Name: "gw"}) },
		"axis 1":         func(g *Graph) { g.Nodes[0].Attrs = attrs(3, 1) },
		"two clips": func(g *Graph) {
			g.Nodes[2].Inputs[3] = "grad/w/n2"
			c1 := &Node{Name: "n1", OpType: ClipGradNormOp, Domain: InternalDomain, Inputs: []string{"max", "grad/w"}, Outputs: []string{"nw1", "grad/w/n1"}, Attrs: attrs(0, 1)}
			c2 := &Node{Name: "n2", OpType: ClipGradNormOp, Domain: InternalDomain, Inputs: []string{"max", "grad/w/n1"}, Outputs: []string{"nw2", "grad/w/n2"}, Attrs: attrs(0, 1)}
			g.Nodes = []*Node{g.Nodes[0], g.Nodes[1], c1, c2, g.Nodes[2]}
			g.Outputs = append(g.Outputs, &ValueInfo{Name: "nw1"}, &ValueInfo{Name: "nw2"})
		},
		"another table": func(g *Graph) { g.Nodes[0].Inputs[1] = "b" },
		"two tensors": func(g *Graph) {
			u := g.Nodes[2]
			u.Inputs = []string{"c", "h", "w", "b", "grad/w", "gb"}
			g.Inputs = append(g.Inputs, &ValueInfo{Name: "gb", Type: f32(10, 4)})
			u.Outputs = []string{"w1", "b1"}
			u.Attrs = attrs(0, 2)
		},
	} {
		g := build(name != "two tensors", false, edit)
		nodes := len(g.Nodes)
		assert.Zero(t, FuseUpdateGathered(g), name)
		assert.Len(t, g.Nodes, nodes, name)
	}
}
