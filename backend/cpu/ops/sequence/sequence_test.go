package sequence

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// testRunner runs a subgraph's nodes in order with the kernels registered
// in kern (this package's, in these tests); it sees no outer scope.
type testRunner struct{ opset int64 }

func (r *testRunner) RunSubgraph(g *graph.Graph, inputs []*graph.Tensor) ([]*graph.Tensor, error) {
	values := map[string]*graph.Tensor{}
	for i, t := range inputs {
		values[g.Inputs[i].Name] = t
	}
	for _, n := range g.Nodes {
		spec, ok := kern.Lookup(n.Domain, n.OpType, r.opset)
		if !ok {
			return nil, fmt.Errorf("no kernel for %s", n.OpType)
		}
		in := make([]*graph.Tensor, len(n.Inputs))
		for i, name := range n.Inputs {
			in[i] = values[name]
		}
		out, err := spec.Fn(&kern.Context{Opset: r.opset, Sub: r}, n, in)
		if err != nil {
			return nil, err
		}
		for i, name := range n.Outputs {
			values[name] = out[i]
		}
	}
	out := make([]*graph.Tensor, len(g.Outputs))
	for i, o := range g.Outputs {
		out[i] = values[o.Name]
	}
	return out, nil
}

func testNode(op string, nIn, nOut int, attrs ...*graph.Attr) *graph.Node {
	n := &graph.Node{Name: op + "_test", OpType: op}
	for i := 0; i < nIn; i++ {
		n.Inputs = append(n.Inputs, fmt.Sprintf("in%d", i))
	}
	for i := 0; i < nOut; i++ {
		n.Outputs = append(n.Outputs, fmt.Sprintf("out%d", i))
	}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	return n
}

func intAttr(name string, v int64) *graph.Attr {
	return &graph.Attr{Name: name, Type: graph.AttrInt, I: v}
}

func runOp(t *testing.T, opset int64, n *graph.Node, in ...*graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup("", n.OpType, opset)
	require.True(t, ok, "no kernel for %s", n.OpType)
	require.True(t, spec.Half, "%s must handle every dtype itself", n.OpType)
	return spec.Fn(&kern.Context{Opset: opset, Sub: &testRunner{opset: opset}}, n, in)
}

func mustOp(t *testing.T, opset int64, n *graph.Node, in ...*graph.Tensor) []*graph.Tensor {
	t.Helper()
	out, err := runOp(t, opset, n, in...)
	require.NoError(t, err)
	return out
}

func scalar(v int64) *graph.Tensor {
	return &graph.Tensor{DType: graph.Int64, Shape: []int{}, Data: []int64{v}}
}

func f32(v ...float32) *graph.Tensor { return graph.FromFloat32(v, len(v)) }

// firsts returns the first element of each float32 item of a sequence.
func firsts(t *testing.T, s *graph.Tensor) []float32 {
	t.Helper()
	require.Equal(t, graph.SequenceOf, s.DType)
	require.NoError(t, s.Validate())
	var out []float32
	for _, it := range s.Items() {
		out = append(out, it.Float32s()[0])
	}
	return out
}

func TestSequenceInsertEraseAt(t *testing.T) {
	seq := mustOp(t, 11, testNode("SequenceConstruct", 3, 1), f32(1), f32(2), f32(3))[0]
	assert.Equal(t, []float32{1, 2, 3}, firsts(t, seq))

	ins := testNode("SequenceInsert", 3, 1)
	assert.Equal(t, []float32{1, 2, 3, 9}, firsts(t, mustOp(t, 11, ins, seq, f32(9))[0]), "default: at the end")
	assert.Equal(t, []float32{1, 2, 9, 3}, firsts(t, mustOp(t, 11, ins, seq, f32(9), scalar(-1))[0]))
	assert.Equal(t, []float32{9, 1, 2, 3}, firsts(t, mustOp(t, 11, ins, seq, f32(9), scalar(-3))[0]))
	assert.Equal(t, []float32{1, 2, 3, 9}, firsts(t, mustOp(t, 11, ins, seq, f32(9), scalar(3))[0]))
	_, err := runOp(t, 11, ins, seq, f32(9), scalar(4))
	assert.ErrorContains(t, err, "out of range")
	_, err = runOp(t, 11, ins, seq, graph.FromInt64([]int64{1}, 1))
	assert.ErrorContains(t, err, "dtype int64")
	assert.Equal(t, []float32{1, 2, 3}, firsts(t, seq), "the input sequence is unchanged")

	erase := testNode("SequenceErase", 2, 1)
	assert.Equal(t, []float32{1, 2}, firsts(t, mustOp(t, 11, erase, seq)[0]), "default: the last")
	assert.Equal(t, []float32{2, 3}, firsts(t, mustOp(t, 11, erase, seq, scalar(-3))[0]))
	_, err = runOp(t, 11, erase, seq, scalar(3))
	assert.ErrorContains(t, err, "out of range")
	_, err = runOp(t, 11, erase, graph.NewSequence(nil))
	assert.ErrorContains(t, err, "empty sequence")

	at := testNode("SequenceAt", 2, 1)
	assert.Equal(t, []float32{3}, mustOp(t, 11, at, seq, scalar(-1))[0].Data)
	_, err = runOp(t, 11, at, seq, scalar(-4))
	assert.ErrorContains(t, err, "out of range")
	_, err = runOp(t, 11, at, f32(1), scalar(0))
	assert.ErrorContains(t, err, "must be a sequence")

	n := mustOp(t, 11, testNode("SequenceLength", 1, 1), seq)[0]
	assert.Equal(t, []int{}, n.Shape)
	assert.Equal(t, []int64{3}, n.Data)

	empty := mustOp(t, 11, testNode("SequenceEmpty", 0, 1, intAttr("dtype", int64(graph.Int32))))[0]
	assert.Empty(t, empty.Items())
	_, err = runOp(t, 11, testNode("SequenceEmpty", 0, 1, intAttr("dtype", 99)))
	assert.ErrorContains(t, err, "not a tensor element type")
}

