package gradient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// argmaxCase is a poolCase with ceil_mode.
type argmaxCase struct {
	poolCase
	ceil bool
}

// poolNode is a node of op with tc's attributes (poolCase.node's and
// ceil_mode).
func (tc argmaxCase) poolNode(domain, op string) *graph.Node {
	node := tc.node(domain, op)
	if tc.ceil {
		node.SetAttr(&graph.Attr{Name: "ceil_mode", Type: graph.AttrInt, I: 1})
	}
	return node
}

// runKernel runs the registered kernel of node's op on in.
func runKernel(t *testing.T, node *graph.Node, outputs int, in ...*graph.Tensor) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup(node.Domain, node.OpType, 17)
	require.True(t, ok, "%s.%s has a kernel", node.Domain, node.OpType)
	node.Outputs = make([]string, outputs)
	for i := range node.Outputs {
		node.Outputs[i] = fmt.Sprintf("out%d", i)
	}
	return spec.Fn(&kern.Context{Opset: 17}, node, in)
}

// argmaxCodesByDefinition returns, per output of the pool tc over
// planes h×w planes (oh×ow outputs), the code graph.MaxPoolArgmax
// defines: the row-major scan's first maximum, as i·kw + j from the
// window's first tap inside the input, 255 for a window with none.
func argmaxCodesByDefinition(tc poolCase, x []float32, planes, h, w, oh, ow int) []uint8 {
	out := make([]uint8, planes*oh*ow)
	for p := 0; p < planes; p++ {
		for r := 0; r < oh; r++ {
			for q := 0; q < ow; q++ {
				best, bi, bj, i0, j0 := float32(0), -1, -1, -1, -1
				for a := 0; a < tc.k[0]; a++ {
					i := r*tc.s[0] - tc.pads[0] + a
					for b := 0; b < tc.k[1]; b++ {
						j := q*tc.s[1] - tc.pads[1] + b
						if i < 0 || i >= h || j < 0 || j >= w {
							continue
						}
						if i0 < 0 {
							i0, j0 = i, j
						}
						if v := x[p*h*w+i*w+j]; bi < 0 || v > best {
							best, bi, bj = v, i, j
						}
					}
				}
				code := uint8(graph.MaxPoolNoTap)
				if bi >= 0 {
					code = uint8((bi-i0)*tc.k[1] + bj - j0)
				}
				out[(p*oh+r)*ow+q] = code
			}
		}
	}
	return out
}

