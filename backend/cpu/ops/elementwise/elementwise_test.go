package elementwise

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// run calls the registered kernel of op at opset with attrs.
func run(t *testing.T, op string, opset int64, attrs []*graph.Attr, in ...*graph.Tensor) (*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup("", op, opset)
	require.True(t, ok, "no kernel for %s", op)
	n := &graph.Node{Name: "n", OpType: op, Outputs: []string{"y"}}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	out, err := spec.Fn(&kern.Context{Opset: opset}, n, in)
	if err != nil {
		return nil, err
	}
	require.Len(t, out, 1)
	return out[0], nil
}

// mustRun is run that requires success.
func mustRun(t *testing.T, op string, opset int64, attrs []*graph.Attr, in ...*graph.Tensor) *graph.Tensor {
	t.Helper()
	out, err := run(t, op, opset, attrs, in...)
	require.NoError(t, err)
	return out
}

func tensorOf[T any](d graph.DType, data []T, shape ...int) *graph.Tensor {
	return &graph.Tensor{DType: d, Shape: shape, Data: data}
}

func TestPlanCollapsesDims(t *testing.T) {
	n := &graph.Node{OpType: "Add"}
	// NCHW plus a per-channel bias: [N, C, H*W] with the bias walking C.
	p, err := newPlan(n, []int{2, 3, 4, 5}, []int{1, 3, 1, 1})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3, 20}, p.dims)
	assert.Equal(t, []int{60, 20, 1}, p.strides[0])
	assert.Equal(t, []int{0, 1, 0}, p.strides[1])
	// Same shapes collapse to one dim.
	p, err = newPlan(n, []int{2, 3, 4}, []int{2, 3, 4})
	require.NoError(t, err)
	assert.Equal(t, []int{24}, p.dims)
	// Scalars.
	p, err = newPlan(n, nil, []int{1, 1})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 1}, p.out)
	assert.Equal(t, []int{1}, p.dims)
	_, err = newPlan(n, []int{2, 3}, []int{4})
	assert.ErrorContains(t, err, "cannot be broadcast")
}

// TestBroadcastMatchesReference checks every path of runBinary (contiguous,
// scalar on either side, both repeated) against BroadcastIndex.
func TestBroadcastMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][2][]int{
		{{3, 4}, {3, 4}}, {{3, 4}, {}}, {{}, {3, 4}}, {{3, 1}, {1, 4}}, {{1, 4}, {3, 1}},
		{{2, 3, 4, 5}, {3, 1, 1}}, {{2, 1, 4, 1}, {1, 3, 1, 5}}, {{5}, {2, 3, 5}},
		{{2, 3, 1}, {2, 3, 1}}, {{2, 1, 3}, {2, 4, 1}}, {{0, 3}, {1, 3}}, {{4, 1, 1}, {1, 1, 1}},
	}
	for _, s := range shapes {
		a := randTensor(r, s[0])
		b := randTensor(r, s[1])
		for _, op := range []string{"Add", "Sub", "Mul", "Div", "Max", "Min"} {
			got := mustRun(t, op, 17, nil, a, b)
			want := referenceBinary(t, op, a, b)
			require.Equal(t, want.Shape, got.Shape, "%s %v %v", op, s[0], s[1])
			assert.InDeltaSlice(t, want.Data, got.Data, 1e-6, "%s %v %v", op, s[0], s[1])
		}
		// Comparisons go through the same engine with swapped operands.
		got := mustRun(t, "Greater", 17, nil, a, b)
		ia, ib := kern.BroadcastIndex(a.Shape, got.Shape), kern.BroadcastIndex(b.Shape, got.Shape)
		for i, v := range got.Bools() {
			assert.Equal(t, a.Float32s()[ia[i]] > b.Float32s()[ib[i]], v)
		}
	}
}

func randTensor(r *rand.Rand, shape []int) *graph.Tensor {
	n, _ := graph.NumElements(shape)
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(r.NormFloat64()) + 0.1
	}
	return graph.FromFloat32(d, shape...)
}

