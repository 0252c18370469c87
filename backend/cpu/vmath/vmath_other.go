//go:build !amd64 || purego

package vmath

func exp(dst, src []float32) { expGo(dst, src) }

func expShiftAll(dst, src []float32, mh, ml float32) float64 { return expShiftGo(dst, src, mh, ml) }

func erf(dst, src []float32) { erfGo(dst, src) }

func geluErf(y, d, a, x []float32, c1, c2, c3 float32) { geluErfGo(y, d, a, x, c1, c2, c3) }

func erfGrad(dst, dy, x []float32, c float32) { erfGradGo(dst, dy, x, c) }

func geluErfGrad(dst, dy, x, d, a []float32, c1, c3, k float32) {
	geluErfGradGo(dst, dy, x, d, a, c1, c3, k)
}

func sumExpShift(src []float32, m float32) float64 { return sumExpShiftGo(src, m) }
