//go:build amd64 && !purego

#include "textflag.h"

// Offsets of the rows of avxConst (eight float32 lanes, 32 bytes each).
#define K_LO 0
#define K_HI 32
#define K_INVLN2 64
#define K_MAGIC 96
#define K_LN2HI 128
#define K_LN2LO 160
#define K_P0 192
#define K_P1 224
#define K_P2 256
#define K_P3 288
#define K_P4 320
#define K_ONE 352
#define K_BIAS 384
#define K_ABS 416
#define K_SPLIT 448
#define K_TOP 480
#define K_IDXMUL 512
#define K_IDXADD 544
#define K_IDXMAX 576
#define K_R0 608
#define K_R1 640
#define K_R2 672
#define K_R3 704
#define K_R4 736
#define K_CENTRE 768
#define K_C0H 800
#define K_C0L 832
#define K_Q0 864
#define K_Q1 896
#define K_Q2 928
#define K_Q3 960
#define K_Q4 992
#define K_Q5 1024
#define K_KMIN 1056
#define K_I128 1088
#define K_MINNORM 1120
#define K_KMINF 1152
#define K_KRANGE 1184

// EXP_REDUCE: X holds the clamped argument. T = x/ln2 + magic (k in its
// low bits), K = k as a float, X = x - k·ln2Hi (exact). R8 = avxConst.
#define EXP_REDUCE(X, T, K) \
	VMOVUPS K_MAGIC(R8), T \
	VFMADD231PS K_INVLN2(R8), X, T \
	VSUBPS K_MAGIC(R8), T, K \
	VFNMADD231PS K_LN2HI(R8), K, X

// EXP_FINISH: from EXP_REDUCE's X, T, K, P = e^x; X, T, K and E are
// clobbered, and the flags; LF and LD are two labels unique to the use.
// r = X - k·ln2Lo, p = 1 + (r + r²·P(r)), then p·2^k1·2^k2 with k1 = k>>1,
// k2 = k - k1 (so 2^k past the float32 exponent range still works).
// Where k < -150 the product is below half the smallest subnormal (p <
// 1.42) and rounds to +0: there 2^k2 becomes +0, so the last multiply
// gives the same +0 (a NaN p passes) without underflowing, which x86
// cores compute through a microcode assist costing about as much as a
// whole block of eight.
//
// Where -150 ≤ k ≤ -126 the result may be subnormal, and the last
// multiply would take the assist: the blocks with such a lane (rare
// outside softmax's tails) compute it as an FMA that adds 2^-126,
//
//	q = p·2^k1·2^k2 + 2^-126 (one rounding; p·2^k1 and 2^k2 normal),
//
// in the lanes whose result is below 2^-126 (the biased exponents of
// p·2^k1 and 2^k2 summing to less than 128; the lanes with k < -150, whose
// 2^k2 is +0, give q = 2^-126 and +0 in the end). q lies in [2^-126,
// 2^-125], where float32's spacing is 2^-149, the subnormals': q's bits
// minus those of 2^-126 are those of p·2^k rounded to nearest even among
// the subnormals (a carry into the smallest normal included), the bits the
// multiply gives, with no subnormal in or out. The other lanes add +0 and
// subtract nothing: the multiply's bits (p·2^k1·2^k2 + 0 is rounded once,
// and is positive, +Inf or NaN; a NaN's exponent field sums to 255 or more).
//
// The common blocks take a shorter road to the same bits (E is one more
// register clobbered; the labels LF, LD): where every lane has k ≤ -151
// (and no NaN) or -125 ≤ k ≤ 127, p·2^k is normal (p in [0.707, 1.415))
// or rounds to +0, and the exponent field of p plus k gives it exactly:
// t's bits shifted left by 23 are k's (magic's low nine bits are zero), one
// VPADDD adds them to p's, and the lanes with k ≤ -151 are zeroed. The
// test takes two compares, a subtraction and an AND on k as a float (the
// lanes with k > -151 or NaN; those with |k - 1| < 126.5) and a VPTEST
// (its carry: no lane in the first and not the second); other blocks (the subnormal band,
// k = 128, a NaN) run the FMA form above, which gives the multiply's bits in
// every lane.
#define EXP_FINISH(X, T, K, P, E, LF, LD) \
	VFNMADD231PS K_LN2LO(R8), K, X \
	VMULPS X, X, E \
	VMOVUPS K_P0(R8), P \
	VFMADD213PS K_P1(R8), X, P \
	VFMADD213PS K_P2(R8), X, P \
	VFMADD213PS K_P3(R8), X, P \
	VFMADD213PS K_P4(R8), X, P \
	VFMADD213PS X, E, P \
	VADDPS K_ONE(R8), P, P \
	VCMPPS $6, K_KMINF(R8), K, X \
	VSUBPS K_ONE(R8), K, E \
	VANDPS K_ABS(R8), E, E \
	VCMPPS $1, K_KRANGE(R8), E, E \
	VPTEST X, E \
	JCS LF \
	VPSUBD K_MAGIC(R8), T, T \
	VPCMPGTD K_KMIN(R8), T, X \
	VPSRAD $1, T, K \
	VPSUBD K, T, T \
	VPADDD K_BIAS(R8), K, K \
	VPSLLD $23, K, K \
	VPADDD K_BIAS(R8), T, T \
	VPSLLD $23, T, T \
	VPAND X, T, T \
	VMULPS K, P, P \
	VPSRLD $23, P, X \
	VPSRLD $23, T, K \
	VPADDD K, X, X \
	VMOVDQU K_I128(R8), K \
	VPCMPGTD X, K, X \
	VPAND K_MINNORM(R8), X, X \
	VFMADD213PS X, T, P \
	VPSUBD X, P, P \
	JMP LD \
