package nn

import (
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
)

// resnet50OneByOne are the distinct 1×1 convolutions of torchvision's
// ResNet-50 at 224 px (the training benchmark's shapes, batch 8).
var resnet50OneByOne = []struct {
	name       string
	c, h, m, s int
}{
	{"56_64to256", 64, 56, 256, 1},
	{"56_256to64", 256, 56, 64, 1},
	{"56_64to64", 64, 56, 64, 1},
	{"56_256to128", 256, 56, 128, 1},
	{"28_128to512", 128, 28, 512, 1},
	{"28_512to128", 512, 28, 128, 1},
	{"14_256to1024", 256, 14, 1024, 1},
	{"14_1024to256", 1024, 14, 256, 1},
	{"7_512to2048", 512, 7, 2048, 1},
	{"7_2048to512", 2048, 7, 512, 1},
	{"ds56_256to512s2", 256, 56, 512, 2},
	{"ds28_512to1024s2", 512, 28, 1024, 2},
	{"ds14_1024to2048s2", 1024, 14, 2048, 2},
}

// BenchmarkResNet50OneByOne times the three products of each ResNet-50
// 1×1 convolution at batch 8: "batch" is the product over the whole batch
// of pointwise.go, "before" what ran before it (one GEMM per image for
// the unit-stride forward pass and input gradient, the general implicit
// GEMM for the rest; the strided input gradient is not timed there, as it
// ran through im2col in package gradient). GFLOP/s of wall-clock time and
// of process CPU time (run with -cpu 1 to read the latter as one core's);
// ref_2048 is the 2048³ GEMM that the 85% is measured against.
func BenchmarkResNet50OneByOne(b *testing.B) {
	const n = 8
	rng := rand.New(rand.NewPCG(1, 2))
	benchRef2048(b, rng)
	for _, l := range resnet50OneByOne {
		oh := (l.h-1)/l.s + 1
		g := Conv2D{N: n, C: l.c, H: l.h, W: l.h, M: l.m, KH: 1, KW: 1, SH: l.s, SW: l.s, DH: 1, DW: 1, OH: oh, OW: oh}
		x := toF32(randF64(rng, n*l.c*l.h*l.h))
		w := toF32(randF64(rng, l.m*l.c))
		y := toF32(randF64(rng, n*l.m*oh*oh))
		dw := make([]float32, len(w))
		dx := make([]float32, len(x))
		L, I := oh*oh, l.h*l.h
		flops := 2 * float64(n*l.m*L*l.c)
		perImageFwd := func() {
			for i := 0; i < n; i++ {
				gemm.Sgemm(false, false, l.m, L, l.c, 1, w, l.c, x[i*l.c*I:], I, 0, y[i*l.m*L:], L)
			}
		}
		perImageDX := func() {
			for i := 0; i < n; i++ {
				gemm.Sgemm(true, false, l.c, I, l.m, 1, w, l.c, y[i*l.m*L:], L, 0, dx[i*l.c*I:], I)
			}
		}
		ops := []struct {
			name     string
			run      func()
			old      bool
			unitOnly bool
		}{
			{"fwd/batch", func() { g.Forward(x, w, y, false) }, false, false},
			{"fwd/before", perImageFwd, false, true},
			{"fwd/before", func() { g.Forward(x, w, y, false) }, true, false},
			{"dX/batch", func() { g.InputGrad(y, w, dx) }, false, false},
			{"dX/before", perImageDX, false, true},
			{"dW/batch", func() { g.FilterGrad(y, x, dw, false) }, false, false},
			{"dW/before", func() { g.FilterGrad(y, x, dw, false) }, true, false},
		}
		for _, op := range ops {
			if op.unitOnly && l.s != 1 || op.old && op.name == "fwd/before" && l.s == 1 {
				continue
			}
			b.Run(l.name+"/"+op.name, func(b *testing.B) {
				saved := oneByOneProducts
				oneByOneProducts = !op.old
				defer func() { oneByOneProducts = saved }()
				timeFlops(b, flops, op.run)
			})
		}
	}
}
