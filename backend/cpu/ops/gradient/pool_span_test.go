package gradient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TestMaxPoolGradSpans checks MaxPoolGrad without Indices on the window
// shapes of the consecutive-tap paths (full 2×2 and 3×3 windows unrolled,
// partial border windows, other sizes) and on a dilated pool (the tap-list
// path) against the definition: each output's gradient goes to the first
// tap, in row-major order, that no later tap strictly exceeds, the first
// tap taken even when NaN. Values lie on a coarse grid (many ties) with
// NaNs sprinkled in; the planes are enough to split over goroutines.
func TestMaxPoolGradSpans(t *testing.T) {
	const n, c, h, w = 2, 40, 11, 10
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, n*c*h*w)
	for i := range x {
		x[i] = float32(rng.IntN(4))
		if rng.IntN(13) == 0 {
			x[i] = float32(math.NaN())
		}
	}
	for _, tc := range []poolCase{
		{[]int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}},
		{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}},
		{[]int{3, 3}, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}},
		{[]int{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 0, 0, 1}},
		{[]int{4, 3}, []int{3, 2}, []int{1, 1}, []int{2, 1, 0, 1}},
		{[]int{2, 2}, []int{2, 1}, []int{2, 2}, []int{0, 1, 1, 0}},
	} {
		t.Run(fmt.Sprintf("k%v_s%v_d%v_p%v", tc.k, tc.s, tc.d, tc.pads), func(t *testing.T) {
			oh, ow := tc.outSize(h, w)
			dy := make([]float32, n*c*oh*ow)
			for i := range dy {
				dy[i] = float32(rng.IntN(100) + 1)
			}
			want := maxPoolGradByDefinition(tc, x, dy, n*c, h, w, oh, ow)
			require.Equal(t, want, runMaxPoolGrad(t, tc, x, dy, n, c, h, w, oh, ow))
		})
	}
}

// poolCase is a 2-D max pool's window: kernel, strides, dilations, pads
// (begin H, begin W, end H, end W).
type poolCase struct{ k, s, d, pads []int }

// outSize is the pooled size of an h×w plane.
func (tc poolCase) outSize(h, w int) (oh, ow int) {
	oh = (h+tc.pads[0]+tc.pads[2]-tc.d[0]*(tc.k[0]-1)-1)/tc.s[0] + 1
	ow = (w+tc.pads[1]+tc.pads[3]-tc.d[1]*(tc.k[1]-1)-1)/tc.s[1] + 1
	return oh, ow
}