LF: \
	VPSLLD $23, T, T \
	VPADDD T, P, P \
	VANDPS X, P, P \
LD:

// func expAVX2(dst, src *float32, n int, consts *[8]float32)
TEXT ·expAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ consts+24(FP), R8
	VMOVUPS K_LO(R8), Y14
	VMOVUPS K_HI(R8), Y15
	SHRQ $3, CX

exp2:
	CMPQ CX, $2
	JLT exp1
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y4
	// Clamp with x as the second source: a NaN passes.
	VMAXPS Y0, Y14, Y0
	VMAXPS Y4, Y14, Y4
	VMINPS Y0, Y15, Y0
	VMINPS Y4, Y15, Y4
	EXP_REDUCE(Y0, Y1, Y2)
	EXP_REDUCE(Y4, Y5, Y6)
	EXP_FINISH(Y0, Y1, Y2, Y3, Y8, expM1, expD1)
	EXP_FINISH(Y4, Y5, Y6, Y7, Y9, expM2, expD2)
	VMOVUPS Y3, (DI)
	VMOVUPS Y7, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $2, CX
	JMP exp2

exp1:
	TESTQ CX, CX
	JZ expDone
	VMOVUPS (SI), Y0
	VMAXPS Y0, Y14, Y0
	VMINPS Y0, Y15, Y0
	EXP_REDUCE(Y0, Y1, Y2)
	EXP_FINISH(Y0, Y1, Y2, Y3, Y8, expM3, expD3)
	VMOVUPS Y3, (DI)

expDone:
	VZEROUPPER
	RET

// EXPSHIFT8R sets O = e^(I - m) for eight lanes, m = mh + ml in Y13 and
// Y12: a two-sum gives s = x - mh and lo = (its rounding error) - ml; s is
// clamped (a NaN passes) and lo counts only where s was not clamped. I, A,
// B and C are clobbered (and the flags); needs Y14, Y15 = the clamp bounds
// and R8 = avxConst; LM and LD are EXP_FINISH's labels.
#define EXPSHIFT8R(I, A, B, C, O, LM, LD) \
	VSUBPS Y13, I, A \
	VSUBPS I, A, B \
	VSUBPS B, A, C \
	VSUBPS C, I, C \
	VADDPS Y13, B, B \
	VSUBPS B, C, C \
	VSUBPS Y12, C, C \
	VMAXPS A, Y14, I \
	VMINPS I, Y15, I \
	VCMPPS $0, A, I, B \
	VANDPS B, C, C \
	EXP_REDUCE(I, A, B) \
	VADDPS C, I, I \
	EXP_FINISH(I, A, B, O, C, LM, LD)

// EXPSHIFT8 is EXPSHIFT8R from Y0 into Y4 (Y1-Y3 clobbered).
#define EXPSHIFT8(LM, LD) EXPSHIFT8R(Y0, Y1, Y2, Y3, Y4, LM, LD)

// SUM8R adds the eight float32 lanes of YR (XR its low half), widened to
// float64, to Y10 (low four) and Y11 (high four); YT is clobbered.
#define SUM8R(XR, YR, XT, YT) \
	VCVTPS2PD XR, YT \
	VADDPD YT, Y10, Y10 \
	VEXTRACTF128 $1, YR, XT \
	VCVTPS2PD XT, YT \
	VADDPD YT, Y11, Y11

// SUM8 is SUM8R of Y4 (Y5 clobbered).
#define SUM8 SUM8R(X4, Y4, X5, Y5)

// TAILMASK sets Y9 to a mask of the first R11 (1-7) lanes, from the table
// at masks+off(FP); AX and R10 are clobbered.
#define TAILMASK(off) \
	MOVQ off(FP), R10 \
	MOVQ $8, AX \
	SUBQ R11, AX \
	VMOVUPS (R10)(AX*4), Y9

