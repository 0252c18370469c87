package graph

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recomputeFixture is a small training graph: forward
//
//	h = MatMul(x, w); a = Relu(h); d = Dropout(a); s = Mul(d, d);
//	e = Sigmoid(s); y = MatMul(e, v); loss = ReduceSum(y)
//
// and its backward pass from Gradients. It returns the graph and the number
// of forward nodes.
func recomputeFixture(t *testing.T) (*Graph, int) {
	t.Helper()
	g := NewGraph("recompute")
	f32 := func(shape ...int64) *Type {
		ty := &Type{Kind: KindTensor, DType: Float32, HasShape: true}
		for _, d := range shape {
			ty.Shape = append(ty.Shape, Dim{Value: d, Known: true})
		}
		return ty
	}
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(2, 3)}, {Name: "w", Type: f32(3, 4)}, {Name: "v", Type: f32(4, 2)}}
	g.Initializers["ratio"] = FromFloat32([]float32{0.5})
	g.Nodes = []*Node{
		{Name: "mm1", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"h"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"h"}, Outputs: []string{"a"}},
		{Name: "drop", OpType: "Dropout", Inputs: []string{"a", "ratio"}, Outputs: []string{"d", "mask"}},
		{Name: "sq", OpType: "Mul", Inputs: []string{"d", "d"}, Outputs: []string{"s"}},
		{Name: "sig", OpType: "Sigmoid", Inputs: []string{"s"}, Outputs: []string{"e"}},
		{Name: "mm2", OpType: "MatMul", Inputs: []string{"e", "v"}, Outputs: []string{"y"}},
		{Name: "sum", OpType: "ReduceSum", Inputs: []string{"y"}, Outputs: []string{"loss"}, Attrs: map[string]*Attr{"keepdims": IntAttr("keepdims", 0)}},
	}
	forward := len(g.Nodes)
	grads, err := Gradients(g, "loss", []string{"w", "v"}, "", 17)
	require.NoError(t, err)
	g.Outputs = []*ValueInfo{{Name: "loss"}}
	for _, gr := range grads {
		g.Outputs = append(g.Outputs, &ValueInfo{Name: gr})
	}
	return g, forward
}

// readers maps each value to the indices of the nodes reading it.
func readers(g *Graph) map[string][]int {
	r := map[string][]int{}
	for i, n := range g.Nodes {
		for _, in := range n.Inputs {
			r[in] = append(r[in], i)
		}
	}
	return r
}

func TestRecomputeCopiesCheapValuesBeforeTheirFirstUse(t *testing.T) {
	g, forward := recomputeFixture(t)
	before := readers(g)
	// Without the pass, backward reads e (MatMul's gradient) and d.
	require.Condition(t, func() bool { return before["e"][len(before["e"])-1] >= forward })

	st, err := Recompute(g, forward, 17, RecomputeOptions{})
	require.NoError(t, err)
	assert.Positive(t, st.Recomputed)
	// CastLike(constant, x) nodes of backward moved into forward.
	assert.Positive(t, st.Hoisted)
	forward += st.Hoisted
	for _, n := range g.Nodes[:forward] {
		assert.False(t, strings.HasPrefix(n.Name, "grad/") && n.OpType != "CastLike", "%s is a backward node", n.Name)
	}
	after := readers(g)

	// e = Sigmoid(Mul(d, d)) is recomputed from d, the Dropout output the
	// backward pass keeps: nothing in backward reads the original e or s.
	for _, v := range []string{"e", "s"} {
		for _, i := range after[v] {
			assert.Less(t, i, forward, "backward node %q still reads the original %s", g.Nodes[i].Label(), v)
		}
	}
	// Dropout is never copied: its output (and mask) are drawn once.
	drops := 0
	for _, n := range g.Nodes {
		if n.OpType == "Dropout" {
			drops++
		}
	}
	assert.Equal(t, 1, drops)
	// Every copy comes after the forward pass, right before the backward
	// nodes that need it, and reads only kept values or other copies.
	copies := 0
	for i, n := range g.Nodes {
		if !strings.Contains(n.Name, "/recomputed") {
			continue
		}
		copies++
		assert.GreaterOrEqual(t, i, forward)
		for _, in := range n.Inputs {
			assert.True(t, in == "d" || strings.Contains(in, "/recomputed"), "copy %s reads %s", n.Name, in)
		}
	}
	assert.Equal(t, st.Copies, copies)
	assert.Positive(t, copies)
	// The order is already topological: TopoSort keeps it.
	order := append([]*Node{}, g.Nodes...)
	require.NoError(t, TopoSort(g))
	assert.Equal(t, order, g.Nodes)
}

