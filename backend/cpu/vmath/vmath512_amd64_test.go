//go:build amd64 && !purego

package vmath

import (
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"
)

// canAVX512 is whether this CPU runs the AVX-512 loops at all (whatever
// ONNXTRAIN_NO_AVX512 says): the tests below call them directly.
var canAVX512 = hasAVX2FMA && cpu.X86.HasAVX512F

func needAVX512(t *testing.T) {
	t.Helper()
	if !canAVX512 {
		t.Skip("no AVX-512F on this CPU (missing hardware)")
	}
}

func sameBits32(t *testing.T, what string, i int, x, got, want float32) {
	t.Helper()
	if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
		t.Fatalf("%s[%d] at x = %g (%#08x): AVX-512 %g (%#08x), Go %g (%#08x)", what, i, x, math.Float32bits(x),
			got, math.Float32bits(got), want, math.Float32bits(want))
	}
}

// band returns every float32 in [lo, hi] (lo < hi < 0 or 0 < lo < hi).
func band(lo, hi float32) []float32 {
	a, b := math.Float32bits(lo), math.Float32bits(hi)
	if a > b {
		a, b = b, a
	}
	xs := make([]float32, 0, b-a+1)
	for u := a; u <= b; u++ {
		xs = append(xs, math.Float32frombits(u))
	}
	return xs
}

// specialsAt returns n values, random but for the specials, which land on
// every lane position and in the masked tail (n not a multiple of 16).
func specialsAt(n int, rng *rand.Rand, scale float64) []float32 {
	inf := float32(math.Inf(1))
	sp := []float32{0, float32(math.Copysign(0, -1)), inf, -inf, float32(math.NaN()), -float32(math.NaN()),
		math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00123), 1e-40, -1e-40, math.SmallestNonzeroFloat32,
		-87.5, -95, -103.9, -104, -110, 88.8, 0.5, -0.5, 4, -4, 13.5, -14, 1e30, -1e30}
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	for i := range x {
		if (i*7+3)%5 == 0 {
			x[i] = sp[(i*3)%len(sp)]
		}
	}
	return x
}

// exp512 gives expGo's bits over the sweep of every bit pattern and over
// every float32 whose exponential is subnormal or rounds to 0 from above
// (e^-87.34 down to e^-104), the band where EXP_FINISH16 rounds with an
// FMA instead of a subnormal multiply.
func TestExp512MatchesGo(t *testing.T) {
	needAVX512(t)
	for _, xs := range [][]float32{sweep(), band(-87.2, -104.1)} {
		got, want := make([]float32, len(xs)), make([]float32, len(xs))
		exp512(&got[0], &xs[0], len(xs), &avx512Const[0])
		expGo(want, xs)
		for i := range xs {
			sameBits32(t, "exp", i, xs[i], got[i], want[i])
		}
	}
	// The band gives most subnormals of the upper exponents.
	xs := band(-87.2, -104.1)
	got := make([]float32, len(xs))
	exp512(&got[0], &xs[0], len(xs), &avx512Const[0])
	seen := map[float32]bool{}
	for _, v := range got {
		if v > 0 && v < 0x1p-126 {
			seen[v] = true
		}
	}
	assert.Greater(t, len(seen), 600000, "distinct subnormal results in the band (of 2^23)")

	// The carry out of the subnormals: e^-(126·ln2 + 3e-8) = 2^-126·(1 -
	// 3e-8) lies within 2^-150 of 2^-126 (and 3e-8 is ten times the
	// polynomial's error), so it rounds up to the smallest normal. The
	// exact shift (m in two parts) reaches it from x = 0.
	m := 126*math.Ln2 + 3e-8
	mh := float32(m)
	ml := float32(m - float64(mh))
	var one, want [1]float32
	zero := []float32{0}
	expShift512(&one[0], &zero[0], 1, mh, ml, &avx512Const[0], nil, nil)
	expShiftGo(want[:], zero, mh, ml)
	assert.Equal(t, float32(0x1p-126), want[0], "the Go reference rounds up to 2^-126")
	assert.Equal(t, math.Float32bits(want[0]), math.Float32bits(one[0]), "AVX-512 rounds up to 2^-126")
}

