// Package vmath holds float32 transcendentals over slices for the CPU
// kernels: Exp32, ExpShift32 and Erf32. On amd64 with AVX2 and FMA they run
// four lanes of float64 arithmetic per instruction (Go assembly); elsewhere
// a pure-Go loop evaluates the same formulas with the same fused
// multiply-adds, so both give the same bits.
//
// Every value is computed in float64 to about 1e-11 (exp) or 1.4e-9 (erf)
// relative error and rounded once to float32, so each result is the
// correctly rounded float32 or a neighbour: within 1 ulp of float32 of
// float32(math.Exp(x)) and float32(math.Erf(x)) over every float32 input,
// with ±Inf, NaN, -0, subnormal inputs and underflow to subnormals or 0
// handled (tests sweep all float32 bit patterns at a stride).
package vmath

import "math"

// block is how many elements the assembly loops take per step; the
// wrappers run a shorter tail through a padded block so that every element
// goes through the same code.
const block = 8

// Exp32 sets dst[i] = e^src[i] for i < len(src); dst must be at least as
// long as src (it may be src).
func Exp32(dst, src []float32) {
	ExpShift32(dst, src, 0)
}

// ExpShift32 sets dst[i] = e^(src[i]-m), the difference taken in float64,
// and returns the float64 sum of the unrounded exponentials (the softmax
// denominator); dst may be src.
func ExpShift32(dst, src []float32, m float64) float64 {
	dst = dst[:len(src)]
	n := len(src) &^ (block - 1)
	var sum float64
	if n > 0 {
		sum = expShift(dst[:n], src[:n], m)
	}
	if r := len(src) - n; r > 0 {
		var in, out [block]float32
		for i := range in {
			in[i] = float32(math.Inf(-1)) // e^-Inf = 0 adds nothing to the sum
		}
		copy(in[:], src[n:])
		sum += expShift(out[:], in[:], m)
		copy(dst[n:], out[:r])
	}
	return sum
}

// Erf32 sets dst[i] = erf(src[i]); dst may be src.
func Erf32(dst, src []float32) {
	dst = dst[:len(src)]
	n := len(src) &^ (block - 1)
	if n > 0 {
		erf(dst[:n], src[:n])
	}
	if r := len(src) - n; r > 0 {
		var in, out [block]float32
		copy(in[:], src[n:])
		erf(out[:], in[:])
		copy(dst[n:], out[:r])
	}
}

// Exp and erf constants. The assembly reads the polynomial coefficients as
// four-lane vectors from expPoly and erfSmallPoly, and gathers erfMid rows.
const (
	expClampLo = -110 // e^-110 < 2^-150: rounds to 0 in float32
	expClampHi = 100  // e^100 > MaxFloat32: rounds to +Inf in float32
	roundMagic = 0x1.8p52
	invLn2     = 1 / math.Ln2
)

// expCoef: e^r ≈ Σ r^j/j! for j = 0..9 (Taylor; for |r| ≤ ln2/2 the
// truncation error is below 7e-12 relative), highest degree first.
var expCoef = func() (c [10]float64) {
	f := 1.0
	for j := 1; j <= 9; j++ {
		f *= float64(j)
	}
	for j := 9; j >= 0; j-- {
		c[9-j] = 1 / f
		f /= math.Max(float64(j), 1)
	}
	return c
}()

// erfSmall: erf(x) = x·P(x²) for |x| < 1, P of degree 6 fitted (Chebyshev
// least squares on [0, 1] in x², numpy) to math.erf; relative error 1.4e-9.
// Highest degree first.
var erfSmall = [7]float64{7.8825003818071922e-05, -0.00080188589950960819, 0.0051893128103558308, -0.026854329537099764, 0.11283597491530763, -0.37612626907889429, 1.1283791658833289}

