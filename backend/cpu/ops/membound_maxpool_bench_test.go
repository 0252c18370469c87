package ops_test

import (
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// ResNet-50's stem pool as the fusion fuse-maxpool-argmax leaves it: the
// forward writes Y and one argmax code per output, the gradient reads dY
// and the codes (not X):
//
//	go test ./backend/cpu/ops -run XXX -bench 'MemboundResNet50MaxPool|Triad' -benchtime 20x

func stemPoolAttrs() []*graph.Attr {
	return []*graph.Attr{graph.IntsAttr("kernel_shape", 3, 3), graph.IntsAttr("strides", 2, 2), graph.IntsAttr("pads", 1, 1, 1, 1)}
}

// argmaxCodes runs MaxPoolArgmax on x and returns its argmax codes (the
// gradient's input).
func argmaxCodes(b *testing.B, attrs []*graph.Attr, x *graph.Tensor) *graph.Tensor {
	b.Helper()
	fwd := mkNode(graph.FusedDomain, graph.MaxPoolArgmax, 2, attrs...)
	spec, ok := kern.Lookup(fwd.Domain, fwd.OpType, 17)
	if !ok {
		b.Fatal("no MaxPoolArgmax kernel")
	}
	out, err := spec.Fn(&kern.Context{Opset: 17}, fwd, []*graph.Tensor{x})
	if err != nil {
		b.Fatal(err)
	}
	return out[1]
}

func BenchmarkMemboundResNet50MaxPoolArgmax(b *testing.B) {
	n := mkNode(graph.FusedDomain, graph.MaxPoolArgmax, 2, stemPoolAttrs()...)
	// reads X, writes Y and the codes
	benchOp(b, n, 17, 4*(size(8, 64, 112, 112)+size(8, 64, 56, 56))+size(8, 64, 56, 56), randn(1, 8, 64, 112, 112))
}

func BenchmarkMemboundResNet50MaxPoolArgmaxGrad(b *testing.B) {
	codes := argmaxCodes(b, stemPoolAttrs(), randn(2, 8, 64, 112, 112))
	n := mkNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad, 1, stemPoolAttrs()...)
	// reads dY and the codes, writes dX
	benchOp(b, n, 17, 4*(size(8, 64, 112, 112)+size(8, 64, 56, 56))+size(8, 64, 56, 56),
		randn(1, 8, 64, 56, 56), codes, graph.FromInt64([]int64{8, 64, 112, 112}, 4))
}

// BenchmarkMaxPoolForms times both forms of a training step's max pool —
// MaxPool with MaxPoolGrad (argmax found again in X) and MaxPoolArgmax
// with MaxPoolArgmaxGrad (argmax codes) — on the small fixtures' shapes:
// compare.py's ResNet-18 stem (batch 32, 64 px: X 32×64×32×32, 3×3/2 pad
// 1) and the Fashion-MNIST CNN's first pool (batch 64: X 64×32×28×28,
// 2×2/2). Run with ONNXTRAIN_BENCH_EVICT_MIB=0 (operands in cache, as in
// those steps).
func BenchmarkMaxPoolForms(b *testing.B) {
	for _, s := range []struct {
		name       string
		n, c, h, w int
		k, st, pad int64
		oh, ow     int
	}{{"resnet18_stem", 32, 64, 32, 32, 3, 2, 1, 16, 16}, {"fmnist_2x2", 64, 32, 28, 28, 2, 2, 0, 14, 14}} {
		attrs := []*graph.Attr{graph.IntsAttr("kernel_shape", s.k, s.k), graph.IntsAttr("strides", s.st, s.st),
			graph.IntsAttr("pads", s.pad, s.pad, s.pad, s.pad)}
		x, dy := randn(3, s.n, s.c, s.h, s.w), randn(4, s.n, s.c, s.oh, s.ow)
		xs, ys := size(s.n, s.c, s.h, s.w), size(s.n, s.c, s.oh, s.ow)
		codes := argmaxCodes(b, attrs, x)
		shape := graph.FromInt64([]int64{int64(s.n), int64(s.c), int64(s.h), int64(s.w)}, 4)
		b.Run(s.name+"/MaxPool", func(b *testing.B) {
			benchOp(b, mkNode("", "MaxPool", 1, attrs...), 17, 4*(xs+ys), x)
		})
		b.Run(s.name+"/MaxPoolGrad", func(b *testing.B) {
			benchOp(b, mkNode(graph.InternalDomain, "MaxPoolGrad", 1, attrs...), 17, 4*(2*xs+ys), dy, x)
		})
		b.Run(s.name+"/MaxPoolArgmax", func(b *testing.B) {
			benchOp(b, mkNode(graph.FusedDomain, graph.MaxPoolArgmax, 2, attrs...), 17, 4*(xs+ys)+ys, x)
		})
		b.Run(s.name+"/MaxPoolArgmaxGrad", func(b *testing.B) {
			benchOp(b, mkNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad, 1, attrs...), 17, 4*(xs+ys)+ys, dy, codes, shape)
		})
	}
}
