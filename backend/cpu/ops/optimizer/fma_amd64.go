//go:build !purego

package optimizer

import "golang.org/x/sys/cpu"

// hasFMA32 is true where fmaAxpy32AVX2 runs (AVX2 and FMA, checked at run
// time).
var hasFMA32 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// fmaAxpy32AVX2 sets y[i] = fma(alpha, x[i], y[i]) for the first
// len(y) &^ 7 elements; len(x) >= len(y).
//
//go:noescape
func fmaAxpy32AVX2(alpha float32, x, y []float32)

// fmaAxpy32 sets y[i] = fma32(alpha, x[i], y[i]) for every i < len(y)
// (len(x) >= len(y)): the hardware's fused multiply-add where there is
// one, which rounds once exactly as fma32 does.
func fmaAxpy32(alpha float32, x, y []float32) {
	x = x[:len(y)]
	done := 0
	if hasFMA32 {
		done = len(y) &^ 7
		if done > 0 {
			fmaAxpy32AVX2(alpha, x[:done], y[:done])
		}
	}
	fmaAxpy32Go(alpha, x[done:], y[done:])
}
