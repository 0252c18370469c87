package vmath

import "math"

// block is how many elements the AVX2 loops take per step; the wrappers
// run a shorter tail through a padded block (ExpShift32: masked loads and
// stores) so that every element goes through the same code. The AVX-512
// loops (sixteen lanes, where hasAVX512) take any length, the tail through
// masked loads and stores.
const block = 8

// Exp32 sets dst[i] = e^src[i] for i < len(src); dst must be at least as
// long as src (it may be src).
func Exp32(dst, src []float32) {
	dst = dst[:len(src)]
	if hasAVX512 {
		wideExp(dst, src)
		return
	}
	n := len(src) &^ (block - 1)
	if n > 0 {
		exp(dst[:n], src[:n])
	}
	if r := len(src) - n; r > 0 {
		var buf [block]float32
		copy(buf[:], src[n:])
		exp(buf[:], buf[:])
		copy(dst[n:], buf[:r])
	}
}

// ExpShift32 sets dst[i] = e^(src[i]-m), the difference taken exactly (a
// float32 two-sum, with m split in two float32 parts), and returns the
// float64 sum of the float32 results (the softmax denominator); dst may be
// src.
func ExpShift32(dst, src []float32, m float64) float64 {
	return ExpShiftAhead32(dst, src, m, nil, nil)
}

// ExpShiftAhead32 is ExpShift32 that, as its assembly loop reads src, also
// asks the memory system for ahead and aheadDst (PREFETCHT1, into L2), as
// many bytes of each as it reads of src: a caller that passes the row it
// reads next and the row it writes next (each at least len(src) long; a
// shorter or nil one is not fetched) has their memory traffic overlap this
// row's exponentials. The same bits as ExpShift32.
func ExpShiftAhead32(dst, src []float32, m float64, ahead, aheadDst []float32) float64 {
	dst = dst[:len(src)]
	var pf, pfDst *float32
	if len(ahead) >= len(src) && len(src) > 0 {
		pf = &ahead[0]
	}
	if len(aheadDst) >= len(src) && len(src) > 0 {
		pfDst = &aheadDst[0]
	}
	mh := float32(m)
	var ml float32
	if d := m - float64(mh); !math.IsNaN(d) && !math.IsInf(d, 0) {
		ml = float32(d)
	}
	if len(src) == 0 {
		return 0
	}
	return expShiftAll(dst, src, mh, ml, pf, pfDst)
}

// SoftmaxRow32 sets dst (as long as src, not overlapping it) to the
// softmax of src in one assembly call, where vmath runs its AVX2 loops and
// len(src) ≥ 8 or its AVX-512 loops and len(src) ≥ 16, and reports whether
// it did; else it leaves dst alone and the caller computes it. The result
// is, bit for bit,
//
//	m := src[0]; for _, v := range src { if v > m { m = v } }  // see below
//	s := ExpShift32(dst, src, float64(m))
//	for i := range dst { dst[i] = float32(float64(dst[i]) * (1 / s)) }
//
// with m taken as a vector row maximum takes it (lane maxima, then folded;
// the AVX2 loop takes the last len mod 8 in order): the loop's m where no
// element is a NaN (a row holding one gives NaNs either way), up to the
// sign of a zero maximum, which changes no exponential (x - (+0) and
// x - (-0) differ only where x is a zero, and e^±0 = 1). One
// call instead of three saves the calls, the Go tails and the returns of
// the maximum and the sum: a Softmax over short rows (attention's 128 or
// 197 keys) spends a tenth of its time there.
//
// While it writes dst it fetches the lines pf bytes past dst's (pf ≥ 0;
// they need not lie in dst; 0 fetches nothing new): with rows end to end
// and pf a row's length in bytes, the next row's destination, whose lines
// a row written to memory then finds in cache instead of waiting to own
// each one. pf changes no result.
func SoftmaxRow32(dst, src []float32, pf int) bool {
	if len(dst) < len(src) || pf < 0 {
		return false
	}
	return softmaxRow(dst[:len(src)], src, pf)
}

