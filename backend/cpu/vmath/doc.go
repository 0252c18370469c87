// Package vmath holds float32 transcendentals over slices for the CPU
// kernels: Exp32, ExpShift32 and Erf32, and the one-pass kernels built on
// them (GeluErf32, ErfGrad32, GeluErfGrad32, and the GEMM epilogues' rows
// GeluErfBias32 and GeluErfGradX32, whose AVX2 and AVX-512 loops keep the
// intermediates in registers and start the next block's division before
// this block's erf: the loops are bound by that chain's latency). On
// amd64 with AVX2 and FMA they run eight float32 lanes per instruction (Go
// assembly); elsewhere a pure-Go loop evaluates the same formulas with the
// same fused multiply-adds (fma32 rounds once, as VFMADD does), so both
// give the same bits (the float64 sums of ExpShift32 aside, which add in
// another order). The pure-Go form is several times slower than a float64
// one would be: it is the fallback for machines without AVX2.
//
// Exp: Cody-Waite reduction x = k·ln2 + r (|r| ≤ ln2/2, ln2 in two float32
// parts so r is exact but for one rounding), e^r = 1 + r + r²·P(r) with P a
// degree-4 minimax fit, and the scale 2^k applied as two powers of two so
// that results that overflow become +Inf and results below the normal range
// round once into the subnormals (gradual underflow, not flushed to zero).
// The assembly reaches the same bits with fewer instructions: the AVX-512
// loops scale by one VSCALEFPS (lanes that round to 0 masked off), the
// AVX2 loops add k to p's exponent field in blocks whose results are all
// normal or 0; blocks with a subnormal result round it with an FMA that
// adds 2^-126 (no subnormal multiply, which x86 cores run through a
// microcode assist).
//
// Erf: erf(a) = a + a·R(a²) for |x| < 0.5 (R of degree 4), and for
// 0.5 ≤ |x| < 4 one degree-6 polynomial in a - c per interval of width
// 7/16 (eight intervals, coefficients picked per lane with VPERMPS), whose
// constant term is carried in two float32 parts; |x| ≥ 4 gives ±1.
//
// Both stay within 1 ulp of float32(math.Exp(x)) and float32(math.Erf(x))
// over every float32 input (tests sweep the bit patterns at a stride and
// densely near the range switches); ±Inf, NaN, -0 and subnormal inputs are
// handled.
package vmath
