package gradient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
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
		for _, tc := range []struct {
			k, s, d, pads []int
		}{
			{[]int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}},
			{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}},
			{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{0, 1, 1, 0}},
			{[]int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}},
			{[]int{4, 3}, []int{3, 2}, []int{1, 1}, []int{2, 1, 0, 1}},
			{[]int{2, 2}, []int{2, 1}, []int{2, 2}, []int{0, 1, 1, 0}},
		} {
			t.Run(fmt.Sprintf("nan%v_k%v_s%v_d%v_p%v", nan, tc.k, tc.s, tc.d, tc.pads), func(t *testing.T) {
				oh := (h+tc.pads[0]+tc.pads[2]-tc.d[0]*(tc.k[0]-1)-1)/tc.s[0] + 1
				ow := (w+tc.pads[1]+tc.pads[3]-tc.d[1]*(tc.k[1]-1)-1)/tc.s[1] + 1
				dy := make([]float32, n*c*oh*ow)
				for i := range dy {
					dy[i] = float32(rng.IntN(100) + 1)
				}
				want := make([]float32, len(x))
				for p := 0; p < n*c; p++ {
					for r := 0; r < oh; r++ {
						for q := 0; q < ow; q++ {
							best, at := float32(0), -1
							for a := 0; a < tc.k[0]; a++ {
								i := r*tc.s[0] - tc.pads[0] + a*tc.d[0]
								for b := 0; b < tc.k[1]; b++ {
									j := q*tc.s[1] - tc.pads[1] + b*tc.d[1]
									if i < 0 || i >= h || j < 0 || j >= w {
										continue
									}
									if v := x[p*h*w+i*w+j]; at < 0 || v > best {
										best, at = v, p*h*w+i*w+j
									}
								}
							}
							if at >= 0 {
								want[at] += dy[(p*oh+r)*ow+q]
							}
						}
					}
				}
				run := func() []float32 {
					node := &graph.Node{Name: "pool", OpType: "MaxPoolGrad", Outputs: []string{"dx"}}
					for name, v := range map[string][]int{"kernel_shape": tc.k, "strides": tc.s, "dilations": tc.d, "pads": tc.pads} {
						ints := make([]int64, len(v))
						for i, e := range v {
							ints[i] = int64(e)
						}
						node.SetAttr(&graph.Attr{Name: name, Type: graph.AttrInts, Ints: ints})
					}
					out, err := maxPoolGrad(nil, node, []*graph.Tensor{
						graph.FromFloat32(dy, n, c, oh, ow), graph.FromFloat32(x, n, c, h, w)})
					require.NoError(t, err)
					return out[0].Float32s()
				}
				got := run()
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("dx[%d] = %v, want %v", i, got[i], want[i])
					}
				}
			})
		}
	}
}