// Erf32 sets dst[i] = erf(src[i]); dst may be src.
func Erf32(dst, src []float32) {
	dst = dst[:len(src)]
	if hasAVX512 {
		wideErf(dst, src)
		return
	}
	n := len(src) &^ (block - 1)
	if n > 0 {
		erf(dst[:n], src[:n])
	}
	if r := len(src) - n; r > 0 {
		var buf [block]float32
		copy(buf[:], src[n:])
		erf(buf[:], buf[:])
		copy(dst[n:], buf[:r])
	}
}

// Exp constants.
const (
	expLo    = -110     // e^-110 < 2^-150: rounds to 0
	expHi    = 89       // e^89 > MaxFloat32: +Inf
	expMagic = 0x1.8p23 // t = x/ln2 + magic holds round(x/ln2) in its low bits
	invLn2   = float32(1 / math.Ln2)
	ln2Hi    = float32(math.Ln2)                  // k·ln2Hi is exact and x - k·ln2Hi too
	ln2Lo    = float32(math.Ln2 - float64(ln2Hi)) // the rest of ln2
	expBias  = 127
	// expKMin: below 2^(expKMin+1) = 2^-150, half the smallest subnormal,
	// e^x·2^k rounds to 0; the assembly zeroes those lanes rather than
	// let the multiply underflow (the same bits, no microcode assist).
	expKMin = -151
	// expKSub: where expKMin < k < expKSub the result may be subnormal
	// (p·2^k with p < 1.42 is below 2^-126 only if k ≤ -126); the
	// assembly then rounds it without a subnormal multiply (EXP_FINISH).
	expKSub = -125
)

// expP: e^r = 1 + r + r²·P(r) for |r| ≤ 0.3467, P of degree 4 fitted
// (minimax, coefficients rounded to float32 one at a time, each refit
// after the previous rounding) to relative error 3.1e-9 of e^r.
// Highest degree first.
var expP = [5]float32{0.0013820749009028077, 0.008368678390979767, 0.04166826605796814, 0.1666652113199234, 0.4999999403953552}

// Erf constants.
const (
	erfSplit  = 0.5               // below: the small-argument form
	erfTop    = 4                 // erf(4) rounds to 1; larger |x| are clamped to it
	erfIdxMul = float32(8 / 3.5)  // interval index = trunc((a - 0.5)·8/3.5)
	erfIdxAdd = float32(-4 / 3.5) // -0.5·8/3.5
	erfIdxMax = 7
)

// erfR: erf(a) = a + a·R(a²) for a ≤ 0.5, R of degree 4 fitted the same way
// to relative error 1.5e-9 of erf. Highest degree first.
var erfR = [5]float32{0.004720369819551706, -0.02675865776836872, 0.11282853782176971, -0.37612611055374146, 0.12837916612625122}

// erfTab: for 0.5 ≤ a ≤ 4, interval i = [0.5 + 7i/16, 0.5 + 7(i+1)/16)
// (i < 8), erf(a) = c0h + (c0l + t·Q(t)) with t = a - centre[i], c0h + c0l
// = erf(centre) to 48 bits and Q of degree 5 fitted the same way to
// relative error 1.2e-8 (interval 0; below 4.2e-9 for the others).
// erfTab[0] holds the centres, erfTab[1] c0h, erfTab[2] c0l, erfTab[3+j]
// the coefficient of t^(6-j) (highest degree first), one interval a lane.
var erfTab = func() (tab [9][8]float32) {
	rows := [8][8]float64{ // c0h, c0l, c1..c6 per interval
		{0.6905924677848816, 9.154452196291629e-10, 0.6731284856796265, -0.48381128907203674, 0.007415886968374252, 0.1586092859506607, -0.046365492045879364, -0.03087719716131687},
		{0.8979896306991577, -2.149213962354679e-08, 0.29637446999549866, -0.34268316626548767, 0.16534382104873657, 0.01865512505173683, -0.05754229426383972, 0.016760328784585},
		{0.975797712802887, 7.787204658882274e-09, 0.08898764848709106, -0.14182420074939728, 0.12103816866874695, -0.049165450036525726, -0.005472785793244839, 0.01566142402589321},
		{0.9959291815757751, 7.189778772342947e-10, 0.01822071149945259, -0.037010837346315384, 0.044051527976989746, -0.03240222483873367, 0.012853228487074375, -6.9019639340695e-05},
		{0.999519407749176, -1.245793423976238e-08, 0.002544191898778081, -0.006280948407948017, 0.009488433599472046, -0.009620972909033298, 0.00669116759672761, -0.0028731604106724262},
		{0.9999604225158691, 2.1537497119084037e-08, 0.00024226444656960666, -0.0007040668861009181, 0.0012823294382542372, -0.0016297573456540704, 0.0015525249764323235, -0.0010423281928524375},
		{0.9999977350234985, 6.2089888785976655e-09, 1.5732413885416463e-05, -5.2602477808250114e-05, 0.00011176404950674623, -0.00016951683210209012, 0.00020352700084913522, -0.00017686405044514686},
		{0.9999999403953552, -2.957521338942115e-08, 6.967642889321723e-07, -2.6343359422753565e-06, 6.3783272707951255e-06, -1.1201240340596996e-05, 1.6271733329631388e-05, -1.7043566913343966e-05},
	}
	for i, r := range rows {
		tab[0][i] = float32(0.5 + 7*(float64(i)+0.5)/16)
		tab[1][i] = float32(r[0])
		tab[2][i] = float32(r[1])
		for j := 0; j < 6; j++ {
			tab[3+j][i] = float32(r[7-j])
		}
	}
	return tab
}()

