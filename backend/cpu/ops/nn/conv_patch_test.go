package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// patchCases are patchify convolutions (kernel = stride, no padding, no
// dilation): batches of 1 and 3, 1, 3 and 5 channels, square and
// non-square kernels of 2, 4 and 16, images whose sizes are not multiples
// of the kernel (the last rows and columns are never read), a shared
// dimension past the GEMM's k block (5·16·16 = 1280) and products large
// enough to be split over the cores.
var patchCases = []convCase{
	{"patch_k2_batch1_c1_odd", []int{1, 1, 7, 9}, []int{3, 1, 2, 2}, 1, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	{"patch_k4_batch3_c3", []int{3, 3, 16, 12}, []int{10, 3, 4, 4}, 1, []int{4, 4}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	{"patch_k2x4_batch3_c5_odd", []int{3, 5, 11, 13}, []int{7, 5, 2, 4}, 1, []int{2, 4}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	{"patch_k16_batch3_c3_parallel", []int{3, 3, 50, 35}, []int{40, 3, 16, 16}, 1, []int{16, 16}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	{"patch_k16_batch1_c5_k_blocks", []int{1, 5, 48, 33}, []int{24, 5, 16, 16}, 1, []int{16, 16}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	{"patch_k4x16_batch1_c1", []int{1, 1, 9, 35}, []int{5, 1, 4, 16}, 1, []int{4, 16}, []int{1, 1}, []int{0, 0, 0, 0}, true},
	// An end pad that no window reaches: still a tiling of the image.
	{"patch_k4_unread_end_pad", []int{3, 3, 9, 8}, []int{6, 3, 4, 4}, 1, []int{4, 4}, []int{1, 1}, []int{0, 0, 1, 0}, true},
}

// refFilterGrad is the weight gradient of a 2-D convolution summed in
// float64 from its definition: dW[m, c, a, b] = Σ dy[n, m, oh, ow]·x[n,
// c, oh·SH + a·DH − PadTop, ow·SW + b·DW − PadLeft].
func refFilterGrad(g Conv2D, x, dy []float64) []float64 {
	want := make([]float64, g.M*g.C*g.KH*g.KW)
	for i := 0; i < g.N; i++ {
		for mi := 0; mi < g.M; mi++ {
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					d := dy[((i*g.M+mi)*g.OH+oh)*g.OW+ow]
					for ci := 0; ci < g.C; ci++ {
						for a := 0; a < g.KH; a++ {
							r := oh*g.SH + a*g.DH - g.PadTop
							if r < 0 || r >= g.H {
								continue
							}
							for b := 0; b < g.KW; b++ {
								col := ow*g.SW + b*g.DW - g.PadLeft
								if col < 0 || col >= g.W {
									continue
								}
								want[((mi*g.C+ci)*g.KH+a)*g.KW+b] += d * x[((i*g.C+ci)*g.H+r)*g.W+col]
							}
						}
					}
				}
			}
		}
	}
	return want
}

// nans returns n float32 NaNs: storage a kernel must overwrite unread.
func nans(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}

// TestConvPatchifyMatchesDirect checks the patchify path (patch matrix and
// plain GEMMs) against the definitions summed in float64: the Conv kernel
// (with and without bias, its output storage uncleared), Conv2D.Forward
// overwriting NaNs and accumulating, and Conv2D.FilterGrad overwriting
// NaNs and accumulating.
func TestConvPatchifyMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, tc := range patchCases {
		t.Run(tc.name, func(t *testing.T) {
			g, out := tc.conv2D()
			require.True(t, g.patchify(), "the case must take the patchify path")
			x, w := randF64(rng, prod(tc.x)), randF64(rng, prod(tc.w))
			var b []float64
			if tc.bias {
				b = randF64(rng, tc.w[0])
			}
			ys := []int{g.N, g.M, out[0], out[1]}

			// The Conv kernel.
			want := refConv(x, tc.x, w, tc.w, b, 1, convGeom{tc.strides, tc.dilations, tc.pads[:2]}, out)
			n := testNode("Conv", 1, aInts("strides", toI64(tc.strides)...), aInts("pads", toI64(tc.pads)...))
			in := []*graph.Tensor{f32(tc.x, toF32(x)...), f32(tc.w, toF32(w)...)}
			if b != nil {
				in = append(in, f32([]int{tc.w[0]}, toF32(b)...))
			}
			assertClose(t, want, mustRun(t, 17, n, in...)[0], 1e-4)

			// Conv2D.Forward, overwriting then accumulating.
			plain := refConv(x, tc.x, w, tc.w, nil, 1, convGeom{tc.strides, tc.dilations, tc.pads[:2]}, out)
			y := nans(prod(ys))
			g.Forward(toF32(x), toF32(w), y, false)
			assertClose(t, plain, f32(ys, y...), 1e-4)
			g.Forward(toF32(x), toF32(w), y, true)
			for i := range plain {
				plain[i] *= 2
			}
			assertClose(t, plain, f32(ys, y...), 1e-4)

			// Conv2D.FilterGrad, overwriting then accumulating.
			dy := randF64(rng, prod(ys))
			wantDW := refFilterGrad(g, x, dy)
			dw := nans(len(wantDW))
			g.FilterGrad(toF32(dy), toF32(x), dw, false)
			assertClose(t, wantDW, f32(tc.w, dw...), 1e-4)
			g.FilterGrad(toF32(dy), toF32(x), dw, true)
			for i := range wantDW {
				wantDW[i] *= 2
			}
			assertClose(t, wantDW, f32(tc.w, dw...), 1e-4)
		})
	}
}

// TestConvPatchifyAgreesWithImplicit checks that the patchify path and
// the implicit GEMM it replaces agree to float32 rounding on ViT-B/16's
// patch embedding at batch 1 (3→768 channels, 16×16 windows, stride 16,
// 224×224 images).
func TestConvPatchifyAgreesWithImplicit(t *testing.T) {
	if testing.Short() {
		t.Skip("ViT-B/16's patch embedding takes a few seconds under -race")
	}
	rng := rand.New(rand.NewPCG(23, 24))
	g := Conv2D{N: 1, C: 3, H: 224, W: 224, M: 768, KH: 16, KW: 16, SH: 16, SW: 16, DH: 1, DW: 1, OH: 14, OW: 14}
	require.True(t, g.patchify())
	x, w := toF32(randF64(rng, 3*224*224)), toF32(randF64(rng, 768*768))
	dy := toF32(randF64(rng, 768*196))
	y, dw := make([]float32, 768*196), make([]float32, 768*768)
	g.Forward(x, w, y, false)
	g.FilterGrad(dy, x, dw, false)
	patchConv = false
	defer func() { patchConv = true }()
	require.False(t, g.patchify())
	yRef, dwRef := make([]float32, len(y)), make([]float32, len(dw))
	g.Forward(x, w, yRef, false)
	g.FilterGrad(dy, x, dwRef, false)
	// Sums of 768 (forward) and 196 (filter gradient) products of
	// values in [−1, 1): a few float32 roundings of sums of order 10.
	for i := range y {
		if !assert.InDelta(t, yRef[i], y[i], 1e-4, "y[%d]", i) {
			break
		}
	}
	for i := range dw {
		if !assert.InDelta(t, dwRef[i], dw[i], 1e-4, "dw[%d]", i) {
			break
		}
	}
}

// TestPatchifyRefuses checks the windows that must not take the patchify
// path: each reads padding, overlaps, skips or dilates, is 1×1 (pointwise.go
// handles those), or is the input gradient's flipped correlation. The
// convolutions themselves are checked against the definition by the
// implicit and general cases (TestConvImplicitMatchesDirect,
// TestConvMatchesDirect); here each is also run through the Conv kernel
// and compared with refConv.
func TestPatchifyRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, tc := range []convCase{
		{"begin_pad", []int{2, 3, 8, 8}, []int{4, 3, 4, 4}, 1, []int{4, 4}, []int{1, 1}, []int{1, 1, 0, 0}, true},
		{"end_pad_read", []int{2, 3, 9, 8}, []int{4, 3, 4, 4}, 1, []int{4, 4}, []int{1, 1}, []int{0, 0, 3, 0}, false},
		{"kernel_above_stride", []int{2, 3, 9, 9}, []int{4, 3, 4, 4}, 1, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}, true},
		{"kernel_below_stride", []int{2, 3, 12, 12}, []int{4, 3, 2, 2}, 1, []int{4, 4}, []int{1, 1}, []int{0, 0, 0, 0}, false},
		{"one_axis_only", []int{2, 3, 8, 8}, []int{4, 3, 4, 4}, 1, []int{4, 2}, []int{1, 1}, []int{0, 0, 0, 0}, true},
		{"dilation", []int{2, 3, 12, 12}, []int{4, 3, 2, 2}, 1, []int{2, 2}, []int{2, 2}, []int{0, 0, 0, 0}, true},
		{"1x1", []int{2, 3, 5, 5}, []int{4, 3, 1, 1}, 1, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, out := tc.conv2D()
			assert.False(t, g.patchify())
			x, w := randF64(rng, prod(tc.x)), randF64(rng, prod(tc.w))
			var b []float64
			if tc.bias {
				b = randF64(rng, tc.w[0])
			}
			want := refConv(x, tc.x, w, tc.w, b, 1, convGeom{tc.strides, tc.dilations, tc.pads[:2]}, out)
			n := testNode("Conv", 1, aInts("strides", toI64(tc.strides)...),
				aInts("dilations", toI64(tc.dilations)...), aInts("pads", toI64(tc.pads)...))
			in := []*graph.Tensor{f32(tc.x, toF32(x)...), f32(tc.w, toF32(w)...)}
			if b != nil {
				in = append(in, f32([]int{tc.w[0]}, toF32(b)...))
			}
			assertClose(t, want, mustRun(t, 17, n, in...)[0], 1e-4)
		})
	}
	// The input gradient's correlation (flipped taps) of a patchify
	// window is not a patchify convolution.
	g := Conv2D{N: 1, C: 2, H: 8, W: 8, M: 3, KH: 4, KW: 4, SH: 4, SW: 4, DH: 1, DW: 1, OH: 2, OW: 2}
	require.True(t, g.patchify())
	g.flipTaps = true
	assert.False(t, g.patchify(), "flipped taps")
	// Groups: Conv2D is ungrouped; the Conv kernel sends a grouped
	// patchify convolution to the grouped im2col path.
	t.Run("groups", func(t *testing.T) {
		xs, ws := []int{2, 4, 8, 8}, []int{6, 2, 4, 4}
		x, w, b := randF64(rng, prod(xs)), randF64(rng, prod(ws)), randF64(rng, 6)
		want := refConv(x, xs, w, ws, b, 2, convGeom{[]int{4, 4}, []int{1, 1}, []int{0, 0}}, []int{2, 2})
		n := testNode("Conv", 1, aInts("strides", 4, 4), aInt("group", 2))
		y := mustRun(t, 17, n, f32(xs, toF32(x)...), f32(ws, toF32(w)...), f32([]int{6}, toF32(b)...))[0]
		assertClose(t, want, y, 1e-4)
	})
}

