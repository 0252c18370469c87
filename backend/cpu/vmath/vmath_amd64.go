//go:build amd64 && !purego

package vmath

import (
	"math"

	"golang.org/x/sys/cpu"
)

// hasAVX2FMA reports whether the CPU (and OS) support the assembly loops.
var hasAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// avxConst holds the eight-lane constants the assembly reads as memory
// operands, one row of 32 bytes each, in the order of the K_* offsets in
// vmath_amd64.s: broadcast constants, then erfTab's per-interval rows, then
// the int32 rows of the exponential's last step (expKMin, 128 and the bits
// of 2^-126), and the float rows of its common-block test
// (expKMin, and 126.5: |k - 1| < 126.5 for -125 ≤ k ≤ 127).
var avxConst = func() (c [38][8]float32) {
	bits := func(v uint32) float32 { return math.Float32frombits(v) }
	rows := []float32{expLo, expHi, invLn2, expMagic, ln2Hi, ln2Lo}
	rows = append(rows, expP[:]...)
	rows = append(rows, 1, bits(expBias), bits(0x7fffffff), erfSplit, erfTop, erfIdxMul, erfIdxAdd, bits(erfIdxMax))
	rows = append(rows, erfR[:]...)
	for i, v := range rows {
		c[i] = [8]float32{v, v, v, v, v, v, v, v}
	}
	for i, r := range erfTab {
		c[len(rows)+i] = r
	}
	kmin := int32(expKMin)
	for i, v := range []float32{bits(uint32(kmin)), bits(128), bits(0x00800000), expKMin, 126.5} {
		c[len(rows)+len(erfTab)+i] = [8]float32{v, v, v, v, v, v, v, v}
	}
	return c
}()

// The loops are in vmath_amd64.s; n is a multiple of 8.
//
//go:noescape
func expAVX2(dst, src *float32, n int, consts *[8]float32)

// expShiftAVX2 takes any n > 0: the last n mod 8 elements go through
// masked loads and stores, with the lane masks from tailMask.
//
//go:noescape
func expShiftAVX2(dst, src *float32, n int, mh, ml float32, consts *[8]float32, masks *int32, pf, pfDst *float32) float64

// tailMask[8-r:16-r] selects the first r lanes.
var tailMask = [16]int32{-1, -1, -1, -1, -1, -1, -1, -1}

//go:noescape
func erfAVX2(dst, src *float32, n int, consts *[8]float32)

// sumExpShiftAVX2 takes n a multiple of 8 (at most sumExpChunk).
//
//go:noescape
func sumExpShiftAVX2(src *float32, n int, m float32, consts *[8]float32, pf *float32) float64

// sumExpShift is SumExpShift32's loop over len(src), a multiple of 8;
// the assembly also prefetches len(src) elements from pf (nil: none).
func sumExpShift(src []float32, m float32, pf *float32) float64 {
	if hasAVX512 {
		return sumExpShift512(&src[0], len(src), m, &avx512Const[0], pf)
	}
	if !hasAVX2FMA {
		return sumExpShiftGo(src, m)
	}
	return sumExpShiftAVX2(&src[0], len(src), m, &avxConst[0], pf)
}

func exp(dst, src []float32) {
	if !hasAVX2FMA {
		expGo(dst, src)
		return
	}
	expAVX2(&dst[0], &src[0], len(src), &avxConst[0])
}

// expShiftAll is ExpShift32 for any len(src) > 0; the assembly also
// prefetches about len(src) elements from pf and from pfDst (nil: none).
func expShiftAll(dst, src []float32, mh, ml float32, pf, pfDst *float32) float64 {
	if hasAVX512 {
		return expShift512(&dst[0], &src[0], len(src), mh, ml, &avx512Const[0], pf, pfDst)
	}
	if !hasAVX2FMA {
		return expShiftGo(dst, src, mh, ml)
	}
	return expShiftAVX2(&dst[0], &src[0], len(src), mh, ml, &avxConst[0], &tailMask[0], pf, pfDst)
}

func erf(dst, src []float32) {
	if !hasAVX2FMA {
		erfGo(dst, src)
		return
	}
	erfAVX2(&dst[0], &src[0], len(src), &avxConst[0])
}

//go:noescape
func geluErfAVX2(y, d, a, x *float32, n int, c1, c2, c3 float32, consts *[8]float32)

//go:noescape
func erfGradAVX2(dst, dy, x *float32, n int, c float32, consts *[8]float32)