// The AVX2 loops round the subnormal band the same way (EXP_FINISH's FMA
// with 2^-126): every float32 there gives expGo's bits, through exp, the
// exact shift (the carry into 2^-126 included) and erfGrad's e^-(x·x).
func TestAVX2SubnormalBandMatchesGo(t *testing.T) {
	if !hasAVX2FMA {
		t.Skip("no AVX2/FMA on this CPU (missing hardware)")
	}
	xs := band(-87.2, -104.1)
	n := len(xs) &^ 7
	got, want := make([]float32, len(xs)), make([]float32, len(xs))
	expAVX2(&got[0], &xs[0], n, &avxConst[0])
	expGo(want, xs)
	for i := range n {
		sameBits32(t, "expAVX2", i, xs[i], got[i], want[i])
	}
	sh := make([]float32, len(xs))
	for i := range sh {
		sh[i] = xs[i] + 10
	}
	expShiftAVX2(&got[0], &sh[0], len(sh), 10, 1e-7, &avxConst[0], &tailMask[0], nil, nil)
	expShiftGo(want, sh, 10, 1e-7)
	for i := range sh {
		sameBits32(t, "expShiftAVX2", i, sh[i], got[i], want[i])
	}
	m := 126*math.Ln2 + 3e-8
	mh := float32(m)
	ml := float32(m - float64(mh))
	zero := []float32{0}
	var one [1]float32
	expShiftAVX2(&one[0], &zero[0], 1, mh, ml, &avxConst[0], &tailMask[0], nil, nil)
	assert.Equal(t, float32(0x1p-126), one[0], "AVX2 rounds up to 2^-126")
	// x in [13.2, 14.4]: -(x·x) in the band.
	gx := band(13.2, 14.4)
	gx = gx[:len(gx)&^7]
	dy := make([]float32, len(gx))
	for i := range dy {
		dy[i] = 1.5
	}
	g, gg := make([]float32, len(gx)), make([]float32, len(gx))
	erfGradAVX2(&g[0], &dy[0], &gx[0], len(gx), 1.25, &avxConst[0])
	erfGradGo(gg, dy, gx, 1.25)
	for i := range gx {
		sameBits32(t, "erfGradAVX2", i, gx[i], g[i], gg[i])
	}
}

// Every length from 1 to 80 (whole blocks of 16 and 32, masked tails) at
// every offset: the Go bits, nothing written past the end.
func TestExp512Lengths(t *testing.T) {
	needAVX512(t)
	rng := rand.New(rand.NewPCG(21, 22))
	for n := 1; n <= 80; n++ {
		for off := 0; off < 16; off += 5 {
			checkUnary512(t, "exp", specialsAt(off+n, rng, 40)[off:], exp512, expGo)
		}
	}
}

// checkUnary512 runs an AVX-512 loop over src into a buffer 17 longer
// and checks every element has the Go function's bits and nothing past
// the end is written.
func checkUnary512(t *testing.T, name string, src []float32, loop func(dst, src *float32, n int, c *[16]float32), ref func(dst, src []float32)) {
	t.Helper()
	n := len(src)
	got := make([]float32, n+17)
	for i := range got {
		got[i] = -7
	}
	want := make([]float32, n)
	loop(&got[0], &src[0], n, &avx512Const[0])
	ref(want, src)
	for i := range want {
		sameBits32(t, name, i, src[i], got[i], want[i])
	}
	for i := n; i < len(got); i++ {
		require.Equal(t, float32(-7), got[i], "%s n=%d: [%d] past the end written", name, n, i)
	}
}