func referenceBinary(t *testing.T, op string, a, b *graph.Tensor) *graph.Tensor {
	shape, err := kern.BroadcastShape(a.Shape, b.Shape)
	require.NoError(t, err)
	out := graph.Zeros(graph.Float32, shape...)
	ia, ib := kern.BroadcastIndex(a.Shape, shape), kern.BroadcastIndex(b.Shape, shape)
	for i := range out.Float32s() {
		x, y := a.Float32s()[ia[i]], b.Float32s()[ib[i]]
		var v float32
		switch op {
		case "Add":
			v = x + y
		case "Sub":
			v = x - y
		case "Mul":
			v = x * y
		case "Div":
			v = x / y
		case "Max":
			v = max(x, y)
		case "Min":
			v = min(x, y)
		}
		out.Float32s()[i] = v
	}
	return out
}

func TestIntegerDivAndMod(t *testing.T) {
	a := tensorOf(graph.Int32, []int32{7, -7, 7, -7}, 4)
	b := tensorOf(graph.Int32, []int32{2, 2, -2, -2}, 4)
	assert.Equal(t, []int32{3, -3, -3, 3}, mustRun(t, "Div", 14, nil, a, b).Data)
	assert.Equal(t, []int32{1, 1, -1, -1}, mustRun(t, "Mod", 13, nil, a, b).Data)
	assert.Equal(t, []int32{1, -1, 1, -1}, mustRun(t, "Mod", 13, []*graph.Attr{graph.IntAttr("fmod", 1)}, a, b).Data)

	zero := tensorOf(graph.Int32, []int32{1, 0, 1, 1}, 4)
	_, err := run(t, "Div", 14, nil, a, zero)
	assert.ErrorContains(t, err, "division by zero")
	_, err = run(t, "Mod", 13, nil, a, zero)
	assert.ErrorContains(t, err, "modulo by zero")

	fa := graph.FromFloat64([]float64{5.5, -5.5}, 2)
	fb := graph.FromFloat64([]float64{-2, 2}, 2)
	assert.InDeltaSlice(t, []float64{-0.5, 0.5}, mustRun(t, "Mod", 13, nil, fa, fb).Data, 1e-12)
	assert.InDeltaSlice(t, []float64{1.5, -1.5}, mustRun(t, "Mod", 13, []*graph.Attr{graph.IntAttr("fmod", 1)}, fa, fb).Data, 1e-12)
}

func TestPow(t *testing.T) {
	base := graph.FromInt64([]int64{2, 3, -2, 1, -1, 5}, 6)
	exp := graph.FromInt64([]int64{10, 3, 3, -4, -3, -1}, 6)
	assert.Equal(t, []int64{1024, 27, -8, 1, -1, 0}, mustRun(t, "Pow", 15, nil, base, exp).Data)

	x := graph.FromFloat32([]float32{1, 2, 3, 4}, 4)
	for e, want := range map[float32][]float32{
		2: {1, 4, 9, 16}, 0.5: {1, math.Sqrt2, float32(math.Sqrt(3)), 2}, 3: {1, 8, 27, 64},
		-1: {1, 0.5, 1.0 / 3, 0.25}, 1.5: {1, float32(math.Pow(2, 1.5)), float32(math.Pow(3, 1.5)), 8},
	} {
		got := mustRun(t, "Pow", 15, nil, x, graph.FromFloat32([]float32{e}))
		assert.InDeltaSlice(t, want, got.Data, 1e-6, "exponent %v", e)
	}
	// float base, integer exponent keeps the base's dtype.
	got := mustRun(t, "Pow", 15, nil, x, tensorOf(graph.Int32, []int32{2}, 1))
	assert.Equal(t, graph.Float32, got.DType)
	assert.Equal(t, []float32{1, 4, 9, 16}, got.Data)
}

