package graph

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ftype(dims ...int64) *Type {
	t := &Type{Kind: KindTensor, DType: Float32, HasShape: true}
	for _, d := range dims {
		t.Shape = append(t.Shape, Dim{Value: d, Known: true})
	}
	return t
}

func scalarInt(v int64) *Tensor {
	t := FromInt64([]int64{v})
	t.Shape = []int{}
	return t
}

// attentionViewsGraph: q, k, v as Gathers of a Transpose of r; S = q·kᵀ;
// O = A·v moved by a Transpose; the gradient side: MatMulGradA/B reading
// the views, and GatherGrads of the three gradients summed and transposed
// back. Plus a linear layer whose weight Transpose must stay for
// FuseTransposedMatMul, and a Transpose that a graph output reads.
func attentionViewsGraph() *Graph {
	g := NewGraph("attn")
	g.Inputs = []*ValueInfo{
		{Name: "r", Type: ftype(2, 5, 3, 4, 8)}, {Name: "a", Type: ftype(2, 4, 5, 5)},
		{Name: "ds", Type: ftype(2, 4, 5, 5)}, {Name: "do", Type: ftype(2, 4, 5, 8)}, {Name: "x", Type: ftype(2, 5, 16)}, {Name: "w", Type: ftype(8, 16)},
	}
	g.Initializers = map[string]*Tensor{"i0": scalarInt(0), "i1": scalarInt(1), "i2": scalarInt(2), "scale": FromFloat32([]float32{0.25})}
	n := func(op string, in []string, out string, attrs ...*Attr) *Node {
		nd := &Node{Name: out, OpType: op, Inputs: in, Outputs: []string{out}}
		for _, a := range attrs {
			nd.SetAttr(a)
		}
		return nd
	}
	internal := func(op string, in []string, out string, attrs ...*Attr) *Node {
		nd := n(op, in, out, attrs...)
		nd.Domain = InternalDomain
		return nd
	}
	g.Nodes = []*Node{
		n("Transpose", []string{"r"}, "p", IntsAttr("perm", 2, 0, 3, 1, 4)),
		n("Gather", []string{"p", "i0"}, "q"),
		n("Gather", []string{"p", "i1"}, "k"),
		n("Gather", []string{"p", "i2"}, "v"),
		n("Transpose", []string{"k"}, "kt", IntsAttr("perm", 0, 1, 3, 2)),
		n("MatMul", []string{"q", "kt"}, "s0"),
		n("Mul", []string{"scale", "s0"}, "s"),
		n("MatMul", []string{"a", "v"}, "o"),
		n("Transpose", []string{"o"}, "ot", IntsAttr("perm", 0, 2, 1, 3)),
		internal("MatMulGradA", []string{"ds", "q", "kt"}, "dq"),
		internal("MatMulGradB", []string{"ds", "q", "kt"}, "dkt"),
		n("Transpose", []string{"dkt"}, "dk", IntsAttr("perm", 0, 1, 3, 2)),
		internal("MatMulGradB", []string{"do", "a", "v"}, "dv"),
		internal("GatherGrad", []string{"dq", "p", "i0"}, "g0", &Attr{Name: "axis", Type: AttrInt}),
		internal("GatherGrad", []string{"dk", "p", "i1"}, "g1", &Attr{Name: "axis", Type: AttrInt}),
		internal("GatherGrad", []string{"dv", "p", "i2"}, "g2", &Attr{Name: "axis", Type: AttrInt}),
		n("Add", []string{"g0", "g1"}, "g01"),
		n("Add", []string{"g01", "g2"}, "gsum"),
		n("Transpose", []string{"gsum"}, "dr", IntsAttr("perm", 1, 3, 0, 2, 4)),
		// A linear layer: left alone.
		n("Transpose", []string{"w"}, "wt", IntsAttr("perm", 1, 0)),
		n("MatMul", []string{"x", "wt"}, "lin"),
		// A Transpose a graph output reads stays.
		n("Transpose", []string{"q"}, "qt", IntsAttr("perm", 0, 1, 3, 2)),
	}
	g.Outputs = []*ValueInfo{{Name: "s"}, {Name: "ot"}, {Name: "dr"}, {Name: "lin"}, {Name: "qt"}}
	return g
}

