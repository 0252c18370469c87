package nn

import (
	"math/rand/v2"
	"testing"
)

// resnet50Strided are ResNet-50's convolutions with a window larger than
// 1×1 and a stride of 2 (torchvision's v1.5: the stride on the 3×3 layer
// of each stage's first block, and the 7×7 stem), at 224 px, batch 8.
var resnet50Strided = []struct {
	name             string
	c, h, m, k, s, p int
}{
	{"stem_7x7s2_3to64", 3, 224, 64, 7, 2, 3},
	{"l2_3x3s2_128", 128, 56, 128, 3, 2, 1},
	{"l3_3x3s2_256", 256, 28, 256, 3, 2, 1},
	{"l4_3x3s2_512", 512, 14, 512, 3, 2, 1},
}

// BenchmarkResNet50Strided times the forward product, the filter gradient
// and the input gradient of ResNet-50's strided 3×3 and 7×7 layers at
// batch 8 through Conv2D, beside the 2048³ GEMM timed the same way (run
// with -cpu 1 to read cpu-GFLOP/s as one core's throughput). The input
// gradient is timed where Conv2D takes it (by stride phase, see
// strided_grad.go: the 56×56 layer); package gradient's im2col path for
// the others is timed by its BenchmarkConvGradResNet50Strided.
func BenchmarkResNet50Strided(b *testing.B) {
	const n = 8
	rng := rand.New(rand.NewPCG(1, 2))
	benchRef2048(b, rng)
	for _, l := range resnet50Strided {
		oh := (l.h+2*l.p-l.k)/l.s + 1
		benchConvPasses(b, rng, l.name, Conv2D{N: n, C: l.c, H: l.h, W: l.h, M: l.m, KH: l.k, KW: l.k, SH: l.s, SW: l.s, DH: 1, DW: 1,
			PadTop: l.p, PadLeft: l.p, OH: oh, OW: oh})
	}
}
