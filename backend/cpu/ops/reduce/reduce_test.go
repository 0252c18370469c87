package reduce

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// run calls the registered kernel of op at opset on inputs.
func run(t *testing.T, opset int64, n *graph.Node, in ...*graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup("", n.OpType, opset)
	require.True(t, ok, "no kernel for %s", n.OpType)
	if n.Outputs == nil {
		n.Outputs = []string{"y"}
	}
	ctx := &kern.Context{Opset: opset, Rand: rand.New(rand.NewPCG(1, 2))}
	return spec.Fn(ctx, n, in)
}

// mustRun is run that requires success.
func mustRun(t *testing.T, opset int64, n *graph.Node, in ...*graph.Tensor) []*graph.Tensor {
	t.Helper()
	out, err := run(t, opset, n, in...)
	require.NoError(t, err)
	return out
}

func node(op string, attrs ...*graph.Attr) *graph.Node {
	n := &graph.Node{OpType: op, Name: "n"}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	return n
}

// iota32 is 0, 1, ..., n-1 as float32.
func iota32(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(i)
	}
	return s
}

func TestReduceSumOverNonContiguousAxes(t *testing.T) {
	// x[i,j,k] = 12i + 4j + k over shape (2, 3, 4); sum over axes 0 and 2.
	x := graph.FromFloat32(iota32(24), 2, 3, 4)
	out := mustRun(t, 13, node("ReduceSum", graph.IntsAttr("keepdims", 0)), x, graph.FromInt64([]int64{0, -1}, 2))
	require.Equal(t, []int{3}, out[0].Shape)
	// Σ_i Σ_k (12i + 4j + k) = 8·(4j) + 4·12 + 2·6 = 32j + 60.
	assert.Equal(t, []float32{60, 92, 124}, out[0].Float32s())
}

func TestReduceAxesAttributeBeforeOpset18(t *testing.T) {
	x := graph.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	out := mustRun(t, 13, node("ReduceMean", graph.IntsAttr("axes", 1)), x)
	assert.Equal(t, []int{2, 1}, out[0].Shape)
	assert.Equal(t, []float32{2, 5}, out[0].Float32s())
}

func TestReduceNoopWithEmptyAxesAppliesElementwiseSteps(t *testing.T) {
	x := graph.FromFloat32([]float32{-1, 2, -3}, 3)
	out := mustRun(t, 18, node("ReduceSumSquare", graph.IntAttr("noop_with_empty_axes", 1)), x)
	assert.Equal(t, []float32{1, 4, 9}, out[0].Float32s())
	out = mustRun(t, 18, node("ReduceL1", graph.IntAttr("noop_with_empty_axes", 1)), x, graph.FromInt64(nil, 0))
	assert.Equal(t, []float32{1, 2, 3}, out[0].Float32s())
}

func TestReduceOverEmptySet(t *testing.T) {
	x := graph.Zeros(graph.Float32, 2, 0)
	axes := graph.FromInt64([]int64{1}, 1)
	want := map[string]float32{
		"ReduceSum": 0, "ReduceProd": 1, "ReduceSumSquare": 0, "ReduceL2": 0,
		"ReduceMax": float32(math.Inf(-1)), "ReduceMin": float32(math.Inf(1)),
		"ReduceLogSumExp": float32(math.Inf(-1)), "ReduceLogSum": float32(math.Inf(-1)),
	}
	for op, w := range want {
		out := mustRun(t, 18, node(op, graph.IntAttr("keepdims", 0)), x, axes)
		assert.Equal(t, []float32{w, w}, out[0].Float32s(), op)
	}
	out := mustRun(t, 18, node("ReduceMax"), graph.Zeros(graph.Int32, 0), nil)
	assert.Equal(t, []int32{math.MinInt32}, out[0].Data)
}

func TestReduceIntsAndBools(t *testing.T) {
	x := &graph.Tensor{DType: graph.Int64, Shape: []int{2, 2}, Data: []int64{1 << 60, 3, 1 << 60, -5}}
	out := mustRun(t, 13, node("ReduceSum", graph.IntAttr("keepdims", 0)), x, graph.FromInt64([]int64{0}, 1))
	assert.Equal(t, []int64{1 << 61, -2}, out[0].Int64s(), "int64 sums must be exact")
	b := graph.FromBool([]bool{true, false, false, false}, 2, 2)
	out = mustRun(t, 20, node("ReduceMax", graph.IntAttr("keepdims", 0)), b, graph.FromInt64([]int64{1}, 1))
	assert.Equal(t, []bool{true, false}, out[0].Bools())
	out = mustRun(t, 20, node("ReduceMin", graph.IntAttr("keepdims", 0)), b, graph.FromInt64([]int64{1}, 1))
	assert.Equal(t, []bool{false, false}, out[0].Bools())
}

