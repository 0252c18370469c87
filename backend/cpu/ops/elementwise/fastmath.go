package elementwise

import "math"

// Float32 transcendentals. The float32 paths of Exp, Erf and Gelu spend most
// of a ViT training step's elementwise time in math.Exp and math.Erf, which
// compute a float64-accurate result that the float32 output then throws
// away. The functions here evaluate in float64 arithmetic but only to about
// 1e-9 relative error, so the result rounded to float32 is the correctly
// rounded value or its neighbour (within 1 ulp of float32). The float64
// kernels keep math.Exp and math.Erf: the gradient checks run in float64.

// exp32Table holds 2^(j/32) for j = 0..31.
var exp32Table = func() (t [32]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / 32)
	}
	return t
}()

// Bounds of float32's exp: e^89 > MaxFloat32 and e^-104 < 2^-150, so the
// result outside them is +Inf or 0; inside, the float64 result's conversion
// to float32 rounds to Inf, a subnormal or 0 where it must.
const (
	expOverflow32  = 89
	expUnderflow32 = -104
)

// fastExp32 is e^x for a float32 x, computed as 2^(k/32)·e^r with
// k = round(x·32/ln2) and |r| ≤ ln2/64, e^r by a degree-4 Taylor polynomial
// (truncation error below 1e-12 relative).
func fastExp32(x float32) float32 {
	v := float64(x)
	if !(v > expUnderflow32) { // also NaN
		if v != v {
			return x
		}
		return 0
	}
	if v > expOverflow32 {
		return float32(math.Inf(1))
	}
	const (
		roundMagic = 0x1.8p52 // adding and subtracting rounds to an integer
		invLn2x32  = 32 / math.Ln2
		ln2Over32  = math.Ln2 / 32
	)
	k := (v*invLn2x32 + roundMagic) - roundMagic
	r := v - k*ln2Over32
	ki := int64(k)
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24))))
	scale := math.Float64frombits(uint64((ki>>5)+1023) << 52)
	return float32(p * exp32Table[ki&31] * scale)
}

// erf32Small: erf(x) = x·P(x²) for |x| < 1, P of degree 6 fitted (Chebyshev
// least squares on [0, 1] in x², numpy) to math.erf; relative error 1.4e-9.
var erf32Small = [...]float64{1.1283791658833289, -0.37612626907889429, 0.11283597491530763, -0.026854329537099764, 0.0051893128103558308, -0.00080188589950960819, 7.8825003818071922e-05}

// erf32Mid: erf(x) for 1 ≤ |x| < 4, one degree-7 polynomial in x - c per
// interval [1 + i/2, 1.5 + i/2) with centre c = 1.25 + i/2, fitted the same
// way; absolute error 6.8e-10 (erf ≥ 0.84 there, so relative error < 1e-9).
var erf32Mid = [6][8]float64{
	{0.92290012892278672, 0.23652112200238667, -0.29565174459861965, 0.16753589031359675, -0.006132028217698678, -0.047186555161679584, 0.020597649947884586, 0.0037451232641002082},
	{0.98667167113942766, 0.052774995450853374, -0.092356201816288452, 0.090157386961754862, -0.048105525348446199, 0.006618471811096361, 0.009049504861797222, -0.0059330854601841497},
	{0.99853728329433911, 0.0071423192149274043, -0.016070156881348472, 0.021724512471564147, -0.019088257526002936, 0.010660060011620513, -0.0027795496455304486, -0.00072153255941133506},
	{0.99989937808757645, 0.0005862772865944364, -0.0016122674224622658, 0.002760380296024234, -0.0032577103494108276, 0.0027562911003801509, -0.0016678518282716081, 0.00063581424484845082},
	{0.99999569723031079, 2.9189011715383259e-05, -9.4869335077947921e-05, 0.00019581263072243846, -0.00028616932897037613, 0.00031362881429619448, -0.00027375972252433484, 0.00017359689893726337},
	{0.99999988627411518, 8.8142884923616092e-07, -3.3060711996902885e-06, 7.9703280827382872e-06, -1.3785395189163726e-05, 1.8330048849029377e-05, -2.0692599684675657e-05, 1.7144833209647179e-05},
}

// fastErf64For32 is erf(x) to about 1e-9 relative error, for results that
// are rounded to float32 (|x| ≥ 4 gives ±1: erfc(4) < 2^-25, so float32's
// erf is exactly ±1 there).
func fastErf64For32(x float64) float64 {
	a := math.Abs(x)
	if a < 1 {
		s := x * x
		c := &erf32Small
		return x * (c[0] + s*(c[1]+s*(c[2]+s*(c[3]+s*(c[4]+s*(c[5]+s*c[6]))))))
	}
	if !(a < 4) { // also NaN
		if x != x {
			return x
		}
		return math.Copysign(1, x)
	}
	i := int((a - 1) * 2)
	d := a - (1.25 + 0.5*float64(i))
	c := &erf32Mid[i]
	r := c[0] + d*(c[1]+d*(c[2]+d*(c[3]+d*(c[4]+d*(c[5]+d*(c[6]+d*c[7]))))))
	return math.Copysign(r, x)
}

func fastErf32(x float32) float32 { return float32(fastErf64For32(float64(x))) }

func erfLoop32(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = fastErf32(v)
	}
}

func erfLoop64(dst, src []float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = math.Erf(v)
	}
}

func expLoop32(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = fastExp32(v)
	}
}

func expLoop64(dst, src []float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = math.Exp(v)
	}
}