// PF_START loads the prefetch pointer at off(FP) into DX, or SI (the
// source: lines already on their way) where it is nil.
#define PF_START(off) \
	MOVQ off(FP), DX \
	TESTQ DX, DX \
	CMOVQEQ SI, DX

// func expShiftAVX2(dst, src *float32, n int, mh, ml float32, consts *[8]float32, masks *int32, pf, pfDst *float32) float64
// Any n > 0. Each pair of blocks (64 bytes of src) also asks for the next
// 64 bytes from pf and from pfDst into L2 (PREFETCHT1; nil: src), so that
// a caller can have its next row read from memory, and the lines of the
// next row it writes fetched, while this one is computed.
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-72
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	PF_START(pf+48)
	MOVQ pfDst+56(FP), BX
	TESTQ BX, BX
	CMOVQEQ SI, BX
	MOVQ n+16(FP), CX
	VBROADCASTSS mh+24(FP), Y13
	VBROADCASTSS ml+28(FP), Y12
	MOVQ consts+32(FP), R8
	VMOVUPS K_LO(R8), Y14
	VMOVUPS K_HI(R8), Y15
	VXORPD Y10, Y10, Y10
	VXORPD Y11, Y11, Y11
	MOVQ CX, R11
	ANDQ $7, R11
	SHRQ $3, CX
	JZ shiftTail

shiftLoop2:
	// Two blocks per iteration: their exponentials are independent, and
	// their sums go into Y10/Y11 in element order (the first block's,
	// then the second's), as one block per iteration would add them.
	CMPQ CX, $2
	JLT shiftLoop1
	PREFETCHT1 (DX)
	PREFETCHT1 (BX)
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y5
	EXPSHIFT8R(Y0, Y1, Y2, Y3, Y4, shiftM1, shiftD1)
	EXPSHIFT8R(Y5, Y6, Y7, Y8, Y9, shiftM2, shiftD2)
	VMOVUPS Y4, (DI)
	VMOVUPS Y9, 32(DI)
	SUM8R(X4, Y4, X0, Y0)
	SUM8R(X9, Y9, X5, Y5)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, DX
	ADDQ $64, BX
	SUBQ $2, CX
	JMP shiftLoop2

shiftLoop1:
	TESTQ CX, CX
	JZ shiftTail
	VMOVUPS (SI), Y0
	EXPSHIFT8(shiftM3, shiftD3)
	VMOVUPS Y4, (DI)
	SUM8
	ADDQ $32, SI
	ADDQ $32, DI

shiftTail:
	// The last n mod 8 through masked loads and stores; the lanes past
	// the end are zeroed before the sum.
	TESTQ R11, R11
	JZ shiftSum
	TAILMASK(masks+40)
	VMASKMOVPS (SI), Y9, Y0
	EXPSHIFT8(shiftM4, shiftD4)
	VANDPS Y9, Y4, Y4
	VMASKMOVPS Y4, Y9, (DI)
	SUM8

shiftSum:
	VADDPD Y11, Y10, Y10
	VEXTRACTF128 $1, Y10, X0
	VADDPD X0, X10, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0
	VMOVSD X0, ret+64(FP)
	VZEROUPPER
	RET

// func sumExpShiftAVX2(src *float32, n int, m float32, consts *[8]float32, pf *float32) float64
// n a multiple of 8; pf as in expShiftAVX2. Σ e^(x - m) with x - m rounded to float32 and clamped
// as in expAVX2 (a NaN passes); blocks of eight alternate between the lane
// sums Y10 and Y11, which are widened to float64 and added at the end
// (sumExpShiftGo spells out the order).
TEXT ·sumExpShiftAVX2(SB), NOSPLIT, $0-48
	MOVQ src+0(FP), SI
	PF_START(pf+32)
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Y13
	MOVQ consts+24(FP), R8
	VMOVUPS K_LO(R8), Y14
	VMOVUPS K_HI(R8), Y15
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	SHRQ $3, CX

sumExp2:
	CMPQ CX, $2
	JLT sumExp1
	PREFETCHT1 (DX)
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y4
	VSUBPS Y13, Y0, Y0
	VSUBPS Y13, Y4, Y4
	VMAXPS Y0, Y14, Y0
	VMAXPS Y4, Y14, Y4
	VMINPS Y0, Y15, Y0
	VMINPS Y4, Y15, Y4
	EXP_REDUCE(Y0, Y1, Y2)
	EXP_REDUCE(Y4, Y5, Y6)
	EXP_FINISH(Y0, Y1, Y2, Y3, Y8, sumExpM1, sumExpD1)
	EXP_FINISH(Y4, Y5, Y6, Y7, Y9, sumExpM2, sumExpD2)
	VADDPS Y3, Y10, Y10
	VADDPS Y7, Y11, Y11
	ADDQ $64, SI
	ADDQ $64, DX
	SUBQ $2, CX
	JMP sumExp2