// TestMaxPoolArgmaxGradMatchesMaxPoolGrad runs MaxPoolArgmax and then
// MaxPoolArgmaxGrad on the window shapes of every MaxPool path (3×3/2 with
// the vector runs and their padded borders, 3×3/1, 2×2/2, uneven pads,
// ceil_mode, windows wholly in padding) over odd-sized planes, small and
// wide, of coarse values (ties), with and without NaNs and signed zeros,
// and checks bit for bit: Y against the MaxPool kernel's, the codes against
// their definition, and dX, with and without the vector loop of the 3×3
// runs, against the MaxPoolGrad kernel (argmax found in X) and the
// definition.
func TestMaxPoolArgmaxGradMatchesMaxPoolGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, size := range [][4]int{{2, 3, 113, 115}, {2, 5, 11, 10}, {1, 2, 9, 37}} {
		n, c, h, w := size[0], size[1], size[2], size[3]
		for _, special := range []string{"none", "nan", "zeros"} {
			x := make([]float32, n*c*h*w)
			for i := range x {
				x[i] = float32(rng.IntN(4))
				switch {
				case special == "nan" && rng.IntN(97) == 0:
					x[i] = float32(math.NaN())
				case special == "zeros" && rng.IntN(2) == 0:
					x[i] = float32(math.Copysign(0, float64(rng.IntN(2)*2-1)))
				case special == "zeros":
					x[i] = -x[i]
				}
			}
			for _, tc := range []argmaxCase{
				{poolCase{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}}, false},
				{poolCase{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{0, 1, 1, 0}}, false},
				{poolCase{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}}, true},
				{poolCase{[]int{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1, 1, 1}}, false},
				{poolCase{[]int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}}, false},
				{poolCase{[]int{2, 2}, []int{2, 2}, []int{1, 1}, []int{0, 0, 0, 0}}, true},
				{poolCase{[]int{4, 3}, []int{3, 2}, []int{1, 1}, []int{2, 1, 0, 1}}, false},
				{poolCase{[]int{2, 3}, []int{1, 2}, []int{1, 1}, []int{1, 2, 1, 2}}, true},
				{poolCase{[]int{5, 5}, []int{4, 4}, []int{1, 1}, []int{4, 4, 4, 4}}, true},
			} {
				t.Run(fmt.Sprintf("%dx%d_%s_k%v_s%v_p%v_ceil%v", h, w, special, tc.k, tc.s, tc.pads, tc.ceil), func(t *testing.T) {
					xt := graph.FromFloat32(x, n, c, h, w)
					fwd, err := runKernel(t, tc.poolNode(graph.FusedDomain, graph.MaxPoolArgmax), 2, xt)
					require.NoError(t, err)
					ref, err := runKernel(t, tc.poolNode("", "MaxPool"), 1, xt)
					require.NoError(t, err)
					require.Equal(t, ref[0].Shape, fwd[0].Shape)
					require.Equal(t, graph.Uint8, fwd[1].DType)
					require.Equal(t, ref[0].Shape, fwd[1].Shape)
					oh, ow := ref[0].Shape[2], ref[0].Shape[3]
					yGot, yRef := fwd[0].Float32s(), ref[0].Float32s()
					for i := range yRef {
						require.Equal(t, math.Float32bits(yRef[i]), math.Float32bits(yGot[i]), "y[%d] = %v, MaxPool's %v", i, yGot[i], yRef[i])
					}
					require.Equal(t, argmaxCodesByDefinition(tc.poolCase, x, n*c, h, w, oh, ow), fwd[1].Data.([]uint8))

					dy := make([]float32, n*c*oh*ow)
					for i := range dy {
						dy[i] = float32(rng.IntN(100)+1) / 8
					}
					dyt := graph.FromFloat32(dy, n, c, oh, ow)
					bwd, err := runKernel(t, tc.poolNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad), 1,
						dyt, fwd[1], graph.FromInt64([]int64{int64(n), int64(c), int64(h), int64(w)}, 4))
					require.NoError(t, err)
					// The same without the vector loop of the 3×3 runs.
					saved := argmaxGradAsm
					argmaxGradAsm = false
					scalar, err := runKernel(t, tc.poolNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad), 1,
						dyt, fwd[1], graph.FromInt64([]int64{int64(n), int64(c), int64(h), int64(w)}, 4))
					argmaxGradAsm = saved
					require.NoError(t, err)
					old, err := runKernel(t, tc.poolNode(graph.InternalDomain, "MaxPoolGrad"), 1, dyt, xt)
					require.NoError(t, err)
					want := maxPoolGradByDefinition(tc.poolCase, x, dy, n*c, h, w, oh, ow)
					got, cur, inGo := bwd[0].Float32s(), old[0].Float32s(), scalar[0].Float32s()
					for i := range want {
						require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "dx[%d] = %v, want %v", i, got[i], want[i])
						require.Equal(t, math.Float32bits(want[i]), math.Float32bits(inGo[i]), "dx[%d] in Go = %v, want %v", i, inGo[i], want[i])
						require.Equal(t, math.Float32bits(cur[i]), math.Float32bits(got[i]), "dx[%d] = %v, MaxPoolGrad's %v", i, got[i], cur[i])
					}
				})
			}
		}
	}
}

