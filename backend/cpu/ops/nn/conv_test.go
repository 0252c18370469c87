package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// forEachIndex calls fn with every multi-index of shape, row-major.
func forEachIndex(shape []int, fn func(idx []int)) {
	idx := make([]int, len(shape))
	total := prod(shape)
	for p := 0; p < total; p++ {
		fn(idx)
		for j := len(shape) - 1; j >= 0; j-- {
			idx[j]++
			if idx[j] < shape[j] {
				break
			}
			idx[j] = 0
		}
	}
}

// flatIndex is the row-major offset of idx in shape.
func flatIndex(shape, idx []int) int {
	off := 0
	for j, d := range shape {
		off = off*d + idx[j]
	}
	return off
}

// convGeom is a test convolution's explicit geometry.
type convGeom struct {
	strides, dilations, padBegin []int
}

// refConv is a direct N-D convolution, the definition of Conv.
func refConv(x []float64, xs []int, w []float64, ws []int, b []float64, group int, g convGeom, out []int) []float64 {
	nb, c, m := xs[0], xs[1], ws[0]
	cg, mg := c/group, m/group
	kernel, in := ws[2:], xs[2:]
	ys := concatShape([]int{nb, m}, out)
	y := make([]float64, prod(ys))
	ipos := make([]int, len(in))
	forEachIndex(ys, func(yi []int) {
		n, mm, opos := yi[0], yi[1], yi[2:]
		grp := mm / mg
		sum := 0.0
		if b != nil {
			sum = b[mm]
		}
		for ci := 0; ci < cg; ci++ {
			forEachIndex(kernel, func(k []int) {
				for j := range in {
					ipos[j] = opos[j]*g.strides[j] + k[j]*g.dilations[j] - g.padBegin[j]
					if ipos[j] < 0 || ipos[j] >= in[j] {
						return
					}
				}
				xv := x[flatIndex(xs, append([]int{n, grp*cg + ci}, ipos...))]
				wv := w[flatIndex(ws, append([]int{mm, ci}, k...))]
				sum += xv * wv
			})
		}
		y[flatIndex(ys, yi)] = sum
	})
	return y
}

// refConvTranspose scatters every input value through the kernel, the
// definition of ConvTranspose.
func refConvTranspose(x []float64, xs []int, w []float64, ws []int, b []float64, group int, g convGeom, out []int) []float64 {
	nb, c, mg := xs[0], xs[1], ws[1]
	cg, m := c/group, mg*group
	kernel := ws[2:]
	ys := concatShape([]int{nb, m}, out)
	y := make([]float64, prod(ys))
	opos := make([]int, len(out))
	forEachIndex(xs, func(xi []int) {
		n, ci, ipos := xi[0], xi[1], xi[2:]
		grp := ci / cg
		xv := x[flatIndex(xs, xi)]
		for mm := 0; mm < mg; mm++ {
			forEachIndex(kernel, func(k []int) {
				for j := range out {
					opos[j] = ipos[j]*g.strides[j] + k[j]*g.dilations[j] - g.padBegin[j]
					if opos[j] < 0 || opos[j] >= out[j] {
						return
					}
				}
				wv := w[flatIndex(ws, append([]int{ci, mm}, k...))]
				y[flatIndex(ys, append([]int{n, grp*mg + mm}, opos...))] += xv * wv
			})
		}
	})
	if b != nil {
		plane := prod(out)
		for i := range y {
			y[i] += b[(i/plane)%m]
		}
	}
	return y
}

func toI64(v []int) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

type convCase struct {
	name      string
	x, w      []int
	group     int
	strides   []int
	dilations []int
	pads      []int // begin..., end...
	bias      bool
}

