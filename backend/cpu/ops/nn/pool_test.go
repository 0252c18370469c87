package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// seq returns 1, 2, ..., n as float32.
func seq(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i + 1)
	}
	return v
}

// TestAveragePoolDilations is the spec's averagepool_2d_dilations example
// (opset 19).
func TestAveragePoolDilations(t *testing.T) {
	n := testNode("AveragePool", 1, aInts("kernel_shape", 2, 2), aInts("strides", 1, 1),
		aInts("dilations", 2, 2), aInt("ceil_mode", 1))
	y := mustRun(t, 19, n, f32([]int{1, 1, 4, 4}, seq(16)...))[0]
	assert.Equal(t, []int{1, 1, 2, 2}, y.Shape)
	assertClose(t, []float64{6, 7, 10, 11}, y, 0)
}

// TestAveragePoolCountIncludePadCeil checks that the divisor counts pads
// but not the part of a ceil-mode window past the end padding.
func TestAveragePoolCountIncludePadCeil(t *testing.T) {
	n := testNode("AveragePool", 1, aInts("kernel_shape", 3), aInts("strides", 2),
		aInts("pads", 1, 1), aInt("ceil_mode", 1), aInt("count_include_pad", 1))
	// Input 1..6 padded to [0 1 2 3 4 5 6 0]: windows start at -1, 1, 3, 5.
	y := mustRun(t, 19, n, f32([]int{1, 1, 6}, seq(6)...))[0]
	assert.Equal(t, []int{1, 1, 4}, y.Shape)
	// The last window [5, 7) covers 6 and the end pad: two taps.
	assertClose(t, []float64{1, 3, 5, 3}, y, 1e-6)
}

// TestLpPool is the spec's lppool_2d_dilations example, plus p given as a
// float attribute (opset 1) and p = 1.
func TestLpPool(t *testing.T) {
	n := testNode("LpPool", 1, aInts("kernel_shape", 2, 2), aInts("strides", 1, 1),
		aInts("dilations", 2, 2), aInt("p", 2))
	y := mustRun(t, 18, n, f32([]int{1, 1, 4, 4}, seq(16)...))[0]
	assertClose(t, []float64{14.560219778561036, 16.24807680927192, 21.633307652783937, 23.49468024894146}, y, 1e-6)

	n = testNode("LpPool", 1, aInts("kernel_shape", 2), aFloat("p", 1))
	y = mustRun(t, 1, n, f32([]int{1, 1, 3}, -1, 2, -3))[0]
	assertClose(t, []float64{3, 5}, y, 1e-6)

	n = testNode("LpPool", 1, aInts("kernel_shape", 2), aInt("p", 3))
	y = mustRun(t, 18, n, f32([]int{1, 1, 2}, 1, 2))[0]
	assertClose(t, []float64{math.Cbrt(9)}, y, 1e-6)
}

// TestGlobalPools checks the three global pools on one 2x2 plane per channel.
func TestGlobalPools(t *testing.T) {
	x := f32([]int{1, 2, 2, 2}, 3, 4, 0, 0, -1, -2, -3, -4)
	y := mustRun(t, 17, testNode("GlobalLpPool", 1), x)[0]
	assert.Equal(t, []int{1, 2, 1, 1}, y.Shape)
	assertClose(t, []float64{5, math.Sqrt(30)}, y, 1e-6)
	y = mustRun(t, 17, testNode("GlobalMaxPool", 1), x)[0]
	assertClose(t, []float64{4, -1}, y, 0)
	y = mustRun(t, 17, testNode("GlobalAveragePool", 1), x)[0]
	assertClose(t, []float64{1.75, -2.5}, y, 0)
}

// TestMaxPoolStorageOrder checks Indices in row-major and column-major
// order, including the batch and channel offset.
func TestMaxPoolStorageOrder(t *testing.T) {
	// Two channels of 2x3; the second channel's maxima sit elsewhere.
	x := f32([]int{1, 2, 2, 3}, 1, 5, 2, 3, 4, 6, 9, 1, 1, 1, 1, 8)
	n := testNode("MaxPool", 2, aInts("kernel_shape", 2, 2))
	out := mustRun(t, 12, n, x)
	assertClose(t, []float64{5, 6, 9, 8}, out[0], 0)
	assert.Equal(t, []int64{1, 5, 6, 11}, out[1].Int64s())
	n = testNode("MaxPool", 2, aInts("kernel_shape", 2, 2), aInt("storage_order", 1))
	out = mustRun(t, 12, n, x)
	// Column-major within a plane: h + w*H.
	assert.Equal(t, []int64{2, 5, 6, 11}, out[1].Int64s())
}

