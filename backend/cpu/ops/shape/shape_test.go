package shape

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// call runs the registered kernel of op at opset with the given attributes.
func call(t *testing.T, op string, opset int64, attrs []*graph.Attr, in ...*graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup("", op, opset)
	require.True(t, ok, "no kernel for %s", op)
	require.True(t, spec.Half, "%s must handle every dtype itself", op)
	n := &graph.Node{Name: "n", OpType: op, Outputs: []string{"y"}}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	return spec.Fn(&kern.Context{Opset: opset}, n, in)
}

// call1 is call for single-output ops that must succeed.
func call1(t *testing.T, op string, opset int64, attrs []*graph.Attr, in ...*graph.Tensor) *graph.Tensor {
	t.Helper()
	out, err := call(t, op, opset, attrs, in...)
	require.NoError(t, err)
	require.NotEmpty(t, out)
	return out[0]
}

func f32(shape []int, v ...float32) *graph.Tensor { return graph.FromFloat32(v, shape...) }
func i64(v ...int64) *graph.Tensor                { return graph.FromInt64(v, len(v)) }
func scalarI64(v int64) *graph.Tensor             { return graph.FromInt64([]int64{v}) }

func iota32(shape ...int) *graph.Tensor {
	t := graph.Zeros(graph.Float32, shape...)
	for i := range t.Float32s() {
		t.Float32s()[i] = float32(i)
	}
	return t
}

func TestPadModes(t *testing.T) {
	x := f32([]int{3, 2}, 1.0, 1.2, 2.3, 3.4, 4.5, 5.7)
	// The spec's wrap example.
	y := call1(t, "Pad", 19, []*graph.Attr{graph.StringAttr("mode", "wrap")}, x, i64(2, 1, 1, 1))
	assert.Equal(t, []int{6, 4}, y.Shape)
	assert.Equal(t, []float32{
		3.4, 2.3, 3.4, 2.3,
		5.7, 4.5, 5.7, 4.5,
		1.2, 1.0, 1.2, 1.0,
		3.4, 2.3, 3.4, 2.3,
		5.7, 4.5, 5.7, 4.5,
		1.2, 1.0, 1.2, 1.0,
	}, y.Float32s())

	// Reflect past the size of the axis reflects again (numpy.pad).
	v := f32([]int{3}, 1, 2, 3)
	y = call1(t, "Pad", 11, []*graph.Attr{graph.StringAttr("mode", "reflect")}, v, i64(5, 4))
	assert.Equal(t, []float32{2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3}, y.Float32s())

	y = call1(t, "Pad", 11, []*graph.Attr{graph.StringAttr("mode", "edge")}, v, i64(2, 1))
	assert.Equal(t, []float32{1, 1, 1, 2, 3, 3}, y.Float32s())

	// Negative pads crop; a constant comes from input 2.
	y = call1(t, "Pad", 11, nil, v, i64(-1, 2), f32(nil, 9))
	assert.Equal(t, []float32{2, 3, 9, 9}, y.Float32s())

	// Opset 18 axes input pads only the named axes.
	y = call1(t, "Pad", 18, nil, x, i64(1, 0), nil, i64(-1))
	assert.Equal(t, []int{3, 3}, y.Shape)
	assert.Equal(t, []float32{0, 1.0, 1.2, 0, 2.3, 3.4, 0, 4.5, 5.7}, y.Float32s())

	// Pad-2: pads and value are attributes.
	y = call1(t, "Pad", 2, []*graph.Attr{graph.IntsAttr("pads", 0, 1, 0, 0), graph.FloatAttr("value", 7)}, x)
	assert.Equal(t, []float32{7, 1.0, 1.2, 7, 2.3, 3.4, 7, 4.5, 5.7}, y.Float32s())

	_, err := call(t, "Pad", 11, nil, v, i64(-2, -2))
	assert.ErrorContains(t, err, "size of -1")
	_, err = call(t, "Pad", 11, []*graph.Attr{graph.StringAttr("mode", "mirror")}, v, i64(1, 1))
	assert.ErrorContains(t, err, "mirror")
	_, err = call(t, "Pad", 11, nil, v, i64(1, 1, 1))
	assert.Error(t, err)
}