func TestFuseAttentionViews(t *testing.T) {
	g := attentionViewsGraph()
	before, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	got := FuseAttentionViews(g)
	RemoveDeadNodes(g)
	assert.Equal(t, 6, got, "five products and one gradient sum")
	ops := map[string]int{}
	byOut := map[string]*Node{}
	for _, nd := range g.Nodes {
		ops[nd.OpType]++
		byOut[nd.Outputs[0]] = nd
	}
	assert.Equal(t, 5, ops[PermutedMatMul], "%v", ops)
	assert.Equal(t, 1, ops[GatherGradSum], "%v", ops)
	assert.Equal(t, 1, ops["MatMul"], "the linear layer stays: %v", ops)
	assert.Zero(t, ops["GatherGrad"]+ops["Add"], "%v", ops)
	// Left: p (read by q's Gather, which qt reads), q, qt, wt.
	assert.Equal(t, 3, ops["Transpose"], "%v", ops)

	s := byOut["s"]
	require.NotNil(t, s)
	assert.Equal(t, PermutedMatMul, s.OpType)
	assert.Equal(t, []string{"r", "r"}, s.Inputs)
	assert.Equal(t, []int64{0, 3, 1, 4}, s.AttrInts("axes0", nil))
	assert.Equal(t, []int64{2, 0}, s.AttrInts("fixed0", nil))
	assert.Equal(t, []int64{0, 3, 4, 1}, s.AttrInts("axes1", nil), "k's view with its last two axes swapped")
	assert.Equal(t, []int64{2, 1}, s.AttrInts("fixed1", nil))
	assert.Equal(t, float32(0.25), s.AttrFloat("alpha", 1), "the Mul by a scalar is the product's alpha")
	assert.Zero(t, ops["Mul"])

	ot := byOut["ot"]
	require.NotNil(t, ot, "the product writes the Transpose's output")
	assert.Equal(t, PermutedMatMul, ot.OpType)
	assert.Equal(t, []int64{0, 2, 1, 3}, ot.AttrInts("permY", nil))
	assert.Nil(t, ot.Attr("axes0"), "A is read as it is")

	dk := byOut["dk"]
	require.NotNil(t, dk)
	assert.Equal(t, int64(2), dk.AttrInt("grad", 0))
	assert.Equal(t, []int64{0, 1, 3, 2}, dk.AttrInts("permY", nil))

	dr := byOut["dr"]
	require.NotNil(t, dr)
	assert.Equal(t, GatherGradSum, dr.OpType)
	assert.Equal(t, []string{"dq", "dk", "dv", "r"}, dr.Inputs)
	assert.Equal(t, []int64{0, 1, 2}, dr.AttrInts("indices", nil))
	assert.Equal(t, []int64{2, 0, 3, 1, 4}, dr.AttrInts("axes", nil))
	assert.Equal(t, []int64{1, 3, 0, 2, 4}, dr.AttrInts("permY", nil))

	// Shape inference gives the fused nodes' outputs the shapes the
	// unfused graph had.
	after, err := InferShapes(&Graph{Name: g.Name, Inputs: g.Inputs, Initializers: g.Initializers, Nodes: g.Nodes,
		Outputs: g.Outputs, ValueInfo: map[string]*ValueInfo{}}, 17, nil)
	require.NoError(t, err)
	want := map[string]*Type{"s": before["s"], "ot": before["ot"], "dq": ftype(2, 4, 5, 8), "dk": ftype(2, 4, 5, 8),
		"dv": ftype(2, 4, 5, 8), "dr": ftype(2, 5, 3, 4, 8)}
	for name, w := range want {
		require.NotNil(t, w, name)
		require.NotNil(t, after[name], name)
		assert.Equal(t, w.Shape, after[name].Shape, name)
		assert.Equal(t, Float32, after[name].DType, name)
	}
}

func TestFuseAttentionViewsLeavesOthers(t *testing.T) {
	g := attentionViewsGraph()
	// An inner sum a graph output reads: only the tree below it (g0 + g1)
	// fuses, without the Transpose (which reads the outer sum); the outer
	// Add and its other GatherGrad stay.
	g.Outputs = append(g.Outputs, &ValueInfo{Name: "g01"})
	FuseAttentionViews(g)
	ops := map[string]int{}
	var sum *Node
	for _, nd := range g.Nodes {
		ops[nd.OpType]++
		if nd.OpType == GatherGradSum {
			sum = nd
		}
	}
	assert.Equal(t, 1, ops[GatherGradSum], "%v", ops)
	assert.Equal(t, 1, ops["GatherGrad"], "%v", ops)
	assert.Equal(t, 1, ops["Add"], "%v", ops)
	require.NotNil(t, sum)
	assert.Equal(t, []string{"g01"}, sum.Outputs)
	assert.Nil(t, sum.Attr("permY"))

	// Nothing to do on a graph without views.
	h := NewGraph("plain")
	h.Inputs = []*ValueInfo{{Name: "x", Type: ftype(2, 3)}, {Name: "y", Type: ftype(3, 4)}}
	h.Nodes = []*Node{{Name: "m", OpType: "MatMul", Inputs: []string{"x", "y"}, Outputs: []string{"m"}}}
	h.Outputs = []*ValueInfo{{Name: "m"}}
	assert.Zero(t, FuseAttentionViews(h))
}

