package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// winoCase is a 3×3 stride-1 convolution for the Winograd tests: batch n,
// c input and m output channels, an h×w image, pads top, left, bottom,
// right.
type winoCase struct {
	n, c, m, h, w  int
	pt, pl, pb, pr int
}

func (tc winoCase) String() string {
	return fmt.Sprintf("n%d_c%d_m%d_%dx%d_pads%d%d%d%d", tc.n, tc.c, tc.m, tc.h, tc.w, tc.pt, tc.pl, tc.pb, tc.pr)
}

func (tc winoCase) conv() Conv2D {
	return Conv2D{N: tc.n, C: tc.c, H: tc.h, W: tc.w, M: tc.m, KH: 3, KW: 3, SH: 1, SW: 1, DH: 1, DW: 1,
		PadTop: tc.pt, PadLeft: tc.pl, OH: tc.h + tc.pt + tc.pb - 2, OW: tc.w + tc.pl + tc.pr - 2}
}

// winoCases cover channel counts that are not multiples of the kernel's
// strips (6 rows, 16 columns), odd and even images down to 1×1 (partial
// edge tiles), every pad from 0 to 2 on each side, blocks split over
// workers and channel counts past the GEMM's k block (256).
var winoCases = []winoCase{
	{1, 1, 1, 1, 1, 1, 1, 1, 1},
	{2, 3, 5, 2, 2, 1, 1, 1, 1},
	{1, 4, 7, 3, 5, 1, 1, 1, 1},
	{3, 5, 9, 17, 9, 1, 1, 1, 1},
	{2, 7, 13, 17, 9, 0, 0, 0, 0},
	{2, 6, 6, 8, 8, 2, 2, 2, 2},
	{1, 9, 17, 5, 6, 0, 2, 1, 0},
	{2, 11, 4, 6, 7, 2, 0, 0, 1},
	{1, 2, 3, 1, 1, 2, 2, 2, 2},
	{3, 16, 16, 16, 16, 1, 1, 1, 1},
	{2, 20, 22, 9, 12, 1, 0, 2, 1},
	{2, 300, 14, 3, 4, 1, 1, 1, 1},
	{1, 17, 270, 4, 3, 1, 1, 1, 1},
	{3, 33, 19, 31, 29, 1, 1, 1, 1},
	// Channels past 128 on one side, whose block holds one strip of
	// tiles within the budget and two where the pair kernel runs
	// (winoMinBlock): 84 tiles (blocks of 32, 32, 20) and 35 tiles (a
	// last block of one partial strip), for the forward product and for
	// the input gradient (whose channels are m).
	{2, 140, 70, 13, 11, 1, 1, 1, 1},
	{1, 200, 130, 14, 10, 1, 0, 1, 2},
}

// directConv is the float64 correlation of the forward product, with
// scale[i] = Σ |x·w| over the terms of output i (the magnitude rounding
// errors are relative to).
func directConv(tc winoCase, x, w []float64) (y, scale []float64) {
	g := tc.conv()
	y = make([]float64, tc.n*tc.m*g.OH*g.OW)
	scale = make([]float64, len(y))
	for n := 0; n < tc.n; n++ {
		for m := 0; m < tc.m; m++ {
			for oy := 0; oy < g.OH; oy++ {
				for ox := 0; ox < g.OW; ox++ {
					var s, a float64
					for c := 0; c < tc.c; c++ {
						for i := 0; i < 3; i++ {
							for j := 0; j < 3; j++ {
								iy, ix := oy+i-tc.pt, ox+j-tc.pl
								if iy < 0 || iy >= tc.h || ix < 0 || ix >= tc.w {
									continue
								}
								p := x[((n*tc.c+c)*tc.h+iy)*tc.w+ix] * w[((m*tc.c+c)*3+i)*3+j]
								s += p
								a += math.Abs(p)
							}
						}
					}
					at := ((n*tc.m+m)*g.OH+oy)*g.OW + ox
					y[at], scale[at] = s, a
				}
			}
		}
	}
	return y, scale
}

