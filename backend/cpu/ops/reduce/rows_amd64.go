//go:build amd64 && !purego

package reduce

import (
	"golang.org/x/sys/cpu"

	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
)

// useAVX2 selects the assembly row kernels (rows_amd64.s); tests switch it
// off to check the pure-Go fallbacks.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// use512 selects the sixteen-lane forms of maxRow32 and scaleRow32
// (vmath.MaxRow512 and vmath.ScaleRow512) where
// vmath runs its AVX-512 loops (the CPU has AVX-512F and
// ONNXTRAIN_NO_AVX512 is unset); tests switch it off to check that both
// paths give the same bits.
var use512 = useAVX2 && vmath.AVX512()

// The assembly row kernels; n is a positive multiple of 8.

//go:noescape
func maxRowAVX2(x *float32, n int) float32

//go:noescape
func scaleRowAVX2(x *float32, n int, s float64)

//go:noescape
func statsRowAVX2(x *float32, n int, x0 float64) (s, q float64)

//go:noescape
func affineRowAVX2(x, y, scale, bias *float32, n int, c *[3]float32, pf int)
