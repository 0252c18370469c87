package ops_test

import (
	"testing"

	"github.com/onnxtrain/onnxtrain/graph"
)

// The ends of ResNet-50's bottleneck blocks (batch 8, 224 px) at the four
// stages' shapes, each as the chain of kernels it replaces ("unfused") and
// as the fused kernel ("fused"), as epilogue_bench_test.go does:
//
//	go test -c -o /tmp/ops.test ./backend/cpu/ops
//	COUNT=15 CPUS=1,2 bench/epilogue_minbench.sh /tmp/ops.test Residual
//
// b.SetBytes is the fused kernel's traffic, so MB/s compare the two as
// times and the fused kernel's MB/s with the triad's.

// resnetBlockEnds are the stages' block-end shapes: channels, side, and
// blocks per step.
var resnetBlockEnds = []struct {
	name     string
	c, side  int
	perStage int
}{{"c256_56", 256, 56, 3}, {"c512_28", 512, 28, 4}, {"c1024_14", 1024, 14, 6}, {"c2048_7", 2048, 7, 3}}

// BenchmarkResidualResNet50BNAddRelu: BatchNormalization (training), the
// residual Add and the Relu against BatchNormAddRelu, which reads X and R
// and writes Y.
func BenchmarkResidualResNet50BNAddRelu(b *testing.B) {
	for _, s := range resnetBlockEnds {
		b.Run(s.name, func(b *testing.B) {
			sh := []int{8, s.c, s.side, s.side}
			x, r := randn(1, sh...), randn(2, sh...)
			params := []*graph.Tensor{filled(1.5, s.c), filled(0.25, s.c), filled(0, s.c), filled(1, s.c)}
			bytes := 12 * size(sh...)
			b.Run("unfused", func(b *testing.B) {
				benchChain(b, bytes,
					stage{mkNode("", "BatchNormalization", 3, graph.IntAttr("training_mode", 1)), fixed(append([]*graph.Tensor{x}, params...)...)},
					stage{mkNode("", "Add", 1), func(p [][]*graph.Tensor) []*graph.Tensor { return []*graph.Tensor{p[0][0], r} }},
					stage{mkNode("", "Relu", 1), func(p [][]*graph.Tensor) []*graph.Tensor { return []*graph.Tensor{p[1][0]} }})
			})
			b.Run("fused", func(b *testing.B) {
				benchChain(b, bytes, stage{mkNode(graph.FusedDomain, graph.BatchNormAddRelu, 3, graph.IntAttr("training_mode", 1)),
					fixed(append(append([]*graph.Tensor{x}, params...), r)...)})
			})
		})
	}
}

// BenchmarkResidualResNet50AddReluGrad: the gradient sum at a block's
// output and the Relu's gradient (Add, ReluGrad) against AddReluGrad,
// which reads both gradients and the Relu's output and writes one.
func BenchmarkResidualResNet50AddReluGrad(b *testing.B) {
	for _, s := range resnetBlockEnds {
		b.Run(s.name, func(b *testing.B) {
			sh := []int{8, s.c, s.side, s.side}
			g1, g2, y := randn(3, sh...), randn(4, sh...), randn(5, sh...)
			bytes := 16 * size(sh...)
			b.Run("unfused", func(b *testing.B) {
				benchChain(b, bytes,
					stage{mkNode("", "Add", 1), fixed(g1, g2)},
					stage{mkNode(graph.FusedDomain, graph.ReluGrad, 1), func(p [][]*graph.Tensor) []*graph.Tensor { return []*graph.Tensor{p[0][0], y} }})
			})
			b.Run("fused", func(b *testing.B) {
				benchChain(b, bytes, stage{mkNode(graph.FusedDomain, graph.AddReluGrad, 1), fixed(g1, g2, y)})
			})
		})
	}
}

// BenchmarkResidualResNet50BNAddReluGrad: the gradient sum at a block's
// output masked by its Relu, then bn3's gradient (AddReluGrad,
// BatchNormalizationGrad) against BatchNormAddReluGrad, which reads both
// gradients, the Relu's output and X and writes dS and dX.
func BenchmarkResidualResNet50BNAddReluGrad(b *testing.B) {
	for _, s := range resnetBlockEnds {
		b.Run(s.name, func(b *testing.B) {
			sh := []int{8, s.c, s.side, s.side}
			g1, g2, y, x := randn(6, sh...), randn(7, sh...), randn(8, sh...), randn(9, sh...)
			params := []*graph.Tensor{filled(1.5, s.c), filled(0, s.c), filled(1, s.c)}
			bytes := 24 * size(sh...)
			attr := graph.IntAttr("training_mode", 1)
			b.Run("unfused", func(b *testing.B) {
				benchChain(b, bytes,
					stage{mkNode(graph.FusedDomain, graph.AddReluGrad, 1), fixed(g1, g2, y)},
					stage{mkNode(graph.InternalDomain, "BatchNormalizationGrad", 3, attr), func(p [][]*graph.Tensor) []*graph.Tensor {
						return append([]*graph.Tensor{p[0][0], x}, params...)
					}})
			})
			b.Run("fused", func(b *testing.B) {
				benchChain(b, bytes, stage{mkNode(graph.FusedDomain, graph.BatchNormAddReluGrad, 4, attr), fixed(append([]*graph.Tensor{g1, g2, y, x}, params...)...)})
			})
		})
	}
}