func TestSplitVariants(t *testing.T) {
	x := iota32(7)
	outs, err := callOutputs(t, "Split", 18, 3, []*graph.Attr{graph.IntAttr("num_outputs", 3)}, x)
	require.NoError(t, err)
	assert.Equal(t, []float32{0, 1, 2}, outs[0].Float32s())
	assert.Equal(t, []float32{3, 4, 5}, outs[1].Float32s())
	assert.Equal(t, []float32{6}, outs[2].Float32s())

	// Split-2: sizes as an attribute.
	outs, err = callOutputs(t, "Split", 2, 2, []*graph.Attr{graph.IntsAttr("split", 2, 5)}, x)
	require.NoError(t, err)
	assert.Equal(t, []float32{0, 1}, outs[0].Float32s())
	assert.Equal(t, []float32{2, 3, 4, 5, 6}, outs[1].Float32s())

	// Split along axis 1 of a matrix.
	m := iota32(2, 3)
	outs, err = callOutputs(t, "Split", 13, 2, []*graph.Attr{graph.IntAttr("axis", -1)}, m, i64(1, 2))
	require.NoError(t, err)
	assert.Equal(t, []float32{0, 3}, outs[0].Float32s())
	assert.Equal(t, []float32{1, 2, 4, 5}, outs[1].Float32s())

	_, err = callOutputs(t, "Split", 13, 2, nil, x, i64(3, 3))
	assert.ErrorContains(t, err, "sums to 6")
	_, err = callOutputs(t, "Split", 13, 2, nil, x)
	assert.ErrorContains(t, err, "equal parts")
}

// callOutputs runs a kernel whose node has k outputs.
func callOutputs(t *testing.T, op string, opset int64, k int, attrs []*graph.Attr, in ...*graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup("", op, opset)
	require.True(t, ok)
	n := &graph.Node{Name: "n", OpType: op}
	for i := 0; i < k; i++ {
		n.Outputs = append(n.Outputs, "y"+string(rune('0'+i)))
	}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	return spec.Fn(&kern.Context{Opset: opset}, n, in)
}