func TestReduceMaxPropagatesNaN(t *testing.T) {
	nan := float32(math.NaN())
	x := graph.FromFloat32([]float32{1, nan, 3, 2, 5, 4}, 3, 2)
	out := mustRun(t, 13, node("ReduceMax", graph.IntsAttr("axes", 0), graph.IntAttr("keepdims", 0)), x)
	got := out[0].Float32s()
	assert.Equal(t, float32(5), got[0])
	assert.True(t, math.IsNaN(float64(got[1])))
}

func TestReduceBadAxes(t *testing.T) {
	x := graph.FromFloat32(iota32(6), 2, 3)
	_, err := run(t, 13, node("ReduceSum"), x, graph.FromInt64([]int64{1, -1}, 2))
	assert.ErrorContains(t, err, "more than once")
	_, err = run(t, 13, node("ReduceMean", graph.IntsAttr("axes", 2)), x)
	assert.ErrorContains(t, err, "out of range")
}

func TestArgMaxNaNAndLastIndex(t *testing.T) {
	nan := float32(math.NaN())
	x := graph.FromFloat32([]float32{1, 3, 3, 2, nan, 0}, 2, 3)
	out := mustRun(t, 13, node("ArgMax", graph.IntAttr("axis", 1), graph.IntAttr("keepdims", 0)), x)
	assert.Equal(t, []int64{1, 1}, out[0].Int64s())
	out = mustRun(t, 13, node("ArgMax", graph.IntAttr("axis", 1), graph.IntAttr("select_last_index", 1)), x)
	assert.Equal(t, []int{2, 1}, out[0].Shape)
	assert.Equal(t, []int64{2, 1}, out[0].Int64s())
	out = mustRun(t, 13, node("ArgMin", graph.IntAttr("axis", 0)), x)
	assert.Equal(t, []int64{0, 1, 1}, out[0].Int64s())
}

func TestCumSumIntReverseExclusive(t *testing.T) {
	x := &graph.Tensor{DType: graph.Int32, Shape: []int{2, 3}, Data: []int32{1, 2, 3, 4, 5, 6}}
	axis := &graph.Tensor{DType: graph.Int32, Shape: []int{}, Data: []int32{1}}
	out := mustRun(t, 14, node("CumSum", graph.IntAttr("reverse", 1), graph.IntAttr("exclusive", 1)), x, axis)
	assert.Equal(t, []int32{5, 3, 0, 11, 6, 0}, out[0].Data)
	out = mustRun(t, 14, node("CumSum"), x, graph.FromInt64([]int64{0}))
	assert.Equal(t, []int32{1, 2, 3, 5, 7, 9}, out[0].Data)
}

func TestSoftmaxAxisSemanticsByOpset(t *testing.T) {
	x := graph.FromFloat32([]float32{0, 0, 0, 0}, 2, 2)
	// Opset 11 coerces (2, 2) at axis 0 into one row of 4.
	out := mustRun(t, 11, node("Softmax", graph.IntAttr("axis", 0)), x)
	assert.InDeltaSlice(t, []float32{0.25, 0.25, 0.25, 0.25}, out[0].Float32s(), 1e-6)
	// Opset 13 normalises along axis 0 alone.
	out = mustRun(t, 13, node("Softmax", graph.IntAttr("axis", 0)), x)
	assert.InDeltaSlice(t, []float32{0.5, 0.5, 0.5, 0.5}, out[0].Float32s(), 1e-6)
	// Hardmax picks the first maximum.
	h := mustRun(t, 13, node("Hardmax"), graph.FromFloat32([]float32{1, 3, 3, 2}, 1, 4))
	assert.Equal(t, []float32{0, 1, 0, 0}, h[0].Float32s())
}

func TestLogSoftmaxLargeValuesStayFinite(t *testing.T) {
	x := graph.FromFloat32([]float32{1000, 1001, 1002}, 3)
	out := mustRun(t, 13, node("LogSoftmax"), x)
	want := []float64{-2.40760596, -1.40760596, -0.40760596}
	for i, w := range want {
		assert.InDelta(t, w, float64(out[0].Float32s()[i]), 1e-5)
	}
}