// TestMaxPoolHighRank pools a tensor with four spatial axes.
func TestMaxPoolHighRank(t *testing.T) {
	v := seq(32)
	v[5] = 100
	n := testNode("MaxPool", 2, aInts("kernel_shape", 2, 2, 2, 2), aInts("strides", 1, 1, 1, 2))
	out := mustRun(t, 12, n, f32([]int{1, 1, 2, 2, 2, 4}, v...))
	assert.Equal(t, []int{1, 1, 1, 1, 1, 2}, out[0].Shape)
	assertClose(t, []float64{100, 32}, out[0], 0)
	assert.Equal(t, []int64{5, 31}, out[1].Int64s())
}

// TestMaxPoolInt8 checks an integer dtype keeps its type.
func TestMaxPoolInt8(t *testing.T) {
	x := &graph.Tensor{DType: graph.Int8, Shape: []int{1, 1, 4}, Data: []int8{-128, -5, 7, -9}}
	y := mustRun(t, 12, testNode("MaxPool", 1, aInts("kernel_shape", 2), aInts("strides", 2)), x)[0]
	assert.Equal(t, []int8{-5, 7}, y.Data)
}

// TestPoolErrors checks that bad attributes give errors.
func TestPoolErrors(t *testing.T) {
	x := f32([]int{1, 1, 4}, 1, 2, 3, 4)
	_, err := runOp(t, 12, testNode("MaxPool", 1), x)
	assert.ErrorContains(t, err, "kernel_shape")
	_, err = runOp(t, 12, testNode("MaxPool", 1, aInts("kernel_shape", 2, 2)), x)
	assert.ErrorContains(t, err, "kernel_shape")
	_, err = runOp(t, 12, testNode("AveragePool", 1, aInts("kernel_shape", 2), aString("auto_pad", "BOGUS")), x)
	assert.ErrorContains(t, err, "auto_pad")
	_, err = runOp(t, 12, testNode("MaxPool", 1, aInts("kernel_shape", 2)), f32([]int{4}, 1, 2, 3, 4))
	assert.ErrorContains(t, err, "rank")
}

// TestMaxUnpool checks the default output shape and an output_shape that
// pads the end of each axis.
func TestMaxUnpool(t *testing.T) {
	x := f32([]int{1, 1, 2, 2}, 5, 6, 7, 8)
	idx := i64([]int{1, 1, 2, 2}, 5, 7, 13, 15)
	n := testNode("MaxUnpool", 1, aInts("kernel_shape", 2, 2), aInts("strides", 2, 2))
	y := mustRun(t, 11, n, x, idx)[0]
	assert.Equal(t, []int{1, 1, 4, 4}, y.Shape)
	assertClose(t, []float64{0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 7, 0, 8}, y, 0)
	_, err := runOp(t, 11, n, x, i64([]int{1, 1, 2, 2}, 5, 7, 13, 16))
	assert.ErrorContains(t, err, "outside")
}