func TestErf512MatchesGo(t *testing.T) {
	needAVX512(t)
	xs := sweep()
	got, want := make([]float32, len(xs)), make([]float32, len(xs))
	erf512(&got[0], &xs[0], len(xs), &avx512Const[0])
	erfGo(want, xs)
	for i := range xs {
		sameBits32(t, "erf", i, xs[i], got[i], want[i])
	}
	rng := rand.New(rand.NewPCG(23, 24))
	for n := 1; n <= 50; n++ {
		checkUnary512(t, "erf", specialsAt(n, rng, 2), erf512, erfGo)
	}
}

// expShift512: the elements have expShiftGo's bits and the sum is the AVX2
// loop's, bit for bit (the same lane sums, added in the same order), at
// every length from 1 to 100, on the sweep, and where x - m falls in the
// subnormal band.
func TestExpShift512MatchesAVX2(t *testing.T) {
	needAVX512(t)
	check := func(xs []float32, mh, ml float32) {
		t.Helper()
		n := len(xs)
		got, want, avx := make([]float32, n+16), make([]float32, n), make([]float32, n)
		for i := range got {
			got[i] = -7
		}
		s := expShift512(&got[0], &xs[0], n, mh, ml, &avx512Const[0], nil, nil)
		s2 := expShiftAVX2(&avx[0], &xs[0], n, mh, ml, &avxConst[0], &tailMask[0], nil, nil)
		expShiftGo(want, xs, mh, ml)
		for i := range want {
			sameBits32(t, "expShift", i, xs[i], got[i], want[i])
		}
		for i := n; i < len(got); i++ {
			require.Equal(t, float32(-7), got[i], "n=%d: [%d] past the end written", n, i)
		}
		if !(math.IsNaN(s) && math.IsNaN(s2)) {
			require.Equal(t, math.Float64bits(s2), math.Float64bits(s), "n=%d m=%g: sum %g, AVX2 %g", n, mh, s, s2)
		}
	}
	rng := rand.New(rand.NewPCG(25, 26))
	for n := 1; n <= 100; n++ {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64() * 5)
		}
		check(xs, 1.5, 3e-8)
		check(specialsAt(n, rng, 30), 0.25, 0)
	}
	xs := sweep()
	check(xs, 0.75, 0)
	check(xs, 88, -2e-7)
	b := band(-87.2, -104.1)
	for i := range b {
		b[i] += 10 // x - 10 in the band (rounded)
	}
	check(b, 10, 1e-7)
}

// sumExpShift512 is sumExpShiftAVX2 and sumExpShiftGo bit for bit, every
// multiple of 8 up to sumExpChunk.
func TestSumExpShift512MatchesAVX2(t *testing.T) {
	needAVX512(t)
	rng := rand.New(rand.NewPCG(27, 28))
	for n := 8; n <= sumExpChunk; n += 8 {
		for _, xs := range [][]float32{specialsAt(n, rng, 1), specialsAt(n, rng, 40)} {
			for i := range xs { // keep most lanes finite so the sums mean something
				if xs[i] != xs[i] && rng.IntN(4) != 0 {
					xs[i] = -3
				}
			}
			for _, m := range []float32{0, 2.5, -90} {
				s := sumExpShift512(&xs[0], n, m, &avx512Const[0], nil)
				s2 := sumExpShiftAVX2(&xs[0], n, m, &avxConst[0], nil)
				sg := sumExpShiftGo(xs, m)
				if math.IsNaN(s2) {
					require.True(t, math.IsNaN(s) && math.IsNaN(sg), "n=%d m=%g", n, m)
					continue
				}
				require.Equal(t, math.Float64bits(s2), math.Float64bits(s), "n=%d m=%g: %g, AVX2 %g", n, m, s, s2)
				require.Equal(t, math.Float64bits(sg), math.Float64bits(s), "n=%d m=%g: %g, Go %g", n, m, s, sg)
			}
		}
	}
	// Terms in the subnormal band.
	xs := band(-87.2, -104.1)[:sumExpChunk]
	s := sumExpShift512(&xs[0], len(xs), 0, &avx512Const[0], nil)
	require.Equal(t, math.Float64bits(sumExpShiftAVX2(&xs[0], len(xs), 0, &avxConst[0], nil)), math.Float64bits(s))
}