// directInputGrad is the float64 input gradient dx[n, c, iy, ix] = Σ
// dy[n, m, oy, ox]·w[m, c, iy − oy + pt, ix − ox + pl], with its scale.
func directInputGrad(tc winoCase, dy, w []float64) (dx, scale []float64) {
	g := tc.conv()
	dx = make([]float64, tc.n*tc.c*tc.h*tc.w)
	scale = make([]float64, len(dx))
	for n := 0; n < tc.n; n++ {
		for c := 0; c < tc.c; c++ {
			for iy := 0; iy < tc.h; iy++ {
				for ix := 0; ix < tc.w; ix++ {
					var s, a float64
					for m := 0; m < tc.m; m++ {
						for i := 0; i < 3; i++ {
							for j := 0; j < 3; j++ {
								oy, ox := iy-i+tc.pt, ix-j+tc.pl
								if oy < 0 || oy >= g.OH || ox < 0 || ox >= g.OW {
									continue
								}
								p := dy[((n*tc.m+m)*g.OH+oy)*g.OW+ox] * w[((m*tc.c+c)*3+i)*3+j]
								s += p
								a += math.Abs(p)
							}
						}
					}
					at := ((n*tc.c+c)*tc.h+iy)*tc.w + ix
					dx[at], scale[at] = s, a
				}
			}
		}
	}
	return dx, scale
}

// assertWinoClose checks got against want elementwise, the error relative
// to the magnitude of the terms summed (scale) plus the accumulated
// value's own magnitude.
func assertWinoClose(t *testing.T, want, scale []float64, got []float32) {
	t.Helper()
	require.Len(t, got, len(want))
	worst, at := 0.0, -1
	for i, w := range want {
		e := math.Abs(float64(got[i])-w) / (scale[i] + math.Abs(w) + 1e-30)
		if !(e <= worst) { // NaN counts as worst
			worst, at = e, i
		}
	}
	if at >= 0 {
		assert.LessOrEqual(t, worst, 2e-6, "element %d: got %g, want %g (scale %g)", at, got[at], want[at], scale[at])
	}
}

// TestWinogradForwardMatchesDirect runs Conv2D.Forward with the policy
// forced on every case (overwriting, and accumulating into a nonzero y)
// against the float64 direct correlation, on one core and on all.
func TestWinogradForwardMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, procs := range []int{1, runtime.GOMAXPROCS(0)} {
		for _, tc := range winoCases {
			t.Run(fmt.Sprintf("%v/procs%d", tc, procs), func(t *testing.T) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				g := tc.conv()
				g.Winograd = WinogradForce
				_, ok := g.winoForwardConv()
				require.True(t, ok, "the transform applies")
				x, w := randF64(rng, tc.n*tc.c*tc.h*tc.w), randF64(rng, tc.m*tc.c*9)
				want, scale := directConv(tc, x, w)
				y := make([]float32, len(want))
				for i := range y {
					y[i] = float32(math.NaN()) // overwritten, never read
				}
				g.Forward(toF32(x), toF32(w), y, false)
				assertWinoClose(t, want, scale, y)

				y0 := randF64(rng, len(want))
				acc := toF32(y0)
				g.Forward(toF32(x), toF32(w), acc, true)
				for i := range want {
					want[i] += float64(float32(y0[i]))
					scale[i] += math.Abs(y0[i])
				}
				assertWinoClose(t, want, scale, acc)
			})
		}
	}
}

// TestWinogradInputGradMatchesDirect runs Conv2D.InputGrad with the
// policy forced on every case against the float64 input gradient.
func TestWinogradInputGradMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, procs := range []int{1, runtime.GOMAXPROCS(0)} {
		for _, tc := range winoCases {
			t.Run(fmt.Sprintf("%v/procs%d", tc, procs), func(t *testing.T) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				g := tc.conv()
				g.Winograd = WinogradForce
				_, ok := g.winoInputGradConv()
				require.True(t, ok, "the transform applies")
				require.True(t, g.InputGradImplicit(tc.pb, tc.pr))
				dy, w := randF64(rng, tc.n*tc.m*g.OH*g.OW), randF64(rng, tc.m*tc.c*9)
				want, scale := directInputGrad(tc, dy, w)
				dx := make([]float32, len(want))
				for i := range dx {
					dx[i] = float32(math.NaN())
				}
				g.InputGrad(toF32(dy), toF32(w), dx)
				assertWinoClose(t, want, scale, dx)
			})
		}
	}
}