func geluErf(y, d, a, x []float32, c1, c2, c3 float32) {
	if !hasAVX2FMA {
		geluErfGo(y, d, a, x, c1, c2, c3)
		return
	}
	geluErfAVX2(&y[0], &d[0], &a[0], &x[0], len(x), c1, c2, c3, &avxConst[0])
}

func erfGrad(dst, dy, x []float32, c float32) {
	if !hasAVX2FMA {
		erfGradGo(dst, dy, x, c)
		return
	}
	erfGradAVX2(&dst[0], &dy[0], &x[0], len(x), c, &avxConst[0])
}

//go:noescape
func geluErfGradAVX2(dst, dy, x, d, a *float32, n int, c1, c3, k float32, consts *[8]float32)

func geluErfGrad(dst, dy, x, d, a []float32, c1, c3, k float32) {
	if !hasAVX2FMA {
		geluErfGradGo(dst, dy, x, d, a, c1, c3, k)
		return
	}
	geluErfGradAVX2(&dst[0], &dy[0], &x[0], &d[0], &a[0], len(dst), c1, c3, k, &avxConst[0])
}

// softmaxRowAVX2 takes n ≥ 8.
//
//go:noescape
func softmaxRowAVX2(dst, src *float32, n int, consts *[8]float32, masks *int32, pf int)

// softmaxRow is SoftmaxRow32's fused path: false where it does not run.
func softmaxRow(dst, src []float32, pf int) bool {
	if hasAVX512 {
		if len(src) < 16 {
			return false
		}
		softmaxRow512(&dst[0], &src[0], len(src), &avx512Const[0], pf)
		return true
	}
	if !hasAVX2FMA || len(src) < 8 {
		return false
	}
	softmaxRowAVX2(&dst[0], &src[0], len(src), &avxConst[0], &tailMask[0], pf)
	return true
}

// sumExpShiftMaxAVX2 takes n a multiple of 8 (at most sumExpChunk).
//
//go:noescape
func sumExpShiftMaxAVX2(src *float32, n int, m float32, consts *[8]float32, next *float32, mx *[8]float32) float64

// sumExpShiftMax is SumExpShiftMax32's loop over len(src), a multiple of
// 8 (AVX2 only: the caller checks fusedMax).
func sumExpShiftMax(src []float32, m float32, next *float32, mx *[block]float32) float64 {
	return sumExpShiftMaxAVX2(&src[0], len(src), m, &avxConst[0], next, mx)
}

// fusedMax reports whether SumExpShiftMax32 runs: vmath's AVX2 loops, not
// the AVX-512 ones.
func fusedMax() bool { return hasAVX2FMA && !hasAVX512 }

// The one-pass AVX2 loops of the GEMM epilogues (vmath_amd64.s); n is a
// multiple of 8, bias and y may be nil.
//
//go:noescape
func geluErfBiasAVX2(y, p, bias *float32, n int, c1, c2, c3 float32, consts *[8]float32)

//go:noescape
func geluErfGradXAVX2(dst, y, dy, x *float32, n int, c1, c2, c3, k float32, consts *[8]float32)

// geluErfBias is GeluErfBias32 without AVX-512 (lengths already checked):
// the one-pass AVX2 loop over the multiple of 8, the blocked form (the
// same bits) over the rest.
func geluErfBias(y, p, bias []float32, c1, c2, c3 float32) {
	n8 := len(p) &^ (block - 1)
	if !hasAVX2FMA || n8 == 0 {
		geluErfBiasBlocks(y, p, bias, c1, c2, c3)
		return
	}
	var bp *float32
	var tail []float32
	if bias != nil {
		bp, tail = &bias[0], bias[n8:]
	}
	geluErfBiasAVX2(&y[0], &p[0], bp, n8, c1, c2, c3, &avxConst[0])
	if n8 < len(p) {
		geluErfBiasBlocks(y[n8:], p[n8:], tail, c1, c2, c3)
	}
}

// geluErfGradX is GeluErfGradX32 without AVX-512 (lengths already
// checked), split as geluErfBias is.
func geluErfGradX(dst, y, dy, x []float32, c1, c2, c3, k float32) {
	n8 := len(x) &^ (block - 1)
	if !hasAVX2FMA || n8 == 0 {
		geluErfGradXBlocks(dst, y, dy, x, c1, c2, c3, k)
		return
	}
	var yp *float32
	var tail []float32
	if y != nil {
		yp, tail = &y[0], y[n8:]
	}
	geluErfGradXAVX2(&dst[0], yp, &dy[0], &x[0], n8, c1, c2, c3, k, &avxConst[0])
	if n8 < len(x) {
		geluErfGradXBlocks(dst[n8:], tail, dy[n8:], x[n8:], c1, c2, c3, k)
	}
}
