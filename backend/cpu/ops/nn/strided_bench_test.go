package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
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

// BenchmarkResNet50StridedPhases times the phase split (Conv2D.pad, its
// padded input written stride phase by stride phase) of ResNet-50's
// strided 3×3 and 7×7 layers at batch 8, which their forward product and
// filter gradient each run first; reported as GB/s of the input read and
// the split written, with the caches dirtied between calls (256 MiB
// written by both cores, so that the pool stays awake) or not.
func BenchmarkResNet50StridedPhases(b *testing.B) {
	const n = 8
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range resnet50Strided {
		oh := (l.h+2*l.p-l.k)/l.s + 1
		g := Conv2D{N: n, C: l.c, H: l.h, W: l.h, M: l.m, KH: l.k, KW: l.k, SH: l.s, SW: l.s, DH: 1, DW: 1,
			PadTop: l.p, PadLeft: l.p, OH: oh, OW: oh}
		x := toF32(randF64(rng, n*l.c*l.h*l.h))
		for _, cold := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/cold=%v", l.name, cold), func(b *testing.B) {
				var bytes int
				var d time.Duration
				for i := 0; i < b.N; i++ {
					if cold {
						evictCaches(256)
					}
					t0 := time.Now()
					xp := g.pad(x)
					d += time.Since(t0)
					bytes = 4 * (len(x) + len(xp.x))
					xp.release()
				}
				b.ReportMetric(float64(bytes)*float64(b.N)/d.Seconds()/1e9, "GB/s")
				b.ReportMetric(float64(d.Microseconds())/float64(b.N)/1e3, "ms/op")
			})
		}
	}
}
