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

func BenchmarkMemboundResNet50MaxPoolArgmax(b *testing.B) {
	n := mkNode(graph.FusedDomain, graph.MaxPoolArgmax, 2, stemPoolAttrs()...)
	// reads X, writes Y and the codes
	benchOp(b, n, 17, 4*(size(8, 64, 112, 112)+size(8, 64, 56, 56))+size(8, 64, 56, 56), randn(1, 8, 64, 112, 112))
}

func BenchmarkMemboundResNet50MaxPoolArgmaxGrad(b *testing.B) {
	fwd := mkNode(graph.FusedDomain, graph.MaxPoolArgmax, 2, stemPoolAttrs()...)
	spec, ok := kern.Lookup(fwd.Domain, fwd.OpType, 17)
	if !ok {
		b.Fatal("no MaxPoolArgmax kernel")
	}
	out, err := spec.Fn(&kern.Context{Opset: 17}, fwd, []*graph.Tensor{randn(2, 8, 64, 112, 112)})
	if err != nil {
		b.Fatal(err)
	}
	n := mkNode(graph.FusedDomain, graph.MaxPoolArgmaxGrad, 1, stemPoolAttrs()...)
	// reads dY and the codes, writes dX
	benchOp(b, n, 17, 4*(size(8, 64, 112, 112)+size(8, 64, 56, 56))+size(8, 64, 56, 56),
		randn(1, 8, 64, 56, 56), out[1], graph.FromInt64([]int64{8, 64, 112, 112}, 4))
}