func TestClipOpsetForms(t *testing.T) {
	x := graph.FromFloat32([]float32{-3, -1, 0, 1, 3, float32(math.NaN())}, 6)
	attrs := []*graph.Attr{graph.FloatAttr("min", -1.5), graph.FloatAttr("max", 2)}
	got := mustRun(t, "Clip", 6, attrs, x)
	assert.Equal(t, []float32{-1.5, -1, 0, 1, 2}, got.Float32s()[:5])
	assert.True(t, math.IsNaN(float64(got.Float32s()[5])))

	got = mustRun(t, "Clip", 13, nil, x, graph.FromFloat32([]float32{-1.5}), graph.FromFloat32([]float32{2}))
	assert.Equal(t, []float32{-1.5, -1, 0, 1, 2}, got.Float32s()[:5])
	// Only max given (min omitted).
	got = mustRun(t, "Clip", 13, nil, x, nil, graph.FromFloat32([]float32{0}))
	assert.Equal(t, []float32{-3, -1, 0, 0, 0}, got.Float32s()[:5])
	// min > max: everything becomes max.
	got = mustRun(t, "Clip", 13, nil, x, graph.FromFloat32([]float32{2}), graph.FromFloat32([]float32{1}))
	assert.Equal(t, []float32{1, 1, 1, 1, 1}, got.Float32s()[:5])
	// Integer clip.
	xi := tensorOf(graph.Int8, []int8{-128, 0, 127}, 3)
	got = mustRun(t, "Clip", 13, nil, xi, tensorOf(graph.Int8, []int8{-5}), tensorOf(graph.Int8, []int8{5}))
	assert.Equal(t, []int8{-5, 0, 5}, got.Data)
	_, err := run(t, "Clip", 13, nil, x, graph.FromFloat32([]float32{1, 2}, 2))
	assert.ErrorContains(t, err, "scalar")
}

func TestCast(t *testing.T) {
	cast := func(x *graph.Tensor, to graph.DType) *graph.Tensor {
		return mustRun(t, "Cast", 19, []*graph.Attr{graph.IntAttr("to", int64(to))}, x)
	}
	// Integers wrap, floats truncate toward zero, nonzero is true.
	assert.Equal(t, []int8{-56, 44}, cast(tensorOf(graph.Int16, []int16{200, 300}, 2), graph.Int8).Data)
	assert.Equal(t, []int32{-2, 2, 0}, cast(graph.FromFloat32([]float32{-2.7, 2.7, -0.5}, 3), graph.Int32).Data)
	assert.Equal(t, []bool{false, true, true, false}, cast(graph.FromFloat64([]float64{0, 0.1, math.NaN(), math.Copysign(0, -1)}, 4), graph.Bool).Data)
	assert.Equal(t, []float32{1, 0}, cast(graph.FromBool([]bool{true, false}, 2), graph.Float32).Data)
	assert.Equal(t, []uint64{math.MaxUint64}, cast(graph.FromInt64([]int64{-1}, 1), graph.Uint64).Data)

	// float64 -> float16 rounds once: 1 + 2^-11 + 2^-40 is just above the
	// halfway point between two float16 values, and float32 would lose the
	// 2^-40 and round to even (down) instead.
	v := 1 + math.Ldexp(1, -11) + math.Ldexp(1, -40)
	h := cast(graph.FromFloat64([]float64{v, 65520, -1e-9}, 3), graph.Float16)
	assert.Equal(t, graph.Float16, h.DType)
	assert.Equal(t, []uint16{0x3c01, 0x7c00, 0x8000}, h.Data)
	bf := cast(graph.FromFloat32([]float32{1.00390625, 3}, 2), graph.BFloat16) // halfway: ties to even
	assert.Equal(t, []uint16{0x3f80, 0x4040}, bf.Data)
	back := cast(bf, graph.Float64)
	assert.Equal(t, []float64{1, 3}, back.Data)
	assert.Equal(t, []uint16{0x3c00, 0x4200}, cast(bf, graph.Float16).Data)

	// Strings.
	s := cast(graph.FromFloat32([]float32{0.1, float32(math.Inf(-1)), 100, float32(math.NaN())}, 4), graph.String)
	assert.Equal(t, []string{"0.1", "-INF", "100", "NaN"}, s.Data)
	f := cast(tensorOf(graph.String, []string{"1e-5", " 3.5", "+inf", "-INF", "nan"}, 5), graph.Float32)
	assert.Equal(t, float32(1e-5), f.Float32s()[0])
	assert.Equal(t, float32(3.5), f.Float32s()[1])
	assert.True(t, math.IsInf(float64(f.Float32s()[2]), 1))
	assert.True(t, math.IsInf(float64(f.Float32s()[3]), -1))
	assert.True(t, math.IsNaN(float64(f.Float32s()[4])))
	assert.Equal(t, []int64{100, -3}, cast(tensorOf(graph.String, []string{"100.5", "-3"}, 2), graph.Int64).Data)
	_, err := run(t, "Cast", 19, []*graph.Attr{graph.IntAttr("to", int64(graph.Float32))}, tensorOf(graph.String, []string{"hello"}, 1))
	assert.ErrorContains(t, err, `"hello"`)

	// Float8 (17) is refused as unsupported, so callers can skip.
	_, err = run(t, "Cast", 19, []*graph.Attr{graph.IntAttr("to", 17)}, graph.FromFloat32([]float32{1}, 1))
	assert.True(t, errors.Is(err, graph.ErrUnsupportedOp), "%v", err)

	// CastLike takes the second input's dtype.
	got := mustRun(t, "CastLike", 19, nil, graph.FromFloat32([]float32{1.5}, 1), graph.FromInt64(nil, 0))
	assert.Equal(t, []int64{1}, got.Data)
}

