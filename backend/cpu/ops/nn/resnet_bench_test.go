package nn

import (
	"math/rand/v2"
	"testing"
)

// resnet18Layers are the distinct convolutions of torchvision's ResNet-18
// on 64×64 images at batch 32 (the training benchmark's shapes); count is
// how many of each the network has.
var resnet18Layers = []struct {
	name                  string
	c, h, m, k, s, p, cnt int
}{
	{"conv1_7x7s2_3to64", 3, 64, 64, 7, 2, 3, 1},
	{"l1_3x3_64", 64, 16, 64, 3, 1, 1, 4},
	{"l2_3x3s2_64to128", 64, 16, 128, 3, 2, 1, 1},
	{"l2_3x3_128", 128, 8, 128, 3, 1, 1, 3},
	{"l2_ds_1x1s2_64to128", 64, 16, 128, 1, 2, 0, 1},
	{"l3_3x3s2_128to256", 128, 8, 256, 3, 2, 1, 1},
	{"l3_3x3_256", 256, 4, 256, 3, 1, 1, 3},
	{"l3_ds_1x1s2_128to256", 128, 8, 256, 1, 2, 0, 1},
	{"l4_3x3s2_256to512", 256, 4, 512, 3, 2, 1, 1},
	{"l4_3x3_512", 512, 2, 512, 3, 1, 1, 3},
	{"l4_ds_1x1s2_256to512", 256, 4, 512, 1, 2, 0, 1},
}

// BenchmarkResNet18Conv times the forward product, the filter gradient and
// the input gradient of each ResNet-18 layer at batch 32 through the
// implicit GEMM, reporting GFLOP/s of process CPU time (cpu-GFLOP/s: run
// with -cpu 1 to read it as one core's throughput) and ms of CPU per call.
func BenchmarkResNet18Conv(b *testing.B) {
	const n = 32
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range resnet18Layers {
		oh := (l.h+2*l.p-l.k)/l.s + 1
		benchConvPasses(b, rng, l.name, Conv2D{N: n, C: l.c, H: l.h, W: l.h, M: l.m, KH: l.k, KW: l.k, SH: l.s, SW: l.s, DH: 1, DW: 1,
			PadTop: l.p, PadLeft: l.p, OH: oh, OW: oh})
	}
}
