package gradient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMaxPoolGradWide checks MaxPoolGrad without Indices on planes wide
// enough for the vector runs (nn.PoolArgmaxScatter3x3S2 over 8 windows or
// more) with the padded border windows beside them (addBorderWindow's
// two-column scan over two and three rows), odd sizes, the 2×2, 3×3/1
// and dilated paths, against the definition (the first tap, in row-major
// order, that no later tap strictly exceeds, the first tap taken even
// when NaN; PyTorch's rule), bit for bit, on a coarse grid (ties) with
// and without NaNs.
func TestMaxPoolGradWide(t *testing.T) {
	const n, c, h, w = 2, 3, 113, 115
	rng := rand.New(rand.NewPCG(5, 6))
	for _, nan := range []bool{false, true} {
		x := make([]float32, n*c*h*w)
		for i := range x {
			x[i] = float32(rng.IntN(4))
			if nan && rng.IntN(211) == 0 {
				x[i] = float32(math.NaN())
			}
		}
		for _, tc := range []poolCase{
			{[]int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}},
			{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}},
			{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{0, 1, 1, 0}},
			{[]int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}},
			{[]int{4, 3}, []int{3, 2}, []int{1, 1}, []int{2, 1, 0, 1}},
			{[]int{2, 2}, []int{2, 1}, []int{2, 2}, []int{0, 1, 1, 0}},
		} {
			t.Run(fmt.Sprintf("nan%v_k%v_s%v_d%v_p%v", nan, tc.k, tc.s, tc.d, tc.pads), func(t *testing.T) {
				oh, ow := tc.outSize(h, w)
				dy := make([]float32, n*c*oh*ow)
				for i := range dy {
					dy[i] = float32(rng.IntN(100) + 1)
				}
				want := maxPoolGradByDefinition(tc, x, dy, n*c, h, w, oh, ow)
				got := runMaxPoolGrad(t, tc, x, dy, n, c, h, w, oh, ow)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("dx[%d] = %v, want %v", i, got[i], want[i])
					}
				}
			})
		}
	}
}