// fma32 is a·b+c rounded once to float32, as VFMADD*PS computes it. The
// product is exact in float64; the float64 sum then rounds to the right
// float32 unless it landed on a float32 rounding midpoint (or on a float32,
// where its own rounding could hide that the exact sum was just off one):
// those few cases take sumToOdd.
func fma32(a, b, c float32) float32 {
	p, cc := float64(a)*float64(b), float64(c)
	if s := p + cc; math.Float64bits(s)<<36 != 0 { // not a midpoint, not a float32
		return float32(s)
	}
	return float32(sumToOdd(p, cc))
}

// sumToOdd is p + c rounded to odd: the float64 sum, with its last bit set
// when the exact sum (from a two-sum) lies beyond it. Rounding that to
// float32 gives the correctly rounded p + c, float32 subnormals included.
func sumToOdd(p, c float64) float64 {
	s := p + c
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return s
	}
	bb := s - p
	e := (p - (s - bb)) + (c - bb)
	if bits := math.Float64bits(s); e != 0 && bits&1 == 0 {
		if (e > 0) == (s > 0) {
			bits++
		} else {
			bits--
		}
		s = math.Float64frombits(bits)
	}
	return s
}

// expCore is e^(s+lo) for one element (s the rounded argument, lo its
// rounding error): the pure-Go form of the assembly, operation for
// operation. A clamped or NaN s drops lo, as the assembly's mask does.
func expCore(s, lo float32, withLo bool) float32 {
	sc := s
	if sc < expLo { // NaN passes, as VMAXPS with s second
		sc = expLo
	}
	if sc > expHi {
		sc = expHi
	}
	t := fma32(sc, invLn2, expMagic)
	kf := t - expMagic
	r := fma32(-kf, ln2Hi, sc)
	if withLo {
		if sc != s {
			lo = 0
		}
		r += lo
	}
	r = fma32(-kf, ln2Lo, r)
	ki := int32(math.Float32bits(t) - math.Float32bits(expMagic))
	r2 := r * r
	p := expP[0]
	for _, c := range expP[1:] {
		p = fma32(p, r, c)
	}
	p = fma32(r2, p, r)
	p += 1
	k1 := ki >> 1
	k2 := ki - k1
	p *= math.Float32frombits(uint32(k1+expBias) << 23)
	p *= math.Float32frombits(uint32(k2+expBias) << 23)
	return p
}

// twoDiff returns x - mh rounded and the rounding error minus ml.
func twoDiff(x, mh, ml float32) (s, lo float32) {
	s = x - mh
	bb := s - x
	e1 := x - (s - bb)
	e := e1 - (bb + mh)
	return s, e - ml
}

func expGo(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = expCore(v, 0, false)
	}
}

func expShiftGo(dst, src []float32, mh, ml float32) float64 {
	dst = dst[:len(src)]
	var sum float64
	for i, v := range src {
		s, lo := twoDiff(v, mh, ml)
		e := expCore(s, lo, true)
		dst[i] = e
		sum += float64(e)
	}
	return sum
}

