package control

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

func TestConstantAttributeForms(t *testing.T) {
	cases := []struct {
		attr  *graph.Attr
		dtype graph.DType
		shape []int
		data  any
	}{
		{&graph.Attr{Name: "value_float", Type: graph.AttrFloat, F: 2.5}, graph.Float32, []int{}, []float32{2.5}},
		{&graph.Attr{Name: "value_floats", Type: graph.AttrFloats, Floats: []float32{1, 2}}, graph.Float32, []int{2}, []float32{1, 2}},
		{&graph.Attr{Name: "value_int", Type: graph.AttrInt, I: 7}, graph.Int64, []int{}, []int64{7}},
		{&graph.Attr{Name: "value_ints", Type: graph.AttrInts, Ints: []int64{3, 4, 5}}, graph.Int64, []int{3}, []int64{3, 4, 5}},
		{&graph.Attr{Name: "value_string", Type: graph.AttrString, S: "hi"}, graph.String, []int{}, []string{"hi"}},
		{&graph.Attr{Name: "value_strings", Type: graph.AttrStrings, Strings: []string{"a", "b"}}, graph.String, []int{2}, []string{"a", "b"}},
		{&graph.Attr{Name: "sparse_value", Type: graph.AttrSparse, T: graph.FromInt64([]int64{0, 9}, 2)}, graph.Int64, []int{2}, []int64{0, 9}},
	}
	for _, c := range cases {
		out := mustRun(t, 13, node("Constant", nil, []string{"y"}, c.attr))
		require.Len(t, out, 1, c.attr.Name)
		assert.Equal(t, c.dtype, out[0].DType, c.attr.Name)
		assert.Equal(t, c.shape, out[0].Shape, c.attr.Name)
		assert.Equal(t, c.data, out[0].Data, c.attr.Name)
	}

	_, err := run(t, 13, node("Constant", nil, []string{"y"}), nil)
	assert.ErrorContains(t, err, "no value attribute")
	_, err = run(t, 13, node("Constant", nil, []string{"y"},
		&graph.Attr{Name: "value_int", Type: graph.AttrInt, I: 1},
		&graph.Attr{Name: "value_float", Type: graph.AttrFloat, F: 1}), nil)
	assert.ErrorContains(t, err, "exactly one value attribute")
}

func TestIdentityKeepsHalfDType(t *testing.T) {
	x := &graph.Tensor{DType: graph.Float16, Shape: []int{2}, Data: []uint16{graph.Float32ToFloat16(1.5), graph.Float32ToFloat16(-2)}}
	out := mustRun(t, 13, node("Identity", []string{"x"}, []string{"y"}), x)
	assert.Equal(t, graph.Float16, out[0].DType)
	assert.Equal(t, x.Data, out[0].Data)
	assert.Equal(t, []int{2}, out[0].Shape)
}

func TestIfBranchesMayDifferInShape(t *testing.T) {
	then := body(nil, []string{"a"}, node("Constant", nil, []string{"a"}, graph.TensorAttr("value", graph.FromFloat32([]float32{1, 2, 3}, 3))))
	els := body(nil, []string{"outer"})
	n := node("If", []string{"c"}, []string{"y"}, graphAttr("then_branch", then), graphAttr("else_branch", els))
	outer := map[string]*graph.Tensor{"outer": graph.FromFloat32([]float32{9}, 1, 1)}

	out, err := run(t, 11, n, outer, scalarBool(true))
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 3}, out[0].Data)

	out, err = run(t, 11, n, outer, scalarBool(false))
	require.NoError(t, err)
	assert.Equal(t, []int{1, 1}, out[0].Shape, "the else branch reads the outer scope")

	two := node("If", []string{"c"}, []string{"y", "z"}, graphAttr("then_branch", then), graphAttr("else_branch", els))
	_, err = run(t, 11, two, outer, scalarBool(true))
	assert.ErrorContains(t, err, "returned 1 outputs, want 2")

	_, err = run(t, 11, n, outer, graph.FromBool([]bool{true, false}, 2))
	assert.ErrorContains(t, err, "exactly one element")
}

// loopBody passes cond and x through and emits the iteration number as a
// scan output.
func loopBody(condNode *graph.Node) *graph.Graph {
	if condNode == nil {
		condNode = node("Identity", []string{"cond_in"}, []string{"cond_out"})
	}
	return body([]string{"i", "cond_in", "x_in"}, []string{"cond_out", "x_out", "i_out"},
		condNode,
		node("Identity", []string{"x_in"}, []string{"x_out"}),
		node("Identity", []string{"i"}, []string{"i_out"}))
}