// maxPoolGradByDefinition is dX of a max pool over planes h×w planes by
// its definition: each dY element goes to the first tap of its window, in
// row-major order, that no later tap strictly exceeds (the first tap
// taken even when NaN).
func maxPoolGradByDefinition(tc poolCase, x, dy []float32, planes, h, w, oh, ow int) []float32 {
	want := make([]float32, len(x))
	for p := 0; p < planes; p++ {
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
	return want
}

// node is a node named pool of op with tc's kernel_shape, strides,
// dilations and pads.
func (tc poolCase) node(domain, op string) *graph.Node {
	node := &graph.Node{Name: "pool", OpType: op, Domain: domain}
	for name, v := range map[string][]int{"kernel_shape": tc.k, "strides": tc.s, "dilations": tc.d, "pads": tc.pads} {
		ints := make([]int64, len(v))
		for i, e := range v {
			ints[i] = int64(e)
		}
		node.SetAttr(&graph.Attr{Name: name, Type: graph.AttrInts, Ints: ints})
	}
	return node
}

// runMaxPoolGrad runs the MaxPoolGrad kernel (no Indices) with tc's
// attributes on dY (n×c×oh×ow) and X (n×c×h×w).
func runMaxPoolGrad(t testing.TB, tc poolCase, x, dy []float32, n, c, h, w, oh, ow int) []float32 {
	t.Helper()
	node := tc.node("", "MaxPoolGrad")
	node.Outputs = []string{"dx"}
	out, err := maxPoolGrad(nil, node, []*graph.Tensor{graph.FromFloat32(dy, n, c, oh, ow), graph.FromFloat32(x, n, c, h, w)})
	require.NoError(t, err)
	return out[0].Float32s()
}

// BenchmarkMaxPoolGradResNetStem times MaxPoolGrad (argmax recomputed from
// X) on ResNet-18's stem pool at batch 32 and 64×64 images: X 32×64×32×32,
// 3×3 windows, stride 2, pad 1.
func BenchmarkMaxPoolGradResNetStem(b *testing.B) {
	const n, c, h, w, oh, ow = 32, 64, 32, 32, 16, 16
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n*c*h*w)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	dy := make([]float32, n*c*oh*ow)
	for i := range dy {
		dy[i] = float32(rng.NormFloat64())
	}
	node := &graph.Node{Name: "pool", OpType: "MaxPoolGrad", Outputs: []string{"dx"}}
	node.SetAttr(&graph.Attr{Name: "kernel_shape", Type: graph.AttrInts, Ints: []int64{3, 3}})
	node.SetAttr(&graph.Attr{Name: "strides", Type: graph.AttrInts, Ints: []int64{2, 2}})
	node.SetAttr(&graph.Attr{Name: "pads", Type: graph.AttrInts, Ints: []int64{1, 1, 1, 1}})
	in := []*graph.Tensor{graph.FromFloat32(dy, n, c, oh, ow), graph.FromFloat32(x, n, c, h, w)}
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		if _, err := maxPoolGrad(nil, node, in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMaxPoolGradSeparable checks MaxPoolGrad without Indices on float32
// (the separable argmax: the first row holding the window's maximum, and
// in it the first column) against the definition, on values on a coarse
// grid (many ties, zeros of both signs) where most planes have no NaN,
// and on planes with NaNs at a window's first tap or inside rows (handed
// to the scan). The windows cover the unrolled widths, borders, kernel
// rows up to the path's limit and one beyond. The sums run in the same
// order as the definition's, so they must match exactly.
func TestMaxPoolGradSeparable(t *testing.T) {
	checkMaxPoolGradSeparable(t, 2, 20, 13, 11)
}

// TestMaxPoolGradSeparableWide is TestMaxPoolGradSeparable on planes wide
// enough for the AVX2 loops of the window maxima (blocks of 8 outputs, an
// overlapping last block and scalar borders), with even and odd widths.
func TestMaxPoolGradSeparableWide(t *testing.T) {
	for _, w := range []int{16, 17, 33, 40, 47} {
		t.Run(fmt.Sprint("w", w), func(t *testing.T) { checkMaxPoolGradSeparable(t, 2, 20, 9, w) })
	}
}

func checkMaxPoolGradSeparable(t *testing.T, n, c, h, w int) {
	rng := rand.New(rand.NewPCG(13, uint64(14+w)))
	x := make([]float32, n*c*h*w)
	grid := []float32{-1, 0, float32(math.Copysign(0, -1)), 0.5, 1, 2}
	for i := range x {
		x[i] = grid[rng.IntN(len(grid))]
	}
	for _, i := range []int{3*h*w + 0, 3*h*w + 2*w + 5, 17*h*w + 4*w + 1, 17*h*w + (h-4)*w + 10, 30*h*w + 6*w, 35*h*w + 7} {
		x[i] = float32(math.NaN())
	}
	for _, tc := range []poolCase{
		{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}},
		{[]int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}},
		{[]int{3, 3}, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}},
		{[]int{4, 5}, []int{3, 2}, []int{1, 1}, []int{2, 1, 1, 2}},
		{[]int{5, 1}, []int{2, 1}, []int{1, 1}, []int{2, 0, 2, 0}},
		{[]int{1, 2}, []int{3, 3}, []int{1, 1}, []int{0, 1, 0, 1}},
	} {
		t.Run(fmt.Sprintf("k%v_s%v_p%v", tc.k, tc.s, tc.pads), func(t *testing.T) {
			oh, ow := tc.outSize(h, w)
			dy := make([]float32, n*c*oh*ow)
			for i := range dy {
				dy[i] = float32(rng.NormFloat64())
			}
			want := maxPoolGradByDefinition(tc, x, dy, n*c, h, w, oh, ow)
			require.Equal(t, want, runMaxPoolGrad(t, tc, x, dy, n, c, h, w, oh, ow))
		})
	}
}