func TestSliceClampingAndSteps(t *testing.T) {
	x := iota32(10)
	cases := []struct {
		starts, ends, steps int64
		want                []float32
	}{
		{math.MaxInt64, math.MinInt64, -1, []float32{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
		{-1, -4, -2, []float32{9, 7}},
		{8, 2, -3, []float32{8, 5}},
		{2, 8, 3, []float32{2, 5}},
		{0, 10, math.MaxInt64, []float32{0}},
		{9, -100, math.MinInt64, []float32{9}},
		{5, 2, 1, []float32{}},
		{-100, 100, 4, []float32{0, 4, 8}},
	}
	for _, c := range cases {
		y := call1(t, "Slice", 13, nil, x, i64(c.starts), i64(c.ends), i64(0), i64(c.steps))
		assert.Equal(t, c.want, y.Float32s(), "start %d end %d step %d", c.starts, c.ends, c.steps)
	}
	// Slice-1 takes attributes.
	m := iota32(3, 4)
	y := call1(t, "Slice", 1, []*graph.Attr{graph.IntsAttr("starts", 1, 1), graph.IntsAttr("ends", 3, -1), graph.IntsAttr("axes", 0, 1)}, m)
	assert.Equal(t, []int{2, 2}, y.Shape)
	assert.Equal(t, []float32{5, 6, 9, 10}, y.Float32s())
	// int32 starts/ends.
	s32 := &graph.Tensor{DType: graph.Int32, Shape: []int{1}, Data: []int32{1}}
	e32 := &graph.Tensor{DType: graph.Int32, Shape: []int{1}, Data: []int32{3}}
	y = call1(t, "Slice", 13, nil, m, s32, e32)
	assert.Equal(t, []int{2, 4}, y.Shape)

	_, err := call(t, "Slice", 13, nil, x, i64(0), i64(5), i64(0), i64(0))
	assert.ErrorContains(t, err, "0")
	_, err = call(t, "Slice", 13, nil, x, i64(0), i64(5), i64(1))
	assert.ErrorContains(t, err, "out of range")
	// An empty int32 steps (or axes) input is present, and its length
	// must match starts' like an int64 one's.
	empty32 := &graph.Tensor{DType: graph.Int32, Shape: []int{0}, Data: []int32{}}
	_, err = call(t, "Slice", 13, nil, x, i64(0), i64(5), i64(0), empty32)
	assert.ErrorContains(t, err, "steps [] and starts [0] differ in length")
	_, err = call(t, "Slice", 13, nil, x, i64(0), i64(5), empty32)
	assert.ErrorContains(t, err, "axes [] and starts [0] differ in length")
}

func TestScatterReductions(t *testing.T) {
	data := f32([]int{1, 5}, 1, 2, 3, 4, 5)
	ind := &graph.Tensor{DType: graph.Int64, Shape: []int{1, 3}, Data: []int64{1, 1, -1}}
	upd := f32([]int{1, 3}, 10, 20, 30)
	want := map[string][]float32{
		"none": {1, 20, 3, 4, 30},
		"add":  {1, 32, 3, 4, 35},
		"mul":  {1, 400, 3, 4, 150},
		"max":  {1, 20, 3, 4, 30},
		"min":  {1, 2, 3, 4, 5},
	}
	for red, w := range want {
		y := call1(t, "ScatterElements", 18, []*graph.Attr{graph.IntAttr("axis", 1), graph.StringAttr("reduction", red)}, data, ind, upd)
		assert.Equal(t, w, y.Float32s(), red)
	}
	assert.Equal(t, []float32{1, 2, 3, 4, 5}, data.Float32s(), "the input must not change")

	// Integer data and ScatterND with a reduction.
	idata := &graph.Tensor{DType: graph.Int32, Shape: []int{2, 2}, Data: []int32{1, 2, 3, 4}}
	nd := &graph.Tensor{DType: graph.Int64, Shape: []int{2, 1}, Data: []int64{1, 1}}
	iupd := &graph.Tensor{DType: graph.Int32, Shape: []int{2, 2}, Data: []int32{5, 1, 2, 7}}
	y := call1(t, "ScatterND", 18, []*graph.Attr{graph.StringAttr("reduction", "max")}, idata, nd, iupd)
	assert.Equal(t, []int32{1, 2, 5, 7}, y.Data)
	y = call1(t, "ScatterND", 16, []*graph.Attr{graph.StringAttr("reduction", "add")}, idata, nd, iupd)
	assert.Equal(t, []int32{1, 2, 10, 12}, y.Data)

	// Float16 data reduces in float32.
	h := &graph.Tensor{DType: graph.Float16, Shape: []int{2}, Data: []uint16{graph.Float32ToFloat16(1.5), graph.Float32ToFloat16(2)}}
	hu := &graph.Tensor{DType: graph.Float16, Shape: []int{1}, Data: []uint16{graph.Float32ToFloat16(0.25)}}
	y = call1(t, "ScatterElements", 16, []*graph.Attr{graph.StringAttr("reduction", "add")}, h, i64(0), hu)
	assert.Equal(t, graph.Float16, y.DType)
	assert.Equal(t, float32(1.75), graph.Float16ToFloat32(y.Data.([]uint16)[0]))

	_, err := call(t, "ScatterElements", 16, nil, data, &graph.Tensor{DType: graph.Int64, Shape: []int{1, 1}, Data: []int64{5}}, f32([]int{1, 1}, 0))
	assert.ErrorContains(t, err, "out of range")
	_, err = call(t, "ScatterElements", 16, []*graph.Attr{graph.IntAttr("axis", 1), graph.StringAttr("reduction", "avg")}, data, ind, upd)
	assert.ErrorContains(t, err, "avg")
}

func TestGatherIndicesAndDtypes(t *testing.T) {
	x := iota32(3, 2)
	y := call1(t, "Gather", 13, nil, x, &graph.Tensor{DType: graph.Int32, Shape: []int{2, 2}, Data: []int32{-1, 0, 1, -3}})
	assert.Equal(t, []int{2, 2, 2}, y.Shape)
	assert.Equal(t, []float32{4, 5, 0, 1, 2, 3, 0, 1}, y.Float32s())

	// A scalar index drops the axis.
	y = call1(t, "Gather", 13, []*graph.Attr{graph.IntAttr("axis", 1)}, x, scalarI64(1))
	assert.Equal(t, []int{3}, y.Shape)
	assert.Equal(t, []float32{1, 3, 5}, y.Float32s())

	for _, bad := range []int64{3, -4} {
		_, err := call(t, "Gather", 13, nil, x, i64(bad))
		assert.ErrorContains(t, err, "out of range", "index %d", bad)
	}
	_, err := call(t, "Gather", 13, nil, x, f32([]int{1}, 0))
	assert.ErrorContains(t, err, "integer")

	// Strings, bools and bfloat16 move like any other dtype.
	s := &graph.Tensor{DType: graph.String, Shape: []int{3}, Data: []string{"a", "b", "c"}}
	y = call1(t, "Gather", 13, nil, s, i64(2, 0))
	assert.Equal(t, []string{"c", "a"}, y.Data)
	bf := &graph.Tensor{DType: graph.BFloat16, Shape: []int{2}, Data: []uint16{0x3f80, 0x4000}}
	y = call1(t, "Gather", 13, nil, bf, i64(1))
	assert.Equal(t, graph.BFloat16, y.DType)
	assert.Equal(t, []uint16{0x4000}, y.Data)

	_, err = call(t, "GatherElements", 13, nil, x, &graph.Tensor{DType: graph.Int64, Shape: []int{1, 1}, Data: []int64{7}})
	assert.ErrorContains(t, err, "out of range")
}

func TestGatherNDBatchDims(t *testing.T) {
	x := iota32(2, 2, 2)
	ind := &graph.Tensor{DType: graph.Int64, Shape: []int{2, 1}, Data: []int64{1, 0}}
	y := call1(t, "GatherND", 12, []*graph.Attr{graph.IntAttr("batch_dims", 1)}, x, ind)
	assert.Equal(t, []int{2, 2}, y.Shape)
	assert.Equal(t, []float32{2, 3, 4, 5}, y.Float32s())

	ind2 := &graph.Tensor{DType: graph.Int64, Shape: []int{2, 2}, Data: []int64{0, -1, 1, 0}}
	y = call1(t, "GatherND", 13, nil, x, ind2)
	assert.Equal(t, []float32{2, 3, 4, 5}, y.Float32s())

	bad := &graph.Tensor{DType: graph.Int64, Shape: []int{1, 2}, Data: []int64{0, 2}}
	_, err := call(t, "GatherND", 13, nil, x, bad)
	assert.ErrorContains(t, err, "out of range")
}

func TestReshapeSqueezeShape(t *testing.T) {
	x := iota32(2, 0, 3)
	y := call1(t, "Reshape", 14, nil, x, i64(0, -1))
	assert.Equal(t, []int{2, 0}, y.Shape)
	y = call1(t, "Reshape", 14, []*graph.Attr{graph.IntAttr("allowzero", 1)}, x, i64(3, 0, 2))
	assert.Equal(t, []int{3, 0, 2}, y.Shape)
	_, err := call(t, "Reshape", 14, []*graph.Attr{graph.IntAttr("allowzero", 1)}, x, i64(0, -1))
	assert.ErrorContains(t, err, "-1")

	z := iota32(2, 3, 4)
	y = call1(t, "Reshape", 13, nil, z, i64(-1, 4))
	assert.Equal(t, []int{6, 4}, y.Shape)
	_, err = call(t, "Reshape", 13, nil, z, i64(5, -1))
	assert.ErrorContains(t, err, "cannot reshape")
	_, err = call(t, "Reshape", 13, nil, z, i64(-1, -1))
	assert.ErrorContains(t, err, "more than one -1")

	// Squeeze/Unsqueeze take axes as an attribute before opset 13.
	s := iota32(1, 3, 1)
	y = call1(t, "Squeeze", 11, []*graph.Attr{graph.IntsAttr("axes", -1)}, s)
	assert.Equal(t, []int{1, 3}, y.Shape)
	y = call1(t, "Squeeze", 13, nil, s)
	assert.Equal(t, []int{3}, y.Shape)
	_, err = call(t, "Squeeze", 13, nil, s, i64(1))
	assert.ErrorContains(t, err, "not 1")
	y = call1(t, "Unsqueeze", 11, []*graph.Attr{graph.IntsAttr("axes", 0, -1)}, iota32(3))
	assert.Equal(t, []int{1, 3, 1}, y.Shape)
	_, err = call(t, "Unsqueeze", 13, nil, iota32(3), i64(0, 0))
	assert.ErrorContains(t, err, "repeated")

	y = call1(t, "Shape", 15, []*graph.Attr{graph.IntAttr("start", -2), graph.IntAttr("end", 100)}, z)
	assert.Equal(t, []int64{3, 4}, y.Data)
	y = call1(t, "Shape", 15, []*graph.Attr{graph.IntAttr("start", 2), graph.IntAttr("end", 1)}, z)
	assert.Equal(t, []int{0}, y.Shape)
	y = call1(t, "Size", 13, nil, z)
	assert.Equal(t, []int64{24}, y.Data)
	assert.Empty(t, y.Shape)
}

func TestUniqueHalfAndStrings(t *testing.T) {
	h := &graph.Tensor{DType: graph.Float16, Shape: []int{4}, Data: []uint16{
		graph.Float32ToFloat16(1), graph.Float32ToFloat16(-2), graph.Float32ToFloat16(1), graph.Float32ToFloat16(-3),
	}}
	outs, err := callOutputs(t, "Unique", 11, 4, nil, h)
	require.NoError(t, err)
	require.Len(t, outs, 4)
	assert.Equal(t, graph.Float16, outs[0].DType)
	got := make([]float32, 3)
	for i, b := range outs[0].Data.([]uint16) {
		got[i] = graph.Float16ToFloat32(b)
	}
	assert.Equal(t, []float32{-3, -2, 1}, got, "half floats sort by value, not by bits")
	assert.Equal(t, []int64{3, 1, 0}, outs[1].Data)
	assert.Equal(t, []int64{2, 1, 2, 0}, outs[2].Data)
	assert.Equal(t, []int64{1, 1, 2}, outs[3].Data)

	s := &graph.Tensor{DType: graph.String, Shape: []int{4}, Data: []string{"b", "a", "b", "c"}}
	outs, err = callOutputs(t, "Unique", 11, 4, []*graph.Attr{graph.IntAttr("sorted", 0)}, s)
	require.NoError(t, err)
	assert.Equal(t, []string{"b", "a", "c"}, outs[0].Data)
	assert.Equal(t, []int64{0, 1, 0, 2}, outs[2].Data)
}

func TestGeneratorsAndMasks(t *testing.T) {
	// OneHot: negative indices count from depth; out-of-range ones are all off.
	ind := i64(1, -1, 5)
	vals := f32([]int{2}, 0, 9)
	y := call1(t, "OneHot", 11, []*graph.Attr{graph.IntAttr("axis", 0)}, ind, f32(nil, 3), vals)
	assert.Equal(t, []int{3, 3}, y.Shape)
	assert.Equal(t, []float32{0, 0, 0, 9, 0, 0, 0, 9, 0}, y.Float32s())

	// NonZero of a scalar follows numpy's 1-element view.
	y = call1(t, "NonZero", 13, nil, graph.Scalar(graph.Float32, 2))
	assert.Equal(t, []int{1, 1}, y.Shape)
	h := &graph.Tensor{DType: graph.Float16, Shape: []int{3}, Data: []uint16{0x8000, 0x3c00, 0}}
	y = call1(t, "NonZero", 13, nil, h)
	assert.Equal(t, []int64{1}, y.Data, "-0 is zero")

	// Trilu with a k past the matrix keeps everything or nothing.
	m := iota32(2, 3)
	y = call1(t, "Trilu", 14, nil, m, scalarI64(math.MinInt64))
	assert.Equal(t, m.Float32s(), y.Float32s())
	y = call1(t, "Trilu", 14, []*graph.Attr{graph.IntAttr("upper", 0)}, m, scalarI64(-1))
	assert.Equal(t, []float32{0, 0, 0, 3, 0, 0}, y.Float32s())

	// Range with integers and a negative delta; zero delta is an error.
	r := call1(t, "Range", 11, nil, scalarI64(10), scalarI64(3), scalarI64(-3))
	assert.Equal(t, []int64{10, 7, 4}, r.Data)
	_, err := call(t, "Range", 11, nil, scalarI64(1), scalarI64(3), scalarI64(0))
	assert.ErrorContains(t, err, "delta")

	// EyeLike with another dtype and an off-diagonal k.
	y = call1(t, "EyeLike", 9, []*graph.Attr{graph.IntAttr("dtype", int64(graph.Bool)), graph.IntAttr("k", 1)}, iota32(2, 3))
	assert.Equal(t, []bool{false, true, false, false, false, true}, y.Data)

	// ConstantOfShape takes its dtype from the value attribute.
	y = call1(t, "ConstantOfShape", 9, []*graph.Attr{graph.TensorAttr("value", i64(4))}, i64(2, 2))
	assert.Equal(t, []int64{4, 4, 4, 4}, y.Data)
	y = call1(t, "ConstantOfShape", 9, nil, &graph.Tensor{DType: graph.Int64, Shape: []int{0}, Data: []int64{}})
	assert.Empty(t, y.Shape)
	assert.Equal(t, []float32{0}, y.Float32s())
}

func TestConcatTileExpand(t *testing.T) {
	a := iota32(2, 1)
	b := iota32(2, 0)
	c := iota32(2, 2)
	y := call1(t, "Concat", 13, []*graph.Attr{graph.IntAttr("axis", -1)}, a, b, c)
	assert.Equal(t, []int{2, 3}, y.Shape)
	assert.Equal(t, []float32{0, 0, 1, 1, 2, 3}, y.Float32s())
	_, err := call(t, "Concat", 13, []*graph.Attr{graph.IntAttr("axis", 0)}, a, c)
	assert.ErrorContains(t, err, "differ")
	_, err = call(t, "Concat", 13, nil, a, c)
	assert.ErrorContains(t, err, "axis")

	y = call1(t, "Tile", 13, nil, iota32(2), i64(3))
	assert.Equal(t, []float32{0, 1, 0, 1, 0, 1}, y.Float32s())
	_, err = call(t, "Tile", 13, nil, iota32(2), i64(-1))
	assert.Error(t, err)

	y = call1(t, "Expand", 13, nil, iota32(3, 1), i64(2, 1, 2))
	assert.Equal(t, []int{2, 3, 2}, y.Shape)
	assert.Equal(t, []float32{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}, y.Float32s())
	_, err = call(t, "Expand", 13, nil, iota32(3), i64(2))
	assert.ErrorContains(t, err, "cannot expand")
}

// naiveTranspose is the reference for the blocked transpose.
func naiveTranspose(x []float32, shape, perm []int) []float32 {
	st := graph.Strides(shape)
	out := make([]float32, len(x))
	oshape := make([]int, len(perm))
	for i, p := range perm {
		oshape[i] = shape[p]
	}
	idx := make([]int, len(perm))
	for o := range out {
		rem := o
		for a := len(oshape) - 1; a >= 0; a-- {
			idx[a] = rem % oshape[a]
			rem /= oshape[a]
		}
		src := 0
		for a, p := range perm {
			src += idx[a] * st[p]
		}
		out[o] = x[src]
	}
	return out
}

func TestTransposeMatchesNaive(t *testing.T) {
	cases := []struct{ shape, perm []int }{
		{[]int{70, 45}, []int{1, 0}},
		{[]int{3, 40, 33}, []int{0, 2, 1}},
		{[]int{2, 3, 4, 5}, []int{3, 1, 0, 2}},
		{[]int{33, 2, 65}, []int{2, 1, 0}},
		{[]int{4, 1, 37, 3}, []int{2, 0, 3, 1}},
		{[]int{5}, []int{0}},
		{[]int{}, []int{}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		checkTransposeNaive(t, rng, c.shape, c.perm)
	}
}

// checkTransposeNaive transposes random float32 data of shape by perm and
// compares it with naiveTranspose.
func checkTransposeNaive(t *testing.T, rng *rand.Rand, shape, perm []int) {
	t.Helper()
	x := graph.Zeros(graph.Float32, shape...)
	for i := range x.Float32s() {
		x.Float32s()[i] = rng.Float32()
	}
	p64 := make([]int64, len(perm))
	for i, p := range perm {
		p64[i] = int64(p)
	}
	y := call1(t, "Transpose", 13, []*graph.Attr{graph.IntsAttr("perm", p64...)}, x)
	assert.Equal(t, naiveTranspose(x.Float32s(), shape, perm), y.Float32s(), "shape %v perm %v", shape, perm)
}

func TestReverseSequenceAndCompress(t *testing.T) {
	x := iota32(3, 2) // [time, batch]
	y := call1(t, "ReverseSequence", 10, nil, x, i64(3, 1))
	assert.Equal(t, []float32{4, 1, 2, 3, 0, 5}, y.Float32s())
	_, err := call(t, "ReverseSequence", 10, nil, x, i64(4, 1))
	assert.ErrorContains(t, err, "out of range")

	cond := graph.FromBool([]bool{false, true, true}, 3)
	y = call1(t, "Compress", 11, nil, iota32(2, 2), cond)
	assert.Equal(t, []float32{1, 2}, y.Float32s())
	_, err = call(t, "Compress", 11, []*graph.Attr{graph.IntAttr("axis", 0)}, iota32(2, 2), cond)
	assert.ErrorContains(t, err, "past the size")
}

func BenchmarkTranspose(b *testing.B) {
	x := iota32(64, 256, 256)
	spec, _ := kern.Lookup("", "Transpose", 13)
	n := &graph.Node{OpType: "Transpose", Attrs: map[string]*graph.Attr{"perm": graph.IntsAttr("perm", 0, 2, 1)}}
	b.SetBytes(int64(4 * x.Size()))
	for b.Loop() {
		if _, err := spec.Fn(nil, n, []*graph.Tensor{x}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGatherRows(b *testing.B) {
	x := iota32(30000, 512)
	idx := make([]int64, 4096)
	for i := range idx {
		idx[i] = int64(i * 7 % 30000)
	}
	spec, _ := kern.Lookup("", "Gather", 13)
	n := &graph.Node{OpType: "Gather"}
	b.SetBytes(int64(4 * len(idx) * 512))
	for b.Loop() {
		if _, err := spec.Fn(nil, n, []*graph.Tensor{x, i64(idx...)}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGatherViewMatchesNaive checks the run-splitting, axis merging and
// tiling of gatherView against a direct evaluation of its definition, over
// random maps mixing arithmetic (also negative and zero strides) and table
// axes with padding.
func TestGatherViewMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]int32, 10000)
	for i := range src {
		src[i] = int32(i)
	}
	fill := []int32{-7}
	for trial := 0; trial < 500; trial++ {
		r := 1 + rng.IntN(4)
		maps := make([]axisMap, r)
		base := 0
		size := 1
		for a := range maps {
			n := 1 + rng.IntN(40)
			if rng.IntN(10) == 0 {
				n = 1
			}
			size *= n
			switch rng.IntN(4) {
			case 0: // table with some padding
				tab := make([]int, n)
				for i := range tab {
					tab[i] = rng.IntN(20)
					if rng.IntN(5) == 0 {
						tab[i] = padOffset
					}
				}
				maps[a] = tabled(tab)
			case 1: // reversed
				maps[a] = arith(n, (n-1)*(1+a), -(1 + a))
			default:
				maps[a] = arith(n, rng.IntN(3), []int{0, 1, 1, 40}[rng.IntN(4)])
			}
		}
		want := make([]int32, size)
		idx := make([]int, r)
		for p := range want {
			off := base
			pad := false
			for a := range maps {
				o := maps[a].at(idx[a])
				if o < 0 {
					pad = true
				}
				off += o
			}
			if pad {
				want[p] = fill[0]
			} else {
				want[p] = src[off]
			}
			for a := r - 1; a >= 0; a-- {
				idx[a]++
				if idx[a] < maps[a].n {
					break
				}
				idx[a] = 0
			}
		}
		got := make([]int32, size)
		require.NoError(t, gatherView(got, src, base, append([]axisMap{}, maps...), fill))
		require.Equal(t, want, got, "trial %d maps %+v", trial, maps)
	}
}

func TestMalformedInputsAreErrors(t *testing.T) {
	short := &graph.Tensor{DType: graph.Float32, Shape: []int{2, 3}, Data: []float32{1, 2}}
	for _, op := range []string{"Transpose", "Flatten", "Squeeze", "Unique", "NonZero", "Trilu"} {
		_, err := call(t, op, 14, nil, short)
		assert.ErrorContains(t, err, "holds 2 elements", op)
	}
	_, err := call(t, "Concat", 13, []*graph.Attr{graph.IntAttr("axis", 0)}, iota32(2), &graph.Tensor{DType: graph.Int64, Shape: []int{1}, Data: []int64{1}})
	assert.ErrorContains(t, err, "dtype")
	_, err = call(t, "Gather", 13, nil, iota32(2))
	assert.ErrorContains(t, err, "needs 2 inputs")
	_, err = call(t, "Transpose", 13, []*graph.Attr{graph.IntsAttr("perm", 0, 0)}, iota32(2, 2))
	assert.ErrorContains(t, err, "perm")
	_, err = call(t, "DepthToSpace", 13, []*graph.Attr{graph.IntAttr("blocksize", 2)}, iota32(1, 3, 2, 2))
	assert.ErrorContains(t, err, "divisible")
}