func TestTopKTiesNaNAndLargeK(t *testing.T) {
	nan := float32(math.NaN())
	x := graph.FromFloat32([]float32{2, nan, 5, 5, 1, 2}, 6)
	out := mustRun(t, 11, node("TopK"), x, graph.FromInt64([]int64{3}, 1))
	v := out[0].Float32s()
	assert.True(t, math.IsNaN(float64(v[0])))
	assert.Equal(t, []float32{5, 5}, v[1:])
	assert.Equal(t, []int64{1, 2, 3}, out[1].Int64s())
	out = mustRun(t, 11, node("TopK", graph.IntAttr("largest", 0)), x, graph.FromInt64([]int64{2}, 1))
	assert.Equal(t, []float32{1, 2}, out[0].Float32s())
	assert.Equal(t, []int64{4, 0}, out[1].Int64s())

	// k above the insertion-sort threshold, along axis 0 of a (20, 2) input.
	data := make([]float32, 40)
	for i := range data {
		data[i] = float32((i * 7) % 20)
	}
	y := graph.FromFloat32(data, 20, 2)
	out = mustRun(t, 1, node("TopK", graph.IntAttr("axis", 0), graph.IntAttr("k", 12)), y)
	require.Equal(t, []int{12, 2}, out[0].Shape)
	vals, idx := out[0].Float32s(), out[1].Int64s()
	for j := 0; j < 12; j++ {
		for c := 0; c < 2; c++ {
			assert.Equal(t, data[int(idx[j*2+c])*2+c], vals[j*2+c])
			if j > 0 {
				assert.GreaterOrEqual(t, vals[(j-1)*2+c], vals[j*2+c])
			}
		}
	}
	_, err := run(t, 11, node("TopK"), x, graph.FromInt64([]int64{7}, 1))
	assert.ErrorContains(t, err, "out of range")
}

func TestBatchNormOldOpsetTrainingOutputs(t *testing.T) {
	// N=2, C=1, two elements each: batch mean 2.5, population variance 1.25.
	x := graph.FromFloat32([]float32{1, 2, 3, 4}, 2, 1, 2)
	one := graph.FromFloat32([]float32{1}, 1)
	zero := graph.FromFloat32([]float32{0}, 1)
	n := node("BatchNormalization", graph.FloatAttr("epsilon", 0), graph.FloatAttr("momentum", 0.5))
	n.Outputs = []string{"y", "mean", "var", "saved_mean", "saved_var"}
	out := mustRun(t, 9, n, x, one, zero, zero, one)
	require.Len(t, out, 5)
	s := 1 / math.Sqrt(1.25)
	assert.InDeltaSlice(t, []float32{float32(-1.5 * s), float32(-0.5 * s), float32(0.5 * s), float32(1.5 * s)}, out[0].Float32s(), 1e-6)
	assert.InDeltaSlice(t, []float32{1.25}, out[1].Float32s(), 1e-6)  // 0·0.5 + 2.5·0.5
	assert.InDeltaSlice(t, []float32{1.125}, out[2].Float32s(), 1e-6) // 1·0.5 + 1.25·0.5
	assert.InDeltaSlice(t, []float32{2.5}, out[3].Float32s(), 1e-6)
	assert.InDeltaSlice(t, []float32{1.25}, out[4].Float32s(), 1e-6)
}

func TestBatchNormPerActivationParams(t *testing.T) {
	// spatial=0 (opset 7): one parameter per (C, D) element.
	x := graph.FromFloat32([]float32{1, 2, 3, 4}, 1, 2, 2)
	scale := graph.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	zero := graph.FromFloat32([]float32{0, 0, 0, 0}, 2, 2)
	ones := graph.FromFloat32([]float32{1, 1, 1, 1}, 2, 2)
	out := mustRun(t, 7, node("BatchNormalization", graph.IntAttr("spatial", 0), graph.FloatAttr("epsilon", 0)), x, scale, zero, zero, ones)
	assert.Equal(t, []float32{1, 4, 9, 16}, out[0].Float32s())
}

