package ops

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// The tests below run every elementwise, broadcasting and reduction kernel
// on inputs with a zero-size dimension. Elementwise and broadcasting ops
// must give the empty tensor of the broadcast shape (numpy's rule: a 0
// broadcasts with 0 or 1 only); reductions over an empty set give the value
// the ONNX operator text defines for it (ReduceSum 0, ReduceProd 1,
// ReduceMax and ReduceLogSumExp -inf, ReduceMin +inf, ...). None may panic.

// runZeroSize calls op's kernel on in with attrs, turning a panic into a
// test failure that names the op and shapes.
func runZeroSize(t *testing.T, domain, op string, opset int64, attrs []*graph.Attr, in ...*graph.Tensor) (out []*graph.Tensor, err error) {
	t.Helper()
	spec, ok := kern.Lookup(domain, op, opset)
	require.True(t, ok, "no kernel for %s:%s at opset %d", domain, op, opset)
	n := &graph.Node{Name: "n", OpType: op, Domain: domain, Outputs: []string{"y"}}
	if op == graph.GeluErf {
		n.Outputs = []string{"y", "d", "a"}
	}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	defer func() {
		if r := recover(); r != nil {
			shapes := make([][]int, len(in))
			for i, x := range in {
				if x != nil {
					shapes[i] = x.Shape
				}
			}
			t.Errorf("%s:%s on shapes %v panicked: %v", domain, op, shapes, r)
			out, err = nil, fmt.Errorf("panic")
		}
	}()
	return spec.Fn(&kern.Context{Opset: opset}, n, in)
}

// sample is a tensor of dtype d and shape whose elements are small positive
// values (valid for every unary op's domain, Acosh's included after +1).
func sample(d graph.DType, shape ...int) *graph.Tensor {
	size := 1
	for _, s := range shape {
		size *= s
	}
	switch d {
	case graph.Bool:
		v := make([]bool, size)
		for i := range v {
			v[i] = i%2 == 0
		}
		return graph.FromBool(v, shape...)
	case graph.Int64:
		v := make([]int64, size)
		for i := range v {
			v[i] = int64(i%3 + 1)
		}
		return graph.FromInt64(v, shape...)
	case graph.Uint8:
		v := make([]uint8, size)
		for i := range v {
			v[i] = uint8(i%3 + 1)
		}
		return &graph.Tensor{DType: graph.Uint8, Shape: shape, Data: v}
	}
	v := make([]float32, size)
	for i := range v {
		v[i] = 0.25 + 0.125*float32(i%5)
	}
	return graph.FromFloat32(v, shape...)
}

// requireEmpty checks a kernel's single result: no error, the shape wanted
// and no elements.
func requireEmpty(t *testing.T, what string, out []*graph.Tensor, err error, want []int) {
	t.Helper()
	if !assert.NoError(t, err, what) || !assert.NotEmpty(t, out, what) || !assert.NotNil(t, out[0], what) {
		return
	}
	assert.Equal(t, want, out[0].Shape, what)
	assert.Equal(t, 0, out[0].Size(), what)
	assert.Equal(t, 0, lenOf(out[0].Data), "%s: data length", what)
}

// lenOf is the length of a tensor's data slice.
func lenOf(data any) int {
	switch s := data.(type) {
	case []float32:
		return len(s)
	case []float64:
		return len(s)
	case []int64:
		return len(s)
	case []int32:
		return len(s)
	case []uint8:
		return len(s)
	case []uint16:
		return len(s)
	case []bool:
		return len(s)
	}
	return -1
}

// emptyShapes are single-operand shapes with a zero-size dimension.
var emptyShapes = [][]int{{0}, {2, 0, 3}, {2, 3, 0}, {0, 4}}

// broadcastCases pair shapes with a zero-size dimension (on either side)
// with the broadcast shape they give.
var broadcastCases = []struct{ a, b, out []int }{
	{[]int{2, 0, 3}, []int{2, 0, 3}, []int{2, 0, 3}},
	{[]int{2, 0, 3}, []int{3}, []int{2, 0, 3}},
	{[]int{2, 0, 3}, []int{}, []int{2, 0, 3}},
	{[]int{}, []int{2, 3, 0}, []int{2, 3, 0}},
	{[]int{3, 0}, []int{3, 1}, []int{3, 0}},
	{[]int{3, 1}, []int{1, 0}, []int{3, 0}},
	{[]int{0}, []int{1}, []int{0}},
	{[]int{2, 1, 3}, []int{2, 0, 1}, []int{2, 0, 3}},
	{[]int{1, 0, 1}, []int{4, 1, 5}, []int{4, 0, 5}},
}