// TestCol2Im checks the spec's Col2Im examples.
func TestCol2Im(t *testing.T) {
	// col2im: 5x5 image from 1x5 blocks; input[k][l] = 5l + k + 1.
	in := make([]float32, 25)
	for k := 0; k < 5; k++ {
		for l := 0; l < 5; l++ {
			in[k*5+l] = float32(5*l + k + 1)
		}
	}
	in[4*5+1] = 0
	y := mustRun(t, 18, testNode("Col2Im", 1), f32([]int{1, 5, 5}, in...), i64([]int{2}, 5, 5), i64([]int{2}, 1, 5))[0]
	assert.Equal(t, []int{1, 1, 5, 5}, y.Shape)
	want := make([]float64, 25)
	for i := range want {
		want[i] = float64(i + 1)
	}
	want[9] = 0
	assertClose(t, want, y, 0)

	// col2im_dilations.
	in = []float32{1, 5, 9, 13, 17, 2, 6, 10, 14, 18, 3, 7, 11, 15, 19, 4, 8, 12, 16, 20}
	y = mustRun(t, 18, testNode("Col2Im", 1, aInts("dilations", 1, 5)), f32([]int{1, 4, 5}, in...), i64([]int{2}, 6, 6), i64([]int{2}, 2, 2))[0]
	assertClose(t, []float64{
		1, 0, 0, 0, 0, 2,
		8, 0, 0, 0, 0, 10,
		16, 0, 0, 0, 0, 18,
		24, 0, 0, 0, 0, 26,
		32, 0, 0, 0, 0, 34,
		19, 0, 0, 0, 0, 20}, y, 0)

	// col2im_pads: input[k][l] = 5l + k + 1 over 15 blocks.
	in = make([]float32, 75)
	for k := 0; k < 5; k++ {
		for l := 0; l < 15; l++ {
			in[k*15+l] = float32(5*l + k + 1)
		}
	}
	y = mustRun(t, 18, testNode("Col2Im", 1, aInts("pads", 0, 1, 0, 1)), f32([]int{1, 5, 15}, in...), i64([]int{2}, 5, 5), i64([]int{2}, 1, 5))[0]
	assertClose(t, []float64{
		8, 21, 24, 27, 24,
		38, 66, 69, 72, 54,
		68, 111, 114, 117, 84,
		98, 156, 159, 162, 114,
		128, 201, 204, 207, 144}, y, 0)

	// col2im_strides.
	rowsOn := []bool{false, true, true, true, false, false, false, true, false}
	in = make([]float32, 36)
	for k, on := range rowsOn {
		if on {
			for l := 0; l < 4; l++ {
				in[k*4+l] = 1
			}
		}
	}
	y = mustRun(t, 18, testNode("Col2Im", 1, aInts("strides", 2, 2)), f32([]int{1, 9, 4}, in...), i64([]int{2}, 5, 5), i64([]int{2}, 3, 3))[0]
	assertClose(t, []float64{
		0, 1, 1, 1, 1,
		1, 0, 1, 0, 0,
		0, 2, 1, 2, 1,
		1, 0, 1, 0, 0,
		0, 1, 0, 1, 0}, y, 0)

	_, err := runOp(t, 18, testNode("Col2Im", 1), f32([]int{1, 5, 4}, make([]float32, 20)...), i64([]int{2}, 5, 5), i64([]int{2}, 1, 5))
	require.Error(t, err)
	assert.ErrorContains(t, err, "blocks")
}

// TestPoolParallelMatchesSerial runs pools big enough to use several
// goroutines and checks them against windows computed one by one.
func TestPoolParallelMatchesSerial(t *testing.T) {
	shape := []int{4, 32, 20, 20}
	v := make([]float32, prod(shape))
	for i := range v {
		v[i] = float32((i*7919)%1000) / 100
	}
	x := f32(shape, v...)
	maxY := mustRun(t, 12, testNode("MaxPool", 1, aInts("kernel_shape", 3, 3), aInts("pads", 1, 1, 1, 1)), x)[0]
	avgY := mustRun(t, 12, testNode("AveragePool", 1, aInts("kernel_shape", 3, 3), aInts("pads", 1, 1, 1, 1)), x)[0]
	require.Equal(t, shape, maxY.Shape)
	wantMax := make([]float64, len(v))
	wantAvg := make([]float64, len(v))
	forEachIndex(shape, func(idx []int) {
		best, sum, cnt := math.Inf(-1), 0.0, 0
		for dy := -1; dy <= 1; dy++ {
			for dx := -1; dx <= 1; dx++ {
				h, w := idx[2]+dy, idx[3]+dx
				if h < 0 || h >= shape[2] || w < 0 || w >= shape[3] {
					continue
				}
				xv := float64(v[flatIndex(shape, []int{idx[0], idx[1], h, w})])
				best = math.Max(best, xv)
				sum += xv
				cnt++
			}
		}
		wantMax[flatIndex(shape, idx)] = best
		wantAvg[flatIndex(shape, idx)] = sum / float64(cnt)
	})
	assertClose(t, wantMax, maxY, 0)
	assertClose(t, wantAvg, avgY, 1e-6)
}

