package nn

import (
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
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
	const ref = 2048
	ra, rb, rc := toF32(randF64(rng, ref*ref)), toF32(randF64(rng, ref*ref)), make([]float32, ref*ref)
	b.Run("ref_2048", func(b *testing.B) {
		c0 := processCPU()
		for i := 0; i < b.N; i++ {
			gemm.Sgemm(false, false, ref, ref, ref, 1, ra, ref, rb, ref, 0, rc, ref)
		}
		flops := 2 * float64(ref*ref*ref) * float64(b.N)
		b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		if cpu := float64(processCPU()-c0) / 1e9; cpu > 0 {
			b.ReportMetric(flops/cpu/1e9, "cpu-GFLOP/s")
		}
	})
	for _, l := range resnet50Strided {
		oh := (l.h+2*l.p-l.k)/l.s + 1
		g := Conv2D{N: n, C: l.c, H: l.h, W: l.h, M: l.m, KH: l.k, KW: l.k, SH: l.s, SW: l.s, DH: 1, DW: 1,
			PadTop: l.p, PadLeft: l.p, OH: oh, OW: oh}
		x := toF32(randF64(rng, n*l.c*l.h*l.h))
		w := toF32(randF64(rng, l.m*l.c*l.k*l.k))
		y := toF32(randF64(rng, n*l.m*oh*oh))
		dw := make([]float32, len(w))
		dx := make([]float32, len(x))
		flops := 2 * float64(n*l.m*oh*oh*l.c*l.k*l.k)
		padEnd := max(0, (oh-1)*l.s+l.k-l.p-l.h)
		ops := []struct {
			name string
			run  func()
			ok   bool
		}{
			{"fwd", func() { g.Forward(x, w, y, false) }, true},
			{"dW", func() { g.FilterGrad(y, x, dw, false) }, true},
			{"dX", func() { g.InputGrad(y, w, dx) }, g.InputGradImplicit(padEnd, padEnd)},
		}
		for _, op := range ops {
			if !op.ok {
				continue
			}
			b.Run(l.name+"/"+op.name, func(b *testing.B) {
				op.run()
				b.ResetTimer()
				c0 := processCPU()
				for i := 0; i < b.N; i++ {
					op.run()
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				if cpu := float64(processCPU()-c0) / 1e9; cpu > 0 {
					b.ReportMetric(flops*float64(b.N)/cpu/1e9, "cpu-GFLOP/s")
				}
			})
		}
	}
}