func TestZeroSizeUnary(t *testing.T) {
	float := []string{
		"Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Celu", "Cos", "Cosh",
		"Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity", "IsInf",
		"IsNaN", "LeakyRelu", "Log", "Mish", "Neg", "Reciprocal", "Relu", "Round", "Selu",
		"Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh",
		"ThresholdedRelu", "Shrink", "Clip", "Softmax", "LogSoftmax", "Hardmax",
	}
	for _, s := range emptyShapes {
		for _, op := range float {
			out, err := runZeroSize(t, "", op, 17, nil, sample(graph.Float32, s...))
			requireEmpty(t, fmt.Sprintf("%s %v", op, s), out, err, s)
		}
		out, err := runZeroSize(t, "", "Not", 17, nil, sample(graph.Bool, s...))
		requireEmpty(t, fmt.Sprintf("Not %v", s), out, err, s)
		out, err = runZeroSize(t, "", "BitwiseNot", 18, nil, sample(graph.Int64, s...))
		requireEmpty(t, fmt.Sprintf("BitwiseNot %v", s), out, err, s)
		out, err = runZeroSize(t, "", "Cast", 17, []*graph.Attr{graph.IntAttr("to", int64(graph.Int64))}, sample(graph.Float32, s...))
		requireEmpty(t, fmt.Sprintf("Cast %v", s), out, err, s)
		out, err = runZeroSize(t, "", "Clip", 17, nil, sample(graph.Float32, s...), graph.FromFloat32([]float32{0}), graph.FromFloat32([]float32{1}))
		requireEmpty(t, fmt.Sprintf("Clip(min,max) %v", s), out, err, s)
		// Along the zero-size axis and along another.
		for axis := range s {
			for _, op := range []string{"Softmax", "LogSoftmax", "Hardmax"} {
				out, err := runZeroSize(t, "", op, 13, []*graph.Attr{graph.IntAttr("axis", int64(axis))}, sample(graph.Float32, s...))
				requireEmpty(t, fmt.Sprintf("%s axis %d %v", op, axis, s), out, err, s)
			}
			out, err := runZeroSize(t, "", "CumSum", 14, nil, sample(graph.Float32, s...), graph.FromInt64([]int64{int64(axis)}))
			requireEmpty(t, fmt.Sprintf("CumSum axis %d %v", axis, s), out, err, s)
		}
	}
}

