package ops_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/onnxtrain/onnxtrain/graph"
)

// BenchmarkSubnormalSoftmax is ViT-B/16's attention softmax (4×12×197×197)
// on scores of growing spread: standard normal scores times 1, 10, 30 and
// 100. From a spread of about 30 many probabilities fall below float32's
// smallest normal (e^-87) and come out subnormal, which the x86 units
// compute through microcode assists unless flush-to-zero is on (it is
// not: results stay exact, as PyTorch's with its defaults). The forward
// and the gradient (fed the forward's output) are timed at each spread:
//
//	go test ./backend/cpu/ops -run XXX -bench SubnormalSoftmax -benchtime 10x -cpu 1,2
func BenchmarkSubnormalSoftmax(b *testing.B) {
	sh := []int{4, 12, 197, 197}
	for _, spread := range []float32{1, 10, 30, 100} {
		x := randn(1, sh...)
		xs := x.Float32s()
		for i := range xs {
			xs[i] *= spread
		}
		b.Run(fmt.Sprintf("spread%g/fwd", spread), func(b *testing.B) {
			benchOp(b, mkNode("", "Softmax", 1, graph.IntAttr("axis", -1)), 13, 8*size(sh...), x)
		})
		y := exactSoftmax(x)
		b.Run(fmt.Sprintf("spread%g/grad", spread), func(b *testing.B) {
			n := mkNode(graph.InternalDomain, "SoftmaxGrad", 1, graph.IntAttr("axis", -1))
			benchOp(b, n, 13, 12*size(sh...), randn(2, sh...), y)
		})
	}
}

// exactSoftmax is the softmax of x's rows in float64, rounded to float32
// (subnormals included).
func exactSoftmax(x *graph.Tensor) *graph.Tensor {
	v := x.Float32s()
	w := x.Shape[len(x.Shape)-1]
	out := newT(graph.Float32, x.Shape)
	o := out.Float32s()
	for r := 0; r < len(v); r += w {
		m := v[r]
		for _, e := range v[r : r+w] {
			m = max(m, e)
		}
		var s float64
		for _, e := range v[r : r+w] {
			s += math.Exp(float64(e - m))
		}
		for i, e := range v[r : r+w] {
			o[r+i] = float32(math.Exp(float64(e-m)) / s)
		}
	}
	return out
}
