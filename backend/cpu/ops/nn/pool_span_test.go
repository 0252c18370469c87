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