func TestZeroSizeBroadcast(t *testing.T) {
	float := []string{"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}
	for _, c := range broadcastCases {
		for _, op := range float {
			out, err := runZeroSize(t, "", op, 17, nil, sample(graph.Float32, c.a...), sample(graph.Float32, c.b...))
			requireEmpty(t, fmt.Sprintf("%s %v %v", op, c.a, c.b), out, err, c.out)
		}
		if graph.SameShape(c.a, c.out) {
			// PRelu's slope broadcasts to X's shape only.
			out, err := runZeroSize(t, "", "PRelu", 16, nil, sample(graph.Float32, c.a...), sample(graph.Float32, c.b...))
			requireEmpty(t, fmt.Sprintf("PRelu %v %v", c.a, c.b), out, err, c.out)
		}
		fmod := []*graph.Attr{graph.IntAttr("fmod", 1)}
		out, err := runZeroSize(t, "", "Mod", 17, fmod, sample(graph.Float32, c.a...), sample(graph.Float32, c.b...))
		requireEmpty(t, fmt.Sprintf("Mod %v %v", c.a, c.b), out, err, c.out)
		out, err = runZeroSize(t, "", "Mod", 17, nil, sample(graph.Int64, c.a...), sample(graph.Int64, c.b...))
		requireEmpty(t, fmt.Sprintf("Mod int64 %v %v", c.a, c.b), out, err, c.out)
		for _, op := range []string{"And", "Or", "Xor"} {
			out, err := runZeroSize(t, "", op, 17, nil, sample(graph.Bool, c.a...), sample(graph.Bool, c.b...))
			requireEmpty(t, fmt.Sprintf("%s %v %v", op, c.a, c.b), out, err, c.out)
		}
		for _, op := range []string{"BitwiseAnd", "BitwiseOr", "BitwiseXor"} {
			out, err := runZeroSize(t, "", op, 18, nil, sample(graph.Int64, c.a...), sample(graph.Int64, c.b...))
			requireEmpty(t, fmt.Sprintf("%s %v %v", op, c.a, c.b), out, err, c.out)
		}
		out, err = runZeroSize(t, "", "BitShift", 17, []*graph.Attr{graph.StringAttr("direction", "LEFT")},
			sample(graph.Uint8, c.a...), sample(graph.Uint8, c.b...))
		requireEmpty(t, fmt.Sprintf("BitShift %v %v", c.a, c.b), out, err, c.out)
		// Where with the zero-size operand in each of the three places.
		for k := 0; k < 3; k++ {
			shapes := [3][]int{c.b, c.b, c.b}
			shapes[k] = c.a
			cond := sample(graph.Bool, shapes[0]...)
			out, err := runZeroSize(t, "", "Where", 17, nil, cond, sample(graph.Float32, shapes[1]...), sample(graph.Float32, shapes[2]...))
			requireEmpty(t, fmt.Sprintf("Where %v", shapes), out, err, c.out)
		}
		// Variadic forms with three operands.
		for _, op := range []string{"Max", "Min", "Sum", "Mean"} {
			out, err := runZeroSize(t, "", op, 17, nil, sample(graph.Float32, c.a...), sample(graph.Float32, c.b...), sample(graph.Float32, c.b...))
			requireEmpty(t, fmt.Sprintf("%s of 3 %v %v", op, c.a, c.b), out, err, c.out)
		}
	}
	// The fused elementwise gradient kernels take operands of one shape.
	for _, s := range emptyShapes {
		c := graph.FromFloat32([]float32{0.5})
		out, err := runZeroSize(t, graph.FusedDomain, graph.ReluGrad, 17, nil, sample(graph.Float32, s...), sample(graph.Float32, s...))
		requireEmpty(t, fmt.Sprintf("ReluGrad %v", s), out, err, s)
		out, err = runZeroSize(t, graph.FusedDomain, graph.ErfGrad, 17, nil, sample(graph.Float32, s...), sample(graph.Float32, s...), c)
		requireEmpty(t, fmt.Sprintf("ErfGrad %v", s), out, err, s)
		out, err = runZeroSize(t, graph.FusedDomain, graph.GeluErf, 17, nil, sample(graph.Float32, s...), c, c, c)
		requireEmpty(t, fmt.Sprintf("GeluErf %v", s), out, err, s)
	}
	// A zero against a size other than 1 does not broadcast: an error, no panic.
	_, err := runZeroSize(t, "", "Add", 17, nil, sample(graph.Float32, 2, 0), sample(graph.Float32, 2, 3))
	assert.ErrorContains(t, err, "broadcast")
	_, err = runZeroSize(t, "", "Where", 17, nil, sample(graph.Bool, 0), sample(graph.Float32, 2), sample(graph.Float32, 1))
	assert.ErrorContains(t, err, "broadcast")
}

func TestZeroSizeReductions(t *testing.T) {
	inf := math.Inf(1)
	// The value of each reduction over an empty set, from the ONNX operator
	// text; ReduceMean's is undefined there (NaN here), so only its shape is
	// checked.
	empty := map[string]float64{
		"ReduceSum": 0, "ReduceSumSquare": 0, "ReduceL1": 0, "ReduceL2": 0, "ReduceProd": 1,
		"ReduceMax": -inf, "ReduceMin": inf, "ReduceLogSum": -inf, "ReduceLogSumExp": -inf,
		"ReduceMean": math.NaN(),
	}
	x := sample(graph.Float32, 2, 0, 3)
	cases := []struct {
		axes     []int64 // nil: no axes input
		keepdims int64
		noop     int64
		out      []int
		filled   bool // the output has elements, each the empty-set value
	}{
		{axes: []int64{1}, keepdims: 1, out: []int{2, 1, 3}, filled: true},
		{axes: []int64{1}, keepdims: 0, out: []int{2, 3}, filled: true},
		{axes: []int64{-2, 2}, keepdims: 0, out: []int{2}, filled: true},
		{axes: []int64{0}, keepdims: 1, out: []int{1, 0, 3}},
		{axes: []int64{0, 2}, keepdims: 0, out: []int{0}},
		{keepdims: 1, out: []int{1, 1, 1}, filled: true},
		{keepdims: 0, out: []int{}, filled: true},
		{keepdims: 1, noop: 1, out: []int{2, 0, 3}},
	}
	for op, want := range empty {
		for _, c := range cases {
			what := fmt.Sprintf("%s axes %v keepdims %d noop %d", op, c.axes, c.keepdims, c.noop)
			attrs := []*graph.Attr{graph.IntAttr("keepdims", c.keepdims), graph.IntAttr("noop_with_empty_axes", c.noop)}
			in := []*graph.Tensor{x}
			if c.axes != nil {
				in = append(in, graph.FromInt64(c.axes, len(c.axes)))
			}
			out, err := runZeroSize(t, "", op, 18, attrs, in...)
			if !c.filled {
				requireEmpty(t, what, out, err, c.out)
				continue
			}
			if !assert.NoError(t, err, what) {
				continue
			}
			assert.Equal(t, c.out, out[0].Shape, what)
			got := out[0].Float32s()
			size, err := graph.NumElements(c.out)
			require.NoError(t, err)
			require.Len(t, got, size, what)
			if op == "ReduceMean" {
				continue
			}
			for i, v := range got {
				assert.Equal(t, want, float64(v), "%s: element %d", what, i)
			}
		}
		// The opset-13 form (axes as an attribute), with an int64 input.
		if op != "ReduceSum" {
			out, err := runZeroSize(t, "", op, 13, []*graph.Attr{graph.IntsAttr("axes", 0)}, sample(graph.Int64, 0, 2))
			if op == "ReduceLogSum" || op == "ReduceLogSumExp" || op == "ReduceL2" || op == "ReduceMean" {
				// Undefined or not representable in an integer type:
				// an error or a value, but no panic (checked by runZeroSize).
				continue
			}
			if assert.NoError(t, err, "%s int64 opset 13", op) {
				assert.Equal(t, []int{1, 2}, out[0].Shape, "%s int64 opset 13", op)
			}
		}
	}
	// ArgMax and ArgMin have no index to give over an empty axis: an error.
	// Along another axis the result is empty.
	for _, op := range []string{"ArgMax", "ArgMin"} {
		_, err := runZeroSize(t, "", op, 13, []*graph.Attr{graph.IntAttr("axis", 1)}, x)
		assert.Error(t, err, "%s over an empty axis", op)
		out, err := runZeroSize(t, "", op, 13, []*graph.Attr{graph.IntAttr("axis", 2)}, x)
		requireEmpty(t, op+" axis 2", out, err, []int{2, 0, 1})
	}
	// SumToShape (the gradient of broadcasting) sums to the shape of its
	// second operand: zeros where the summed dimension was empty.
	for _, c := range []struct {
		g, like []int
		filled  bool
	}{
		{[]int{2, 0, 3}, []int{1, 1, 3}, true},
		{[]int{2, 0, 3}, []int{3}, true},
		{[]int{2, 0, 3}, []int{2, 1, 1}, true},
		{[]int{2, 0, 3}, []int{0, 3}, false},
		{[]int{0, 4}, []int{4}, true},
		{[]int{4, 0}, []int{4, 1}, true},
	} {
		what := fmt.Sprintf("SumToShape %v to %v", c.g, c.like)
		out, err := runZeroSize(t, graph.InternalDomain, "SumToShape", 17, nil, sample(graph.Float32, c.g...), sample(graph.Float32, c.like...))
		if !c.filled {
			requireEmpty(t, what, out, err, c.like)
			continue
		}
		if assert.NoError(t, err, what) {
			assert.Equal(t, c.like, out[0].Shape, what)
			for i, v := range out[0].Float32s() {
				assert.Zero(t, v, "%s: element %d", what, i)
			}
		}
	}
}

// Conv with no input channels sums over nothing: each output is its
// channel's bias. An empty batch gives an empty output. Neither panics.
func TestZeroSizeConv(t *testing.T) {
	b := graph.FromFloat32([]float32{1, 2, 3}, 3)
	out, err := runZeroSize(t, "", "Conv", 17, nil, sample(graph.Float32, 2, 0, 5), sample(graph.Float32, 3, 0, 3), b)
	require.NoError(t, err)
	require.Equal(t, []int{2, 3, 3}, out[0].Shape)
	assert.Equal(t, []float32{1, 1, 1, 2, 2, 2, 3, 3, 3, 1, 1, 1, 2, 2, 2, 3, 3, 3}, out[0].Float32s())
	out, err = runZeroSize(t, "", "Conv", 17, nil, sample(graph.Float32, 2, 0, 5), sample(graph.Float32, 3, 0, 3))
	require.NoError(t, err)
	assert.Equal(t, make([]float32, 18), out[0].Float32s())
	out, err = runZeroSize(t, "", "Conv", 17, nil, sample(graph.Float32, 0, 2, 5), sample(graph.Float32, 3, 2, 3), b)
	requireEmpty(t, "Conv of an empty batch", out, err, []int{0, 3, 3})
	// Group normalisation's gradient with no channels has no group to
	// normalise: an error naming num_groups.
	_, err = runZeroSize(t, graph.InternalDomain, "GroupNormalizationGrad", 17, nil,
		sample(graph.Float32, 2, 0, 3), sample(graph.Float32, 2, 0, 3), sample(graph.Float32, 0))
	assert.ErrorContains(t, err, "num_groups")
}
