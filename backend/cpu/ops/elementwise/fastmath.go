package elementwise

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
)

// Float32 transcendentals. The float32 Exp and Erf kernels (and GeluErf,
// ErfGrad, Softmax) run vmath's slice functions: float32 arithmetic eight
// lanes wide (AVX2/FMA assembly, or the same operations in Go), within 1
// ulp of float32 of the float64 math functions. Gelu's exact form rounds
// 0.5·x·(1+erf) once from float64, with vmath's one-element float64 erf.
// The float64 kernels keep math.Exp and math.Erf: the gradient checks run
// in float64.

// fastErf64For32 is erf(x) to about 1.4e-9 relative error, for results
// that are rounded to float32 (vmath's scalar float64 formula).
func fastErf64For32(x float64) float64 { return vmath.Erf64For32(x) }

func erfLoop32(dst, src []float32) { vmath.Erf32(dst, src) }

func erfLoop64(dst, src []float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = math.Erf(v)
	}
}

func expLoop32(dst, src []float32) { vmath.Exp32(dst, src) }

func expLoop64(dst, src []float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = math.Exp(v)
	}
}
