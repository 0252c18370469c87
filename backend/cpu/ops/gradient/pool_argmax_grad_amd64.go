//go:build amd64 && !purego

package gradient

import "golang.org/x/sys/cpu"

// argmaxGradAsm selects the vector loop of MaxPoolArgmaxGrad's 3×3 runs
// (pool_argmax_grad_amd64.s); tests switch it off to check the loop in Go.
var argmaxGradAsm = cpu.X86.HasAVX2

//go:noescape
func argmaxGrad3x3S2AVX2(d *float32, iw int, dy *float32, c *uint8, blocks, skip int) (bad bool)

// argmaxGrad3x3S2 is the assembly loop on slices: d from window k's first
// tap in its first row (rows iw apart), g and c from window k−1, for the
// 8·blocks windows k, k+1, ... (argmaxGrad3x3S2AVX2 says what it adds).
func argmaxGrad3x3S2(d []float32, iw int, g []float32, c []uint8, blocks, skip int) (bad bool) {
	_ = d[2*iw+16*blocks-1]
	_ = g[8*blocks]
	_ = c[8*blocks]
	return argmaxGrad3x3S2AVX2(&d[0], iw, &g[1], &c[1], blocks, skip)
}
