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

// adamVec is adamAVX2's constants (layout fixed by adam_amd64.s).
type adamVec struct {
	b1, b2, omb1, omb2, eps, negStep, bc2, decay, wd float32
	signmask                                         uint32
}

// adamAVX2 runs the Adam update over n elements (a multiple of 8) of p,
// g, m and v; mode bits: 1 maximize, 2 decoupled, 4 L2.
//
//go:noescape
func adamAVX2(p, gr, m, v *float32, n int, c *adamVec, mode int)

// adamVector updates the first len(p) &^ 7 elements with adamAVX2 where the
// CPU has it, and returns how many it updated.
func adamVector(p, g, m, v []float32, c *adamVec, mode int) int {
	n := len(p) &^ 7
	if !hasFMA32 || n == 0 {
		return 0
	}
	g, m, v = g[:n], m[:n], v[:n]
	c.signmask = 1 << 31
	adamAVX2(&p[0], &g[0], &m[0], &v[0], n, c, mode)
	return n
}

// sgdVec is sgdMomentumAVX2's constants (layout fixed by sgd_amd64.s).
type sgdVec struct {
	m, damp, negLR, wd float32
	signmask           uint32
}

// sgdMomentumAVX2 runs the SGD-with-momentum update over n elements (a
// multiple of 8) of p, g and the buffer b; mode bits: 1 maximize, 2 weight
// decay, 4 first step, 8 Nesterov.
//
//go:noescape
func sgdMomentumAVX2(p, gr, b *float32, n int, c *sgdVec, mode int)

// sgdVector updates the first len(p) &^ 7 elements with sgdMomentumAVX2
// where the CPU has it, and returns how many it updated.
func sgdVector(p, g, b []float32, c *sgdVec, mode int) int {
	n := len(p) &^ 7
	if !hasFMA32 || n == 0 {
		return 0
	}
	g, b = g[:n], b[:n]
	c.signmask = 1 << 31
	sgdMomentumAVX2(&p[0], &g[0], &b[0], n, c, mode)
	return n
}