sumExp1:
	TESTQ CX, CX
	JZ sumExpFold
	VMOVUPS (SI), Y0
	VSUBPS Y13, Y0, Y0
	VMAXPS Y0, Y14, Y0
	VMINPS Y0, Y15, Y0
	EXP_REDUCE(Y0, Y1, Y2)
	EXP_FINISH(Y0, Y1, Y2, Y3, Y8, sumExpM3, sumExpD3)
	VADDPS Y3, Y10, Y10

sumExpFold:
	VCVTPS2PD X10, Y0
	VEXTRACTF128 $1, Y10, X1
	VCVTPS2PD X1, Y1
	VCVTPS2PD X11, Y2
	VEXTRACTF128 $1, Y11, X3
	VCVTPS2PD X3, Y3
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0
	VMOVSD X0, ret+40(FP)
	VZEROUPPER
	RET

// ERF8TAIL is the part ERF8 and ERF8M share: from the index clamp's upper
// bound on, with Y1 = a = |x|, Y2 = b, Y3 the index clamped below and Y0
// x's sign bit; Y5 = erf(x).
#define ERF8TAIL \
	VPMINSD K_IDXMAX(R8), Y3, Y3 \
	VPERMPS K_CENTRE(R8), Y3, Y4 \
	VSUBPS Y4, Y2, Y4 \
	VPERMPS K_Q0(R8), Y3, Y5 \
	VPERMPS K_Q1(R8), Y3, Y6 \
	VFMADD213PS Y6, Y4, Y5 \
	VPERMPS K_Q2(R8), Y3, Y6 \
	VFMADD213PS Y6, Y4, Y5 \
	VPERMPS K_Q3(R8), Y3, Y6 \
	VFMADD213PS Y6, Y4, Y5 \
	VPERMPS K_Q4(R8), Y3, Y6 \
	VFMADD213PS Y6, Y4, Y5 \
	VPERMPS K_Q5(R8), Y3, Y6 \
	VFMADD213PS Y6, Y4, Y5 \
	VPERMPS K_C0L(R8), Y3, Y6 \
	VFMADD213PS Y6, Y4, Y5 \
	VPERMPS K_C0H(R8), Y3, Y6 \
	VADDPS Y6, Y5, Y5 \
	VMULPS Y1, Y1, Y2 \
	VMOVUPS K_R0(R8), Y6 \
	VFMADD213PS K_R1(R8), Y2, Y6 \
	VFMADD213PS K_R2(R8), Y2, Y6 \
	VFMADD213PS K_R3(R8), Y2, Y6 \
	VFMADD213PS K_R4(R8), Y2, Y6 \
	VFMADD213PS Y1, Y1, Y6 \
	VCMPPS $1, K_SPLIT(R8), Y1, Y7 \
	VBLENDVPS Y7, Y6, Y5, Y5 \
	VORPS Y0, Y5, Y5

// ERF8 sets Y5 = erf(Y0) for eight lanes; Y0-Y4, Y6 and Y7 are clobbered.
// Needs Y15 = |x| mask, Y14 = 4, Y13 = 0 and R8 = avxConst. With a = |x|
// and b = min(a, 4) (a NaN passes): the interval i = clamp(trunc((b -
// 0.5)·8/3.5), 0, 7), t = b - centre[i], mid = c0h + (c0l + t·Q(t)) with
// each coefficient picked per lane by VPERMPS; small = a + a·R(a²); the
// result is small where a < 0.5 (false for NaN), else mid, with x's sign.
#define ERF8 \
	VANDPS Y15, Y0, Y1 \
	VXORPS Y1, Y0, Y0 \
	VMINPS Y1, Y14, Y2 \
	VMOVUPS K_IDXMUL(R8), Y3 \
	VFMADD213PS K_IDXADD(R8), Y2, Y3 \
	VCVTTPS2DQ Y3, Y3 \
	VPMAXSD Y13, Y3, Y3 \
	ERF8TAIL

#define ERF_CONSTS \
	VMOVUPS K_ABS(R8), Y15 \
	VMOVUPS K_TOP(R8), Y14 \
	VPXOR Y13, Y13, Y13

// func erfAVX2(dst, src *float32, n int, consts *[8]float32)
TEXT ·erfAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ consts+24(FP), R8
	ERF_CONSTS
	SHRQ $3, CX
	JZ erfDone