// TestMaxPoolArgmaxGradBadInput: codes naming a tap outside their window,
// 255 for a window with taps, codes of the wrong type or shape, and a
// kernel with more taps than a byte holds are errors naming what is
// wrong, not panics.
func TestMaxPoolArgmaxGradBadInput(t *testing.T) {
	tc := argmaxCase{poolCase{[]int{3, 3}, []int{2, 2}, []int{1, 1}, []int{1, 1, 1, 1}}, false}
	const n, c, h, w, oh, ow = 1, 2, 9, 9, 5, 5
	shape := graph.FromInt64([]int64{n, c, h, w}, 4)
	dy := graph.FromFloat32(make([]float32, n*c*oh*ow), n, c, oh, ow)
	codes := func(at int, v uint8) *graph.Tensor {
		d := make([]uint8, n*c*oh*ow)
		d[at] = v
		return &graph.Tensor{DType: graph.Uint8, Shape: []int{n, c, oh, ow}, Data: d}
	}
	// Output (0, 0) is the corner window: rows 0-1, columns 0-1 (code 3
	// is row 1, column 0; code 2 is column 2, outside it).
	_, err := runKernel(t, tc.poolNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad), 1, dy, codes(0, 3), shape)
	require.NoError(t, err)
	for _, bad := range []struct {
		at   int
		code uint8
	}{{0, 2}, {0, 6}, {2, 7}, {30, 9}, {31, graph.MaxPoolNoTap}, {49, 200}} {
		_, err := runKernel(t, tc.poolNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad), 1, dy, codes(bad.at, bad.code), shape)
		require.Error(t, err, "code %d at %d", bad.code, bad.at)
		assert.Contains(t, err.Error(), fmt.Sprintf("code %d of output %d", bad.code, bad.at))
	}
	// A plane 41 wide: windows 1-19 of each row are a run of 3×3
	// windows, rows 1-3 have three rows inside the input (the vector loop
	// with AVX2: window 1 here, two blocks of eight, one block over the
	// last eight); the first code above 8 in row-major order is named.
	const wh, ww, wow = 9, 41, 21
	wide := graph.FromInt64([]int64{1, 1, wh, ww}, 4)
	wdy := graph.FromFloat32(make([]float32, 5*wow), 1, 1, 5, wow)
	for _, bad := range [][]struct {
		at   int
		code uint8
	}{{{wow + 1, 9}}, {{2*wow + 5, 12}}, {{2*wow + 16, 9}, {2*wow + 18, 200}}, {{3*wow + 19, 9}}, {{3*wow + 12, 255}, {3*wow + 3, 9}}} {
		d := make([]uint8, 5*wow)
		for _, b := range bad {
			d[b.at] = b.code
		}
		_, err := runKernel(t, tc.poolNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad), 1, wdy,
			&graph.Tensor{DType: graph.Uint8, Shape: []int{1, 1, 5, wow}, Data: d}, wide)
		first := bad[0]
		for _, b := range bad[1:] {
			if b.at < first.at {
				first = b
			}
		}
		require.Error(t, err, "codes %v", bad)
		assert.Contains(t, err.Error(), fmt.Sprintf("code %d of output %d", first.code, first.at))
	}
	_, err = runKernel(t, tc.poolNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad), 1, dy,
		&graph.Tensor{DType: graph.Uint8, Shape: []int{n, c, oh, ow - 1}, Data: make([]uint8, n*c*oh*(ow-1))}, shape)
	require.ErrorContains(t, err, "codes have")
	_, err = runKernel(t, tc.poolNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad), 1, dy,
		graph.FromInt64(make([]int64, n*c*oh*ow), n, c, oh, ow), shape)
	require.ErrorContains(t, err, "codes have")
	big := argmaxCase{poolCase{[]int{16, 16}, []int{1, 1}, []int{1, 1}, []int{0, 0, 0, 0}}, false}
	_, err = runKernel(t, big.poolNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad), 1,
		graph.FromFloat32(make([]float32, 4), 1, 1, 2, 2), &graph.Tensor{DType: graph.Uint8, Shape: []int{1, 1, 2, 2}, Data: make([]uint8, 4)},
		graph.FromInt64([]int64{1, 1, 17, 17}, 4))
	require.ErrorContains(t, err, "too many for a one-byte code")
	_, err = runKernel(t, big.poolNode(graph.FusedDomain, graph.MaxPoolArgmax), 2, graph.FromFloat32(make([]float32, 17*17), 1, 1, 17, 17))
	require.ErrorContains(t, err, "too many for a one-byte code")
	dil := argmaxCase{poolCase{[]int{2, 2}, []int{1, 1}, []int{2, 2}, []int{0, 0, 0, 0}}, false}
	_, err = runKernel(t, dil.poolNode(graph.FusedDomain, graph.MaxPoolArgmax), 2, graph.FromFloat32(make([]float32, 25), 1, 1, 5, 5))
	require.ErrorContains(t, err, "consecutive")
}
