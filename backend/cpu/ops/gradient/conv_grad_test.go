package gradient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/graph"
)

// refConv2DGrads computes Conv's input and weight gradients for an
// ungrouped 2-D convolution (square stride s, pads top, left, bottom,
// right, no dilation) by their definitions:
// y[i,m,oh,ow] = Σ w[m,c,a,b]·x[i,c,oh·s+a-top,ow·s+b-left], so dx and dw
// are the sums of dy times the other factor over every term.
func refConv2DGrads(x, w, dy []float64, xs, ws []int, s int, pads []int) (dx, dw []float64) {
	n, c, h, wd := xs[0], xs[1], xs[2], xs[3]
	m, kh, kw := ws[0], ws[2], ws[3]
	oh, ow := (h+pads[0]+pads[2]-kh)/s+1, (wd+pads[1]+pads[3]-kw)/s+1
	dx, dw = make([]float64, len(x)), make([]float64, len(w))
	for i := 0; i < n; i++ {
		for o := 0; o < m; o++ {
			for r := 0; r < oh; r++ {
				for q := 0; q < ow; q++ {
					g := dy[((i*m+o)*oh+r)*ow+q]
					for ch := 0; ch < c; ch++ {
						for a := 0; a < kh; a++ {
							for b := 0; b < kw; b++ {
								ih, iw := r*s+a-pads[0], q*s+b-pads[1]
								if ih < 0 || ih >= h || iw < 0 || iw >= wd {
									continue
								}
								xi := ((i*c+ch)*h+ih)*wd + iw
								wi := ((o*c+ch)*kh+a)*kw + b
								dx[xi] += g * w[wi]
								dw[wi] += g * x[xi]
							}
						}
					}
				}
			}
		}
	}
	return dx, dw
}

// TestConvGradBatchedImages checks ConvBackwardData and ConvBackwardFilter
// against refConv2DGrads with the images batched into one product (tiles
// of 2, 2 and 1 images, or all 5) and one image at a time, in float64 and
// float32. With stride 1 and the largest budget the input gradient runs as
// a correlation with the flipped kernel (convColsToImageGather); otherwise
// as col2im.
func TestConvGradBatchedImages(t *testing.T) {
	xs := []int{5, 3, 7, 6}
	for _, geo := range []struct {
		stride int
		ws     []int
		pads   []int
	}{
		{1, []int{4, 3, 3, 3}, []int{1, 1, 1, 1}},
		{1, []int{4, 3, 3, 2}, []int{2, 0, 0, 1}},
		{2, []int{4, 3, 3, 3}, []int{1, 1, 1, 1}},
	} {
		ws, pads, stride := geo.ws, geo.pads, geo.stride
		oh, ow := (xs[2]+pads[0]+pads[2]-ws[2])/stride+1, (xs[3]+pads[1]+pads[3]-ws[3])/stride+1
		dys := []int{xs[0], ws[0], oh, ow}
		rng := rand.New(rand.NewPCG(7, uint64(stride)))
		rnd := func(k int) []float64 {
			v := make([]float64, k)
			for i := range v {
				v[i] = rng.NormFloat64()
			}
			return v
		}
		x, w, dy := rnd(product(xs)), rnd(product(ws)), rnd(product(dys))
		wantDX, wantDW := refConv2DGrads(x, w, dy, xs, ws, stride, pads)
		perImage := ws[1] * ws[2] * ws[3] * oh * ow
		// budget: all images at once, tiles of two, one at a time.
		for _, tc := range []struct {
			budget, batch int
		}{{1 << 19, 5}, {perImage, 2}, {perImage / 2, 1}} {
			t.Run(fmt.Sprintf("stride%d/kernel%v/pads%v/batch%d", stride, ws[2:], pads, tc.batch), func(t *testing.T) {
				saved := convGradColBudget
				convGradColBudget = tc.budget
				defer func() { convGradColBudget = saved }()
				require.Equal(t, tc.batch, convGradImageBatch(xs[0], perImage))
				n := &graph.Node{Name: "conv", OpType: "ConvBackwardData", Outputs: []string{"g"}}
				n.SetAttr(&graph.Attr{Name: "strides", Type: graph.AttrInts, Ints: []int64{int64(stride), int64(stride)}})
				n.SetAttr(&graph.Attr{Name: "pads", Type: graph.AttrInts, Ints: []int64{int64(pads[0]), int64(pads[1]), int64(pads[2]), int64(pads[3])}})
				p, err := newConvGradPlan(n, xs, ws, false)
				require.NoError(t, err)
				require.Equal(t, dys, p.dyShape)
				assert.Equal(t, stride == 1, p.transposedWindow() != nil)

				dx, dw := make([]float64, len(x)), make([]float64, len(w))
				convGradRun(p, nn.WinogradAuto, false, false, dy, w, dx)
				convGradRun(p, nn.WinogradAuto, false, true, dy, x, dw)
				assertAllClose(t, wantDX, dx, 1e-12, "dX float64")
				assertAllClose(t, wantDW, dw, 1e-12, "dW float64")

				dx32, dw32 := make([]float32, len(x)), make([]float32, len(w))
				convGradRun(p, nn.WinogradAuto, false, false, to32(dy), to32(w), dx32)
				convGradRun(p, nn.WinogradAuto, false, true, to32(dy), to32(x), dw32)
				assertAllClose(t, wantDX, to64(dx32), 1e-4, "dX float32")
				assertAllClose(t, wantDW, to64(dw32), 1e-4, "dW float32")
			})
		}
	}
}

func assertAllClose(t *testing.T, want, got []float64, tol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	bad := 0
	for i := range want {
		// (Written so that a NaN, which compares false, counts as a
		// difference.)
		if !(math.Abs(want[i]-got[i]) <= tol*(1+math.Abs(want[i]))) {
			if bad < 3 {
				assert.InDelta(t, want[i], got[i], tol*(1+math.Abs(want[i])), "%s[%d]", what, i)
			}
			bad++
		}
	}
	assert.Zero(t, bad, "%s: %d of %d elements differ", what, bad, len(want))
}

func to32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