erfLoop:
	VMOVUPS (SI), Y0
	ERF8
	VMOVUPS Y5, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ erfLoop

erfDone:
	VZEROUPPER
	RET

// func geluErfAVX2(y, d, a, x *float32, n int, c1, c2, c3 float32, consts *[8]float32)
// d = x/c1, a = erf(d) + c2, y = (x·a)·c3, each operation rounded.
TEXT ·geluErfAVX2(SB), NOSPLIT, $0-64
	MOVQ y+0(FP), DI
	MOVQ d+8(FP), DX
	MOVQ a+16(FP), BX
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), CX
	VBROADCASTSS c1+40(FP), Y9
	VBROADCASTSS c2+44(FP), Y10
	VBROADCASTSS c3+48(FP), Y11
	MOVQ consts+56(FP), R8
	ERF_CONSTS
	SHRQ $3, CX
	JZ geluDone

geluLoop:
	VMOVUPS (SI), Y8
	VDIVPS Y9, Y8, Y0
	VMOVUPS Y0, (DX)
	ERF8
	VADDPS Y10, Y5, Y5
	VMOVUPS Y5, (BX)
	VMULPS Y5, Y8, Y5
	VMULPS Y11, Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	ADDQ $32, BX
	DECQ CX
	JNZ geluLoop

geluDone:
	VZEROUPPER
	RET

// func erfGradAVX2(dst, dy, x *float32, n int, c float32, consts *[8]float32)
// dst = dy·(c·e^-(x·x)), each operation rounded.
TEXT ·erfGradAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	VBROADCASTSS c+32(FP), Y10
	MOVQ consts+40(FP), R8
	VMOVUPS K_LO(R8), Y14
	VMOVUPS K_HI(R8), Y15
	VMOVUPS K_ABS(R8), Y11
	VPCMPEQD Y12, Y12, Y12
	VPXOR Y11, Y12, Y11 // the sign bit
	SHRQ $3, CX
	JZ gradDone

gradLoop:
	VMOVUPS (SI), Y0
	VMULPS Y0, Y0, Y0
	VXORPS Y11, Y0, Y0 // -(x·x)
	VMAXPS Y0, Y14, Y0
	VMINPS Y0, Y15, Y0
	EXP_REDUCE(Y0, Y1, Y2)
	EXP_FINISH(Y0, Y1, Y2, Y3, Y4, gradM, gradD)
	VMULPS Y10, Y3, Y3
	VMULPS (DX), Y3, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ gradLoop

gradDone:
	VZEROUPPER
	RET

// func geluErfGradAVX2(dst, dy, x, d, a *float32, n int, c1, c3, k float32, consts *[8]float32)
// m = dy·c3; dst = m·a + ((m·x)·(k·e^-(d·d)))/c1, each operation rounded.
TEXT ·geluErfGradAVX2(SB), NOSPLIT, $0-72
	MOVQ dst+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ d+24(FP), BX
	MOVQ a+32(FP), R9
	MOVQ n+40(FP), CX
	VBROADCASTSS c1+48(FP), Y9
	VBROADCASTSS c3+52(FP), Y10
	VBROADCASTSS k+56(FP), Y12
	MOVQ consts+64(FP), R8
	VMOVUPS K_LO(R8), Y14
	VMOVUPS K_HI(R8), Y15
	VMOVUPS K_ABS(R8), Y11
	VPCMPEQD Y13, Y13, Y13
	VPXOR Y11, Y13, Y11 // the sign bit
	SHRQ $3, CX
	JZ ggDone

ggLoop:
	VMOVUPS (BX), Y0
	VMULPS Y0, Y0, Y0
	VXORPS Y11, Y0, Y0 // -(d·d)
	VMAXPS Y0, Y14, Y0
	VMINPS Y0, Y15, Y0
	EXP_REDUCE(Y0, Y1, Y2)
	EXP_FINISH(Y0, Y1, Y2, Y3, Y4, ggM, ggD)
	VMULPS Y12, Y3, Y3 // k·e
	VMOVUPS (DX), Y8
	VMULPS Y10, Y8, Y8 // m = dy·c3
	VMULPS (SI), Y8, Y4 // m·x
	VMULPS Y3, Y4, Y4
	VDIVPS Y9, Y4, Y4
	VMULPS (R9), Y8, Y5 // m·a
	VADDPS Y4, Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, DI
	ADDQ $32, DX
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, R9
	DECQ CX
	JNZ ggLoop

ggDone:
	VZEROUPPER
	RET

