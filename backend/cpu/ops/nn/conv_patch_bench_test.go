package nn

import (
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
)

// BenchmarkPatchConv times ViT-B/16's patch embedding at batch 4 (3→768
// channels, 16×16 windows, stride 16, 224×224 images: a 768×784×768
// product) through the patchify path and through the implicit GEMM it
// replaces (patchConv off), forward (with its bias) and filter gradient,
// beside the bare GEMM of the same shape (gemm_NT: the weights times the
// patch matrix transposed) and the patch matrix's rearrangement alone.
// "cold" runs write 256 MiB between calls, so that the operands and the
// scratch come from memory as in a training step, where the embedding
// runs first (forward) and last (filter gradient).
func BenchmarkPatchConv(b *testing.B) {
	g := Conv2D{N: 4, C: 3, H: 224, W: 224, M: 768, KH: 16, KW: 16, SH: 16, SW: 16, DH: 1, DW: 1, OH: 14, OW: 14}
	rng := rand.New(rand.NewPCG(1, 1))
	x, w := toF32(randF64(rng, 4*3*224*224)), toF32(randF64(rng, 768*768))
	bias, dy := toF32(randF64(rng, 768)), toF32(randF64(rng, 4*768*196))
	y, dw := make([]float32, 4*768*196), make([]float32, 768*768)
	flops := 2.0 * 768 * 784 * 768
	report := func(b *testing.B) {
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	}
	trash := make([]float32, 64<<20)
	for _, cold := range []bool{false, true} {
		for _, patch := range []bool{false, true} {
			name := "implicit"
			if patch {
				name = "patchify"
			}
			if cold {
				name += "_cold"
			}
			run := func(b *testing.B, call func()) {
				patchConv = patch
				defer func() { patchConv = true }()
				for i := 0; i < b.N; i++ {
					if cold {
						b.StopTimer()
						for j := range trash {
							trash[j]++
						}
						b.StartTimer()
					}
					call()
				}
				report(b)
			}
			b.Run("forward_"+name, func(b *testing.B) {
				run(b, func() {
					if patch {
						g.forwardPatches(x, w, bias, y, false)
						return
					}
					// convRun's implicit route: the bias first,
					// then the product added to it.
					for m := 0; m < 4*768; m++ {
						plane := y[m*196 : (m+1)*196]
						for j := range plane {
							plane[j] = bias[m%768]
						}
					}
					g.Forward(x, w, y, true)
				})
			})
			b.Run("filtergrad_"+name, func(b *testing.B) {
				run(b, func() { g.FilterGrad(dy, x, dw, false) })
			})
		}
	}
	p := g.patches(x)
	defer release(p)
	b.Run("gemm_NT", func(b *testing.B) {
		c := make([]float32, 768*784)
		for i := 0; i < b.N; i++ {
			gemm.Sgemm(false, true, 768, 784, 768, 1, w, 768, p, 768, 0, c, 784)
		}
		report(b)
	})
	b.Run("patches", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			release(g.patches(x))
		}
	})
}
