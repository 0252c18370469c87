package graph

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func maskOf(T int, neg float32, shape ...int) *Tensor {
	d := make([]float32, T*T)
	for i := 0; i < T; i++ {
		for j := i + 1; j < T; j++ {
			d[i*T+j] = neg
		}
	}
	if shape == nil {
		shape = []int{T, T}
	}
	return FromFloat32(d, shape...)
}

func TestIsCausalMask(t *testing.T) {
	inf := float32(math.Inf(-1))
	moved := maskOf(5, inf)
	moved.Float32s()[1*5+3], moved.Float32s()[3*5+1] = 0, inf
	nanBelow := maskOf(5, inf)
	nanBelow.Float32s()[4*5+2] = float32(math.NaN())
	plusInf := maskOf(5, float32(math.Inf(1)))
	wide := FromFloat64([]float64{0, math.Inf(-1), 0, 0}, 2, 2)
	for _, c := range []struct {
		name string
		t    *Tensor
		want bool
	}{
		{"T=5", maskOf(5, inf), true},
		{"T=1", maskOf(1, inf), true},
		{"[1, 1, T, T]", maskOf(4, inf, 1, 1, 4, 4), true},
		{"float64", wide, true},
		{"one −inf moved below the diagonal", moved, false},
		{"−1e9 instead of −inf", maskOf(5, -1e9), false},
		{"+inf above the diagonal", plusInf, false},
		{"NaN below the diagonal", nanBelow, false},
		{"[2, T, T]", FromFloat32(append(maskOf(3, inf).Float32s(), maskOf(3, inf).Float32s()...), 2, 3, 3), false},
		{"not square", FromFloat32(make([]float32, 6), 2, 3), false},
		{"rank 1", FromFloat32([]float32{0}, 1), false},
		{"int64", FromInt64([]int64{0, 0, 0, 0}, 2, 2), false},
		{"nil", nil, false},
	} {
		assert.Equal(t, c.want, IsCausalMask(c.t), c.name)
	}
}

