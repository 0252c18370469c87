//go:build amd64 && !purego

package reduce

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly row kernels (rows_amd64.s); tests switch it
// off to check the pure-Go fallbacks.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The assembly row kernels; n is a positive multiple of 8.

//go:noescape
func maxRowAVX2(x *float32, n int) float32

//go:noescape
func scaleRowAVX2(x *float32, n int, s float64)

//go:noescape
func statsRowAVX2(x *float32, n int, x0 float64) (s, q float64)

//go:noescape
func affineRowAVX2(x, y, scale, bias *float32, n int, c *[3]float32)