func TestLayerNormHalfKeepsStatsInStashType(t *testing.T) {
	vals := []float32{1, 2, 3, 4}
	half := make([]uint16, len(vals))
	for i, v := range vals {
		half[i] = graph.Float32ToFloat16(v)
	}
	x := &graph.Tensor{DType: graph.Float16, Shape: []int{2, 2}, Data: half}
	scale := &graph.Tensor{DType: graph.Float16, Shape: []int{2}, Data: []uint16{graph.Float32ToFloat16(1), graph.Float32ToFloat16(2)}}
	n := node("LayerNormalization", graph.FloatAttr("epsilon", 0))
	n.Outputs = []string{"y", "mean", "inv_std"}
	out := mustRun(t, 17, n, x, scale)
	require.Len(t, out, 3)
	assert.Equal(t, graph.Float16, out[0].DType)
	assert.Equal(t, []float32{-1, 2, -1, 2}, []float32{
		graph.Float16ToFloat32(out[0].Data.([]uint16)[0]), graph.Float16ToFloat32(out[0].Data.([]uint16)[1]),
		graph.Float16ToFloat32(out[0].Data.([]uint16)[2]), graph.Float16ToFloat32(out[0].Data.([]uint16)[3]),
	})
	assert.Equal(t, graph.Float32, out[1].DType)
	assert.Equal(t, []int{2, 1}, out[1].Shape)
	assert.Equal(t, []float32{1.5, 3.5}, out[1].Float32s())
	assert.Equal(t, []float32{2, 2}, out[2].Float32s())
}

func TestGroupNormalization(t *testing.T) {
	// N=1, C=4, two groups of two channels with one element each.
	x := graph.FromFloat32([]float32{1, 3, 10, 20}, 1, 4, 1)
	// Opset 18: scale and bias per group.
	out := mustRun(t, 18, node("GroupNormalization", graph.IntAttr("num_groups", 2), graph.FloatAttr("epsilon", 0)),
		x, graph.FromFloat32([]float32{1, 2}, 2), graph.FromFloat32([]float32{0, 1}, 2))
	assert.InDeltaSlice(t, []float32{-1, 1, -1, 3}, out[0].Float32s(), 1e-6)
	// Opset 21: per channel.
	out = mustRun(t, 21, node("GroupNormalization", graph.IntAttr("num_groups", 2), graph.FloatAttr("epsilon", 0)),
		x, graph.FromFloat32([]float32{1, 2, 3, 4}, 4), graph.FromFloat32([]float32{0, 0, 0, 1}, 4))
	assert.InDeltaSlice(t, []float32{-1, 2, -3, 5}, out[0].Float32s(), 1e-6)
	_, err := run(t, 18, node("GroupNormalization", graph.IntAttr("num_groups", 3)), x, graph.FromFloat32([]float32{1, 2, 3}, 3), graph.FromFloat32([]float32{0, 0, 0}, 3))
	assert.ErrorContains(t, err, "divide")
}

func TestLpNormalization(t *testing.T) {
	x := graph.FromFloat32([]float32{3, 4, 0, 0, -1, 1}, 3, 2)
	out := mustRun(t, 1, node("LpNormalization"), x)
	assert.InDeltaSlice(t, []float32{0.6, 0.8, 0, 0, float32(-math.Sqrt2 / 2), float32(math.Sqrt2 / 2)}, out[0].Float32s(), 1e-6)
	out = mustRun(t, 1, node("LpNormalization", graph.IntAttr("p", 1), graph.IntAttr("axis", 0)), x)
	assert.InDeltaSlice(t, []float32{0.75, 0.8, 0, 0, -0.25, 0.2}, out[0].Float32s(), 1e-6)
}

func TestNLLLossIgnoredAndWeighted(t *testing.T) {
	x := graph.FromFloat32([]float32{-1, -2, -3, -4, -5, -6}, 3, 2)
	target := graph.FromInt64([]int64{0, 1, 1}, 3)
	w := graph.FromFloat32([]float32{2, 1}, 2)
	out := mustRun(t, 13, node("NegativeLogLikelihoodLoss", graph.IntAttr("ignore_index", 0)), x, target, w)
	// Losses 0 (ignored), 4, 6 with weights 0, 1, 1: mean = 10 / 2.
	assert.Equal(t, []float32{5}, out[0].Float32s())
	_, err := run(t, 13, node("NegativeLogLikelihoodLoss"), x, graph.FromInt64([]int64{0, 2, 1}, 3))
	assert.ErrorContains(t, err, "out of range")
}