// A cheap value whose recomputation would need a value backward does not
// otherwise read (here h, an expensive MatMul output, is read by Relu's
// gradient, so a is recomputable; with Relu swapped for Tanh, whose gradient
// reads its output, h is no longer kept and a must stay).
func TestRecomputeKeepsValuesWhoseRootsWouldLiveLonger(t *testing.T) {
	g, forward := recomputeFixture(t)
	g.Nodes[1].OpType = "Tanh"
	g.Nodes = g.Nodes[:forward]
	g.Outputs = nil
	grads, err := Gradients(g, "loss", []string{"w"}, "", 17)
	require.NoError(t, err)
	g.Outputs = []*ValueInfo{{Name: grads[0]}}
	_, err = Recompute(g, forward, 17, RecomputeOptions{})
	require.NoError(t, err)
	for _, n := range g.Nodes[forward:] {
		assert.NotEqual(t, "Tanh", n.OpType, "a = Tanh(h) would need h, which backward does not keep")
	}
}

func TestRecomputeRejectsABadSplit(t *testing.T) {
	g, _ := recomputeFixture(t)
	_, err := Recompute(g, len(g.Nodes)+1, 17, RecomputeOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "forward nodes")
	g2, forward := recomputeFixture(t)
	g2.Nodes = append(g2.Nodes, &Node{Name: "bad", OpType: "Identity", Inputs: []string{"x"}, Outputs: []string{"h"}})
	_, err = Recompute(g2, forward, 17, RecomputeOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `redefines forward value "h"`)
}

// Reads that do not need the value: the Relu gradient's mask reads the
// Relu's output (x > 0 exactly where Relu(x) > 0), and SumToShape of an
// operand that its Add does not broadcast is an Identity.
func TestRecomputeDropsReadsThatNeedNoValue(t *testing.T) {
	g := NewGraph("residual")
	f32 := &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{{Param: "N"}, {Value: 4, Known: true}}}
	w := &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{{Value: 4, Known: true}, {Value: 4, Known: true}}}
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32}, {Name: "w", Type: w}}
	g.Nodes = []*Node{
		{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"h"}},
		{Name: "res", OpType: "Add", Inputs: []string{"h", "x"}, Outputs: []string{"r"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"r"}, Outputs: []string{"a"}},
		{Name: "mm2", OpType: "MatMul", Inputs: []string{"a", "w"}, Outputs: []string{"y"}},
		{Name: "sum", OpType: "ReduceSum", Inputs: []string{"y"}, Outputs: []string{"loss"}, Attrs: map[string]*Attr{"keepdims": IntAttr("keepdims", 0)}},
	}
	forward := len(g.Nodes)
	grads, err := Gradients(g, "loss", []string{"w"}, "", 17)
	require.NoError(t, err)
	g.Outputs = []*ValueInfo{{Name: grads[0]}}
	readsBefore := readers(g)
	require.Condition(t, func() bool { return readsBefore["r"][len(readsBefore["r"])-1] >= forward }, "Relu's gradient reads its input")

	st, err := Recompute(g, forward, 17, RecomputeOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1, st.ReluMasks)
	assert.Positive(t, st.ShapeReads)
	for _, n := range g.Nodes[forward+st.Hoisted:] {
		for _, in := range n.Inputs {
			assert.NotEqual(t, "r", in, "backward node %s reads the Relu's input", n.Label())
			assert.NotEqual(t, "h", in, "backward node %s reads the Add's operand", n.Label())
		}
		assert.NotEqual(t, "SumToShape", n.OpType)
	}
}

