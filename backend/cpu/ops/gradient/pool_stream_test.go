package gradient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TestMaxPoolGradStreamed checks the streamed path (a float32 dX of at
// least poolStreamMinBytes, each plane built in a cached buffer and
// stored with non-temporal stores) against the definition (the first
// tap, in row-major order, that no later tap strictly exceeds, the first
// tap taken even when NaN; PyTorch's rule), on odd plane sizes, padded
// and unpadded windows, the 2×2, 3×3/2 (ResNet's stem) and dilated
// paths, values on a coarse grid (ties) with and without NaNs, and
// bit for bit against the unstreamed path.
func TestMaxPoolGradStreamed(t *testing.T) {
	const n, c, h, w = 2, 72, 113, 115
	require.GreaterOrEqual(t, n*c*h*w*4, poolStreamMinBytes, "dX must be large enough to stream")
	rng := rand.New(rand.NewPCG(5, 6))
	for _, nan := range []bool{false, true} {
		x := make([]float32, n*c*h*w)
		for i := range x {
			x[i] = float32(rng.IntN(4))
			if nan && rng.IntN(997) == 0 {
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
				run := func(stream bool) []float32 {
					defer func(old bool) { poolGradStream = old }(poolGradStream)
					poolGradStream = stream
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
				streamed := run(true)
				for i := range want {
					if math.Float32bits(streamed[i]) != math.Float32bits(want[i]) {
						t.Fatalf("streamed dx[%d] = %v, want %v", i, streamed[i], want[i])
					}
				}
				plain := run(false)
				for i := range want {
					if math.Float32bits(plain[i]) != math.Float32bits(streamed[i]) {
						t.Fatalf("unstreamed dx[%d] = %v, streamed %v", i, plain[i], streamed[i])
					}
				}
			})
		}
	}
}