var convCases = []convCase{
	{"1d_groups", []int{2, 4, 11}, []int{6, 2, 3}, 2, []int{2}, []int{1}, []int{1, 2}, true},
	{"2d_general", []int{2, 3, 9, 7}, []int{5, 3, 3, 2}, 1, []int{2, 1}, []int{1, 2}, []int{1, 0, 2, 1}, true},
	{"2d_no_bias", []int{1, 3, 8, 8}, []int{4, 3, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, false},
	{"2d_depthwise", []int{2, 4, 9, 8}, []int{4, 1, 3, 3}, 4, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"2d_depthwise_multiplier", []int{1, 3, 7, 9}, []int{6, 1, 3, 2}, 3, []int{1, 2}, []int{2, 1}, []int{2, 0, 1, 1}, true},
	{"1d_depthwise", []int{2, 3, 12}, []int{3, 1, 4}, 3, []int{3}, []int{1}, []int{2, 1}, false},
	{"2d_pointwise", []int{2, 6, 5, 4}, []int{4, 6, 1, 1}, 1, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	{"2d_pointwise_groups", []int{2, 6, 5, 4}, []int{4, 3, 1, 1}, 2, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	{"2d_1x1_strided", []int{1, 4, 7, 7}, []int{3, 4, 1, 1}, 1, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	{"3d", []int{1, 2, 4, 5, 6}, []int{3, 2, 2, 3, 2}, 1, []int{1, 2, 1}, []int{2, 1, 1}, []int{0, 1, 1, 1, 0, 0}, true},
	{"3d_groups", []int{2, 4, 3, 4, 5}, []int{2, 2, 1, 2, 3}, 2, []int{1, 1, 2}, []int{1, 1, 1}, []int{0, 0, 1, 0, 1, 1}, true},
	// Large enough to run on several goroutines: many small grouped GEMMs,
	// many depthwise planes, and one GEMM with a shared im2col.
	{"parallel_groups", []int{4, 32, 16, 16}, []int{32, 4, 3, 3}, 8, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"parallel_depthwise", []int{4, 32, 16, 16}, []int{32, 1, 3, 3}, 32, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"parallel_im2col", []int{1, 16, 32, 32}, []int{8, 16, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, false},
	// Several images per GEMM (convBatched): all 5 at once with the large
	// budget, tiles of 2, 2 and 1 with budget 1000 (810 column elements per
	// image).
	{"batched_images", []int{5, 3, 6, 5}, []int{4, 3, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, true},
	{"batched_images_no_bias", []int{5, 3, 6, 5}, []int{4, 3, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}, false},
}

// TestConvMatchesDirect checks every Conv path (im2col with and without
// tiling, pointwise, depthwise) in float32 and float64 against refConv.
func TestConvMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, budget := range []int{1 << 19, 1000, 40} {
		for _, tc := range convCases {
			t.Run(fmt.Sprintf("%s/budget%d", tc.name, budget), func(t *testing.T) {
				saved := colBudget
				colBudget = budget
				defer func() { colBudget = saved }()
				r := len(tc.x) - 2
				x, w := randF64(rng, prod(tc.x)), randF64(rng, prod(tc.w))
				var b []float64
				if tc.bias {
					b = randF64(rng, tc.w[0])
				}
				out := make([]int, r)
				for j := 0; j < r; j++ {
					dk := (tc.w[j+2]-1)*tc.dilations[j] + 1
					out[j] = (tc.x[j+2]+tc.pads[j]+tc.pads[j+r]-dk)/tc.strides[j] + 1
				}
				want := refConv(x, tc.x, w, tc.w, b, tc.group, convGeom{tc.strides, tc.dilations, tc.pads[:r]}, out)
				n := testNode("Conv", 1, aInt("group", int64(tc.group)), aInts("strides", toI64(tc.strides)...),
					aInts("dilations", toI64(tc.dilations)...), aInts("pads", toI64(tc.pads)...))
				in64 := []*graph.Tensor{graph.FromFloat64(x, tc.x...), graph.FromFloat64(w, tc.w...)}
				in32 := []*graph.Tensor{f32(tc.x, toF32(x)...), f32(tc.w, toF32(w)...)}
				if b != nil {
					in64 = append(in64, graph.FromFloat64(b, tc.w[0]))
					in32 = append(in32, f32([]int{tc.w[0]}, toF32(b)...))
				}
				y64 := mustRun(t, 17, n, in64...)[0]
				assert.Equal(t, concatShape([]int{tc.x[0], tc.w[0]}, out), y64.Shape)
				assertClose(t, want, y64, 1e-12)
				y32 := mustRun(t, 17, n, in32...)[0]
				assertClose(t, want, y32, 1e-5)
			})
		}
	}
}

// TestImageBatch checks how images are grouped per GEMM.
func TestImageBatch(t *testing.T) {
	saved := colBudget
	defer func() { colBudget = saved }()
	colBudget = 1000
	assert.Equal(t, 2, imageBatch(5, 810), "at most 2 per tile: tiles of 2, 2, 1")
	assert.Equal(t, 1, imageBatch(5, 1500), "one image over half the budget: no batching")
	assert.Equal(t, 1, imageBatch(1, 10), "a single image")
	colBudget = 1 << 19
	// ResNet-18's last stage at 64x64 inputs: ck = 512·9, 2x2 positions.
	assert.Equal(t, 32, imageBatch(32, 512*9*4))
	// Its third stage: ck = 256·9, 4x4 positions, at most 28 per tile.
	assert.Equal(t, 16, imageBatch(32, 256*9*16))
}

// TestConvAutoPad checks SAME_UPPER / SAME_LOWER padding placement on an
// odd total pad, and VALID.
func TestConvAutoPad(t *testing.T) {
	x := f32([]int{1, 1, 4}, 1, 2, 3, 4)
	w := f32([]int{1, 1, 2}, 1, 10)
	// SAME with stride 1 and kernel 2: one pad, at the end for SAME_UPPER.
	y := mustRun(t, 17, testNode("Conv", 1, aString("auto_pad", "SAME_UPPER")), x, w)[0]
	assertClose(t, []float64{21, 32, 43, 4}, y, 0)
	y = mustRun(t, 17, testNode("Conv", 1, aString("auto_pad", "SAME_LOWER")), x, w)[0]
	assertClose(t, []float64{10, 21, 32, 43}, y, 0)
	y = mustRun(t, 17, testNode("Conv", 1, aString("auto_pad", "VALID"), aInts("strides", 2)), x, w)[0]
	assertClose(t, []float64{21, 43}, y, 0)
}

// TestConvErrors checks that malformed convolutions fail with errors.
func TestConvErrors(t *testing.T) {
	x := f32([]int{1, 3, 4, 4}, make([]float32, 48)...)
	_, err := runOp(t, 17, testNode("Conv", 1), x, f32([]int{2, 2, 3, 3}, make([]float32, 36)...))
	assert.ErrorContains(t, err, "C/group")
	_, err = runOp(t, 17, testNode("Conv", 1), x, f32([]int{2, 3, 5, 5}, make([]float32, 150)...))
	assert.ErrorContains(t, err, "larger than the padded input")
	_, err = runOp(t, 17, testNode("Conv", 1, aInts("strides", 1)), x, f32([]int{2, 3, 3, 3}, make([]float32, 54)...))
	assert.ErrorContains(t, err, "strides")
	_, err = runOp(t, 17, testNode("Conv", 1), x, f32([]int{2, 3, 3, 3}, make([]float32, 54)...), f32([]int{3}, 0, 0, 0))
	assert.ErrorContains(t, err, "bias")
}

type convTransposeCase struct {
	name       string
	x, w       []int
	group      int
	strides    []int
	dilations  []int
	pads       []int
	outPadding []int
	bias       bool
}

// TestConvTransposeMatchesScatter checks ConvTranspose (groups, strides,
// dilations, pads, output_padding, tiling) against refConvTranspose.
func TestConvTransposeMatchesScatter(t *testing.T) {
	cases := []convTransposeCase{
		{"1d", []int{2, 3, 5}, []int{3, 2, 3}, 1, []int{2}, []int{1}, []int{1, 0}, []int{1}, true},
		{"2d_groups", []int{1, 4, 3, 4}, []int{4, 3, 3, 2}, 2, []int{2, 3}, []int{2, 1}, []int{1, 0, 0, 2}, []int{1, 2}, true},
		{"2d_plain", []int{2, 2, 4, 4}, []int{2, 3, 3, 3}, 1, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}, []int{0, 0}, false},
		{"3d", []int{1, 2, 2, 3, 3}, []int{2, 2, 2, 2, 3}, 1, []int{2, 1, 2}, []int{1, 2, 1}, []int{0, 1, 0, 1, 0, 1}, []int{1, 0, 0}, true},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, budget := range []int{1 << 19, 20} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/budget%d", tc.name, budget), func(t *testing.T) {
				saved := colBudget
				colBudget = budget
				defer func() { colBudget = saved }()
				r := len(tc.x) - 2
				x, w := randF64(rng, prod(tc.x)), randF64(rng, prod(tc.w))
				var b []float64
				if tc.bias {
					b = randF64(rng, tc.w[1]*tc.group)
				}
				out := make([]int, r)
				for j := 0; j < r; j++ {
					dk := (tc.w[j+2]-1)*tc.dilations[j] + 1
					out[j] = tc.strides[j]*(tc.x[j+2]-1) + tc.outPadding[j] + dk - tc.pads[j] - tc.pads[j+r]
				}
				want := refConvTranspose(x, tc.x, w, tc.w, b, tc.group, convGeom{tc.strides, tc.dilations, tc.pads[:r]}, out)
				n := testNode("ConvTranspose", 1, aInt("group", int64(tc.group)), aInts("strides", toI64(tc.strides)...),
					aInts("dilations", toI64(tc.dilations)...), aInts("pads", toI64(tc.pads)...),
					aInts("output_padding", toI64(tc.outPadding)...))
				in64 := []*graph.Tensor{graph.FromFloat64(x, tc.x...), graph.FromFloat64(w, tc.w...)}
				in32 := []*graph.Tensor{f32(tc.x, toF32(x)...), f32(tc.w, toF32(w)...)}
				if b != nil {
					in64 = append(in64, graph.FromFloat64(b, len(b)))
					in32 = append(in32, f32([]int{len(b)}, toF32(b)...))
				}
				y64 := mustRun(t, 17, n, in64...)[0]
				assert.Equal(t, concatShape([]int{tc.x[0], tc.w[1] * tc.group}, out), y64.Shape)
				assertClose(t, want, y64, 1e-12)
				y32 := mustRun(t, 17, n, in32...)[0]
				assertClose(t, want, y32, 1e-5)
			})
		}
	}
}

// TestConvTransposeOutputShape checks that output_shape larger than the
// natural size pads the end (negative computed pads) with bias only.
func TestConvTransposeOutputShape(t *testing.T) {
	x := f32([]int{1, 1, 2}, 1, 2)
	w := f32([]int{1, 1, 2}, 1, 10)
	b := f32([]int{1}, 0.5)
	// Natural output: [1, 12, 20] (stride 1, kernel 2); asking for 4 adds
	// total padding -1: begin gets -1 - floor(-1/2) = 0, end gets -1.
	y := mustRun(t, 17, testNode("ConvTranspose", 1, aInts("output_shape", 4)), x, w, b)[0]
	assert.Equal(t, []int{1, 1, 4}, y.Shape)
	assertClose(t, []float64{1.5, 12.5, 20.5, 0.5}, y, 0)
}

// TestConvTransposeErrors checks malformed ConvTranspose inputs.
func TestConvTransposeErrors(t *testing.T) {
	x := f32([]int{1, 2, 3}, 1, 2, 3, 4, 5, 6)
	_, err := runOp(t, 17, testNode("ConvTranspose", 1), x, f32([]int{3, 1, 2}, 1, 2, 3, 4, 5, 6))
	require.Error(t, err)
	assert.ErrorContains(t, err, "dim 0 must be C")
}