func TestActivations(t *testing.T) {
	x := graph.FromFloat64([]float64{-2, -0.5, 0, 0.5, 2.5}, 5)
	gelu := mustRun(t, "Gelu", 20, nil, x).Float64s()
	geluTanh := mustRun(t, "Gelu", 20, []*graph.Attr{{Name: "approximate", Type: graph.AttrString, S: "tanh"}}, x).Float64s()
	for i, v := range x.Float64s() {
		assert.InDelta(t, 0.5*v*(1+math.Erf(v/math.Sqrt2)), gelu[i], 1e-12)
		assert.InDelta(t, 0.5*v*(1+math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))), geluTanh[i], 1e-12)
	}
	// gelu(-2) = -2·Φ(-2) with Φ(-2) = 0.0227501319481792.
	assert.InDelta(t, -0.0455002638963584, gelu[0], 1e-9)
	_, err := run(t, "Gelu", 20, []*graph.Attr{{Name: "approximate", Type: graph.AttrString, S: "fast"}}, x)
	assert.ErrorContains(t, err, "approximate")

	assert.Equal(t, []float64{-2, -0, 0, 0, 2}, mustRun(t, "Round", 11, nil, x).Data)
	mish := mustRun(t, "Mish", 18, nil, x).Float64s()
	assert.InDelta(t, 2.5*math.Tanh(math.Log1p(math.Exp(2.5))), mish[4], 1e-12)
	hs := mustRun(t, "HardSwish", 14, nil, x).Float64s()
	assert.InDeltaSlice(t, []float64{-2 * (1.0 / 6), -0.5 * (0.5 - 0.5/6), 0, 0.5 * (0.5 + 0.5/6), 2.5 * (0.5 + 2.5/6)}, hs, 1e-12)
	sp := mustRun(t, "Softplus", 1, nil, graph.FromFloat32([]float32{1000, -1000}, 2)).Float32s()
	assert.Equal(t, []float32{1000, 0}, sp)
	sig := mustRun(t, "Sigmoid", 13, nil, graph.FromFloat32([]float32{-1000, 0, 1000}, 3)).Float32s()
	assert.Equal(t, []float32{0, 0.5, 1}, sig)
}

func TestIntegerUnary(t *testing.T) {
	x := tensorOf(graph.Int32, []int32{-3, 0, 4}, 3)
	assert.Equal(t, []int32{3, 0, 4}, mustRun(t, "Abs", 13, nil, x).Data)
	assert.Equal(t, []int32{3, 0, -4}, mustRun(t, "Neg", 13, nil, x).Data)
	assert.Equal(t, []int32{-1, 0, 1}, mustRun(t, "Sign", 13, nil, x).Data)
	assert.Equal(t, []int32{0, 0, 4}, mustRun(t, "Relu", 14, nil, x).Data)
	assert.Equal(t, []int32{^int32(-3), ^int32(0), ^int32(4)}, mustRun(t, "BitwiseNot", 18, nil, x).Data)
	s := mustRun(t, "Shrink", 9, []*graph.Attr{graph.FloatAttr("lambd", 1), graph.FloatAttr("bias", 1)}, x)
	assert.Equal(t, []int32{-2, 0, 3}, s.Data)
	_, err := run(t, "Exp", 13, nil, x)
	assert.True(t, errors.Is(err, graph.ErrUnsupportedOp))
}

