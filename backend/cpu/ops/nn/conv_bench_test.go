package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// convBenchCases are layers of the CNNs the CPU backend runs whole.
var convBenchCases = []struct {
	name                string
	n, c, h, w, m, k, s int
	pad, group          int
}{
	{"resnet_stem_7x7s2", 1, 3, 224, 224, 64, 7, 2, 3, 1},
	{"resnet_3x3_64", 1, 64, 56, 56, 64, 3, 1, 1, 1},
	{"resnet_1x1_256to64", 1, 256, 56, 56, 64, 1, 1, 0, 1},
	{"resnet_3x3s2_128", 1, 128, 56, 56, 128, 3, 2, 1, 1},
	{"vgg_3x3_64_224", 1, 64, 224, 224, 64, 3, 1, 1, 1},
	{"mobilenet_dw_3x3_32", 1, 32, 112, 112, 32, 3, 1, 1, 32},
	{"resnet_3x3_64_batch4", 4, 64, 56, 56, 64, 3, 1, 1, 1},
}

// BenchmarkConv times Conv on typical layers; the GEMM-only time of the
// same product (BenchmarkConvGemmOnly) is its lower bound.
func BenchmarkConv(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, bc := range convBenchCases {
		b.Run(bc.name, func(b *testing.B) {
			x := f32([]int{bc.n, bc.c, bc.h, bc.w}, toF32(randF64(rng, bc.n*bc.c*bc.h*bc.w))...)
			w := f32([]int{bc.m, bc.c / bc.group, bc.k, bc.k}, toF32(randF64(rng, bc.m*bc.c/bc.group*bc.k*bc.k))...)
			bias := f32([]int{bc.m}, toF32(randF64(rng, bc.m))...)
			p := int64(bc.pad)
			n := testNode("Conv", 1, aInts("strides", int64(bc.s), int64(bc.s)), aInts("pads", p, p, p, p), aInt("group", int64(bc.group)))
			oh := (bc.h+2*bc.pad-bc.k)/bc.s + 1
			flops := 2.0 * float64(bc.n*bc.m*oh*oh*bc.c/bc.group*bc.k*bc.k)
			ctx := &kern.Context{Opset: 17}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := convKernel(ctx, n, []*graph.Tensor{x, w, bias}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkConvGemmOnly times the bare GEMM each Conv layer reduces to.
func BenchmarkConvGemmOnly(b *testing.B) {
	for _, bc := range convBenchCases {
		if bc.group != 1 {
			continue
		}
		oh := (bc.h+2*bc.pad-bc.k)/bc.s + 1
		m, nn, k := bc.m, oh*oh, bc.c*bc.k*bc.k
		b.Run(fmt.Sprintf("%s_%dx%dx%d", bc.name, m, nn, k), func(b *testing.B) {
			a, bm, c := make([]float32, m*k), make([]float32, k*nn), make([]float32, m*nn)
			for i := 0; i < b.N; i++ {
				for j := 0; j < bc.n; j++ {
					gemm.Sgemm(false, false, m, nn, k, 1, a, k, bm, nn, 0, c, nn)
				}
			}
			b.ReportMetric(2*float64(bc.n*m*nn*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