// func softmaxRowAVX2(dst, src *float32, n int, consts *[8]float32, masks *int32, pf int)
// n ≥ 8. The softmax of a row in one call, operation for operation what
// SoftmaxRow32 spells out: (1) m, the largest element, as reduce's AVX2
// row maximum takes it (lane maxima over the first n&^7 elements in two
// accumulators, folded, then the last n mod 8 in order, each taking the
// place of m where it is greater); (2) expShiftAVX2's loop with mh = m and
// ml = +0 (ExpShift32's split of a float32 m), the exponentials into dst
// and their float64 sum s; (3) dst[i] = float32(float64(dst[i])·(1/s)),
// eight at a time and then one at a time.
// Each 64 bytes of dst the exponentials store ask for the line pf bytes
// on (PREFETCHT0): with pf the row's length in bytes, the next row's
// destination, which a row then finds in cache rather than waiting for
// each line's read for ownership (0: the line in hand).
TEXT ·softmaxRowAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), BX
	MOVQ consts+24(FP), R8
	MOVQ pf+40(FP), R10

	// (1) The maximum: blocks of eight, then the scalar tail.
	MOVQ BX, CX
	ANDQ $-8, CX
	MOVQ SI, DX
	VMOVUPS (DX), Y0
	VMOVAPS Y0, Y1
	ADDQ $32, DX
	SUBQ $8, CX

smMax16:
	CMPQ CX, $16
	JLT smMax8
	VMAXPS (DX), Y0, Y0
	VMAXPS 32(DX), Y1, Y1
	ADDQ $64, DX
	SUBQ $16, CX
	JMP smMax16

smMax8:
	CMPQ CX, $8
	JLT smMaxFold
	VMAXPS (DX), Y0, Y0
	ADDQ $32, DX

smMaxFold:
	VMAXPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4E, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xB1, X0, X1
	VMAXPS X1, X0, X0
	MOVQ BX, CX
	ANDQ $7, CX
	JZ smMaxDone

smMaxTail:
	// m = v where v > m (else m): VMAXSS returns its first Intel source
	// where that compares greater, the second otherwise.
	VMOVSS (DX), X1
	VMAXSS X0, X1, X0
	ADDQ $4, DX
	DECQ CX
	JNZ smMaxTail

smMaxDone:
	// (2) The exponentials: expShiftAVX2 with mh = m, ml = +0.
	VBROADCASTSS X0, Y13
	VXORPS Y12, Y12, Y12
	VMOVUPS K_LO(R8), Y14
	VMOVUPS K_HI(R8), Y15
	VXORPD Y10, Y10, Y10
	VXORPD Y11, Y11, Y11
	MOVQ BX, R11
	ANDQ $7, R11
	MOVQ BX, CX
	SHRQ $3, CX
	MOVQ DI, R9 // dst, for (3)

smShift2:
	CMPQ CX, $2
	JLT smShift1
	PREFETCHT0 (DI)(R10*1)
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y5
	EXPSHIFT8R(Y0, Y1, Y2, Y3, Y4, smM1, smD1)
	EXPSHIFT8R(Y5, Y6, Y7, Y8, Y9, smM2, smD2)
	VMOVUPS Y4, (DI)
	VMOVUPS Y9, 32(DI)
	SUM8R(X4, Y4, X0, Y0)
	SUM8R(X9, Y9, X5, Y5)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $2, CX
	JMP smShift2

smShift1:
	TESTQ CX, CX
	JZ smShiftTail
	VMOVUPS (SI), Y0
	EXPSHIFT8(smM3, smD3)
	VMOVUPS Y4, (DI)
	SUM8
	ADDQ $32, SI
	ADDQ $32, DI

smShiftTail:
	TESTQ R11, R11
	JZ smShiftSum
	TAILMASK(masks+32)
	VMASKMOVPS (SI), Y9, Y0
	EXPSHIFT8(smM4, smD4)
	VANDPS Y9, Y4, Y4
	VMASKMOVPS Y4, Y9, (DI)
	SUM8

smShiftSum:
	VADDPD Y11, Y10, Y10
	VEXTRACTF128 $1, Y10, X0
	VADDPD X0, X10, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0

	// (3) The products with 1/s, rounded once each.
	MOVQ $0x3ff0000000000000, AX
	VMOVQ AX, X1
	VDIVSD X0, X1, X2
	VBROADCASTSD X2, Y2
	MOVQ BX, CX
	SHRQ $3, CX

smScale:
	VCVTPS2PD (R9), Y0
	VCVTPS2PD 16(R9), Y1
	VMULPD Y2, Y0, Y0
	VMULPD Y2, Y1, Y1
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS X0, (R9)
	VMOVUPS X1, 16(R9)
	ADDQ $32, R9
	DECQ CX
	JNZ smScale
	ANDQ $7, BX
	JZ smDone