// A SumToShape whose operand is broadcast (here m, shaped [N,1], added to
// h, shaped [N,4]) really sums: it stays.
func TestRecomputeKeepsSumToShapeOfBroadcastOperands(t *testing.T) {
	g := NewGraph("broadcast")
	g.Inputs = []*ValueInfo{
		{Name: "x", Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{{Param: "N"}, {Value: 4, Known: true}}}},
		{Name: "w", Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{{Value: 4, Known: true}, {Value: 4, Known: true}}}},
	}
	g.Initializers["axes"] = FromInt64([]int64{1}, 1)
	g.Nodes = []*Node{
		{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"h"}},
		{Name: "mean", OpType: "ReduceMean", Inputs: []string{"h", "axes"}, Outputs: []string{"m"}, Attrs: map[string]*Attr{"keepdims": IntAttr("keepdims", 1)}},
		{Name: "add", OpType: "Add", Inputs: []string{"h", "m"}, Outputs: []string{"s"}},
		{Name: "sq", OpType: "Mul", Inputs: []string{"s", "s"}, Outputs: []string{"q"}},
		{Name: "sum", OpType: "ReduceSum", Inputs: []string{"q"}, Outputs: []string{"loss"}, Attrs: map[string]*Attr{"keepdims": IntAttr("keepdims", 0)}},
	}
	forward := len(g.Nodes)
	grads, err := Gradients(g, "loss", []string{"w"}, "", 18)
	require.NoError(t, err)
	g.Outputs = []*ValueInfo{{Name: grads[0]}}
	_, err = Recompute(g, forward, 18, RecomputeOptions{})
	require.NoError(t, err)
	kept := false
	for _, n := range g.Nodes {
		if n.OpType == "SumToShape" && n.Inputs[1] == "m" {
			kept = true
		}
	}
	assert.True(t, kept, "the gradient of the broadcast operand m must still be summed to its shape")
}

// A value computed from constants alone (here c = Identity(k) of an
// initializer, and Neg of a Constant node's output) is not copied into
// backward: a copy would free nothing, and the backends' fusions look for
// the forward's constant by name (the GELU gradient's scalars).
func TestRecomputeKeepsConstantValues(t *testing.T) {
	g, forward := recomputeFixture(t)
	g.Nodes = g.Nodes[:forward]
	g.Outputs = nil
	g.Initializers["k"] = FromFloat32([]float32{3})
	c := &Node{Name: "kc", OpType: "Constant", Outputs: []string{"kk"}, Attrs: map[string]*Attr{"value": {Name: "value", Type: AttrTensor, T: FromFloat32([]float32{2})}}}
	nodes := []*Node{g.Nodes[0], g.Nodes[1], g.Nodes[2],
		{Name: "cid", OpType: "Identity", Inputs: []string{"k"}, Outputs: []string{"c"}},
		c,
		{Name: "neg", OpType: "Neg", Inputs: []string{"kk"}, Outputs: []string{"c2"}},
		{Name: "sq", OpType: "Mul", Inputs: []string{"d", "c"}, Outputs: []string{"s0"}},
		{Name: "sq2", OpType: "Mul", Inputs: []string{"s0", "c2"}, Outputs: []string{"s"}},
	}
	g.Nodes = append(nodes, g.Nodes[4:]...)
	forward = len(g.Nodes)
	grads, err := Gradients(g, "loss", []string{"w", "v"}, "", 17)
	require.NoError(t, err)
	for _, gr := range grads {
		g.Outputs = append(g.Outputs, &ValueInfo{Name: gr})
	}
	read := func() map[string]bool {
		r := map[string]bool{}
		for _, n := range g.Nodes[forward:] {
			for _, in := range n.Inputs {
				r[in] = true
			}
		}
		return r
	}
	require.True(t, read()["c"], "Mul's gradient reads c")
	require.True(t, read()["c2"], "Mul's gradient reads c2")
	st, err := Recompute(g, forward, 17, RecomputeOptions{})
	require.NoError(t, err)
	after := read()
	assert.True(t, after["c"], "backward reads the forward's c")
	assert.True(t, after["c2"], "backward reads the forward's c2")
	for _, n := range g.Nodes[forward+st.Hoisted:] {
		assert.False(t, n.OpType == "Identity" && len(n.Inputs) == 1 && n.Inputs[0] == "k", "a copy of c: %s", n.Name)
		assert.NotEqual(t, "Neg", n.OpType, "a copy of c2: %s", n.Name)
		assert.NotEqual(t, "Constant", n.OpType, "a copy of kk: %s", n.Name)
	}
}