func TestDropoutModes(t *testing.T) {
	x := graph.FromFloat32(iota32(1000), 1000)
	n := node("Dropout")
	n.Outputs = []string{"y", "mask"}
	// Inference: identity and an all-true mask.
	out := mustRun(t, 13, n, x)
	assert.Equal(t, x.Float32s(), out[0].Float32s())
	for _, m := range out[1].Bools() {
		require.True(t, m)
	}
	// Opset 9: the mask has the input's dtype.
	out = mustRun(t, 9, n, x)
	assert.Equal(t, graph.Float32, out[1].DType)
	// Training: kept elements are scaled by 1/(1-ratio), about ratio dropped.
	out = mustRun(t, 13, n, x, graph.FromFloat32([]float32{0.25}), graph.FromBool([]bool{true}))
	dropped := 0
	for i, keep := range out[1].Bools() {
		if keep {
			assert.InDelta(t, float32(i)/0.75, out[0].Float32s()[i], 1e-3)
		} else {
			dropped++
			assert.Zero(t, out[0].Float32s()[i])
		}
	}
	assert.InDelta(t, 250, dropped, 60)
	_, err := run(t, 13, n, x, graph.FromFloat32([]float32{1}), graph.FromBool([]bool{true}))
	assert.ErrorContains(t, err, "ratio")
}

func TestReduceLayoutMergesAndPermutes(t *testing.T) {
	perm, b := reduceLayout([]int{2, 1, 3, 4}, []bool{false, true, true, false})
	assert.Nil(t, perm)
	assert.Equal(t, blocks{outer: 2, r: 3, inner: 4}, b)
	perm, b = reduceLayout([]int{2, 3, 4, 5}, []bool{true, false, true, true})
	assert.Equal(t, []int{1, 0, 2, 3}, perm)
	assert.Equal(t, blocks{outer: 3, r: 40, inner: 1}, b)
}

func TestExp32MatchesMathExpToFloat32Precision(t *testing.T) {
	for x := -87.0; x < 88.7; x += 0.00731 {
		want := math.Exp(x)
		assert.InEpsilon(t, want, exp32(x), 1e-11, "x = %g", x)
	}
	assert.Equal(t, 0.0, exp32(math.Inf(-1)))
	assert.True(t, math.IsInf(exp32(100), 1))
	assert.True(t, math.IsNaN(exp32(math.NaN())))
}

// TestSumAroundMiddleIsTheGeneralPath: ReduceSum and ReduceMean over the
// batch and spatial axes of an NCHW tensor (a convolution's bias gradient)
// take the in-place path, whose values equal the general path's (a
// permuted copy reduced in its order) to the bit, with a size-1 axis in
// the middle and float32 and float64 data of mixed magnitudes.
func TestSumAroundMiddleIsTheGeneralPath(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	for _, shape := range [][]int{{8, 6, 5, 7}, {3, 16, 1, 9, 4}, {2, 3, 2}} {
		size := 1
		for _, d := range shape {
			size *= d
		}
		axes := []int64{0}
		for a := 2; a < len(shape); a++ {
			axes = append(axes, int64(a))
		}
		reduced := make([]bool, len(shape))
		for _, a := range axes {
			reduced[a] = true
		}
		m := middleOf(shape, reduced)
		require.Greater(t, m.keep, 0, "shape %v takes the in-place path", shape)
		for _, op := range []string{"ReduceSum", "ReduceMean"} {
			x32 := make([]float32, size)
			for i := range x32 {
				x32[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(7)-3)))
			}
			x := graph.FromFloat32(x32, shape...)
			got := mustRun(t, 13, node(op, graph.IntsAttr("axes", axes...)), x)[0]
			perm, b := reduceLayout(shape, reduced)
			want := make([]float32, b.outer*b.inner)
			st := &reduceState{perm: perm}
			rop := map[string]reduceOp{"ReduceSum": opSum, "ReduceMean": opMean}[op]
			reduceNumbers[float32, float64](rop, permuted(st, x32, shape), want, b)
			require.Len(t, got.Float32s(), len(want))
			for i := range want {
				assert.Equal(t, math.Float32bits(want[i]), math.Float32bits(got.Float32s()[i]), "%s %v [%d]: %g vs %g", op, shape, i, got.Float32s()[i], want[i])
			}
			x64 := graph.Zeros(graph.Float64, shape...)
			for i := range x32 {
				x64.Float64s()[i] = float64(x32[i]) * 1.000001
			}
			got64 := mustRun(t, 13, node(op, graph.IntsAttr("axes", axes...)), x64)[0]
			want64 := make([]float64, b.outer*b.inner)
			reduceNumbers[float64, float64](rop, permuted(&reduceState{perm: perm}, x64.Float64s(), shape), want64, b)
			assert.Equal(t, want64, got64.Float64s(), "%s %v float64", op, shape)
		}
	}
}
