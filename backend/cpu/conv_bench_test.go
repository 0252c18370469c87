package cpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// BenchmarkConvBackward times the forward Conv kernel and its two backward
// kernels on a ResNet-style 3x3 layer and a depthwise one, in float32.
func BenchmarkConvBackward(b *testing.B) {
	r := rand.New(rand.NewPCG(33, 34))
	f32 := func(shape ...int) *graph.Tensor {
		t := graph.Zeros(graph.Float32, shape...)
		for i := range t.Float32s() {
			t.Float32s()[i] = float32(r.Float64()*2 - 1)
		}
		return t
	}
	layers := []struct {
		name  string
		x, w  []int
		attrs []*graph.Attr
	}{
		{"3x3 64ch 28x28 batch 8", []int{8, 64, 28, 28}, []int{64, 64, 3, 3}, []*graph.Attr{graph.IntsAttr("pads", 1, 1, 1, 1)}},
		{"depthwise 3x3 128ch 28x28 batch 8", []int{8, 128, 28, 28}, []int{128, 1, 3, 3},
			[]*graph.Attr{graph.IntsAttr("pads", 1, 1, 1, 1), graph.IntAttr("group", 128)}},
	}
	for _, l := range layers {
		x, w := f32(l.x...), f32(l.w...)
		node := &graph.Node{Name: "conv", OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"y"}}
		for _, a := range l.attrs {
			node.SetAttr(a)
		}
		ctx := &kern.Context{Opset: 17}
		fwd, ok := kern.Lookup("", "Conv", 17)
		require.True(b, ok)
		ys, err := fwd.Fn(ctx, node, []*graph.Tensor{x, w})
		require.NoError(b, err)
		dy := f32(ys[0].Shape...)
		xs := graph.FromInt64([]int64{int64(l.x[0]), int64(l.x[1]), int64(l.x[2]), int64(l.x[3])}, 4)
		ws := graph.FromInt64([]int64{int64(l.w[0]), int64(l.w[1]), int64(l.w[2]), int64(l.w[3])}, 4)
		run := func(name string, op string, in []*graph.Tensor) {
			b.Run(l.name+"/"+name, func(b *testing.B) {
				domain := graph.InternalDomain
				if op == "Conv" {
					domain = ""
				}
				spec, ok := kern.Lookup(domain, op, 17)
				require.True(b, ok)
				for i := 0; i < b.N; i++ {
					_, err := spec.Fn(ctx, node, in)
					require.NoError(b, err)
				}
			})
		}
		run("forward", "Conv", []*graph.Tensor{x, w})
		run("data", "ConvBackwardData", []*graph.Tensor{dy, w, xs})
		run("filter", "ConvBackwardFilter", []*graph.Tensor{dy, x, ws})
	}
}
