//go:build !amd64 || purego

package vmath

func exp(dst, src []float32) { expGo(dst, src) }

func expShiftAll(dst, src []float32, mh, ml float32, _, _ *float32) float64 {
	return expShiftGo(dst, src, mh, ml)
}

func erf(dst, src []float32) { erfGo(dst, src) }

func geluErf(y, d, a, x []float32, c1, c2, c3 float32) { geluErfGo(y, d, a, x, c1, c2, c3) }

func erfGrad(dst, dy, x []float32, c float32) { erfGradGo(dst, dy, x, c) }

func geluErfGrad(dst, dy, x, d, a []float32, c1, c3, k float32) {
	geluErfGradGo(dst, dy, x, d, a, c1, c3, k)
}

func sumExpShift(src []float32, m float32, _ *float32) float64 { return sumExpShiftGo(src, m) }

// hasAVX512 is false off amd64 (and with purego): the wide* functions are
// never called there.
const hasAVX512 = false

// AVX512 reports whether vmath's kernels run their AVX-512 loops.
func AVX512() bool { return false }

func wideExp(dst, src []float32) { expGo(dst, src) }

func wideErf(dst, src []float32) { erfGo(dst, src) }

func wideGeluErf(y, d, a, x []float32, c1, c2, c3 float32) { geluErfGo(y, d, a, x, c1, c2, c3) }

func wideErfGrad(dst, dy, x []float32, c float32) { erfGradGo(dst, dy, x, c) }

func wideGeluErfGrad(dst, dy, x, d, a []float32, c1, c3, k float32) {
	geluErfGradGo(dst, dy, x, d, a, c1, c3, k)
}

func wideGeluErfBias(y, p, bias []float32, c1, c2, c3 float32) {
	geluErfBiasBlocks(y, p, bias, c1, c2, c3)
}

func wideGeluErfGradX(dst, y, dy, x []float32, c1, c2, c3, k float32) {
	geluErfGradXBlocks(dst, y, dy, x, c1, c2, c3, k)
}

func softmaxRow(_, _ []float32, _ int) bool { return false }

func fusedMax() bool { return false }

func sumExpShiftMax(_ []float32, _ float32, _ *float32, _ *[block]float32) float64 {
	panic("vmath: no fused maximum on this platform")
}

func geluErfBias(y, p, bias []float32, c1, c2, c3 float32) {
	geluErfBiasBlocks(y, p, bias, c1, c2, c3)
}

func geluErfGradX(dst, y, dy, x []float32, c1, c2, c3, k float32) {
	geluErfGradXBlocks(dst, y, dy, x, c1, c2, c3, k)
}

// MaxRow512 is never called here (AVX512 reports false).
func MaxRow512([]float32) float32 { panic("vmath: no AVX-512 loops on this platform") }

// ScaleRow512 is never called here (AVX512 reports false).
func ScaleRow512([]float32, float64) { panic("vmath: no AVX-512 loops on this platform") }