func TestLoopTripCountAndScanOutputs(t *testing.T) {
	n := node("Loop", []string{"M", "", "x"}, []string{"x_final", "iters"}, graphAttr("body", loopBody(nil)))
	x := graph.FromFloat32([]float32{4, 5}, 2)
	out := mustRun(t, 11, n, scalarI64(3), nil, x)
	require.Len(t, out, 2)
	assert.Equal(t, []float32{4, 5}, out[0].Data)
	assert.Equal(t, []int{3}, out[1].Shape)
	assert.Equal(t, []int64{0, 1, 2}, out[1].Data)
}

func TestLoopConditionStops(t *testing.T) {
	stop := node("Constant", nil, []string{"cond_out"}, graph.TensorAttr("value", scalarBool(false)))
	n := node("Loop", []string{"", "c", "x"}, []string{"x_final", "iters"}, graphAttr("body", loopBody(stop)))
	out := mustRun(t, 11, n, nil, scalarBool(true), graph.FromFloat32([]float32{1}, 1))
	assert.Equal(t, []int64{0}, out[1].Data, "a do-while loop runs once when the body says stop")

	// Both M and cond: cond false from the start runs nothing.
	n = node("Loop", []string{"M", "c", "x"}, []string{"x_final", "iters"}, graphAttr("body", loopBody(nil)))
	n.Attr("body").G.Outputs[2].Type = &graph.Type{Kind: graph.KindTensor, DType: graph.Int64, HasShape: true, Shape: []graph.Dim{}}
	out = mustRun(t, 11, n, scalarI64(5), scalarBool(false), graph.FromFloat32([]float32{1}, 1))
	assert.Equal(t, graph.Int64, out[1].DType)
	assert.Equal(t, []int{0}, out[1].Shape)
}

func TestLoopErrors(t *testing.T) {
	n := node("Loop", []string{"", "", "x"}, []string{"x_final"}, graphAttr("body", loopBody(nil)))
	_, err := run(t, 11, n, nil, nil, nil, graph.FromFloat32([]float32{1}, 1))
	assert.ErrorContains(t, err, "never end")

	n = node("Loop", []string{"M", ""}, []string{"x_final"}, graphAttr("body", loopBody(nil)))
	_, err = run(t, 11, n, nil, scalarI64(1), nil)
	assert.ErrorContains(t, err, "body takes 3 inputs, want 2")

	// A loop-carried input may also be a scan output.
	grow := body([]string{"i", "c", "x_in"}, []string{"c", "x_out", "x_in"},
		node("Identity", []string{"x_in"}, []string{"x_out"}))
	n = node("Loop", []string{"M", "", "x"}, []string{"x_final", "s"}, graphAttr("body", grow))
	out, err := run(t, 11, n, nil, scalarI64(2), nil, graph.FromFloat32([]float32{1}, 1))
	require.NoError(t, err)
	assert.Equal(t, []int{2, 1}, out[1].Shape)
}

func TestScanAxesAndDirections(t *testing.T) {
	// x is [2,3]; scanning axis 1 gives the columns.
	x := graph.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	b := body([]string{"s_in", "col"}, []string{"s_out", "col_out"},
		node("Identity", []string{"col"}, []string{"s_out"}),
		node("Identity", []string{"col"}, []string{"col_out"}))
	mk := func(attrs ...*graph.Attr) *graph.Node {
		return node("Scan", []string{"s", "x"}, []string{"s_final", "y"},
			append([]*graph.Attr{graphAttr("body", b), graph.IntAttr("num_scan_inputs", 1)}, attrs...)...)
	}
	s0 := graph.FromFloat32([]float32{0, 0}, 2)

	out := mustRun(t, 11, mk(graph.IntsAttr("scan_input_axes", 1)), s0, x)
	assert.Equal(t, []float32{3, 6}, out[0].Data, "the final state is the last column")
	assert.Equal(t, []int{3, 2}, out[1].Shape)
	assert.Equal(t, []float32{1, 4, 2, 5, 3, 6}, out[1].Data)

	out = mustRun(t, 11, mk(graph.IntsAttr("scan_input_axes", -1), graph.IntsAttr("scan_input_directions", 1),
		graph.IntsAttr("scan_output_axes", 1)), s0, x)
	assert.Equal(t, []float32{1, 4}, out[0].Data, "reverse: the last step sees the first column")
	assert.Equal(t, []int{2, 3}, out[1].Shape)
	assert.Equal(t, []float32{3, 2, 1, 6, 5, 4}, out[1].Data)

	out = mustRun(t, 11, mk(graph.IntsAttr("scan_input_axes", 1), graph.IntsAttr("scan_input_directions", 1),
		graph.IntsAttr("scan_output_axes", -1), graph.IntsAttr("scan_output_directions", 1)), s0, x)
	assert.Equal(t, []float32{1, 2, 3, 4, 5, 6}, out[1].Data, "reversed twice is the identity")

	_, err := run(t, 11, mk(graph.IntsAttr("scan_input_axes", 1, 0)), nil, s0, x)
	assert.ErrorContains(t, err, "scan_input_axes has 2 entries")
}