// TestWinogradAgreesWithImplicit: Conv2D.Forward and InputGrad give the
// same results, within float error, with the transform forced on and off
// (the implicit GEMM), on ResNet-like layers.
func TestWinogradAgreesWithImplicit(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []winoCase{
		{4, 64, 64, 16, 16, 1, 1, 1, 1},
		{8, 128, 96, 8, 8, 1, 1, 1, 1},
		{5, 40, 70, 7, 10, 1, 1, 1, 1},
	} {
		t.Run(tc.String(), func(t *testing.T) {
			g := tc.conv()
			x, w := toF32(randF64(rng, tc.n*tc.c*tc.h*tc.w)), toF32(randF64(rng, tc.m*tc.c*9))
			dy := toF32(randF64(rng, tc.n*tc.m*g.OH*g.OW))
			run := func(p WinogradPolicy) (y, dx []float32) {
				g.Winograd = p
				y = make([]float32, tc.n*tc.m*g.OH*g.OW)
				dx = make([]float32, len(x))
				g.Forward(x, w, y, false)
				g.InputGrad(dy, w, dx)
				return y, dx
			}
			yOff, dxOff := run(WinogradOff)
			yOn, dxOn := run(WinogradForce)
			// Both are sums of c·9 (or m·9) products of values in
			// [-1, 1): bound the difference by the sums' size.
			tolY := 1e-6 * float64(tc.c*9)
			tolX := 1e-6 * float64(tc.m*9)
			for i := range yOff {
				require.InDelta(t, yOff[i], yOn[i], tolY, "y[%d]", i)
			}
			for i := range dxOff {
				require.InDelta(t, dxOff[i], dxOn[i], tolX, "dx[%d]", i)
			}
		})
	}
}

// TestWinogradPolicy: Off never takes the transform, Force takes it
// wherever it applies, and it never applies to other windows, strides,
// dilations or pads.
func TestWinogradPolicy(t *testing.T) {
	big := winoCase{32, 64, 64, 16, 16, 1, 1, 1, 1}.conv()
	small := winoCase{1, 2, 2, 3, 3, 1, 1, 1, 1}.conv()
	cv, ok := big.winoForwardConv()
	require.True(t, ok)
	for _, p := range []WinogradPolicy{WinogradOff, WinogradForce} {
		assert.Equal(t, p == WinogradForce, winoUse(p, &cv))
	}
	cv, ok = small.winoForwardConv()
	require.True(t, ok)
	assert.True(t, winoUse(WinogradForce, &cv))

	// Auto: ResNet-18's 3×3 layers at batch 32 except the 2×2 one (32
	// tiles); never tiny layers.
	for _, tc := range []struct {
		l         winoCase
		fwd, grad bool
	}{
		{winoCase{32, 64, 64, 16, 16, 1, 1, 1, 1}, true, true},
		{winoCase{32, 256, 256, 4, 4, 1, 1, 1, 1}, true, true},
		{winoCase{32, 512, 512, 2, 2, 1, 1, 1, 1}, false, false},
		{winoCase{32, 256, 256, 2, 2, 1, 1, 1, 1}, false, false},
		{winoCase{16, 128, 128, 4, 4, 1, 1, 1, 1}, true, true},
		{winoCase{32, 512, 512, 4, 4, 1, 1, 1, 1}, true, true},
		{winoCase{1, 64, 64, 8, 8, 1, 1, 1, 1}, false, false},
		{winoCase{32, 4, 64, 16, 16, 1, 1, 1, 1}, false, false},
		{winoCase{64, 64, 64, 1, 1, 1, 1, 1, 1}, false, false},
		{winoCase{64, 64, 64, 3, 3, 1, 1, 1, 1}, false, false},
		// 36% and 42% saved: not taken (winoAuto)
		{winoCase{64, 64, 64, 5, 5, 1, 1, 1, 1}, false, false},
		{winoCase{8, 512, 512, 7, 7, 1, 1, 1, 1}, false, false},
		// ResNet-50's other 3×3 layers at batch 8: 56% saved, taken by both
		{winoCase{8, 256, 256, 14, 14, 1, 1, 1, 1}, true, true},
		{winoCase{8, 64, 64, 56, 56, 1, 1, 1, 1}, true, true},
	} {
		g := tc.l.conv()
		fwd, ok := g.winoForwardConv()
		require.True(t, ok)
		grad, ok := g.winoInputGradConv()
		require.True(t, ok)
		assert.Equal(t, tc.fwd, winoUse(WinogradAuto, &fwd), "%v forward", tc.l)
		assert.Equal(t, tc.grad, winoUse(WinogradAuto, &grad), "%v input gradient", tc.l)
	}

	for name, g := range map[string]Conv2D{
		"stride2":   {N: 1, C: 2, H: 8, W: 8, M: 2, KH: 3, KW: 3, SH: 2, SW: 2, DH: 1, DW: 1, PadTop: 1, PadLeft: 1, OH: 4, OW: 4},
		"dilation2": {N: 1, C: 2, H: 8, W: 8, M: 2, KH: 3, KW: 3, SH: 1, SW: 1, DH: 2, DW: 2, PadTop: 2, PadLeft: 2, OH: 8, OW: 8},
		"5x5":       {N: 1, C: 2, H: 8, W: 8, M: 2, KH: 5, KW: 5, SH: 1, SW: 1, DH: 1, DW: 1, PadTop: 2, PadLeft: 2, OH: 8, OW: 8},
		"pad3":      {N: 1, C: 2, H: 8, W: 8, M: 2, KH: 3, KW: 3, SH: 1, SW: 1, DH: 1, DW: 1, PadTop: 3, PadLeft: 1, OH: 10, OW: 8},
		"padEnd3":   {N: 1, C: 2, H: 8, W: 8, M: 2, KH: 3, KW: 3, SH: 1, SW: 1, DH: 1, DW: 1, PadTop: 1, PadLeft: 1, OH: 8, OW: 10},
		"empty":     {N: 0, C: 2, H: 8, W: 8, M: 2, KH: 3, KW: 3, SH: 1, SW: 1, DH: 1, DW: 1, PadTop: 1, PadLeft: 1, OH: 8, OW: 8},
	} {
		_, fwd := g.winoForwardConv()
		_, grad := g.winoInputGradConv()
		assert.False(t, fwd, name)
		assert.False(t, grad, name)
	}
}

