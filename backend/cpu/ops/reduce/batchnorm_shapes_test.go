package reduce

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// resnetBNShapes are the (channels, height = width) of ResNet-18's
// batch-normalised activations at batch 32 and 64×64 images.
var resnetBNShapes = [][2]int{{64, 32}, {64, 16}, {128, 8}, {256, 4}, {512, 2}}

// BenchmarkBatchNormResNet times the training-mode BatchNormalization+Relu
// computation (statistics and the normalised output into preallocated
// storage) at every activation shape of ResNet-18.
func BenchmarkBatchNormResNet(b *testing.B) {
	for _, s := range resnetBNShapes {
		c, hw := s[0], s[1]
		b.Run(fmt.Sprintf("c%d_hw%d", c, hw), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			x := make([]float32, 32*c*hw*hw)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			y := make([]float32, len(x))
			scale, bias := make([]float64, c), make([]float64, c)
			for i := range scale {
				scale[i], bias[i] = 1.5, 0.25
			}
			bl := blocks{outer: 32, r: c, inner: hw * hw}
			b.SetBytes(int64(8 * len(x)))
			for b.Loop() {
				bnTrain(x, y, bl, scale, bias, 1e-5, true)
			}
		})
	}
}