func TestBitOps(t *testing.T) {
	a := tensorOf(graph.Uint8, []uint8{1, 0x80, 0xff}, 3)
	b := tensorOf(graph.Uint8, []uint8{3, 1, 9}, 3)
	assert.Equal(t, []uint8{8, 0, 0}, mustRun(t, "BitShift", 11, []*graph.Attr{{Name: "direction", Type: graph.AttrString, S: "LEFT"}}, a, b).Data)
	assert.Equal(t, []uint8{0, 0x40, 0}, mustRun(t, "BitShift", 11, []*graph.Attr{{Name: "direction", Type: graph.AttrString, S: "RIGHT"}}, a, b).Data)
	_, err := run(t, "BitShift", 11, nil, a, b)
	assert.ErrorContains(t, err, "direction")
	assert.Equal(t, []uint8{1, 0, 9}, mustRun(t, "BitwiseAnd", 18, nil, a, b).Data)
	assert.Equal(t, []uint8{3, 0x81, 0xff}, mustRun(t, "BitwiseOr", 18, nil, a, b).Data)
	assert.Equal(t, []uint8{2, 0x81, 0xf6}, mustRun(t, "BitwiseXor", 18, nil, a, b).Data)

	p := graph.FromBool([]bool{true, false}, 2, 1)
	q := graph.FromBool([]bool{true, false}, 2)
	assert.Equal(t, []bool{true, false, false, false}, mustRun(t, "And", 7, nil, p, q).Data)
	assert.Equal(t, []bool{true, true, true, false}, mustRun(t, "Or", 7, nil, p, q).Data)
	assert.Equal(t, []bool{false, true, true, false}, mustRun(t, "Xor", 7, nil, p, q).Data)
	assert.Equal(t, []bool{false, true}, mustRun(t, "Not", 1, nil, q).Data)
}

func TestVariadicAndNaN(t *testing.T) {
	nan := float32(math.NaN())
	a := graph.FromFloat32([]float32{1, nan, 3}, 3)
	b := graph.FromFloat32([]float32{2, 0, 1}, 3)
	c := graph.FromFloat32([]float32{0}, 1)
	got := mustRun(t, "Max", 13, nil, a, b, c).Float32s()
	assert.Equal(t, float32(2), got[0])
	assert.True(t, math.IsNaN(float64(got[1])))
	assert.Equal(t, float32(3), got[2])
	assert.Equal(t, []float32{1, 2, 3}, mustRun(t, "Sum", 13, nil, graph.FromFloat32([]float32{1, 2, 3}, 3)).Data)
	mean := mustRun(t, "Mean", 13, nil, graph.FromFloat32([]float32{1, 2}, 2, 1), graph.FromFloat32([]float32{3, 5}, 2))
	assert.Equal(t, []int{2, 2}, mean.Shape)
	assert.Equal(t, []float32{2, 3, 2.5, 3.5}, mean.Data)
	_, err := run(t, "Sum", 13, nil, a, graph.FromFloat64([]float64{1}, 1))
	assert.ErrorContains(t, err, "dtype")
}

func TestLegacyBroadcastAxis(t *testing.T) {
	a := graph.FromFloat32(make([]float32, 2*3*2), 2, 3, 2)
	b := graph.FromFloat32([]float32{1, 2, 3}, 3)
	attrs := []*graph.Attr{graph.IntAttr("broadcast", 1), graph.IntAttr("axis", 1)}
	got := mustRun(t, "Add", 6, attrs, a, b)
	assert.Equal(t, []int{2, 3, 2}, got.Shape)
	assert.Equal(t, []float32{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}, got.Data)
}

func TestPReluAndWhere(t *testing.T) {
	x := graph.FromFloat32([]float32{-1, 2, -3, 4}, 2, 2)
	slope := graph.FromFloat32([]float32{0.5, 0.25}, 2)
	assert.Equal(t, []float32{-0.5, 2, -1.5, 4}, mustRun(t, "PRelu", 16, nil, x, slope).Data)
	_, err := run(t, "PRelu", 16, nil, slope, x)
	assert.ErrorContains(t, err, "does not broadcast")

	// Where moves float16 bits untouched and broadcasts all three inputs.
	cond := graph.FromBool([]bool{true, false}, 2, 1)
	hx := tensorOf(graph.Float16, []uint16{0x3c00, 0x4000, 0x4200}, 3)
	hy := tensorOf(graph.Float16, []uint16{0xbc00}, 1)
	got := mustRun(t, "Where", 16, nil, cond, hx, hy)
	assert.Equal(t, graph.Float16, got.DType)
	assert.Equal(t, []int{2, 3}, got.Shape)
	assert.Equal(t, []uint16{0x3c00, 0x4000, 0x4200, 0xbc00, 0xbc00, 0xbc00}, got.Data)
	_, err = run(t, "Where", 16, nil, hx, hx, hy)
	assert.ErrorContains(t, err, "condition")
}