// TestWinogradBlockStrips: with the AVX-512 pair kernel a block holds at
// least two strips of tiles when the channels are one k block, so that
// the 16 products run two strips at a time; one strip otherwise (the
// AVX2 kernel, or channels past the k block).
func TestWinogradBlockStrips(t *testing.T) {
	_, nr := gemm.KernelShape()
	for _, tc := range []struct {
		l               winoCase
		grad            bool // the input gradient (channels m) instead of the forward product
		withPair, plain int  // tiles a block holds with and without the pair kernel
	}{
		// ResNet-50 at batch 8: 256 channels at 14×14, 128 at 28×28.
		{winoCase{8, 256, 256, 14, 14, 1, 1, 1, 1}, false, 2 * nr, nr},
		{winoCase{8, 256, 256, 14, 14, 1, 1, 1, 1}, true, 2 * nr, nr},
		{winoCase{8, 128, 128, 28, 28, 1, 1, 1, 1}, false, 2 * nr, nr},
		{winoCase{2, 140, 70, 13, 11, 1, 1, 1, 1}, true, 2 * nr, nr},
		// 512 or 300 channels: past the k block, one strip as before.
		{winoCase{8, 512, 512, 7, 7, 1, 1, 1, 1}, false, nr, nr},
		{winoCase{2, 300, 14, 3, 4, 1, 1, 1, 1}, false, nr, nr},
	} {
		g := tc.l.conv()
		cv, ok := g.winoForwardConv()
		if tc.grad {
			cv, ok = g.winoInputGradConv()
		}
		require.True(t, ok)
		if nr != 16 {
			// The portable kernel's narrow strips: the block budget, not
			// the pair minimum, sets the size; it stays whole strips.
			assert.True(t, cv.tb >= nr && cv.tb%nr == 0, "%v, input gradient %v: %d tiles with %d-wide strips", tc.l, tc.grad, cv.tb, nr)
			continue
		}
		want := tc.plain
		if gemm.AVX512() {
			want = tc.withPair
		}
		assert.Equal(t, want, cv.tb, "%v, input gradient %v", tc.l, tc.grad)
	}
}

// TestWinogradAllocations: once warmed up, the forward product and the
// input gradient through the transform allocate nothing (scratch from
// the pool, the fan-out through a pooled task).
func TestWinogradAllocations(t *testing.T) {
	if winoRaceEnabled {
		testutil.Skip(t, "the race detector changes allocation behaviour")
	}
	rng := rand.New(rand.NewPCG(13, 14))
	tc := winoCase{4, 32, 24, 12, 12, 1, 1, 1, 1}
	g := tc.conv()
	g.Winograd = WinogradForce
	x, w := toF32(randF64(rng, tc.n*tc.c*tc.h*tc.w)), toF32(randF64(rng, tc.m*tc.c*9))
	y := make([]float32, tc.n*tc.m*g.OH*g.OW)
	dx := make([]float32, len(x))
	step := func() {
		g.Forward(x, w, y, false)
		g.InputGrad(y, w, dx)
	}
	step()
	calls := WinogradCalls()
	assert.Zero(t, testing.AllocsPerRun(20, step))
	assert.Greater(t, WinogradCalls(), calls)
}