smScaleTail:
	VMOVSS (R9), X0
	VCVTSS2SD X0, X0, X0
	VMULSD X2, X0, X0
	VCVTSD2SS X0, X0, X0
	VMOVSS X0, (R9)
	ADDQ $4, R9
	DECQ BX
	JNZ smScaleTail

smDone:
	VZEROUPPER
	RET

// func sumExpShiftMaxAVX2(src *float32, n int, m float32, consts *[8]float32, next *float32, mx *[8]float32) float64
// sumExpShiftAVX2's sum of src (n a multiple of 8), the same operations in
// the same order, and in the same loop the lane maxima of next's first n
// elements folded into mx (VMAXPS: a lane takes the greater; the row a
// caller reads next, so its maximum needs no pass of its own). Each step
// also prefetches next 2 KB further on (PREFETCHT1), the loads' own
// stream from memory.
TEXT ·sumExpShiftMaxAVX2(SB), NOSPLIT, $0-56
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Y13
	MOVQ consts+24(FP), R8
	MOVQ next+32(FP), DX
	MOVQ mx+40(FP), BX
	VMOVUPS (BX), Y12
	VMOVUPS K_LO(R8), Y14
	VMOVUPS K_HI(R8), Y15
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	SHRQ $3, CX

smx2:
	CMPQ CX, $2
	JLT smx1
	PREFETCHT1 2048(DX)
	VMAXPS (DX), Y12, Y12
	VMAXPS 32(DX), Y12, Y12
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y4
	VSUBPS Y13, Y0, Y0
	VSUBPS Y13, Y4, Y4
	VMAXPS Y0, Y14, Y0
	VMAXPS Y4, Y14, Y4
	VMINPS Y0, Y15, Y0
	VMINPS Y4, Y15, Y4
	EXP_REDUCE(Y0, Y1, Y2)
	EXP_REDUCE(Y4, Y5, Y6)
	EXP_FINISH(Y0, Y1, Y2, Y3, Y8, smxM1, smxD1)
	EXP_FINISH(Y4, Y5, Y6, Y7, Y9, smxM2, smxD2)
	VADDPS Y3, Y10, Y10
	VADDPS Y7, Y11, Y11
	ADDQ $64, SI
	ADDQ $64, DX
	SUBQ $2, CX
	JMP smx2

smx1:
	TESTQ CX, CX
	JZ smxFold
	VMAXPS (DX), Y12, Y12
	VMOVUPS (SI), Y0
	VSUBPS Y13, Y0, Y0
	VMAXPS Y0, Y14, Y0
	VMINPS Y0, Y15, Y0
	EXP_REDUCE(Y0, Y1, Y2)
	EXP_FINISH(Y0, Y1, Y2, Y3, Y8, smxM3, smxD3)
	VADDPS Y3, Y10, Y10

smxFold:
	VMOVUPS Y12, (BX)
	VCVTPS2PD X10, Y0
	VEXTRACTF128 $1, Y10, X1
	VCVTPS2PD X1, Y1
	VCVTPS2PD X11, Y2
	VEXTRACTF128 $1, Y11, X3
	VCVTPS2PD X3, Y3
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0
	VMOVSD X0, ret+48(FP)
	VZEROUPPER
	RET

// ERF8M is ERF8 with its constants read from avxConst (R8) instead of Y13,
// Y14 and Y15, the same operations in the same order (so the same bits):
// Y5 = erf(Y0), Y0-Y7 clobbered, Y8-Y15 left alone. The clamp to 4 loads
// the bound into Y2 first (a NaN in a passes, as with ERF8's register
// operand) and the index's lower clamp takes a zeroed Y4.
#define ERF8M \
	VANDPS K_ABS(R8), Y0, Y1 \
	VXORPS Y1, Y0, Y0 \
	VMOVUPS K_TOP(R8), Y2 \
	VMINPS Y1, Y2, Y2 \
	VMOVUPS K_IDXMUL(R8), Y3 \
	VFMADD213PS K_IDXADD(R8), Y2, Y3 \
	VCVTTPS2DQ Y3, Y3 \
	VPXOR Y4, Y4, Y4 \
	VPMAXSD Y4, Y3, Y3 \
	ERF8TAIL

// func geluErfBiasAVX2(y, p, bias *float32, n int, c1, c2, c3 float32, consts *[8]float32)
// n a multiple of 8. p = p + bias (where bias is not nil; stored), then y =
// GeluErf32's y of p: d = p/c1, a = erf(d) + c2, y = (p·a)·c3, each
// operation rounded; d and a stay in registers (geluErfAVX2's bits). The
// loop runs at the latency of its chain of dependent operations rather
// than at its ports' throughput, so the division of the next eight lanes
// (into Y12) is issued before this block's erf, off the chain; p is read
// back from memory for y.
TEXT ·geluErfBiasAVX2(SB), NOSPLIT, $0-56
	MOVQ y+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ bias+16(FP), R10
	MOVQ n+24(FP), CX
	VBROADCASTSS c1+32(FP), Y9
	VBROADCASTSS c2+36(FP), Y10
	VBROADCASTSS c3+40(FP), Y11
	MOVQ consts+48(FP), R8
	ERF_CONSTS
	SHRQ $3, CX
	JZ gbDone
	TESTQ R10, R10
	JZ gbNoBias
	VMOVUPS (SI), Y8
	VADDPS (R10), Y8, Y8
	VMOVUPS Y8, (SI)
	VDIVPS Y9, Y8, Y12