func TestSplitToSequence(t *testing.T) {
	x := &graph.Tensor{DType: graph.Int32, Shape: []int{2, 5}, Data: []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}

	// Scalar split: parts of 2, the last shorter.
	seq := mustOp(t, 11, testNode("SplitToSequence", 2, 1, intAttr("axis", -1)), x, scalar(2))[0]
	require.Len(t, seq.Items(), 3)
	assert.Equal(t, []int{2, 2}, seq.Items()[0].Shape)
	assert.Equal(t, []int32{0, 1, 5, 6}, seq.Items()[0].Data)
	assert.Equal(t, []int{2, 1}, seq.Items()[2].Shape)
	assert.Equal(t, []int32{4, 9}, seq.Items()[2].Data)

	// 1-D split, zero-length parts allowed; keepdims is ignored.
	seq = mustOp(t, 11, testNode("SplitToSequence", 2, 1, intAttr("axis", 1), intAttr("keepdims", 0)), x, graph.FromInt64([]int64{3, 0, 2}, 3))[0]
	require.Len(t, seq.Items(), 3)
	assert.Equal(t, []int{2, 0}, seq.Items()[1].Shape)
	assert.Equal(t, []int32{3, 4, 8, 9}, seq.Items()[2].Data)

	// No split: parts of one, keepdims=0 drops the axis.
	seq = mustOp(t, 11, testNode("SplitToSequence", 1, 1, intAttr("keepdims", 0)), x)[0]
	require.Len(t, seq.Items(), 2)
	assert.Equal(t, []int{5}, seq.Items()[1].Shape)
	assert.Equal(t, []int32{5, 6, 7, 8, 9}, seq.Items()[1].Data)
	seq = mustOp(t, 11, testNode("SplitToSequence", 1, 1), x)[0]
	assert.Equal(t, []int{1, 5}, seq.Items()[1].Shape)

	_, err := runOp(t, 11, testNode("SplitToSequence", 2, 1), x, graph.FromInt64([]int64{1, 2}, 2))
	assert.ErrorContains(t, err, "adds up to 3")
	_, err = runOp(t, 11, testNode("SplitToSequence", 2, 1), x, scalar(0))
	assert.ErrorContains(t, err, "must be positive")
	_, err = runOp(t, 11, testNode("SplitToSequence", 1, 1, intAttr("axis", 2)), x)
	assert.ErrorContains(t, err, "out of range")
}

