package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaxPool3S2Planes checks MaxPool of float32 without Indices through
// the one-call-per-plane path (3 columns wide, stride 2) bit for bit
// against the window maxima evaluated directly, on values from a coarse
// grid (ties, +0 maxima, -Inf) with no -0 or NaN in most planes, and
// with a -0 in plane 1 and a NaN in plane 4 (those planes go to the
// general paths: a zero maximum takes the sign of the window's first
// zero, a NaN first tap wins). Widths cover one vector block, overlapping
// last blocks (odd and even), pads 0 and 1 and ceil_mode, and kernel
// rows of 3 and fewer (pads at the top and bottom, a 2-row kernel).
func TestMaxPool3S2Planes(t *testing.T) {
	negInf := float32(math.Inf(-1))
	grid := []float32{-2, -1, 0, 0.5, 1, 3, negInf}
	for _, tc := range []struct {
		h, w       int
		kh, ph, pw int64
		ceil       int64
	}{
		{32, 32, 3, 1, 1, 0},
		{17, 16, 3, 1, 1, 0},
		{16, 17, 3, 0, 0, 0},
		{15, 33, 3, 1, 0, 1},
		{20, 40, 2, 0, 1, 0},
		{9, 47, 3, 1, 1, 1},
		{12, 22, 1, 0, 1, 0},
	} {
		t.Run(fmt.Sprintf("%dx%d_k%dx3_p%d%d_ceil%d", tc.h, tc.w, tc.kh, tc.ph, tc.pw, tc.ceil), func(t *testing.T) {
			const n, c = 2, 3
			h, w := tc.h, tc.w
			rng := rand.New(rand.NewPCG(71, uint64(h*100+w)))
			x := make([]float32, n*c*h*w)
			for i := range x {
				x[i] = grid[rng.IntN(len(grid))]
			}
			x[1*h*w+w+3] = float32(math.Copysign(0, -1))
			x[4*h*w+2*w+1] = float32(math.NaN())
			// Check that the plan takes the path under test.
			node := testNode("MaxPool", 1, aInts("kernel_shape", tc.kh, 3), aInts("strides", 2, 2),
				aInts("pads", tc.ph, tc.pw, tc.ph, tc.pw), aInt("ceil_mode", tc.ceil))
			y := mustRun(t, 12, node, f32([]int{n, c, h, w}, x...))[0]
			oh, ow := y.Shape[2], y.Shape[3]
			got := y.Data.([]float32)
			for p := 0; p < n*c; p++ {
				for r := 0; r < oh; r++ {
					for q := 0; q < ow; q++ {
						best, at := float32(0), -1
						for a := 0; a < int(tc.kh); a++ {
							i := r*2 - int(tc.ph) + a
							for b := 0; b < 3; b++ {
								j := q*2 - int(tc.pw) + b
								if i < 0 || i >= h || j < 0 || j >= w {
									continue
								}
								if v := x[p*h*w+i*w+j]; at < 0 || v > best {
									best, at = v, i*w+j
								}
							}
						}
						if at < 0 {
							best = negInf
						}
						g := got[(p*oh+r)*ow+q]
						if best != best {
							assert.True(t, g != g, "plane %d output (%d, %d): %v, want NaN", p, r, q, g)
							continue
						}
						require.Equal(t, math.Float32bits(best), math.Float32bits(g), "plane %d output (%d, %d): %v, want %v", p, r, q, g, best)
					}
				}
			}
		})
	}
}

// TestStride3S2Cols checks which column plans the per-plane path takes:
// 3-wide stride-2 windows with a left pad of 0 or 1, at least 8 wide.
func TestStride3S2Cols(t *testing.T) {
	cols := func(iw, ow, pad int) []span {
		out := make([]span, ow)
		for q := range out {
			lo, hi := max(2*q-pad, 0), min(2*q-pad+3, iw)
			out[q] = span{int32(lo), int32(hi - lo)}
		}
		return out
	}
	rows := []span{{0, 2}, {1, 3}, {3, 3}}
	off, ok := stride3S2Cols(rows, cols(32, 16, 1), 32)
	assert.True(t, ok)
	assert.Equal(t, 0, off)
	off, ok = stride3S2Cols(rows, cols(33, 16, 0), 33)
	assert.True(t, ok)
	assert.Equal(t, 1, off)
	_, ok = stride3S2Cols(rows, cols(14, 7, 1), 14) // fewer than 8 outputs
	assert.False(t, ok)
	_, ok = stride3S2Cols(rows, cols(32, 16, 2), 32) // pad 2
	assert.False(t, ok)
	_, ok = stride3S2Cols([]span{{0, 4}}, cols(32, 16, 1), 32) // 4 rows
	assert.False(t, ok)
	wide := cols(32, 16, 1)
	wide[5].n = 2
	_, ok = stride3S2Cols(rows, wide, 32)
	assert.False(t, ok)
}