// scaledQueriesGraph: queries moved to [B·H, T, D] and divided by divisor
// (a scalar constant) before their product with the keys' view, the
// gradient products reading the scaled queries, and the scaling's
// gradient (the same op on the queries' gradient product).
func scaledQueriesGraph(divisor float32, op string) *Graph {
	g := NewGraph("scaled")
	g.Inputs = []*ValueInfo{{Name: "q", Type: ftype(5, 6, 4)}, {Name: "k", Type: ftype(5, 6, 4)}, {Name: "ds", Type: ftype(6, 5, 5)}}
	c := FromFloat32([]float32{divisor})
	c.Shape = []int{}
	g.Initializers = map[string]*Tensor{"c": c}
	n := func(op, domain string, in []string, out string, attrs ...*Attr) *Node {
		nd := &Node{Name: out, OpType: op, Domain: domain, Inputs: in, Outputs: []string{out}}
		for _, a := range attrs {
			nd.SetAttr(a)
		}
		return nd
	}
	g.Nodes = []*Node{
		n("Transpose", "", []string{"q"}, "qt", IntsAttr("perm", 1, 0, 2)),
		n(op, "", []string{"qt", "c"}, "qs"),
		n("Transpose", "", []string{"k"}, "kt", IntsAttr("perm", 1, 2, 0)),
		n("MatMul", "", []string{"qs", "kt"}, "s"),
		n("MatMulGradA", InternalDomain, []string{"ds", "qs", "kt"}, "dqs"),
		n(op, "", []string{"dqs", "c"}, "dqt"),
		n("MatMulGradB", InternalDomain, []string{"ds", "qs", "kt"}, "dkt"),
	}
	g.Outputs = []*ValueInfo{{Name: "s"}, {Name: "dqt"}, {Name: "dkt"}}
	return g
}

// TestFuseAttentionViewsScaledQueries: queries divided (or multiplied) by a
// power of two are read unscaled through their view and the factor is the
// products' alpha: 1/4 on the scores and on the keys' gradient (which
// scales with them), none on the queries' gradient product (for which they
// only give a shape), whose Div by 4 becomes its alpha instead. The Div of
// the queries is left unread. A divisor of 3 changes nothing but the
// plain view fusion of the keys.
func TestFuseAttentionViewsScaledQueries(t *testing.T) {
	for _, c := range []struct {
		op             string
		c              float32
		s, dq, dk      float32
		readsQ, folded bool
	}{
		{"Div", 4, 0.25, 0.25, 0.25, true, true},
		{"Mul", 0.5, 0.5, 0.5, 0.5, true, true},
		{"Div", 3, 1, 1, 1, false, false},
	} {
		g := scaledQueriesGraph(c.c, c.op)
		FuseAttentionViews(g)
		RemoveDeadNodes(g)
		byOut := map[string]*Node{}
		ops := map[string]int{}
		for _, nd := range g.Nodes {
			byOut[nd.Outputs[0]] = nd
			ops[nd.OpType]++
		}
		name := fmt.Sprintf("%s by %g", c.op, c.c)
		for _, p := range []struct {
			out   string
			alpha float32
			qAxes string // the attribute of q's view: q is the scores' A, the keys' gradient's A (input 1)
		}{{"s", c.s, "axes0"}, {"dkt", c.dk, "axes1"}} {
			nd := byOut[p.out]
			require.NotNil(t, nd, "%s: %s", name, p.out)
			assert.Equal(t, PermutedMatMul, nd.OpType, "%s: %s", name, p.out)
			assert.Equal(t, p.alpha, nd.AttrFloat("alpha", 1), "%s: %s", name, p.out)
			if c.readsQ {
				assert.Equal(t, "q", nd.Inputs[map[string]int{"axes0": 0, "axes1": 1}[p.qAxes]], "%s: %s", name, p.out)
				assert.Equal(t, []int64{1, 0, 2}, nd.AttrInts(p.qAxes, nil), "%s: %s reads q's view", name, p.out)
			}
		}
		if c.folded {
			dq := byOut["dqt"]
			require.NotNil(t, dq, name)
			assert.Equal(t, PermutedMatMul, dq.OpType, name)
			assert.Equal(t, c.dq, dq.AttrFloat("alpha", 1), name)
			assert.Zero(t, ops["Div"]+ops["Mul"], "%s: %v", name, ops)
			assert.Zero(t, ops["Transpose"], "%s: q's Transpose read as a view: %v", name, ops)
		} else {
			assert.Equal(t, 2, ops["Div"], "%s: %v", name, ops)
			assert.Equal(t, "qs", byOut["dqs"].Inputs[1], "%s: the scaled queries stay", name)
		}
	}
}

func TestPowerOfTwo(t *testing.T) {
	for _, c := range []struct {
		v    float32
		want bool
	}{{1, true}, {8, true}, {0.125, true}, {-4, true}, {3, false}, {0, false}, {float32(math.Inf(1)), false},
		{float32(math.NaN()), false}, {math.Float32frombits(1 << 22), false}, {math.SmallestNonzeroFloat32, false}} {
		assert.Equal(t, c.want, powerOfTwo(c.v), "%g", c.v)
	}
}
