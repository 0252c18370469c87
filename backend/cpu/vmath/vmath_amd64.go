//go:build amd64 && !purego

package vmath

import (
	"math"

	"golang.org/x/sys/cpu"
)

// hasAVX2FMA reports whether the CPU (and OS) support the assembly loops.
var hasAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// Four-lane copies of the constants the assembly reads as memory operands.
var (
	expPoly      = lanes(expCoef[:])
	erfSmallPoly = lanes(erfSmall[:])
	expConst     = lanes([]float64{expClampLo, expClampHi, invLn2, roundMagic, bitsOf(1023), 1, 4, 0.5, 1.25, bitsOf(1 << 32), bitsOf(3)})
	// erfMidCols holds, for each coefficient j, erfMid[0..3][j] at row 2j
	// and erfMid[4..5][j] at row 2j+1: the tables VPERMD picks lanes from.
	erfMidCols = func() (c [16][4]float64) {
		for j := range 8 {
			for i := range erfMid {
				c[2*j+i/4][i%4] = erfMid[i][j]
			}
		}
		return c
	}()
)

// bitsOf is the float64 with the bits of the integer v.
func bitsOf(v uint64) float64 { return math.Float64frombits(v) }

func lanes(c []float64) [][4]float64 {
	out := make([][4]float64, len(c))
	for i, v := range c {
		out[i] = [4]float64{v, v, v, v}
	}
	return out
}

// expShiftAVX2 and erfAVX2 are in vmath_amd64.s; n is a multiple of 8.
//
//go:noescape
func expShiftAVX2(dst, src *float32, n int, m float64, poly, consts *[4]float64) float64

//go:noescape
func erfAVX2(dst, src *float32, n int, mid, poly, consts *[4]float64)

func expShift(dst, src []float32, m float64) float64 {
	if !hasAVX2FMA {
		return expShiftGo(dst, src, m)
	}
	return expShiftAVX2(&dst[0], &src[0], len(src), m, &expPoly[0], &expConst[0])
}

func erf(dst, src []float32) {
	if !hasAVX2FMA {
		erfGo(dst, src)
		return
	}
	erfAVX2(&dst[0], &src[0], len(src), &erfMidCols[0], &erfSmallPoly[0], &expConst[0])
}
