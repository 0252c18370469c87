package control

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// naiveDFT is the definition: sum_j x[j] e^{-2πi jk/n}.
func naiveDFT(re, im []float64) ([]float64, []float64) {
	n := len(re)
	or, oi := make([]float64, n), make([]float64, n)
	for k := 0; k < n; k++ {
		for j := 0; j < n; j++ {
			s, c := math.Sincos(-2 * math.Pi * float64(j*k) / float64(n))
			or[k] += re[j]*c - im[j]*s
			oi[k] += re[j]*s + im[j]*c
		}
	}
	return or, oi
}

func TestFFTPlanMatchesDefinition(t *testing.T) {
	for _, n := range []int{1, 2, 5, 8, 12, 64} {
		re, im := make([]float64, n), make([]float64, n)
		for i := range re {
			re[i] = math.Sin(float64(i)*1.3) + 0.5
			im[i] = math.Cos(float64(i) * 0.7)
		}
		wr, wi := naiveDFT(re, im)
		newFFTPlan(n).transform(re, im, false)
		assert.InDeltaSlice(t, wr, re, 1e-9, "n=%d", n)
		assert.InDeltaSlice(t, wi, im, 1e-9, "n=%d", n)
	}
}

func TestDFTOnesidedAndInverseRoundTrip(t *testing.T) {
	// A real signal of 6 samples: RFFT gives 4 bins; IRFFT gives it back.
	x := graph.FromFloat32([]float32{1, -2, 3, 0.5, 4, -1}, 1, 6, 1)
	fwd := node("DFT", []string{"x"}, []string{"y"}, graph.IntAttr("onesided", 1))
	spec := mustRun(t, 17, fwd, x)[0]
	require.Equal(t, []int{1, 4, 2}, spec.Shape)
	wr, wi := naiveDFT([]float64{1, -2, 3, 0.5, 4, -1}, make([]float64, 6))
	for k := 0; k < 4; k++ {
		assert.InDelta(t, wr[k], spec.Float(2*k), 1e-5)
		assert.InDelta(t, wi[k], spec.Float(2*k+1), 1e-5)
	}
	inv := node("DFT", []string{"x"}, []string{"y"}, graph.IntAttr("onesided", 1), graph.IntAttr("inverse", 1))
	back := mustRun(t, 17, inv, spec)[0]
	require.Equal(t, []int{1, 6, 1}, back.Shape, "IRFFT defaults to dft_length 2*(bins-1)")
	for i, v := range []float64{1, -2, 3, 0.5, 4, -1} {
		assert.InDelta(t, v, back.Float(i), 1e-5)
	}
}

func TestDFTOpset20AxisInputAndPadding(t *testing.T) {
	// [2,3,1]: transform axis 0 (length 2) zero padded to 4.
	x := graph.FromFloat64([]float64{1, 2, 3, 4, 5, 6}, 2, 3, 1)
	out := mustRun(t, 20, node("DFT", []string{"x", "len", "axis"}, []string{"y"}), x, scalarI64(4), scalarI64(0))[0]
	require.Equal(t, []int{4, 3, 2}, out.Shape)
	require.Equal(t, graph.Float64, out.DType)
	// Column 0 is [1, 4, 0, 0]: its DFT is [5, 1-4i, -3, 1+4i].
	want := []float64{5, 0, 1, -4, -3, 0, 1, 4}
	for k := 0; k < 4; k++ {
		assert.InDelta(t, want[2*k], out.Float((k*3)*2), 1e-12)
		assert.InDelta(t, want[2*k+1], out.Float((k*3)*2+1), 1e-12)
	}
	_, err := run(t, 20, node("DFT", []string{"x", "", "axis"}, []string{"y"}), nil, x, nil, scalarI64(2))
	assert.ErrorContains(t, err, "axis is out of range")
}

func TestSTFTComplexTwoSided(t *testing.T) {
	sig := graph.FromFloat32([]float32{1, 0, 0, 1, -1, 0, 0, -1, 2, 2}, 1, 5, 2)
	out := mustRun(t, 17, node("STFT", []string{"s", "step", "", "len"}, []string{"y"}, graph.IntAttr("onesided", 0)),
		sig, scalarI64(2), nil, scalarI64(2))[0]
	require.Equal(t, []int{1, 2, 2, 2}, out.Shape)
	// Frame 0 is [1, i]: bins [1+i, 1-i]; frame 1 is [-1, -i]: bins [-1-i, -1+i].
	assert.InDeltaSlice(t, []float32{1, 1, 1, -1, -1, -1, -1, 1}, out.Data, 1e-6)

	_, err := run(t, 17, node("STFT", []string{"s", "step"}, []string{"y"}), nil, sig, scalarI64(2))
	assert.ErrorContains(t, err, "window or a positive frame_length")
}

func TestWindowsDTypeAndEdgeSizes(t *testing.T) {
	n := node("HannWindow", []string{"size"}, []string{"y"}, graph.IntAttr("output_datatype", int64(graph.Float64)), graph.IntAttr("periodic", 0))
	out := mustRun(t, 17, n, scalarI64(5))[0]
	assert.Equal(t, graph.Float64, out.DType)
	assert.InDeltaSlice(t, []float64{0, 0.5, 1, 0.5, 0}, out.Data, 1e-12)

	out = mustRun(t, 17, n, scalarI64(1))[0]
	assert.Equal(t, []float64{1}, out.Data)

	b := node("BlackmanWindow", []string{"size"}, []string{"y"})
	out = mustRun(t, 17, b, scalarI64(4))[0]
	assert.Equal(t, graph.Float32, out.DType)
	assert.InDeltaSlice(t, []float32{0, 0.34, 1, 0.34}, out.Data, 1e-6)
}

func TestMelWeightMatrixShape(t *testing.T) {
	i32 := func(v int32) *graph.Tensor {
		return &graph.Tensor{DType: graph.Int32, Shape: []int{}, Data: []int32{v}}
	}
	out := mustRun(t, 17, node("MelWeightMatrix", []string{"a", "b", "c", "d", "e"}, []string{"y"}),
		i32(4), i32(32), i32(16000), graph.Scalar(graph.Float32, 0), graph.Scalar(graph.Float32, 8000))[0]
	assert.Equal(t, []int{17, 4}, out.Shape)
	for _, v := range out.Float32s() {
		assert.True(t, v >= 0 && v <= 1, "weights lie in [0, 1]")
	}
}