func TestConcatFromSequence(t *testing.T) {
	a := &graph.Tensor{DType: graph.String, Shape: []int{2, 1}, Data: []string{"a", "b"}}
	b := &graph.Tensor{DType: graph.String, Shape: []int{2, 2}, Data: []string{"c", "d", "e", "f"}}
	seq := graph.NewSequence([]*graph.Tensor{a, b})

	out := mustOp(t, 11, testNode("ConcatFromSequence", 1, 1, intAttr("axis", -1)), seq)[0]
	assert.Equal(t, []int{2, 3}, out.Shape)
	assert.Equal(t, []string{"a", "c", "d", "b", "e", "f"}, out.Data)

	_, err := runOp(t, 11, testNode("ConcatFromSequence", 1, 1, intAttr("axis", 0)), seq)
	assert.ErrorContains(t, err, "only the axis 0 length may differ")

	// new_axis=1 stacks; axis may then equal the rank.
	stack := graph.NewSequence([]*graph.Tensor{f32(1, 2), f32(3, 4), f32(5, 6)})
	out = mustOp(t, 11, testNode("ConcatFromSequence", 1, 1, intAttr("axis", 1), intAttr("new_axis", 1)), stack)[0]
	assert.Equal(t, []int{2, 3}, out.Shape)
	assert.Equal(t, []float32{1, 3, 5, 2, 4, 6}, out.Data)
	out = mustOp(t, 11, testNode("ConcatFromSequence", 1, 1, intAttr("axis", -2), intAttr("new_axis", 1)), stack)[0]
	assert.Equal(t, []int{3, 2}, out.Shape)

	_, err = runOp(t, 11, testNode("ConcatFromSequence", 1, 1), stack)
	assert.ErrorContains(t, err, "axis is required")
	_, err = runOp(t, 11, testNode("ConcatFromSequence", 1, 1, intAttr("axis", 0)), graph.NewSequence(nil))
	assert.ErrorContains(t, err, "empty sequence")
}

func TestSequenceMap(t *testing.T) {
	// The body returns the tensor input and the sequence element, swapped,
	// and the element's length.
	body := graph.NewGraph("body")
	body.Inputs = []*graph.ValueInfo{{Name: "elem"}, {Name: "extra"}}
	body.Outputs = []*graph.ValueInfo{{Name: "extra"}, {Name: "elem"}, {Name: "len"}}
	split := testNode("SplitToSequence", 1, 1)
	split.Inputs, split.Outputs = []string{"elem"}, []string{"parts"}
	length := testNode("SequenceLength", 1, 1)
	length.Inputs, length.Outputs = []string{"parts"}, []string{"len"}
	body.Nodes = []*graph.Node{split, length}

	n := testNode("SequenceMap", 2, 3, &graph.Attr{Name: "body", Type: graph.AttrGraph, G: body})
	seq := graph.NewSequence([]*graph.Tensor{f32(1), f32(2, 3), f32(4, 5, 6)})
	out := mustOp(t, 17, n, seq, f32(7))
	require.Len(t, out, 3)
	assert.Equal(t, []float32{7, 7, 7}, firsts(t, out[0]))
	assert.Equal(t, []float32{1, 2, 4}, firsts(t, out[1]))
	var lens []int64
	for _, it := range out[2].Items() {
		lens = append(lens, it.Int64s()[0])
	}
	assert.Equal(t, []int64{1, 2, 3}, lens)

	// A second sequence input is iterated alongside the first.
	out = mustOp(t, 17, n, seq, graph.NewSequence([]*graph.Tensor{f32(8), f32(9), f32(10)}))
	assert.Equal(t, []float32{8, 9, 10}, firsts(t, out[0]))
	_, err := runOp(t, 17, n, seq, graph.NewSequence([]*graph.Tensor{f32(8)}))
	assert.ErrorContains(t, err, "has 1 elements, input 0 has 3")

	out = mustOp(t, 17, n, graph.NewSequence(nil), f32(7))
	assert.Empty(t, out[0].Items())
}

func TestOptional(t *testing.T) {
	x := f32(1, 2)
	typeAttr := &graph.Attr{Name: "type", Type: graph.AttrTypeProto, TP: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32}}
	full := mustOp(t, 15, testNode("Optional", 1, 1), x)[0]
	empty := mustOp(t, 15, testNode("Optional", 0, 1, typeAttr))[0]
	require.NoError(t, full.Validate())
	require.NoError(t, empty.Validate())
	_, err := runOp(t, 15, testNode("Optional", 0, 1))
	assert.ErrorContains(t, err, "type attribute is required")

	has := testNode("OptionalHasElement", 1, 1)
	assert.Equal(t, []bool{true}, mustOp(t, 15, has, full)[0].Data)
	assert.Equal(t, []bool{false}, mustOp(t, 15, has, empty)[0].Data)
	assert.Equal(t, []bool{true}, mustOp(t, 18, has, x)[0].Data, "a plain tensor is a present value")
	assert.Equal(t, []bool{false}, mustOp(t, 18, testNode("OptionalHasElement", 0, 1))[0].Data)
	_, err = runOp(t, 15, testNode("OptionalHasElement", 0, 1))
	assert.ErrorContains(t, err, "required before opset 18")

	get := testNode("OptionalGetElement", 1, 1)
	assert.Equal(t, x.Data, mustOp(t, 15, get, full)[0].Data)
	assert.Equal(t, x.Data, mustOp(t, 18, get, x)[0].Data)
	_, err = runOp(t, 18, get, empty)
	assert.ErrorContains(t, err, "empty")
}