// The exact GELU's intermediates that its gradient reads — D = X/c,
// Erf(D) and A = Erf(D) + 1 — are not copied into backward (the
// backends' GELU fusions compute them again from X inside the gradient's
// kernel, and copies would keep those fusions from matching); the GELU's
// output, read by the next product's weight gradient, still is.
func TestRecomputeLeavesGeluIntermediatesToTheFusions(t *testing.T) {
	g := NewGraph("gelu")
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(2, 3)}, {Name: "w", Type: f32(3, 4)}, {Name: "v", Type: f32(4, 2)}}
	scalar := func(name string, v float32) *Node {
		return &Node{Name: name, OpType: "Constant", Outputs: []string{name}, Attrs: map[string]*Attr{"value": {Name: "value", Type: AttrTensor, T: FromFloat32([]float32{v})}}}
	}
	g.Nodes = []*Node{
		{Name: "mm1", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"h"}},
		scalar("sqrt2", 1.4142135), scalar("one", 1), scalar("half", 0.5),
		{Name: "div", OpType: "Div", Inputs: []string{"h", "sqrt2"}, Outputs: []string{"d"}},
		{Name: "erf", OpType: "Erf", Inputs: []string{"d"}, Outputs: []string{"e"}},
		{Name: "add", OpType: "Add", Inputs: []string{"e", "one"}, Outputs: []string{"a"}},
		{Name: "mul", OpType: "Mul", Inputs: []string{"h", "a"}, Outputs: []string{"m"}},
		{Name: "mul2", OpType: "Mul", Inputs: []string{"m", "half"}, Outputs: []string{"y"}},
		{Name: "mm2", OpType: "MatMul", Inputs: []string{"y", "v"}, Outputs: []string{"z"}},
		{Name: "sum", OpType: "ReduceSum", Inputs: []string{"z"}, Outputs: []string{"loss"}, Attrs: map[string]*Attr{"keepdims": IntAttr("keepdims", 0)}},
	}
	forward := len(g.Nodes)
	grads, err := Gradients(g, "loss", []string{"w", "v"}, "", 17)
	require.NoError(t, err)
	for _, gr := range grads {
		g.Outputs = append(g.Outputs, &ValueInfo{Name: gr})
	}
	st, err := Recompute(g, forward, 17, RecomputeOptions{})
	require.NoError(t, err)
	copied := map[string]bool{}
	for _, n := range g.Nodes[forward+st.Hoisted:] {
		if strings.Contains(n.Name, "/recomputed") {
			copied[n.OpType] = true
		}
	}
	for _, op := range []string{"Div", "Erf", "Add", "Constant"} {
		assert.False(t, copied[op], "a %s copied into backward: %v", op, copied)
	}
	assert.True(t, copied["Mul"], "the GELU's output is recomputed for the weight gradient: %v", copied)
}
