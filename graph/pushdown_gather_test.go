package graph

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rowsGraph is x[batch,5,4] → MatMul(w[4,6]) → Add(bias[6]) → Relu →
// Gather(index 0, axis 1) → out[batch,6], the head of a ViT reading its
// class token. extra, when set, is a node added after the Relu.
func rowsGraph(extra ...*Node) *Graph {
	g := NewGraph("rows")
	f32 := func(dims ...Dim) *Type {
		return &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: dims}
	}
	batch := Dim{Param: "batch"}
	g.Inputs = []*ValueInfo{{Name: "x", Type: f32(batch, knownDim(5), knownDim(4))}}
	g.Initializers = map[string]*Tensor{
		"w":    Zeros(Float32, 4, 6),
		"bias": Zeros(Float32, 6),
		"zero": FromInt64([]int64{0}),
	}
	g.Initializers["zero"].Shape = nil // a scalar index
	g.Nodes = []*Node{
		{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"h"}},
		{Name: "add", OpType: "Add", Inputs: []string{"h", "bias"}, Outputs: []string{"y"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"y"}, Outputs: []string{"z"}},
	}
	g.Nodes = append(g.Nodes, extra...)
	g.Nodes = append(g.Nodes, &Node{Name: "cls", OpType: "Gather", Inputs: []string{"z", "zero"}, Outputs: []string{"out"},
		Attrs: map[string]*Attr{"axis": IntAttr("axis", 1)}})
	g.Outputs = []*ValueInfo{{Name: "out"}}
	return g
}

// producerOf returns the node that writes name.
func producerOf(g *Graph, name string) *Node { return g.Producers()[name] }

// upChain follows first inputs up from the producer of name, requiring
// the producers' op types to be ops in order, and returns those nodes.
func upChain(t *testing.T, g *Graph, name string, ops ...string) []*Node {
	t.Helper()
	var chain []*Node
	for _, op := range ops {
		n := producerOf(g, name)
		require.NotNil(t, n, "nothing writes %s (want %s)", name, op)
		require.Equal(t, op, n.OpType, "the producer of %s", name)
		chain = append(chain, n)
		if len(n.Inputs) > 0 {
			name = n.Inputs[0]
		}
	}
	return chain
}

// TestPushDownGatherMovesAboveRowOps: the class-token Gather becomes a
// Gather of x's row 0 (index vector [0]: the axis stays) read by the
// MatMul, the Add and the Relu work on that row, and a Squeeze gives the
// output its shape.
func TestPushDownGatherMovesAboveRowOps(t *testing.T) {
	g := rowsGraph()
	moved, err := PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Equal(t, 3, moved)
	chain := upChain(t, g, "out", "Squeeze", "Relu", "Add", "MatMul", "Gather")
	add, mm, sel := chain[2], chain[3], chain[4]
	assert.Equal(t, "bias", add.Inputs[1], "the bias broadcasts along the rows: read whole")
	assert.Equal(t, "w", mm.Inputs[1])
	assert.Equal(t, "x", sel.Inputs[0])
	assert.Equal(t, []int64{0}, g.Initializers[sel.Inputs[1]].Int64s())
	assert.Equal(t, []int{1}, g.Initializers[sel.Inputs[1]].Shape)
	assert.Equal(t, int64(1), sel.AttrInt("axis", 0))
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			assert.NotEqual(t, "z", in, "%s reads the whole Relu output", n.Label())
		}
	}
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[batch,6]", types["out"].String())
	assert.Equal(t, "float32[batch,1,6]", types[mm.Outputs[0]].String())
	assert.Len(t, g.Nodes, 5) // Gather, MatMul, Add, Relu, Squeeze
}

// TestPushDownGatherMovesSliceRange: a Slice of rows 1..3 moves as a Slice.
func TestPushDownGatherMovesSliceRange(t *testing.T) {
	g := rowsGraph()
	cls := g.Nodes[len(g.Nodes)-1]
	g.Initializers["s"], g.Initializers["e"], g.Initializers["a"] = FromInt64([]int64{1}, 1), FromInt64([]int64{3}, 1), FromInt64([]int64{-2}, 1)
	*cls = Node{Name: "rows", OpType: "Slice", Inputs: []string{"z", "s", "e", "a"}, Outputs: []string{"out"}}
	moved, err := PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Equal(t, 3, moved)
	relu := producerOf(g, "out")
	require.Equal(t, "Relu", relu.OpType)
	sl := producerOf(g, producerOf(g, producerOf(g, relu.Inputs[0]).Inputs[0]).Inputs[0])
	require.Equal(t, "Slice", sl.OpType)
	assert.Equal(t, "x", sl.Inputs[0])
	for i, want := range []int64{1, 3, 1} { // starts, ends, axes
		assert.Equal(t, []int64{want}, g.Initializers[sl.Inputs[1+i]].Int64s(), "Slice input %d", 1+i)
	}
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[batch,2,6]", types["out"].String())
}