// causalGraph is attention's core after the fusions, as the GPT export's
// compiled step has it: scores = PermutedMatMul(q, k view), Add(mask),
// Softmax, P·v; backward dP = dO·vᵀ, dv = Pᵀ·dO, SoftmaxGrad, a Mul by a
// scalar, dq = dS·k, dk = qᵀ·dS.
func causalGraph(mask *Tensor) *Graph {
	g := NewGraph("causal")
	g.Initializers["mask"] = mask
	g.Initializers["one"] = FromFloat32([]float32{1})
	pm := func(name string, grad int64, in []string, attrs ...*Attr) *Node {
		n := &Node{Name: name, OpType: PermutedMatMul, Domain: FusedDomain, Inputs: in, Outputs: []string{name}}
		if grad != 0 {
			n.SetAttr(IntAttr("grad", grad))
		}
		for _, a := range attrs {
			n.SetAttr(a)
		}
		return n
	}
	heads := IntsAttr("axes1", 1, 0, 2)
	g.Nodes = []*Node{
		pm("s", 0, []string{"q", "k"}, IntsAttr("axes1", 1, 2, 0)),
		{Name: "sm", OpType: "Add", Inputs: []string{"s", "mask"}, Outputs: []string{"sm"}},
		{Name: "p", OpType: "Softmax", Inputs: []string{"sm"}, Outputs: []string{"p"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", -1)}},
		pm("o", 0, []string{"p", "v"}, heads),
		pm("dp", 1, []string{"do", "p", "v"}, IntsAttr("axes0", 1, 0, 2), IntsAttr("axes2", 1, 0, 2)),
		pm("dv", 2, []string{"do", "p", "v"}, IntsAttr("axes0", 1, 0, 2), IntsAttr("axes2", 1, 0, 2)),
		{Name: "ds", OpType: "SoftmaxGrad", Domain: InternalDomain, Inputs: []string{"dp", "p"}, Outputs: []string{"ds"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", -1)}},
		{Name: "ds1", OpType: "Mul", Inputs: []string{"ds", "one"}, Outputs: []string{"ds1"}},
		{Name: "ds2", OpType: "Identity", Inputs: []string{"ds1"}, Outputs: []string{"ds2"}},
		pm("dq", 1, []string{"ds2", "q", "k"}, IntsAttr("axes2", 1, 2, 0)),
		pm("dk", 2, []string{"ds2", "q", "k"}, IntsAttr("axes2", 1, 2, 0), IntsAttr("permY", 2, 0, 1)),
	}
	g.Outputs = []*ValueInfo{{Name: "o"}, {Name: "dv"}, {Name: "dq"}, {Name: "dk"}}
	return g
}

// hints returns each PermutedMatMul's hints: lower, and lowerY's fill
// (NaN when absent).
func hints(g *Graph) map[string][2]any {
	out := map[string][2]any{}
	for _, n := range g.Nodes {
		if n.OpType != PermutedMatMul {
			continue
		}
		fill := any(nil)
		if n.AttrInt(CausalLowerYAttr, 0) == 1 {
			fill = n.AttrFloat(CausalFillYAttr, 42)
		}
		out[n.Name] = [2]any{n.AttrInts(CausalLowerAttr, nil), fill}
	}
	return out
}

func TestMarkCausalAttention(t *testing.T) {
	inf := float32(math.Inf(-1))
	g := causalGraph(maskOf(8, inf))
	before := g.Nodes[0]
	softmax := g.Nodes[2]
	require.Equal(t, 7, MarkCausalAttention(g, 17))
	assert.Nil(t, before.Attr(CausalLowerYAttr), "the marked node is a copy")
	assert.Nil(t, softmax.Attr(CausalMaskedAttr), "the marked node is a copy")
	assert.Equal(t, int64(1), g.Nodes[2].AttrInt(CausalMaskedAttr, 0), "the Softmax of the masked scores")
	assert.Equal(t, map[string][2]any{
		"s":  {[]int64(nil), inf},        // scores: −inf above the diagonal
		"o":  {[]int64{0}, nil},          // P·v
		"dp": {[]int64(nil), float32(0)}, // read by SoftmaxGrad only
		"dv": {[]int64{1}, nil},          // Pᵀ·dO
		"dq": {[]int64{0}, nil},          // dS·k
		"dk": {[]int64{0}, nil},          // qᵀ·dS
	}, hints(g))

	t.Run("not causal", func(t *testing.T) {
		moved := maskOf(8, inf)
		moved.Float32s()[2*8+6], moved.Float32s()[6*8+2] = 0, inf
		for name, m := range map[string]*Tensor{"moved": moved, "−1e9": maskOf(8, -1e9)} {
			g := causalGraph(m)
			assert.Zero(t, MarkCausalAttention(g, 17), name)
			assert.Nil(t, g.Nodes[2].Attr(CausalMaskedAttr), name)
		}
	})
	t.Run("scores and dP read twice", func(t *testing.T) {
		g := causalGraph(maskOf(8, inf))
		g.Outputs = append(g.Outputs, &ValueInfo{Name: "s"}, &ValueInfo{Name: "dp"})
		MarkCausalAttention(g, 17)
		h := hints(g)
		assert.Nil(t, h["s"][1], "a graph output keeps its upper half")
		assert.Nil(t, h["dp"][1])
		assert.Equal(t, []int64{0}, h["o"][0])
	})
	t.Run("softmax along another axis", func(t *testing.T) {
		g := causalGraph(maskOf(8, inf))
		g.Nodes[2].Attrs["axis"] = IntAttr("axis", 1)
		assert.Equal(t, 1, MarkCausalAttention(g, 17), "only the scores")
		assert.Nil(t, g.Nodes[2].Attr(CausalMaskedAttr))
	})
	t.Run("scaled by infinity", func(t *testing.T) {
		g := causalGraph(maskOf(8, inf))
		g.Initializers["one"] = FromFloat32([]float32{float32(math.Inf(1))})
		MarkCausalAttention(g, 17)
		h := hints(g)
		assert.Nil(t, h["dq"][0], "∞·0 is not zero")
		assert.Nil(t, h["dk"][0])
		assert.Equal(t, []int64{1}, h["dv"][0])
	})
	t.Run("P read through a view", func(t *testing.T) {
		g := causalGraph(maskOf(8, inf))
		g.Nodes[3].SetAttr(IntsAttr("axes0", 0, 2, 1))
		MarkCausalAttention(g, 17)
		assert.Nil(t, hints(g)["o"][0])
	})
}
