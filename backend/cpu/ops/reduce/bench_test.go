package reduce

import (
	"math"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// benchKernel times op on a (256, 1024) float32 input of values in [-4, 4].
func benchKernel(b *testing.B, opset int64, n *graph.Node, extra ...*graph.Tensor) {
	spec, ok := kern.Lookup("", n.OpType, opset)
	if !ok {
		b.Fatalf("no kernel for %s", n.OpType)
	}
	n.Outputs = []string{"y"}
	data := make([]float32, 256*1024)
	for i := range data {
		data[i] = float32(math.Sin(float64(i))) * 4
	}
	x := graph.FromFloat32(data, 256, 1024)
	in := append([]*graph.Tensor{x}, extra...)
	ctx := &kern.Context{Opset: opset}
	b.SetBytes(int64(4 * x.Size()))
	for b.Loop() {
		if _, err := spec.Fn(ctx, n, in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReduceSumLastAxis(b *testing.B) {
	benchKernel(b, 13, node("ReduceSum"), graph.FromInt64([]int64{1}, 1))
}

func BenchmarkReduceSumFirstAxis(b *testing.B) {
	benchKernel(b, 13, node("ReduceSum"), graph.FromInt64([]int64{0}, 1))
}

func BenchmarkReduceMaxLastAxis(b *testing.B) {
	benchKernel(b, 13, node("ReduceMax", graph.IntsAttr("axes", 1)))
}

func BenchmarkSoftmaxLastAxis(b *testing.B) { benchKernel(b, 13, node("Softmax")) }

func BenchmarkSoftmaxFirstAxis(b *testing.B) {
	benchKernel(b, 13, node("Softmax", graph.IntAttr("axis", 0)))
}

func BenchmarkLayerNormalization(b *testing.B) {
	scale := graph.FromFloat32(iota32(1024), 1024)
	benchKernel(b, 17, node("LayerNormalization"), scale, scale)
}
