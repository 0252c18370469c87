package nn

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkWinogradResNet18 times the forward product and the input
// gradient of ResNet-18's 3×3 stride-1 layers (batch 32, 64×64 images)
// with the Winograd policy off (implicit GEMM) and forced, reporting ms of
// process CPU per call and the direct product's GFLOP/s of CPU time
// (effective: Winograd does fewer multiplications). Run with -cpu 1,2.
func BenchmarkWinogradResNet18(b *testing.B) {
	var layers []winoBenchLayer
	for _, l := range resnet18Layers {
		if l.k == 3 && l.s == 1 {
			layers = append(layers, winoBenchLayer{l.name, winoCase{32, l.c, l.m, l.h, l.h, l.p, l.p, l.p, l.p}})
		}
	}
	benchWinograd(b, layers)
}

// BenchmarkWinogradShapes times other 3×3 stride-1 layers (few channels,
// many or few tiles) for the Auto policy's boundaries.
func BenchmarkWinogradShapes(b *testing.B) {
	benchWinograd(b, []winoBenchLayer{
		{"c16_32x32", winoCase{32, 16, 16, 32, 32, 1, 1, 1, 1}},
		{"c32_16x16", winoCase{32, 32, 32, 16, 16, 1, 1, 1, 1}},
		{"c64_8x8", winoCase{32, 64, 64, 8, 8, 1, 1, 1, 1}},
		{"c128_4x4", winoCase{32, 128, 128, 4, 4, 1, 1, 1, 1}},
		{"c256_2x2", winoCase{32, 256, 256, 2, 2, 1, 1, 1, 1}},
		{"c512_4x4", winoCase{32, 512, 512, 4, 4, 1, 1, 1, 1}},
		{"c256_8x8_n8", winoCase{8, 256, 256, 8, 8, 1, 1, 1, 1}},
		{"c64_56x56_n1", winoCase{1, 64, 64, 56, 56, 1, 1, 1, 1}},
	})
}

// BenchmarkWinogradResNet50 times ResNet-50's 3×3 stride-1 layers at
// 224 px, batch 8 (the training benchmark's shapes).
func BenchmarkWinogradResNet50(b *testing.B) {
	benchWinograd(b, []winoBenchLayer{
		{"c64_56x56", winoCase{8, 64, 64, 56, 56, 1, 1, 1, 1}},
		{"c128_28x28", winoCase{8, 128, 128, 28, 28, 1, 1, 1, 1}},
		{"c256_14x14", winoCase{8, 256, 256, 14, 14, 1, 1, 1, 1}},
		{"c512_7x7", winoCase{8, 512, 512, 7, 7, 1, 1, 1, 1}},
	})
}

type winoBenchLayer struct {
	name string
	tc   winoCase
}

func benchWinograd(b *testing.B, layers []winoBenchLayer) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bl := range layers {
		tc, l := bl.tc, bl
		n := tc.n
		g := tc.conv()
		x := toF32(randF64(rng, n*tc.c*tc.h*tc.w))
		w := toF32(randF64(rng, tc.m*tc.c*9))
		y := toF32(randF64(rng, n*tc.m*g.OH*g.OW))
		dx := make([]float32, len(x))
		flops := 2 * float64(n*tc.m*g.OH*g.OW*tc.c*9)
		for _, op := range []struct {
			name string
			run  func()
		}{
			{"fwd", func() { g.Forward(x, w, y, false) }},
			{"dX", func() { g.InputGrad(y, w, dx) }},
		} {
			for _, pol := range []struct {
				name string
				p    WinogradPolicy
			}{{"off", WinogradOff}, {"wino", WinogradForce}, {"auto", WinogradAuto}} {
				b.Run(l.name+"/"+op.name+"/"+pol.name, func(b *testing.B) {
					g.Winograd = pol.p
					op.run()
					b.ResetTimer()
					c0 := processCPU()
					for i := 0; i < b.N; i++ {
						op.run()
					}
					cpu := float64(processCPU()-c0) / 1e9
					b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/op")
					if cpu > 0 {
						b.ReportMetric(flops*float64(b.N)/cpu/1e9, "cpu-GFLOP/s")
					}
				})
			}
		}
	}
}