// The fused GELU kernels give their Go forms' bits (and so the unfused
// ops'), tails and specials included, on inputs whose e^-(d·d) falls in
// the subnormal band too.
func TestGeluKernels512MatchGo(t *testing.T) {
	needAVX512(t)
	rng := rand.New(rand.NewPCG(29, 30))
	c1, c2, c3, k := float32(math.Sqrt2), float32(1), float32(0.5), float32(2/math.Sqrt(math.Pi))
	lengths := []int{}
	for n := 1; n <= 70; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1000, 4099)
	inputs := func(n int) []float32 {
		x := specialsAt(n, rng, 4)
		for i := range x {
			if i%11 == 5 { // |d| in [9.3, 10.2]: e^-(d·d) subnormal
				x[i] = float32(13.2+rng.Float64()*1.2) * float32(1-2*(i%2))
			}
		}
		return x
	}
	for _, n := range lengths {
		x, dy := inputs(n), specialsAt(n, rng, 1)
		y, d, a := make([]float32, n+16), make([]float32, n+16), make([]float32, n+16)
		for i := range y {
			y[i], d[i], a[i] = -7, -7, -7
		}
		geluErf512(&y[0], &d[0], &a[0], &x[0], n, c1, c2, c3, &avx512Const[0])
		yg, dg, ag := make([]float32, n), make([]float32, n), make([]float32, n)
		geluErfGo(yg, dg, ag, x, c1, c2, c3)
		for i := range x {
			sameBits32(t, "gelu y", i, x[i], y[i], yg[i])
			sameBits32(t, "gelu d", i, x[i], d[i], dg[i])
			sameBits32(t, "gelu a", i, x[i], a[i], ag[i])
		}
		for i := n; i < n+16; i++ {
			require.True(t, y[i] == -7 && d[i] == -7 && a[i] == -7, "n=%d: [%d] past the end written", n, i)
		}

		g, gg := make([]float32, n+16), make([]float32, n)
		for i := range g {
			g[i] = -7
		}
		erfGrad512(&g[0], &dy[0], &d[0], n, k, &avx512Const[0])
		erfGradGo(gg, dy, dg, k)
		for i := range gg {
			sameBits32(t, "erfGrad", i, d[i], g[i], gg[i])
		}
		require.Equal(t, float32(-7), g[n], "n=%d: past the end written", n)

		geluErfGrad512(&g[0], &dy[0], &x[0], &dg[0], &ag[0], n, c1, c3, k, &avx512Const[0])
		geluErfGradGo(gg, dy, x, dg, ag, c1, c3, k)
		for i := range gg {
			sameBits32(t, "geluErfGrad", i, x[i], g[i], gg[i])
		}
		require.Equal(t, float32(-7), g[n], "n=%d: past the end written", n)
	}
	// erfGrad over the sweep: -(x·x) covers the exponential's whole range.
	xs := sweep()
	dy := make([]float32, len(xs))
	for i := range dy {
		dy[i] = 1 + float32(i%5)
	}
	g, gg := make([]float32, len(xs)), make([]float32, len(xs))
	erfGrad512(&g[0], &dy[0], &xs[0], len(xs), k, &avx512Const[0])
	erfGradGo(gg, dy, xs, k)
	for i := range xs {
		sameBits32(t, "erfGrad", i, xs[i], g[i], gg[i])
	}
}