// erfMid: erf(x) for 1 ≤ |x| < 4, one degree-7 polynomial in x - c per
// interval [1 + i/2, 1.5 + i/2) with centre c = 1.25 + i/2, fitted the same
// way; absolute error 6.8e-10 (erf ≥ 0.84 there, so relative error < 1e-9).
// Row i holds coefficient j (of (x-c)^j) at column j.
var erfMid = [6][8]float64{
	{0.92290012892278672, 0.23652112200238667, -0.29565174459861965, 0.16753589031359675, -0.006132028217698678, -0.047186555161679584, 0.020597649947884586, 0.0037451232641002082},
	{0.98667167113942766, 0.052774995450853374, -0.092356201816288452, 0.090157386961754862, -0.048105525348446199, 0.006618471811096361, 0.009049504861797222, -0.0059330854601841497},
	{0.99853728329433911, 0.0071423192149274043, -0.016070156881348472, 0.021724512471564147, -0.019088257526002936, 0.010660060011620513, -0.0027795496455304486, -0.00072153255941133506},
	{0.99989937808757645, 0.0005862772865944364, -0.0016122674224622658, 0.002760380296024234, -0.0032577103494108276, 0.0027562911003801509, -0.0016678518282716081, 0.00063581424484845082},
	{0.99999569723031079, 2.9189011715383259e-05, -9.4869335077947921e-05, 0.00019581263072243846, -0.00028616932897037613, 0.00031362881429619448, -0.00027375972252433484, 0.00017359689893726337},
	{0.99999988627411518, 8.8142884923616092e-07, -3.3060711996902885e-06, 7.9703280827382872e-06, -1.3785395189163726e-05, 1.8330048849029377e-05, -2.0692599684675657e-05, 1.7144833209647179e-05},
}

// expOne is e^(x-m) for one element, rounded to float32 by the caller: the
// pure-Go form of the assembly, operation for operation.
func expOne(x, m float64) float64 {
	v := x - m
	// Clamp as VMAXPD/VMINPD do with the constant first: a NaN passes.
	if v < expClampLo {
		v = expClampLo
	}
	if v > expClampHi {
		v = expClampHi
	}
	t := math.FMA(v, invLn2, roundMagic)
	k := t - roundMagic
	r := math.FMA(-k, math.Ln2, v)
	p := expCoef[0]
	for _, c := range expCoef[1:] {
		p = math.FMA(p, r, c)
	}
	scale := math.Float64frombits((math.Float64bits(t) + 1023) << 52)
	return p * scale
}

// Erf64For32 is erf(x) to about 1.4e-9 relative error: enough for a result
// that is rounded to float32 (Erf32's formula for one float64 element).
func Erf64For32(x float64) float64 { return erfOne(x) }

// erfOne is erf(x) for one element, the pure-Go form of the assembly.
func erfOne(x float64) float64 {
	a := math.Abs(x)
	// Middle range (computed for every lane, as the assembly does).
	i := 0
	if f := (a - 1) * 2; f >= 1 {
		if f < 5 {
			i = int(f)
		} else {
			i = 5
		}
	}
	d := a - (float64(i)*0.5 + 1.25)
	row := &erfMid[i]
	mid := row[7]
	for j := 6; j >= 0; j-- {
		mid = math.FMA(mid, d, row[j])
	}
	var res float64
	switch {
	case a < 1:
		s := a * a
		p := erfSmall[0]
		for _, c := range erfSmall[1:] {
			p = math.FMA(p, s, c)
		}
		res = a * p
	case !(a >= 4): // also NaN: mid is NaN then
		res = mid
	default:
		res = 1
	}
	return math.Float64frombits(math.Float64bits(res) | math.Float64bits(x)&(1<<63))
}

func expShiftGo(dst, src []float32, m float64) float64 {
	dst = dst[:len(src)]
	var sum float64
	for i, v := range src {
		e := expOne(float64(v), m)
		sum += e
		dst[i] = float32(e)
	}
	return sum
}

func erfGo(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = float32(erfOne(float64(v)))
	}
}

// ULPDistance32 is how many float32 values lie between a and b: 0 when
// they are equal (and when both are NaN), math.MaxInt64 when only one is
// NaN. The accuracy tests of these functions and of the kernels that use
// them measure errors with it.
func ULPDistance32(a, b float32) int64 {
	if a != a || b != b {
		if a != a && b != b {
			return 0
		}
		return math.MaxInt64
	}
	ordered := func(f float32) int64 {
		bits := int64(math.Float32bits(f))
		if bits&(1<<31) != 0 {
			return -(bits &^ (1 << 31))
		}
		return bits
	}
	d := ordered(a) - ordered(b)
	if d < 0 {
		d = -d
	}
	return d
}