// TestPushDownGatherStops: where a value has another reader, is made by an
// op that mixes rows or draws random numbers, or is broadcast along the
// axis, the selection stops there (or the input is read whole).
func TestPushDownGatherStops(t *testing.T) {
	t.Run("another reader", func(t *testing.T) {
		// The Relu's input y is also reduced over every row: the Relu
		// moves, the Add does not.
		g := rowsGraph(&Node{Name: "sum", OpType: "ReduceSum", Inputs: []string{"y"}, Outputs: []string{"s"}})
		g.Outputs = append(g.Outputs, &ValueInfo{Name: "s"})
		moved, err := PushDownGather(g, 17)
		require.NoError(t, err)
		assert.Equal(t, 1, moved)
		relu := producerOf(g, producerOf(g, "out").Inputs[0])
		require.Equal(t, "Relu", relu.OpType)
		sel := producerOf(g, relu.Inputs[0])
		require.Equal(t, "Gather", sel.OpType)
		assert.Equal(t, "y", sel.Inputs[0])
		assert.Equal(t, "Add", producerOf(g, "y").OpType)
	})
	t.Run("graph output", func(t *testing.T) {
		g := rowsGraph()
		g.Outputs = append(g.Outputs, &ValueInfo{Name: "z"})
		moved, err := PushDownGather(g, 17)
		require.NoError(t, err)
		assert.Zero(t, moved)
		assert.Equal(t, "Gather", producerOf(g, "out").OpType, "left as it was")
	})
	t.Run("softmax over the axis", func(t *testing.T) {
		g := rowsGraph(&Node{Name: "sm", OpType: "Softmax", Inputs: []string{"z"}, Outputs: []string{"p"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", 1)}})
		g.Nodes[len(g.Nodes)-1].Inputs[0] = "p"
		moved, err := PushDownGather(g, 17)
		require.NoError(t, err)
		assert.Zero(t, moved)
		assert.Equal(t, "Gather", producerOf(g, "out").OpType)
	})
	t.Run("softmax over another axis", func(t *testing.T) {
		g := rowsGraph(&Node{Name: "sm", OpType: "Softmax", Inputs: []string{"z"}, Outputs: []string{"p"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", -1)}})
		g.Nodes[len(g.Nodes)-1].Inputs[0] = "p"
		moved, err := PushDownGather(g, 17)
		require.NoError(t, err)
		assert.Equal(t, 4, moved)
	})
	t.Run("dropout that draws", func(t *testing.T) {
		g := rowsGraph(&Node{Name: "drop", OpType: "Dropout", Inputs: []string{"z", "ratio", "train"}, Outputs: []string{"d"}})
		g.Initializers["ratio"] = FromFloat32([]float32{0.5})
		g.Initializers["ratio"].Shape = nil
		g.Initializers["train"] = FromBool([]bool{true})
		g.Initializers["train"].Shape = nil
		g.Nodes[len(g.Nodes)-1].Inputs[0] = "d"
		moved, err := PushDownGather(g, 17)
		require.NoError(t, err)
		assert.Zero(t, moved, "a smaller Dropout would draw other random numbers")
		g.Initializers["ratio"].Float32s()[0] = 0
		moved, err = PushDownGather(g, 17)
		require.NoError(t, err)
		assert.Equal(t, 4, moved, "ratio 0 draws nothing")
	})
	t.Run("broadcast along the axis", func(t *testing.T) {
		// c[1,1,6] broadcasts along the rows: it is read whole.
		g := rowsGraph(&Node{Name: "addc", OpType: "Add", Inputs: []string{"z", "c"}, Outputs: []string{"zc"}})
		g.Initializers["c"] = Zeros(Float32, 1, 1, 6)
		g.Nodes[len(g.Nodes)-1].Inputs[0] = "zc"
		moved, err := PushDownGather(g, 17)
		require.NoError(t, err)
		assert.Equal(t, 4, moved)
		addc := producerOf(g, producerOf(g, "out").Inputs[0])
		require.Equal(t, "Add", addc.OpType)
		assert.Equal(t, "c", addc.Inputs[1])
	})
	t.Run("out of range index", func(t *testing.T) {
		g := rowsGraph()
		g.Initializers["zero"].Int64s()[0] = 5 // x has 5 rows: Gather's own error stays
		moved, err := PushDownGather(g, 17)
		require.NoError(t, err)
		assert.Zero(t, moved)
		assert.Equal(t, "Gather", producerOf(g, "out").OpType)
	})
	t.Run("malformed transpose", func(t *testing.T) {
		// A perm of the wrong length is not this pass's error to report:
		// the graph is left alone for the compiler to refuse.
		g := rowsGraph(&Node{Name: "tr", OpType: "Transpose", Inputs: []string{"z"}, Outputs: []string{"tz"}, Attrs: map[string]*Attr{"perm": IntsAttr("perm", 0, 1)}})
		g.Nodes[len(g.Nodes)-1].Inputs[0] = "tz"
		_, err := PushDownGather(g, 17)
		require.NoError(t, err)
		assert.Equal(t, "Transpose", producerOf(g, "tz").OpType)
	})
	t.Run("old opset", func(t *testing.T) {
		g := rowsGraph()
		moved, err := PushDownGather(g, 11)
		require.NoError(t, err)
		assert.Zero(t, moved)
	})
}

// TestPushDownGatherMergesResidual: a residual stream read by both
// branches of a block (LayerNorm → MatMul, and the skip Add) is selected
// once, so the selection moves on above the block's input Add.
func TestPushDownGatherMergesResidual(t *testing.T) {
	g := NewGraph("block")
	g.Inputs = []*ValueInfo{
		{Name: "a", Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{{Param: "batch"}, knownDim(5), knownDim(4)}}},
		{Name: "b", Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{{Param: "batch"}, knownDim(5), knownDim(4)}}},
	}
	g.Initializers = map[string]*Tensor{"w": Zeros(Float32, 4, 4), "scale": Zeros(Float32, 4), "shift": Zeros(Float32, 4),
		"idx": FromInt64([]int64{0}, 1)}
	g.Nodes = []*Node{
		{Name: "res", OpType: "Add", Inputs: []string{"a", "b"}, Outputs: []string{"r"}},
		{Name: "ln", OpType: "LayerNormalization", Inputs: []string{"r", "scale", "shift"}, Outputs: []string{"n"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", -1)}},
		{Name: "mm", OpType: "MatMul", Inputs: []string{"n", "w"}, Outputs: []string{"m"}},
		{Name: "skip", OpType: "Add", Inputs: []string{"r", "m"}, Outputs: []string{"y"}},
		{Name: "cls", OpType: "Gather", Inputs: []string{"y", "idx"}, Outputs: []string{"out"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", 1)}},
	}
	g.Outputs = []*ValueInfo{{Name: "out"}}
	moved, err := PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Equal(t, 4, moved)
	var selected []string
	for _, n := range g.Nodes {
		if n.OpType == "Gather" {
			selected = append(selected, n.Inputs[0])
		}
	}
	assert.ElementsMatch(t, []string{"a", "b"}, selected, "one selection of each of the block's inputs")
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[batch,1,4]", types["out"].String(), "a one-element index keeps the axis")
}

// outProjGraph is nn.MultiheadAttention's out-projection as PyTorch
// exports it with the batch second: t [5, batch·2, 3] → Reshape to
// (5·batch, 6) → Gemm(w, bias) → Reshape to [5, batch, 4] (a target made
// from the Shape of another input, x [batch], and the Gemm's Shape) →
// Gather of row 0 on axis 0 (the class token). extra nodes are added after
// the Gemm.
func outProjGraph(extra ...*Node) *Graph {
	g := NewGraph("outproj")
	g.Inputs = []*ValueInfo{{Name: "t", Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true,
		Shape: []Dim{knownDim(5), {Param: "batch2"}, knownDim(3)}}}, {Name: "x", Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true,
		Shape: []Dim{{Param: "batch"}}}}}
	g.Initializers = map[string]*Tensor{
		"w": Zeros(Float32, 4, 6), "bias": Zeros(Float32, 4),
		"flat": FromInt64([]int64{-1, 6}, 2), "l": FromInt64([]int64{5}, 1), "i1": FromInt64([]int64{1}),
		"zero": FromInt64([]int64{0}), "zero1": FromInt64([]int64{0}, 1),
	}
	g.Initializers["zero"].Shape = nil
	g.Initializers["i1"].Shape = nil
	g.Nodes = []*Node{
		{Name: "bshape", OpType: "Shape", Inputs: []string{"x"}, Outputs: []string{"b"}},
		{Name: "r3", OpType: "Reshape", Inputs: []string{"t", "flat"}, Outputs: []string{"a"}},
		{Name: "gemm", OpType: "Gemm", Inputs: []string{"a", "w", "bias"}, Outputs: []string{"y"},
			Attrs: map[string]*Attr{"transB": IntAttr("transB", 1)}},
		{Name: "shape", OpType: "Shape", Inputs: []string{"y"}, Outputs: []string{"ys"}},
		{Name: "n", OpType: "Gather", Inputs: []string{"ys", "i1"}, Outputs: []string{"nn"}},
		{Name: "un", OpType: "Unsqueeze", Inputs: []string{"nn", "zero1"}, Outputs: []string{"nv"}},
		{Name: "target", OpType: "Concat", Inputs: []string{"l", "b", "nv"}, Outputs: []string{"tgt"},
			Attrs: map[string]*Attr{"axis": IntAttr("axis", 0)}},
		{Name: "r4", OpType: "Reshape", Inputs: []string{"y", "tgt"}, Outputs: []string{"z"}},
	}
	g.Nodes = append(g.Nodes, extra...)
	g.Nodes = append(g.Nodes, &Node{Name: "cls", OpType: "Gather", Inputs: []string{"z", "zero"}, Outputs: []string{"out"},
		Attrs: map[string]*Attr{"axis": IntAttr("axis", 0)}})
	g.Outputs = []*ValueInfo{{Name: "out"}}
	return g
}

// TestPushDownGatherThroughRowGemm: the class token's rows of the
// out-projection are rows [0, batch) of its Gemm, so the selection is made
// on t's row 0 instead and the Reshape → Gemm → Reshape chain is rebuilt on
// it (targets [-1, 6] and [1, -1, 4]); the old chain and the Shape
// arithmetic of its target go. With another reader of the Gemm's rows the
// graph stays as it was.
func TestPushDownGatherThroughRowGemm(t *testing.T) {
	g := outProjGraph()
	moved, err := PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Equal(t, 1, moved)
	ops := map[string]int{}
	for _, n := range g.Nodes {
		ops[n.OpType]++
	}
	assert.Equal(t, map[string]int{"Gather": 1, "Reshape": 2, "Gemm": 1, "Squeeze": 1, "Concat": 1, "Shape": 1}, ops,
		"the old chain and the Gemm's Shape are gone; the new target reads x's")
	sq := producerOf(g, "out")
	require.Equal(t, "Squeeze", sq.OpType)
	r4 := producerOf(g, sq.Inputs[0])
	require.Equal(t, "Reshape", r4.OpType)
	assert.Equal(t, "r4", r4.Name)
	tgt := producerOf(g, r4.Inputs[1])
	require.Equal(t, "Concat", tgt.OpType)
	assert.Equal(t, []int64{1}, g.Initializers[tgt.Inputs[0]].Int64s())
	assert.Equal(t, "b", tgt.Inputs[1], "the batch entry of the old target")
	assert.Equal(t, []int64{4}, g.Initializers[tgt.Inputs[2]].Int64s())
	gm := producerOf(g, r4.Inputs[0])
	require.Equal(t, "Gemm", gm.OpType)
	assert.Equal(t, []string{"w", "bias"}, gm.Inputs[1:])
	assert.Equal(t, int64(1), gm.AttrInt("transB", 0))
	r3 := producerOf(g, gm.Inputs[0])
	require.Equal(t, "Reshape", r3.OpType)
	assert.Equal(t, []int64{-1, 6}, g.Initializers[r3.Inputs[1]].Int64s())
	sel := producerOf(g, r3.Inputs[0])
	require.Equal(t, "Gather", sel.OpType)
	assert.Equal(t, "t", sel.Inputs[0])
	assert.Equal(t, []int64{0}, g.Initializers[sel.Inputs[1]].Int64s())
	assert.Equal(t, int64(0), sel.AttrInt("axis", -1))
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[batch,4]", types["out"].String())

	// A constant target [5, -1, 4]: the rebuilt one is [1, -1, 4].
	g = outProjGraph()
	g.Initializers["fixed"] = FromInt64([]int64{5, -1, 4}, 3)
	producerOf(g, "z").Inputs[1] = "fixed"
	moved, err = PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Equal(t, 1, moved)
	r4 = producerOf(g, producerOf(g, "out").Inputs[0])
	require.Equal(t, "Reshape", r4.OpType)
	assert.Equal(t, []int64{1, -1, 4}, g.Initializers[r4.Inputs[1]].Int64s())

	// Another reader of the Gemm's rows: nothing moves.
	g = outProjGraph(&Node{Name: "neg", OpType: "Neg", Inputs: []string{"y"}, Outputs: []string{"ny"}})
	g.Outputs = append(g.Outputs, &ValueInfo{Name: "ny"})
	n := len(g.Nodes)
	moved, err = PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Zero(t, moved)
	assert.Len(t, g.Nodes, n)
}

// attentionGraph is one head group of attention over T=5 tokens:
// q, k, v [bh,5,4] → S = q·kᵀ → Softmax → P·v → Gather(index 0, axis
// axis) → out, the class token's row (axis 1) or a column of the values
// (axis 2).
func attentionGraph(axis int64) *Graph {
	g := NewGraph("attention")
	f32 := func(dims ...Dim) *Type {
		return &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: dims}
	}
	bh := Dim{Param: "bh"}
	for _, name := range []string{"q", "k", "v"} {
		g.Inputs = append(g.Inputs, &ValueInfo{Name: name, Type: f32(bh, knownDim(5), knownDim(4))})
	}
	g.Initializers = map[string]*Tensor{"zero": FromInt64([]int64{0})}
	g.Initializers["zero"].Shape = nil
	g.Nodes = []*Node{
		{Name: "kT", OpType: "Transpose", Inputs: []string{"k"}, Outputs: []string{"kt"}, Attrs: map[string]*Attr{"perm": IntsAttr("perm", 0, 2, 1)}},
		{Name: "scores", OpType: "MatMul", Inputs: []string{"q", "kt"}, Outputs: []string{"s"}},
		{Name: "softmax", OpType: "Softmax", Inputs: []string{"s"}, Outputs: []string{"p"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", -1)}},
		{Name: "pv", OpType: "MatMul", Inputs: []string{"p", "v"}, Outputs: []string{"o"}},
		{Name: "sel", OpType: "Gather", Inputs: []string{"o", "zero"}, Outputs: []string{"out"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", axis)}},
	}
	g.Outputs = []*ValueInfo{{Name: "out"}}
	return g
}

// TestPushDownGatherThroughAttentionRows: the class token's row of P·V
// is row 0 of P, of the scores and of q, so the selection ends on q and
// both batched products and the Softmax work on one query row, keys and
// values read whole. A column of P·V (a column of the batched v) stops
// the selection where it is.
func TestPushDownGatherThroughAttentionRows(t *testing.T) {
	g := attentionGraph(1)
	moved, err := PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Equal(t, 3, moved) // P·V, Softmax, the scores
	chain := upChain(t, g, "out", "Squeeze", "MatMul", "Softmax", "MatMul", "Gather")
	pv, sc, sel := chain[1], chain[3], chain[4]
	assert.Equal(t, "v", pv.Inputs[1], "the values are read whole")
	assert.Equal(t, "kt", sc.Inputs[1], "the keys are read whole")
	assert.Equal(t, "q", sel.Inputs[0])
	assert.Equal(t, int64(1), sel.AttrInt("axis", 0))
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[bh,1,5]", types[sc.Outputs[0]].String())
	assert.Equal(t, "float32[bh,4]", types["out"].String())

	g = attentionGraph(2)
	moved, err = PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Zero(t, moved)
	assert.Equal(t, "o", producerOf(g, "out").Inputs[0], "a column of a batched product stays a selection of its result")
}

// projectionGraph is nn.MultiheadAttention's packed in-projection with the
// sequence first, as PyTorch 1.13 exports it: p[5,batch,6] =
// in_bias + x[5,batch,4]·Transpose(in_weight[6,4]), cut into q, k and v
// along the last axis by Slices whose bounds are computed from Shape(p)
// (chunk's (6+2)/3·i), and the class token's selection of q's row 0. kBounds
// are k's bounds (the export's: 2, 4); v keeps 4:6.
func projectionGraph(kLo, kHi int64) *Graph {
	g := NewGraph("projection")
	batch := Dim{Param: "batch"}
	g.Inputs = []*ValueInfo{{Name: "x", Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{knownDim(5), batch, knownDim(4)}}}}
	vec := func(v ...int64) *Tensor { return FromInt64(v, len(v)) }
	scalar := func(v int64) *Tensor {
		t := FromInt64([]int64{v})
		t.Shape = nil
		return t
	}
	g.Initializers = map[string]*Tensor{
		"w": Zeros(Float32, 6, 4), "b": Zeros(Float32, 6),
		"last": vec(-1), "zero": vec(0), "two": vec(2), "three": vec(3),
		"one": vec(1), "k_lo": vec(kLo), "k_hi": vec(kHi), "cls": scalar(0),
	}
	node := func(op string, out string, in ...string) *Node {
		return &Node{Name: out + "_node", OpType: op, Inputs: in, Outputs: []string{out}}
	}
	g.Nodes = []*Node{
		{Name: "wt_node", OpType: "Transpose", Inputs: []string{"w"}, Outputs: []string{"wt"}, Attrs: map[string]*Attr{"perm": IntsAttr("perm", 1, 0)}},
		node("MatMul", "h", "x", "wt"),
		node("Add", "p", "b", "h"),
		node("Shape", "sh", "p"),
		{Name: "dim_node", OpType: "Gather", Inputs: []string{"sh", "last"}, Outputs: []string{"dim"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", 0)}},
		node("Add", "up", "dim", "two"),
		node("Div", "chunk", "up", "three"),
		node("Mul", "e1", "chunk", "one"),
		node("Mul", "e3", "chunk", "three"),
		node("Slice", "q", "p", "zero", "e1", "last"),
		node("Slice", "k", "p", "k_lo", "k_hi", "last"),
		node("Slice", "v", "p", "k_hi", "e3", "last"),
		{Name: "cls_node", OpType: "Gather", Inputs: []string{"q", "cls"}, Outputs: []string{"q0"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", 0)}},
	}
	g.Outputs = []*ValueInfo{{Name: "q0"}, {Name: "k"}, {Name: "v"}}
	return g
}

// TestPushDownGatherSplitsProjection: the selection of q's row 0 moves
// through q's Slice and then splits the in-projection: q's columns of W
// (a Slice of W under the Transpose, so the product still reads the
// weight as stored) project the selected row of x alone, the projection
// of every row keeps k's and v's columns only, k and v take them with
// constant bounds, and the chunk arithmetic on Shape(p) goes. k's columns
// overlapping q's stop the split (the selection stays above q's Slice).
func TestPushDownGatherSplitsProjection(t *testing.T) {
	g := projectionGraph(2, 4)
	moved, err := PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Equal(t, 2, moved) // q's Slice, then the projection
	chain := upChain(t, g, "q0", "Squeeze", "Add", "Slice")
	add := chain[1]
	mm := producerOf(g, add.Inputs[1])
	require.NotNil(t, mm)
	require.Equal(t, "MatMul", mm.OpType)
	sel := producerOf(g, mm.Inputs[0])
	require.Equal(t, "Gather", sel.OpType, "q projects the selected rows of x")
	assert.Equal(t, "x", sel.Inputs[0])
	tr := upChain(t, g, mm.Inputs[1], "Transpose", "Slice")
	assert.Equal(t, "w", tr[1].Inputs[0], "q's rows of W, transposed")
	ints := func(name string) []int64 {
		v := g.Initializers[name]
		require.NotNil(t, v, name)
		out := make([]int64, v.Size())
		for i := range out {
			out[i] = v.Int(i)
		}
		return out
	}
	assert.Equal(t, []int64{0}, ints(tr[1].Inputs[1]))
	assert.Equal(t, []int64{2}, ints(tr[1].Inputs[2]))
	assert.Equal(t, []int64{0}, ints(chain[2].Inputs[1]), "q's part of the bias")
	assert.Equal(t, []int64{2}, ints(chain[2].Inputs[2]))
	for name, want := range map[string][]int64{"k": {0, 2}, "v": {2, 4}} {
		s := producerOf(g, name)
		require.Equal(t, "Slice", s.OpType)
		assert.Equal(t, want[:1], ints(s.Inputs[1]), name)
		assert.Equal(t, want[1:], ints(s.Inputs[2]), name)
		kv := upChain(t, g, s.Inputs[0], "Add")[0]
		kmm := producerOf(g, kv.Inputs[1])
		require.Equal(t, "MatMul", kmm.OpType)
		assert.Equal(t, "x", kmm.Inputs[0], "k and v project every row")
		ktr := upChain(t, g, kmm.Inputs[1], "Transpose", "Slice")
		assert.Equal(t, []int64{2}, ints(ktr[1].Inputs[1]))
		assert.Equal(t, []int64{6}, ints(ktr[1].Inputs[2]))
	}
	for _, n := range g.Nodes {
		assert.NotEqual(t, "Shape", n.OpType, "the chunk arithmetic is gone")
		assert.NotContains(t, n.Inputs, "p", "%s reads the old projection", n.Name)
	}
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, "float32[batch,2]", types["q0"].String())
	assert.Equal(t, "float32[5,batch,2]", types["k"].String())
	assert.Equal(t, "float32[5,batch,2]", types["v"].String())

	g = projectionGraph(1, 4)
	moved, err = PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Equal(t, 1, moved, "q's Slice moves, the projection is not split")
	assert.Equal(t, "p", producerOf(g, "k").Inputs[0])
	assert.NotNil(t, producerOf(g, "p"))
}

// TestPushDownGatherReshapeComputedTarget: a Reshape whose target computes
// an entry away from the selected axis at run time (the head split's
// batch·heads, from Shape(x)) keeps that entry and takes the selection's
// length on the selected axis, so the selection moves above it. A selected
// axis after a computed entry (its rows are not known to be the input's)
// stops it.
func TestPushDownGatherReshapeComputedTarget(t *testing.T) {
	build := func(outer bool) *Graph {
		g := NewGraph("heads")
		batch := Dim{Param: "batch"}
		g.Inputs = []*ValueInfo{{Name: "x", Type: &Type{Kind: KindTensor, DType: Float32, HasShape: true, Shape: []Dim{knownDim(5), batch, knownDim(6)}}}}
		vec := func(v ...int64) *Tensor { return FromInt64(v, len(v)) }
		g.Initializers = map[string]*Tensor{"five": vec(5), "one": vec(1), "three": vec(3), "two": vec(2), "zero": vec(0), "idx": vec(0)}
		target := []string{"five", "bh", "two"}
		sel := int64(0)
		if outer {
			target = []string{"bh", "five", "two"}
			sel = 1
		}
		g.Nodes = []*Node{
			{Name: "relu", OpType: "Relu", Inputs: []string{"x"}, Outputs: []string{"r"}},
			{Name: "shape", OpType: "Shape", Inputs: []string{"x"}, Outputs: []string{"sh"}},
			{Name: "b", OpType: "Gather", Inputs: []string{"sh", "one"}, Outputs: []string{"b"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", 0)}},
			{Name: "bh", OpType: "Mul", Inputs: []string{"b", "three"}, Outputs: []string{"bh"}},
			{Name: "target", OpType: "Concat", Inputs: target, Outputs: []string{"target"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", 0)}},
			{Name: "reshape", OpType: "Reshape", Inputs: []string{"r", "target"}, Outputs: []string{"h"}},
			{Name: "cls", OpType: "Gather", Inputs: []string{"h", "idx"}, Outputs: []string{"out"}, Attrs: map[string]*Attr{"axis": IntAttr("axis", sel)}},
		}
		g.Outputs = []*ValueInfo{{Name: "out"}}
		return g
	}
	g := build(false)
	moved, err := PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Equal(t, 2, moved) // the Reshape, the Relu
	chain := upChain(t, g, "out", "Reshape", "Relu", "Gather")
	assert.Equal(t, "x", chain[2].Inputs[0])
	types, err := InferShapes(g, 17, nil)
	require.NoError(t, err)
	assert.Equal(t, 3, len(types["out"].Shape))
	assert.Equal(t, knownDim(1), types["out"].Shape[0], "the selected row")
	assert.Equal(t, knownDim(2), types["out"].Shape[2])

	g = build(true)
	moved, err = PushDownGather(g, 17)
	require.NoError(t, err)
	assert.Zero(t, moved, "the input's rows are not the output's: the selection stays")
}