func TestScan8SequenceLens(t *testing.T) {
	// Batch 2, sequence 3, element [1].
	x := graph.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3, 1)
	s := graph.FromFloat32([]float32{-1, -2}, 2, 1)
	b := body([]string{"s_in", "e"}, []string{"s_out", "e_out"},
		node("Identity", []string{"e"}, []string{"s_out"}),
		node("Identity", []string{"e"}, []string{"e_out"}))
	n := node("Scan", []string{"lens", "s", "x"}, []string{"s_final", "y"},
		graphAttr("body", b), graph.IntAttr("num_scan_inputs", 1))

	out := mustRun(t, 8, n, i64(3, 1), s, x)
	assert.Equal(t, []int{2, 1}, out[0].Shape)
	assert.Equal(t, []float32{3, 4}, out[0].Data)
	assert.Equal(t, []int{2, 3, 1}, out[1].Shape)
	assert.Equal(t, []float32{1, 2, 3, 4, 0, 0}, out[1].Data, "short sequences are zero padded")

	n.SetAttr(graph.IntsAttr("directions", 1))
	out = mustRun(t, 8, n, i64(2, 3), s, x)
	assert.Equal(t, []float32{1, 4}, out[0].Data)
	assert.Equal(t, []float32{2, 1, 0, 6, 5, 4}, out[1].Data, "reverse scans only the first sequence_lens positions")

	_, err := run(t, 8, n, nil, i64(4, 1), s, x)
	assert.ErrorContains(t, err, "outside [0, 3]")
}

func TestStackRejectsChangingShapes(t *testing.T) {
	_, err := stack([]*graph.Tensor{graph.FromFloat32([]float32{1}, 1), graph.FromFloat32([]float32{1, 2}, 2)}, 0, false, graph.Float32, nil)
	assert.ErrorContains(t, err, "must keep their dtype and shape")
}

func TestControlFlowPassesContainers(t *testing.T) {
	seq := graph.NewSequence([]*graph.Tensor{graph.FromFloat32([]float32{1, 2}, 2)})
	opt := graph.NewOptional(seq)

	out := mustRun(t, 16, node("Identity", []string{"x"}, []string{"y"}), opt)
	assert.Equal(t, graph.OptionalOf, out[0].DType)
	assert.Same(t, seq, out[0].Items()[0])

	// If returns a sequence its branch computes from the outer scope.
	then := body(nil, []string{"outer"})
	n := node("If", []string{"c"}, []string{"y"}, graphAttr("then_branch", then), graphAttr("else_branch", then))
	out, err := run(t, 13, n, map[string]*graph.Tensor{"outer": seq}, scalarBool(true))
	require.NoError(t, err)
	assert.Same(t, seq, out[0])

	// A sequence is loop-carried unchanged; it cannot be a scan output.
	n = node("Loop", []string{"M", "", "s"}, []string{"s_final"}, graphAttr("body", loopBody(nil)))
	out, err = run(t, 13, n, nil, scalarI64(2), nil, seq)
	require.NoError(t, err)
	assert.Equal(t, graph.SequenceOf, out[0].DType)
	assert.Equal(t, seq.Items(), out[0].Items())

	scanSeq := body([]string{"i", "c", "s_in"}, []string{"c", "s_in", "s_in"})
	n = node("Loop", []string{"M", "", "s"}, []string{"s_final", "stacked"}, graphAttr("body", scanSeq))
	_, err = run(t, 13, n, nil, scalarI64(2), nil, seq)
	assert.ErrorContains(t, err, "scan outputs must be tensors")
}
