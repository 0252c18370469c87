package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TestMaxPoolSpansNaN checks MaxPool values and Indices on the window
// shapes of the consecutive-tap paths (full 2×2 and 3×3 windows unrolled,
// partial border windows, other sizes) against the definition evaluated
// directly: the first tap in row-major order, replaced only by a strictly
// greater one, so a NaN first tap wins its window and later NaNs never do.
// Values lie on a coarse grid (ties) with NaNs sprinkled in, in float32
// and float64.
func TestMaxPoolSpansNaN(t *testing.T) {
	const n, c, h, w = 2, 5, 11, 10
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]float64, n*c*h*w)
	for i := range x {
		x[i] = float64(rng.IntN(4))
		if rng.IntN(11) == 0 {
			x[i] = math.NaN()
		}
	}
	for _, tc := range []struct {
		k, s, pads []int64
	}{
		{[]int64{2, 2}, []int64{2, 2}, []int64{0, 0, 0, 0}},
		{[]int64{3, 3}, []int64{2, 2}, []int64{1, 1, 1, 1}},
		{[]int64{3, 3}, []int64{1, 1}, []int64{0, 0, 0, 0}},
		{[]int64{2, 2}, []int64{1, 1}, []int64{1, 0, 0, 1}},
		{[]int64{4, 3}, []int64{3, 2}, []int64{2, 1, 0, 1}},
	} {
		for _, dt := range []string{"float32", "float64"} {
			t.Run(fmt.Sprintf("k%v_s%v_p%v_%s", tc.k, tc.s, tc.pads, dt), func(t *testing.T) {
				node := testNode("MaxPool", 2, aInts("kernel_shape", tc.k...), aInts("strides", tc.s...), aInts("pads", tc.pads...))
				in := f32([]int{n, c, h, w}, toF32(x)...)
				if dt == "float64" {
					in = graph.FromFloat64(append([]float64(nil), x...), n, c, h, w)
				}
				out := mustRun(t, 12, node, in)
				y := out[0]
				idx := out[1].Data.([]int64)
				oh, ow := y.Shape[2], y.Shape[3]
				k, s, pads := tc.k, tc.s, tc.pads
				for p := 0; p < n*c; p++ {
					for r := 0; r < oh; r++ {
						for q := 0; q < ow; q++ {
							best, at := 0.0, -1
							for a := 0; a < int(k[0]); a++ {
								i := r*int(s[0]) - int(pads[0]) + a
								for b := 0; b < int(k[1]); b++ {
									j := q*int(s[1]) - int(pads[1]) + b
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
							var got float64
							switch d := y.Data.(type) {
							case []float32:
								got = float64(d[o])
							case []float64:
								got = d[o]
							}
							if math.IsNaN(best) {
								assert.True(t, math.IsNaN(got), "plane %d output (%d, %d): %v, want NaN", p, r, q, got)
							} else {
								assert.Equal(t, best, got, "plane %d output (%d, %d)", p, r, q)
							}
							assert.Equal(t, int64(at), idx[o], "plane %d output (%d, %d)", p, r, q)
						}
					}
				}
			})
		}
	}
}

// BenchmarkMaxPoolResNetStem times MaxPool on ResNet-18's stem pool at
// batch 32 and 64×64 images: 32×64×32×32, 3×3 windows, stride 2, pad 1.
func BenchmarkMaxPoolResNetStem(b *testing.B) {
	shape := []int{32, 64, 32, 32}
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]float32, prod(shape))
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	node := testNode("MaxPool", 1, aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1))
	fn := poolKernel(poolMax)
	in := []*graph.Tensor{f32(shape, v...)}
	b.SetBytes(int64(4 * len(v)))
	for b.Loop() {
		if _, err := fn(nil, node, in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMaxPoolSeparable checks MaxPool without Indices on float32 (the
// separable path: column maxima per input row, then the maximum over each
// window's rows) bit for bit against the definition evaluated directly, on
// values on a coarse grid (ties, zeros of both signs) and on planes where
// NaNs fall on a row's first tap, the window's first tap or elsewhere (the
// path hands those planes to the scan, whose rule is that only a NaN first
// tap wins). The windows cover the unrolled widths, borders, ceil_mode,
// kernel rows up to the path's limit and one beyond it.
func TestMaxPoolSeparable(t *testing.T) {
	checkMaxPoolSeparable(t, 2, 6, 13, 11)
}

// TestMaxPoolSeparableWide is TestMaxPoolSeparable on planes wide enough
// for the AVX2 loops (blocks of 8 outputs, an overlapping last block and
// scalar borders), with even and odd widths.
func TestMaxPoolSeparableWide(t *testing.T) {
	for _, w := range []int{16, 17, 33, 40, 47} {
		t.Run(fmt.Sprint("w", w), func(t *testing.T) { checkMaxPoolSeparable(t, 2, 6, 9, w) })
	}
}

func checkMaxPoolSeparable(t *testing.T, n, c, h, w int) {
	rng := rand.New(rand.NewPCG(11, uint64(12+w)))
	x := make([]float32, n*c*h*w)
	grid := []float32{-1, 0, float32(math.Copysign(0, -1)), 0.5, 1, 2}
	for i := range x {
		x[i] = grid[rng.IntN(len(grid))]
	}
	// Planes 3 and 7 carry NaNs: one at a window's first tap, others
	// inside rows.
	for _, i := range []int{3*h*w + 0, 3*h*w + 2*w + 5, 7*h*w + 4*w + 1, 7*h*w + (h-4)*w + 10} {
		x[i] = float32(math.NaN())
	}
	for _, tc := range []struct {
		k, s, pads []int64
		ceil       int64
	}{
		{[]int64{3, 3}, []int64{2, 2}, []int64{1, 1, 1, 1}, 0},
		{[]int64{2, 2}, []int64{2, 2}, []int64{0, 0, 0, 0}, 1},
		{[]int64{3, 3}, []int64{1, 1}, []int64{0, 0, 0, 0}, 0},
		{[]int64{4, 5}, []int64{3, 2}, []int64{2, 1, 1, 2}, 1},
		{[]int64{5, 1}, []int64{2, 1}, []int64{2, 0, 2, 0}, 0},
		{[]int64{1, 2}, []int64{3, 3}, []int64{0, 1, 0, 1}, 1},
	} {
		t.Run(fmt.Sprintf("k%v_s%v_p%v_ceil%d", tc.k, tc.s, tc.pads, tc.ceil), func(t *testing.T) {
			node := testNode("MaxPool", 1, aInts("kernel_shape", tc.k...), aInts("strides", tc.s...),
				aInts("pads", tc.pads...), aInt("ceil_mode", tc.ceil))
			y := mustRun(t, 12, node, f32([]int{n, c, h, w}, x...))[0]
			got := y.Data.([]float32)
			oh, ow := y.Shape[2], y.Shape[3]
			for p := 0; p < n*c; p++ {
				for r := 0; r < oh; r++ {
					for q := 0; q < ow; q++ {
						best, at := math.Inf(-1), -1
						for a := 0; a < int(tc.k[0]); a++ {
							i := r*int(tc.s[0]) - int(tc.pads[0]) + a
							for b := 0; b < int(tc.k[1]); b++ {
								j := q*int(tc.s[1]) - int(tc.pads[1]) + b
								if i < 0 || i >= h || j < 0 || j >= w {
									continue
								}
								if v := float64(x[p*h*w+i*w+j]); at < 0 || v > best {
									best, at = v, p*h*w+i*w+j
								}
							}
						}
						g := float64(got[(p*oh+r)*ow+q])
						if math.IsNaN(best) {
							assert.True(t, math.IsNaN(g), "plane %d output (%d, %d): %v, want NaN", p, r, q, g)
						} else {
							// Bits, so that the sign of a zero counts.
							assert.Equal(t, math.Float64bits(best), math.Float64bits(g), "plane %d output (%d, %d): %v, want %v", p, r, q, g, best)
						}
					}
				}
			}
		})
	}
}