// erfOne32 is erf(x) for one element, the pure-Go form of the assembly.
func erfOne32(x float32) float32 {
	const sign = 1 << 31
	bits := math.Float32bits(x)
	a := math.Float32frombits(bits &^ sign)
	var r float32
	switch {
	case a < erfSplit:
		s := a * a
		p := erfR[0]
		for _, c := range erfR[1:] {
			p = fma32(p, s, c)
		}
		r = fma32(a, p, a)
	case a != a:
		return x
	default:
		b := min(a, erfTop)
		i := int32(fma32(b, erfIdxMul, erfIdxAdd))
		i = min(max(i, 0), erfIdxMax)
		t := b - erfTab[0][i]
		q := erfTab[3][i]
		for j := 4; j < 9; j++ {
			q = fma32(q, t, erfTab[j][i])
		}
		q = fma32(q, t, erfTab[2][i])
		r = q + erfTab[1][i]
	}
	return math.Float32frombits(math.Float32bits(r) | bits&sign)
}

func erfGo(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = erfOne32(v)
	}
}

// Erf64For32 is erf(x) to about 1.4e-9 relative error: enough for a float64
// result that is rounded to float32 once (the scalar GELU formula uses it).
func Erf64For32(x float64) float64 { return erfOne64(x) }

// erfSmall64: erf(x) = x·P(x²) for |x| < 1, P of degree 6 fitted (Chebyshev
// least squares on [0, 1] in x²) to math.erf; relative error 1.4e-9.
// Highest degree first.
var erfSmall64 = [7]float64{7.8825003818071922e-05, -0.00080188589950960819, 0.0051893128103558308, -0.026854329537099764, 0.11283597491530763, -0.37612626907889429, 1.1283791658833289}

// erfMid64: erf(x) for 1 ≤ |x| < 4, one degree-7 polynomial in x - c per
// interval [1 + i/2, 1.5 + i/2) with centre c = 1.25 + i/2, fitted the same
// way; absolute error 6.8e-10 (erf ≥ 0.84 there, so relative error < 1e-9).
// Row i holds coefficient j (of (x-c)^j) at column j.
var erfMid64 = [6][8]float64{
	{0.92290012892278672, 0.23652112200238667, -0.29565174459861965, 0.16753589031359675, -0.006132028217698678, -0.047186555161679584, 0.020597649947884586, 0.0037451232641002082},
	{0.98667167113942766, 0.052774995450853374, -0.092356201816288452, 0.090157386961754862, -0.048105525348446199, 0.006618471811096361, 0.009049504861797222, -0.0059330854601841497},
	{0.99853728329433911, 0.0071423192149274043, -0.016070156881348472, 0.021724512471564147, -0.019088257526002936, 0.010660060011620513, -0.0027795496455304486, -0.00072153255941133506},
	{0.99989937808757645, 0.0005862772865944364, -0.0016122674224622658, 0.002760380296024234, -0.0032577103494108276, 0.0027562911003801509, -0.0016678518282716081, 0.00063581424484845082},
	{0.99999569723031079, 2.9189011715383259e-05, -9.4869335077947921e-05, 0.00019581263072243846, -0.00028616932897037613, 0.00031362881429619448, -0.00027375972252433484, 0.00017359689893726337},
	{0.99999988627411518, 8.8142884923616092e-07, -3.3060711996902885e-06, 7.9703280827382872e-06, -1.3785395189163726e-05, 1.8330048849029377e-05, -2.0692599684675657e-05, 1.7144833209647179e-05},
}

func erfOne64(x float64) float64 {
	a := math.Abs(x)
	var res float64
	switch {
	case a < 1:
		s := a * a
		p := erfSmall64[0]
		for _, c := range erfSmall64[1:] {
			p = math.FMA(p, s, c)
		}
		res = a * p
	case a < 4:
		i := min(int((a-1)*2), 5)
		d := a - (float64(i)*0.5 + 1.25)
		row := &erfMid64[i]
		res = row[7]
		for j := 6; j >= 0; j-- {
			res = math.FMA(res, d, row[j])
		}
	case a >= 4:
		res = 1
	default: // NaN
		return x
	}
	return math.Copysign(res, x)
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