func TestIsInfIsNaN(t *testing.T) {
	x := graph.FromFloat32([]float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1}, 4)
	assert.Equal(t, []bool{true, true, false, false}, mustRun(t, "IsInf", 10, nil, x).Data)
	assert.Equal(t, []bool{false, true, false, false}, mustRun(t, "IsInf", 10, []*graph.Attr{graph.IntAttr("detect_positive", 0)}, x).Data)
	assert.Equal(t, []bool{false, false, true, false}, mustRun(t, "IsNaN", 13, nil, x).Data)
}

func TestBadInputs(t *testing.T) {
	_, err := run(t, "Add", 14, nil, graph.FromFloat32([]float32{1}, 1))
	assert.ErrorContains(t, err, "needs 2 inputs")
	_, err = run(t, "Add", 14, nil, graph.FromFloat32([]float32{1, 2}, 3), graph.FromFloat32([]float32{1}, 1))
	assert.ErrorContains(t, err, "holds 2 elements")
	_, err = run(t, "Add", 14, nil, graph.FromFloat32([]float32{1}, 1), graph.FromInt64([]int64{1}, 1))
	assert.ErrorContains(t, err, "dtypes")
}

func BenchmarkAddFloat32(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name string
		x, y []int
	}{
		{"same", []int{1 << 20}, []int{1 << 20}},
		{"scalar", []int{1 << 20}, nil},
		{"bias_nchw", []int{16, 64, 32, 32}, []int{64, 1, 1}},
		{"bias_rows", []int{4096, 256}, []int{256}},
	} {
		x, y := randTensor(r, c.x), randTensor(r, c.y)
		b.Run(c.name, func(b *testing.B) {
			spec, _ := kern.Lookup("", "Add", 17)
			n := &graph.Node{OpType: "Add"}
			ctx := &kern.Context{Opset: 17}
			b.SetBytes(int64(4 * x.Size()))
			for b.Loop() {
				if _, err := spec.Fn(ctx, n, []*graph.Tensor{x, y}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRowRangesMatchFullWalk checks that walking rows in pieces (as the
// parallel paths do) visits the same offsets as one walk.
func TestRowRangesMatchFullWalk(t *testing.T) {
	n := &graph.Node{OpType: "Where"}
	p, err := newPlan(n, []int{3, 1, 4, 1}, []int{2, 1, 5}, []int{1})
	require.NoError(t, err)
	type row struct{ out, a, b, c int }
	var full []row
	p.eachRow(func(o int, offs []int) { full = append(full, row{o, offs[0], offs[1], offs[2]}) })
	require.Len(t, full, p.rows())
	for _, split := range []int{1, 2, 5, 7} {
		var pieces []row
		for lo := 0; lo < p.rows(); lo += split {
			p.eachRowIn(lo, min(lo+split, p.rows()), func(o int, offs []int) {
				pieces = append(pieces, row{o, offs[0], offs[1], offs[2]})
			})
		}
		assert.Equal(t, full, pieces, "split %d", split)
	}
}

// TestLargeBroadcastParallel runs shapes big enough to be split across
// goroutines and checks them against the reference.
func TestLargeBroadcastParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range [][2][]int{{{64, 33, 40}, {33, 1}}, {{300000}, {300000}}, {{300000}, {1}}, {{1, 70000}, {3, 1}}} {
		a, b := randTensor(r, s[0]), randTensor(r, s[1])
		got := mustRun(t, "Sub", 14, nil, a, b)
		assert.Equal(t, referenceBinary(t, "Sub", a, b).Data, got.Data)
	}
	x := randTensor(r, []int{200000})
	got := mustRun(t, "Tanh", 13, nil, x).Float32s()
	for i, v := range x.Float32s() {
		if float32(math.Tanh(float64(v))) != got[i] {
			t.Fatalf("Tanh element %d: got %v want %v", i, got[i], math.Tanh(float64(v)))
		}
	}
}
