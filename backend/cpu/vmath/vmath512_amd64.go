//go:build amd64 && !purego

package vmath

import (
	"math"
	"os"

	"golang.org/x/sys/cpu"
)

// hasAVX512 reports whether the sixteen-lane AVX-512F loops run: the CPU
// and OS support them (zmm state) and ONNXTRAIN_NO_AVX512 is not set in
// the environment (read once, at start-up, as the GEMM reads it), so that
// one machine can measure what a CPU without AVX-512 gets. They give the
// same bits as the eight-lane AVX2 loops and the pure-Go reference, sums
// included (the float64 lane sums of ExpShift32 and the float32 lane sums
// of SumExpShift32 are added in the AVX2 loops' order).
var hasAVX512 = hasAVX2FMA && cpu.X86.HasAVX512F && os.Getenv("ONNXTRAIN_NO_AVX512") == ""

// AVX512 reports whether vmath's kernels run their AVX-512 loops.
func AVX512() bool { return hasAVX512 }

// avx512Const is avxConst with every row sixteen lanes wide, in the order
// of the Z_* offsets in vmath512_amd64.s (erfTab's rows with interval 7
// in lanes 8-14: VPERMPS on zmm indexes sixteen lanes, and ERF16 leaves
// the index unclamped, 8 at the top of the range; lane 15 holds the small
// form's coefficients for ERF16's single chain: centre and c0h 0, c0l =
// erfR[4], Q0 = Q1 = 0, Q2-Q5 = erfR[0-3]), then the rows only
// EXP_FINISH16 reads: expKSub as a float (it compares k as a float, as
// with avxConst's expKMin row), 64, 2^-64 and 2^-62 (its subnormal band:
// p·2^k = (p·2^(k+64))·2^-64, subnormal where p·2^(k+64) < 2^-62), and
// the int32 15, the index ERF16 gives its small lanes.
var avx512Const = func() (c [len(avxConst) + 5][16]float32) {
	const firstTab = len(avxConst) - len(erfTab) - 5 // erfTab's rows (then the exponential's five)
	for i := range avxConst {
		for j := range c[i] {
			c[i][j] = avxConst[i][j%8]
			if i >= firstTab && i < firstTab+len(erfTab) && j >= 8 {
				c[i][j] = avxConst[i][7]
			}
		}
	}
	// erfTab's rows: centres, c0h, c0l, Q0..Q5.
	small := [len(erfTab)]float32{0, 0, erfR[4], 0, 0, erfR[0], erfR[1], erfR[2], erfR[3]}
	for r, v := range small {
		c[firstTab+r][15] = v
	}
	for i, v := range []float32{expKSub, 64, 0x1p-64, 0x1p-62, math.Float32frombits(15)} {
		for j := range c[len(avxConst)+i] {
			c[len(avxConst)+i][j] = v
		}
	}
	return c
}()

// The AVX-512 loops take any n ≥ 1 (the last n mod 16 elements through
// masked loads and stores) but sumExpShift512, whose n is a multiple of 8
// (at most sumExpChunk).

//go:noescape
func exp512(dst, src *float32, n int, consts *[16]float32)

//go:noescape
func expShift512(dst, src *float32, n int, mh, ml float32, consts *[16]float32, pf, pfDst *float32) float64

// maxRow512 is the largest of n ≥ 16 elements (any n).
//
//go:noescape
func maxRow512(x *float32, n int) float32

// MaxRow512 returns the largest element of x (at least 16 long) through
// the sixteen-lane loop the fused softmax row takes its maximum with,
// where the CPU has AVX-512F (the callers check AVX512): exact in any
// order, up to the sign of a zero maximum and which of several NaNs wins.
func MaxRow512(x []float32) float32 { return maxRow512(&x[0], len(x)) }

// scaleRow512 sets x[i] = float32(float64(x[i])·s) over n ≥ 1 elements.
//
//go:noescape
func scaleRow512(x *float32, n int, s float64)

// ScaleRow512 sets x[i] = float32(float64(x[i])·s), each product rounded
// once, through the sixteen-lane loop the fused softmax row scales with
// (AVX-512F: the callers check AVX512); the bits of the same multiply in
// Go or AVX2.
func ScaleRow512(x []float32, s float64) {
	if len(x) > 0 {
		scaleRow512(&x[0], len(x), s)
	}
}

// softmaxRow512 is softmaxRowAVX2's AVX-512 form (n ≥ 16).
//
//go:noescape
func softmaxRow512(dst, src *float32, n int, consts *[16]float32, pf int)

//go:noescape
func sumExpShift512(src *float32, n int, m float32, consts *[16]float32, pf *float32) float64

//go:noescape
func erf512(dst, src *float32, n int, consts *[16]float32)

//go:noescape
func geluErf512(y, d, a, x *float32, n int, c1, c2, c3 float32, consts *[16]float32)

//go:noescape
func erfGrad512(dst, dy, x *float32, n int, c float32, consts *[16]float32)

//go:noescape
func geluErfGrad512(dst, dy, x, d, a *float32, n int, c1, c3, k float32, consts *[16]float32)

// The wide* functions run the AVX-512 loops over slices of any length
// (the callers check hasAVX512 and pass equal lengths).

func wideExp(dst, src []float32) {
	if len(src) > 0 {
		exp512(&dst[0], &src[0], len(src), &avx512Const[0])
	}
}

func wideErf(dst, src []float32) {
	if len(src) > 0 {
		erf512(&dst[0], &src[0], len(src), &avx512Const[0])
	}
}

func wideGeluErf(y, d, a, x []float32, c1, c2, c3 float32) {
	if len(x) > 0 {
		geluErf512(&y[0], &d[0], &a[0], &x[0], len(x), c1, c2, c3, &avx512Const[0])
	}
}

func wideErfGrad(dst, dy, x []float32, c float32) {
	if len(x) > 0 {
		erfGrad512(&dst[0], &dy[0], &x[0], len(x), c, &avx512Const[0])
	}
}

func wideGeluErfGrad(dst, dy, x, d, a []float32, c1, c3, k float32) {
	if len(dst) > 0 {
		geluErfGrad512(&dst[0], &dy[0], &x[0], &d[0], &a[0], len(dst), c1, c3, k, &avx512Const[0])
	}
}

//go:noescape
func geluErfBias512(y, p, bias *float32, n int, c1, c2, c3 float32, consts *[16]float32)

//go:noescape
func geluErfGradX512(dst, y, dy, x *float32, n int, c1, c2, c3, k float32, consts *[16]float32)

// wideGeluErfBias: bias nil or as long as p.
func wideGeluErfBias(y, p, bias []float32, c1, c2, c3 float32) {
	if len(p) == 0 {
		return
	}
	var bp *float32
	if bias != nil {
		bp = &bias[0]
	}
	geluErfBias512(&y[0], &p[0], bp, len(p), c1, c2, c3, &avx512Const[0])
}

// wideGeluErfGradX: y nil or as long as x.
func wideGeluErfGradX(dst, y, dy, x []float32, c1, c2, c3, k float32) {
	if len(x) == 0 {
		return
	}
	var yp *float32
	if y != nil {
		yp = &y[0]
	}
	geluErfGradX512(&dst[0], yp, &dy[0], &x[0], len(x), c1, c2, c3, k, &avx512Const[0])
}
