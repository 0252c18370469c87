//go:build amd64 && !purego

package vmath

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The one-pass AVX2 loops of the GEMM epilogues (geluErfBiasAVX2,
// geluErfGradXAVX2, called directly, so that an AVX-512 host tests them
// too) give the pure-Go loops' bits of the bias add, GeluErf32 and
// GeluErfGrad32 run one after another: over the sweep of every bit
// pattern (as x, and as the bias), over short lengths with the specials on
// every lane and the band where e^-(d·d) is subnormal, with and without
// the bias and y, dst over dy, and they write nothing past n. Where the
// CPU has AVX-512, the sixteen-lane loops (geluErfBias512,
// geluErfGradX512) go over the same sweep.
func TestGeluFusedAVX2MatchGo(t *testing.T) {
	if !hasAVX2FMA {
		t.Skip("no AVX2/FMA on this CPU (missing hardware)")
	}
	rng := rand.New(rand.NewPCG(35, 36))
	c1, c2, c3, k := float32(math.Sqrt2), float32(1), float32(0.5), float32(2/math.Sqrt(math.Pi))
	type loops struct {
		bias func(y, p, bias *float32, n int)
		grad func(dst, y, dy, x *float32, n int)
	}
	avx2 := loops{
		func(y, p, bias *float32, n int) { geluErfBiasAVX2(y, p, bias, n, c1, c2, c3, &avxConst[0]) },
		func(dst, y, dy, x *float32, n int) { geluErfGradXAVX2(dst, y, dy, x, n, c1, c2, c3, k, &avxConst[0]) },
	}
	wide := loops{
		func(y, p, bias *float32, n int) { geluErfBias512(y, p, bias, n, c1, c2, c3, &avx512Const[0]) },
		func(dst, y, dy, x *float32, n int) { geluErfGradX512(dst, y, dy, x, n, c1, c2, c3, k, &avx512Const[0]) },
	}
	l := avx2
	check := func(name string, x, dy, bias []float32) {
		t.Helper()
		n := len(x)
		require.Zero(t, n%8, "the loops take multiples of 8")
		// Bias add and GELU.
		p := append(append([]float32(nil), x...), -7)
		y := make([]float32, n+8)
		for i := range y {
			y[i] = -7
		}
		var bp *float32
		wantP := append([]float32(nil), x...)
		if bias != nil {
			bp = &bias[0]
			for i := range wantP {
				wantP[i] += bias[i]
			}
		}
		l.bias(&y[0], &p[0], bp, n)
		wantY, _ := geluRef(wantP, nil, c1, c2, c3, k)
		for i := range wantP {
			sameBits(t, name+" bias p", i, x[i], p[i], wantP[i])
			sameBits(t, name+" bias y", i, x[i], y[i], wantY[i])
		}
		require.True(t, p[n] == -7 && y[n] == -7, "%s n=%d: past the end written", name, n)

		// GELU's gradient with y, then in place over dy without y.
		wantY, wantD := geluRef(x, dy, c1, c2, c3, k)
		dst := make([]float32, n+8)
		for i := range dst {
			y[i], dst[i] = -7, -7
		}
		l.grad(&dst[0], &y[0], &dy[0], &x[0], n)
		g := append(append([]float32(nil), dy...), -7)
		l.grad(&g[0], nil, &g[0], &x[0], n)
		for i := range x {
			sameBits(t, name+" gradX y", i, x[i], y[i], wantY[i])
			sameBits(t, name+" gradX dst", i, x[i], dst[i], wantD[i])
			sameBits(t, name+" gradX in place", i, x[i], g[i], wantD[i])
		}
		require.True(t, dst[n] == -7 && y[n] == -7 && g[n] == -7, "%s n=%d: past the end written", name, n)
	}
	for n := 8; n <= 96; n += 8 {
		x, dy, bias := specialsAt(n, rng, 5), specialsAt(n, rng, 1), specialsAt(n, rng, 1)
		for i := range x {
			if i%7 == 2 {
				x[i] = float32(13.2+rng.Float64()*1.2) * float32(1-2*(i%2)) // e^-(d·d) subnormal
			}
		}
		check("short", x, dy, bias)
		check("short, no bias", x, dy, nil)
	}
	xs := sweep()
	xs = xs[:len(xs)&^7]
	dy := make([]float32, len(xs))
	for i := range dy {
		dy[i] = float32(i%13)*0.37 - 2
	}
	rev := make([]float32, len(xs)) // the sweep again as the bias, in another order
	for i := range rev {
		rev[i] = xs[len(xs)-1-i] * 1e-3
	}
	check("sweep", xs, dy, rev)
	if canAVX512 {
		l = wide
		check("sweep, AVX-512", xs, dy, rev)
	}
}
