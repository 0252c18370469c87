package ops_test

import (
	"testing"

	"github.com/onnxtrain/onnxtrain/graph"
)

// The smaller memory-bound ops of the real-size steps that the holds of
// 6–7 December read under half the triad (issue 14): ViT-B/16's patch
// rearrangement, the class-token pushdown's weight slices and its token
// split and scatter, and ResNet-50's 7×7 tail:
//
//	go test ./backend/cpu/ops -run XXX -bench 'MemboundSmall|Triad' -benchtime 50x

// Patchify: X [4, 3, 224, 224] into the 16×16 patches [4, 196, 768].
func BenchmarkMemboundSmallViTPatchify(b *testing.B) {
	n := mkNode(graph.FusedDomain, graph.Patchify, 1, graph.IntsAttr("kernel_shape", 16, 16))
	// reads X, writes the patches (the same count)
	benchOp(b, n, 17, 8*size(4, 3, 224, 224), randn(1, 4, 3, 224, 224))
}

// The in-projection weight's rows for the key and value ([2304, 768] →
// rows 768..2304) and for the query (rows 0..768): contiguous runs.
func BenchmarkMemboundSmallViTSliceWeight(b *testing.B) {
	w := randn(1, 2304, 768)
	for _, s := range []struct {
		name       string
		start, end int64
	}{{"kv", 768, 2304}, {"q", 0, 768}} {
		b.Run(s.name, func(b *testing.B) {
			rows := s.end - s.start
			// reads and writes the rows it keeps
			benchOp(b, mkNode("", "Slice", 1), 17, 8*rows*768, w, graph.FromInt64([]int64{s.start}, 1),
				graph.FromInt64([]int64{s.end}, 1), graph.FromInt64([]int64{0}, 1))
		})
	}
}

// SplitLike: the gradient of the concatenated tokens [4, 197, 768] cut
// back into the class token's [4, 1, 768] and the patches' [4, 196, 768].
func BenchmarkMemboundSmallViTSplitLike(b *testing.B) {
	n := mkNode(graph.InternalDomain, "SplitLike", 2, graph.IntAttr("axis", 1))
	benchOp(b, n, 17, 8*size(4, 197, 768), randn(1, 4, 197, 768), randn(2, 4, 1, 768), randn(3, 4, 196, 768))
}

// GatherGrad: the class token's gradient [4, 1, 768] scattered into the
// zeros of [4, 197, 768].
func BenchmarkMemboundSmallViTGatherGrad(b *testing.B) {
	n := mkNode(graph.InternalDomain, "GatherGrad", 1, graph.IntAttr("axis", 1))
	// writes the result (dY is 12 KiB; X is read for its shape)
	benchOp(b, n, 17, 4*size(4, 197, 768), randn(1, 4, 1, 768), randn(2, 4, 197, 768), graph.FromInt64([]int64{0}, 1))
}

// ResNet-50's last stage: BatchNorm with ReLU and its gradient at
// [8, 512, 7, 7], the global pool and its gradient's broadcast.
func BenchmarkMemboundSmallResNet50Tail(b *testing.B) {
	sh := []int{8, 512, 7, 7}
	b.Run("BatchNormRelu", func(b *testing.B) {
		n := mkNode(graph.FusedDomain, graph.BatchNormRelu, 3, graph.IntAttr("training_mode", 1))
		benchOp(b, n, 15, 8*size(sh...), randn(1, sh...), filled(1.5, 512), filled(0.25, 512), filled(0, 512), filled(1, 512))
	})
	b.Run("BatchNormReluGrad", func(b *testing.B) {
		n := mkNode(graph.FusedDomain, graph.BatchNormReluGrad, 3, graph.IntAttr("training_mode", 1))
		benchOp(b, n, 15, 16*size(sh...), randn(1, sh...), randn(2, sh...), randn(3, sh...), filled(1.5, 512), filled(0, 512), filled(1, 512))
	})
	b.Run("GlobalAveragePool", func(b *testing.B) {
		benchOp(b, mkNode("", "GlobalAveragePool", 1), 17, 4*size(8, 2048, 7, 7), randn(1, 8, 2048, 7, 7))
	})
}

// The GPT's final LayerNorm gradient (the one LayerNormalizationGrad of
// its step; the blocks' are LayerNormGradAdd): reads dY and X, writes dX.
func BenchmarkMemboundSmallGPTLayerNormGrad(b *testing.B) {
	n := mkNode(graph.InternalDomain, "LayerNormalizationGrad", 3, graph.IntAttr("axis", -1), graph.FloatAttr("epsilon", 1e-5))
	benchOp(b, n, 17, 12*size(4, 128, 768), randn(1, 4, 128, 768), randn(2, 4, 128, 768), filled(1.5, 768))
}