gbLoop:
	VMOVAPS Y12, Y0
	DECQ CX
	JZ gbLast
	VMOVUPS 32(SI), Y8
	VADDPS 32(R10), Y8, Y8
	VMOVUPS Y8, 32(SI)
	VDIVPS Y9, Y8, Y12

gbLast:
	ERF8
	VADDPS Y10, Y5, Y5
	VMULPS (SI), Y5, Y5
	VMULPS Y11, Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R10
	TESTQ CX, CX
	JNZ gbLoop
	JMP gbDone

gbNoBias:
	VMOVUPS (SI), Y8
	VDIVPS Y9, Y8, Y12

gbNLoop:
	VMOVAPS Y12, Y0
	DECQ CX
	JZ gbNLast
	VMOVUPS 32(SI), Y8
	VDIVPS Y9, Y8, Y12

gbNLast:
	ERF8
	VADDPS Y10, Y5, Y5
	VMULPS (SI), Y5, Y5
	VMULPS Y11, Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	TESTQ CX, CX
	JNZ gbNLoop

gbDone:
	VZEROUPPER
	RET

// func geluErfGradXAVX2(dst, y, dy, x *float32, n int, c1, c2, c3, k float32, consts *[8]float32)
// n a multiple of 8. geluErfAVX2 and geluErfGradAVX2 in one pass, d and a
// kept in registers: d = x/c1, a = erf(d) + c2, y = (x·a)·c3 (stored
// where y is not nil), m = dy·c3, dst = m·a + ((m·x)·(k·e^-(d·d)))/c1,
// each operation rounded as those loops round it. dst may be dy. As in
// geluErfBiasAVX2, the next block's d is computed (into Y8) before this
// block's erf; x is read from memory where the products need it.
TEXT ·geluErfGradXAVX2(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ y+8(FP), BX
	MOVQ dy+16(FP), DX
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), CX
	VBROADCASTSS c1+40(FP), Y9
	VBROADCASTSS c2+44(FP), Y10
	VBROADCASTSS c3+48(FP), Y11
	VBROADCASTSS k+52(FP), Y12
	MOVQ consts+56(FP), R8
	VMOVUPS K_ABS(R8), Y15
	VPCMPEQD Y13, Y13, Y13
	VPXOR Y15, Y13, Y15 // the sign bit
	SHRQ $3, CX
	JZ gxDone
	VMOVUPS (SI), Y8
	VDIVPS Y9, Y8, Y8

gxLoop:
	VMOVAPS Y8, Y0
	VMOVAPS Y8, Y13 // d
	DECQ CX
	JZ gxLast
	VMOVUPS 32(SI), Y8
	VDIVPS Y9, Y8, Y8 // the next block's d

gxLast:
	ERF8M
	VADDPS Y10, Y5, Y14 // a
	TESTQ BX, BX
	JZ gxNoY
	VMULPS (SI), Y14, Y5 // x·a
	VMULPS Y11, Y5, Y5
	VMOVUPS Y5, (BX)
	ADDQ $32, BX

gxNoY:
	VMULPS Y13, Y13, Y0
	VXORPS Y15, Y0, Y0 // -(d·d)
	VMOVUPS K_LO(R8), Y5
	VMAXPS Y0, Y5, Y0
	VMOVUPS K_HI(R8), Y5
	VMINPS Y0, Y5, Y0
	EXP_REDUCE(Y0, Y1, Y2)
	EXP_FINISH(Y0, Y1, Y2, Y3, Y4, gxM, gxD)
	VMULPS Y12, Y3, Y3 // k·e
	VMOVUPS (DX), Y5
	VMULPS Y11, Y5, Y5 // m = dy·c3
	VMULPS (SI), Y5, Y4 // m·x
	VMULPS Y3, Y4, Y4
	VDIVPS Y9, Y4, Y4
	VMULPS Y14, Y5, Y5 // m·a
	VADDPS Y4, Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, DI
	ADDQ $32, DX
	ADDQ $32, SI
	TESTQ CX, CX
	JNZ gxLoop

gxDone:
	VZEROUPPER
	RET