// The exported functions take the AVX-512 loops when hasAVX512 and give
// the bits of the AVX2 loops (called directly here) either way.
func TestExportedMatchAVX2(t *testing.T) {
	needAVX512(t)
	rng := rand.New(rand.NewPCG(31, 32))
	x := specialsAt(1037, rng, 6)
	n8 := len(x) &^ 7
	a, b := make([]float32, len(x)), make([]float32, len(x))
	Exp32(a, x)
	expAVX2(&b[0], &x[0], n8, &avxConst[0])
	expGo(b[n8:], x[n8:])
	for i := range x {
		sameBits32(t, "Exp32", i, x[i], a[i], b[i])
	}
	Erf32(a, x)
	erfAVX2(&b[0], &x[0], n8, &avxConst[0])
	erfGo(b[n8:], x[n8:])
	for i := range x {
		sameBits32(t, "Erf32", i, x[i], a[i], b[i])
	}
	for i := range x {
		if x[i] != x[i] {
			x[i] = 1
		}
	}
	s := ExpShift32(a, x, 2.5)
	s2 := expShiftAVX2(&b[0], &x[0], len(x), 2.5, 0, &avxConst[0], &tailMask[0], nil, nil)
	require.Equal(t, math.Float64bits(s2), math.Float64bits(s), "ExpShift32's sum")
	for i := range x {
		sameBits32(t, "ExpShift32", i, x[i], a[i], b[i])
	}
}

// ONNXTRAIN_NO_AVX512=1 keeps the AVX-512 loops off (read at start-up, so
// in a child process); the results are the same.
func TestNoAVX512EnvironmentVmath(t *testing.T) {
	if os.Getenv("ONNXTRAIN_VMATH_ENV_CHILD") != "" {
		require.False(t, AVX512(), "ONNXTRAIN_NO_AVX512=1 leaves the AVX-512 loops off")
		x := []float32{-100, -1, 0, 0.5, 3, 20}
		got := make([]float32, len(x))
		Exp32(got, x)
		want := make([]float32, len(x))
		expGo(want, x)
		require.Equal(t, want, got)
		return
	}
	needAVX512(t)
	require.True(t, AVX512() || os.Getenv("ONNXTRAIN_NO_AVX512") != "", "AVX-512 CPU: the loops are on")
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoAVX512EnvironmentVmath$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ONNXTRAIN_VMATH_ENV_CHILD=1", "ONNXTRAIN_NO_AVX512=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child: %s", out)
	assert.Contains(t, string(out), "PASS")
}

// The one-pass AVX-512 loops for the GEMM epilogues give the separate
// calls' bits, masked tails and the subnormal band included, and write
// nothing past the end.
func TestGeluFused512MatchGo(t *testing.T) {
	needAVX512(t)
	rng := rand.New(rand.NewPCG(33, 34))
	c1, c2, c3, k := float32(math.Sqrt2), float32(1), float32(0.5), float32(2/math.Sqrt(math.Pi))
	for n := 1; n <= 70; n++ {
		x, dy, bias := specialsAt(n, rng, 5), specialsAt(n, rng, 1), specialsAt(n, rng, 1)
		for i := range x {
			if i%7 == 2 {
				x[i] = float32(13.2+rng.Float64()*1.2) * float32(1-2*(i%2)) // e^-(d·d) subnormal
			}
		}
		p := append(append([]float32(nil), x...), -7)
		y := make([]float32, n+16)
		for i := range y {
			y[i] = -7
		}
		geluErfBias512(&y[0], &p[0], &bias[0], n, c1, c2, c3, &avx512Const[0])
		wantP := append([]float32(nil), x...)
		for i := range wantP {
			wantP[i] += bias[i]
		}
		wantY, _ := geluRef(wantP, nil, c1, c2, c3, k)
		for i := range wantP {
			sameBits32(t, "bias p", i, x[i], p[i], wantP[i])
			sameBits32(t, "bias y", i, x[i], y[i], wantY[i])
		}
		require.True(t, p[n] == -7 && y[n] == -7, "n=%d: past the end written", n)

		wantY, wantD := geluRef(x, dy, c1, c2, c3, k)
		dst := make([]float32, n+16)
		for i := range y {
			y[i], dst[i] = -7, -7
		}
		geluErfGradX512(&dst[0], &y[0], &dy[0], &x[0], n, c1, c2, c3, k, &avx512Const[0])
		for i := range x {
			sameBits32(t, "gradX y", i, x[i], y[i], wantY[i])
			sameBits32(t, "gradX dst", i, x[i], dst[i], wantD[i])
		}
		require.True(t, dst[n] == -7 && y[n] == -7, "n=%d: past the end written", n)
	}
}