// TestMaxPool2DMatchesDefinition checks the 2-D MaxPool path (values and
// row-major Indices) against the definition evaluated directly: the first
// largest tap in row-major order, with ties (values on a coarse grid),
// strides, dilations, asymmetric pads and ceil_mode.
func TestMaxPool2DMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n, c, h, w = 2, 3, 9, 8
	x := make([]float32, n*c*h*w)
	for i := range x {
		x[i] = float32(rng.IntN(5)) // many ties
	}
	for _, tc := range []struct {
		k, s, d, pads []int64
		ceil          int64
	}{
		{[]int64{3, 3}, []int64{2, 2}, []int64{1, 1}, []int64{1, 1, 1, 1}, 0},
		{[]int64{2, 3}, []int64{1, 2}, []int64{2, 1}, []int64{0, 2, 1, 0}, 1},
		{[]int64{3, 2}, []int64{3, 1}, []int64{1, 1}, []int64{2, 0, 0, 1}, 1},
	} {
		node := testNode("MaxPool", 2, aInts("kernel_shape", tc.k...), aInts("strides", tc.s...),
			aInts("dilations", tc.d...), aInts("pads", tc.pads...), aInt("ceil_mode", tc.ceil))
		out := mustRun(t, 12, node, f32([]int{n, c, h, w}, x...))
		y, idx := out[0].Data.([]float32), out[1].Data.([]int64)
		oh, ow := out[0].Shape[2], out[0].Shape[3]
		for p := 0; p < n*c; p++ {
			for r := 0; r < oh; r++ {
				for q := 0; q < ow; q++ {
					best, at := float32(0), -1
					for a := 0; a < int(tc.k[0]); a++ {
						i := r*int(tc.s[0]) - int(tc.pads[0]) + a*int(tc.d[0])
						for b := 0; b < int(tc.k[1]); b++ {
							j := q*int(tc.s[1]) - int(tc.pads[1]) + b*int(tc.d[1])
							if i < 0 || i >= h || j < 0 || j >= w {
								continue
							}
							if v := x[p*h*w+i*w+j]; at < 0 || v > best {
								best, at = v, p*h*w+i*w+j
							}
						}
					}
					o := (p*oh+r)*ow + q
					require.GreaterOrEqual(t, at, 0)
					assert.Equal(t, best, y[o], "plane %d output (%d, %d)", p, r, q)
					assert.Equal(t, int64(at), idx[o], "plane %d output (%d, %d)", p, r, q)
				}
			}
		}
	}
}

// TestGlobalAveragePoolGroups checks the mean of planes summed eight at a
// time (sixteen in the AVX2 gather loop) against each plane's float64 sum
// taken alone, bit for bit: 2×19 channels (two items of sixteen and a
// partial one), 7×7 planes like ResNet-50's last, one plane too few for a
// group, planes of one element and of 36; float64 too.
func TestGlobalAveragePoolGroups(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, shape := range [][]int{{2, 19, 7, 7}, {1, 1, 3, 5}, {3, 8, 1, 1}, {1, 40, 4, 9}} {
		n := shape[0] * shape[1]
		size := shape[2] * shape[3]
		vals := make([]float32, n*size)
		for i := range vals {
			vals[i] = float32(r.NormFloat64()) * 100
		}
		y := mustRun(t, 17, testNode("GlobalAveragePool", 1), &graph.Tensor{DType: graph.Float32, Shape: shape, Data: vals})[0]
		assert.Equal(t, []int{shape[0], shape[1], 1, 1}, y.Shape)
		want := make([]float32, n)
		want64 := make([]float64, n)
		x64 := make([]float64, len(vals))
		for c := range n {
			var s, s64 float64
			for i := range size {
				s += float64(vals[c*size+i])
				x64[c*size+i] = float64(vals[c*size+i]) / 3
				s64 += x64[c*size+i]
			}
			want[c] = float32(s / float64(size))
			want64[c] = s64 / float64(size)
		}
		assert.Equal(t, want, y.Float32s(), "%v", shape)
		y = mustRun(t, 17, testNode("GlobalAveragePool", 1), &graph.Tensor{DType: graph.Float64, Shape: shape, Data: x64})[0]
		assert.Equal(t, want64, y.Float64s(), "%v float64", shape)
	}
}