// TestPatchifyAllocations: once warmed up, the patchify forward pass
// (with a bias) and filter gradient allocate nothing (the patch matrix and
// the product's scratch from the pool, the epilogue and the packer boxed,
// the fan-outs through pooled tasks).
func TestPatchifyAllocations(t *testing.T) {
	if winoRaceEnabled {
		testutil.Skip(t, "the race detector changes allocation behaviour")
	}
	rng := rand.New(rand.NewPCG(27, 28))
	g := Conv2D{N: 2, C: 3, H: 64, W: 48, M: 64, KH: 16, KW: 16, SH: 16, SW: 16, DH: 1, DW: 1, OH: 4, OW: 3}
	require.True(t, g.patchify())
	x, w := toF32(randF64(rng, 2*3*64*48)), toF32(randF64(rng, 64*768))
	bias := toF32(randF64(rng, 64))
	y, dw := make([]float32, 2*64*12), make([]float32, len(w))
	step := func() {
		g.forwardPatches(x, w, bias, y, false)
		g.FilterGrad(y, x, dw, false)
	}
	step()
	assert.Zero(t, testing.AllocsPerRun(20, step))
}

// TestPatchScratchIsWhatThePassesRequest runs a patchify forward pass and
// filter gradient on an empty scratch free list and checks that what the
// list then keeps is PatchScratch's two buffers, which memory estimates
// count: the forward holds the patch and product matrices at once, and
// the filter gradient reuses the patch matrix's buffer.
func TestPatchScratchIsWhatThePassesRequest(t *testing.T) {
	g := Conv2D{N: 2, C: 3, H: 32, W: 32, M: 8, KH: 16, KW: 16, SH: 16, SW: 16, DH: 1, DW: 1, OH: 2, OW: 2}
	ok, patch, product := g.PatchScratch()
	require.True(t, ok)
	assert.Equal(t, 2*2*2*3*16*16, patch)
	assert.Equal(t, 8*2*2*2, product)
	kept := func() []int {
		f32Bufs.mu.Lock()
		defer f32Bufs.mu.Unlock()
		var caps []int
		for _, b := range f32Bufs.free {
			caps = append(caps, cap(b))
		}
		return caps
	}
	f32Bufs.mu.Lock()
	saved := f32Bufs.free
	f32Bufs.free = nil
	f32Bufs.mu.Unlock()
	defer func() {
		f32Bufs.mu.Lock()
		f32Bufs.free = saved
		f32Bufs.mu.Unlock()
	}()
	r := rand.New(rand.NewPCG(5, 6))
	x, w := make([]float32, g.N*g.C*g.H*g.W), make([]float32, g.M*g.C*g.KH*g.KW)
	for i := range x {
		x[i] = r.Float32()
	}
	for i := range w {
		w[i] = r.Float32()
	}
	y := make([]float32, g.N*g.M*g.OH*g.OW)
	g.Forward(x, w, y, false)
	assert.ElementsMatch(t, []int{patch, product}, kept(), "after the forward pass")
	dw := make([]float32, len(w))
	g.FilterGrad(y, x, dw, false)
	assert.ElementsMatch(t, []int{patch, product}, kept(), "after the filter gradient")

	// Not a tiling (stride below the kernel): no patch scratch.
	h := g
	h.SH, h.SW, h.OH, h.OW = 8, 8, 3, 3
	ok, _, _ = h.PatchScratch()
	assert.False(t, ok)
}
