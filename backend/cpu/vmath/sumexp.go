package vmath

import (
	"math"
	"unsafe"
)

// sumExpChunk is the most elements one call of the assembly (or of
// sumExpShiftGo) sums in float32 lanes before the float64 total takes
// them: 16 lanes of at most 32 terms each.
const sumExpChunk = 512

// SumExpShift32 returns Σ e^(src[i] - m), the sum of a log-sum-exp, without
// writing the exponentials: x - m rounded to float32 (an error of at most
// |x-m|·2^-25 in the exponent, so below 2^-25/e of each term's size
// relative to e^0 = 1, the largest term when m is the largest element),
// e^ as Exp32 computes it, the terms added in 16 float32 lanes over blocks
// of at most 512 elements and the blocks' sums in float64. Cheaper than
// ExpShift32 (no exact difference, no stores, no widening per element) for
// a loss that needs only the sum; results agree with the float64 sum of
// the exact terms to a relative 4e-6 at worst (about 1e-7 in practice).
// A NaN in src, or m = +Inf with an infinite src element, gives NaN.
func SumExpShift32(src []float32, m float32) float64 {
	return SumExpShiftAhead32(src, m, nil)
}

// SumExpShiftAhead32 is SumExpShift32 that, as its assembly loops read
// src, also asks the memory system for ahead (PREFETCHT1, into L2), as
// many bytes as they read of src: a caller that passes the row it reads
// next (at least len(src) long; a shorter or nil ahead is not fetched)
// has that row's memory read overlap this row's exponentials, instead of
// waiting for it in its next pass. The result is SumExpShift32's, bit for
// bit: a prefetch moves no data into a register.
func SumExpShiftAhead32(src []float32, m float32, ahead []float32) float64 {
	var pf *float32
	if len(ahead) >= len(src) && len(src) > 0 {
		pf = &ahead[0]
	}
	var z float64
	off := 0
	for len(src) >= sumExpChunk {
		z += sumExpShift(src[:sumExpChunk], m, pfAt(pf, off))
		src = src[sumExpChunk:]
		off += sumExpChunk
	}
	if n := len(src) &^ (block - 1); n > 0 {
		z += sumExpShift(src[:n], m, pfAt(pf, off))
		src = src[n:]
	}
	z = addExpTail(z, src, m)
	return z
}

// SumExpShiftMax32 returns SumExpShift32(src, m), bit for bit, and the
// largest element of next (as long as src), whose loads ride in the sum's
// loop: a log-sum-exp over rows (a loss over a vocabulary) gets the next
// row's maximum without a pass of its own over it. The maximum is exact
// where next holds no NaN (one NaN may or may not win, as in an AVX2 row
// maximum; the next sum is then NaN either way) up to the sign of a zero
// maximum. ok is false, and nothing computed, where vmath does not run its
// AVX2 loops (on AVX-512 the separate passes are as fast), or len(src) < 8,
// or the lengths differ.
func SumExpShiftMax32(src []float32, m float32, next []float32) (sum float64, nextMax float32, ok bool) {
	if !fusedMax() || len(src) < block || len(next) != len(src) {
		return 0, 0, false
	}
	sum, nextMax = sumExpShiftMax32(src, m, next)
	return sum, nextMax, true
}

// sumExpShiftMax32 is SumExpShiftMax32 past its checks.
func sumExpShiftMax32(src []float32, m float32, next []float32) (float64, float32) {
	negInf := float32(math.Inf(-1))
	mx := [block]float32{negInf, negInf, negInf, negInf, negInf, negInf, negInf, negInf}
	all := len(src)
	var z float64
	off := 0
	for len(src) >= sumExpChunk {
		z += sumExpShiftMax(src[:sumExpChunk], m, &next[off], &mx)
		src = src[sumExpChunk:]
		off += sumExpChunk
	}
	if n := len(src) &^ (block - 1); n > 0 {
		z += sumExpShiftMax(src[:n], m, &next[off], &mx)
		src = src[n:]
		off += n
	}
	z = addExpTail(z, src, m)
	r := mx[0]
	for _, v := range mx[1:] {
		if v > r {
			r = v
		}
	}
	for _, v := range next[off:all] {
		if v > r {
			r = v
		}
	}
	return z, r
}

// sumExpShiftGo is the assembly's loop in Go, operation for operation
// (len(src) a multiple of 8): block b of eight terms goes to lane
// accumulator b mod 2, and the 16 lanes are added in the assembly's order.
func sumExpShiftGo(src []float32, m float32) float64 {
	var acc [2][block]float32
	for b := 0; b*block < len(src); b++ {
		a := &acc[b%2]
		for i, v := range src[b*block : (b+1)*block] {
			a[i] += expCore(v-m, 0, false)
		}
	}
	var y [4]float64
	for i := range y {
		y[i] = (float64(acc[0][i]) + float64(acc[0][i+4])) + (float64(acc[1][i]) + float64(acc[1][i+4]))
	}
	return (y[0] + y[2]) + (y[1] + y[3])
}

// pfAt returns pf advanced by off elements (nil stays nil); the caller
// keeps off within the slice pf points into.
func pfAt(pf *float32, off int) *float32 {
	if pf == nil {
		return nil
	}
	return (*float32)(unsafe.Add(unsafe.Pointer(pf), 4*off))
}

// addExpTail adds e^(x-m), in order and in float64, to z for the fewer
// than 8 elements of src that a loop over whole blocks leaves.
func addExpTail(z float64, src []float32, m float32) float64 {
	if len(src) > 0 {
		var buf [block]float32
		for i, v := range src {
			buf[i] = v - m
		}
		Exp32(buf[:len(src)], buf[:len(src)])
		for _, e := range buf[:len(src)] {
			z += float64(e)
		}
	}
	return z
}
