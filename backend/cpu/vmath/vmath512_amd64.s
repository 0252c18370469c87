//go:build amd64 && !purego

#include "textflag.h"

// The AVX-512F forms of vmath_amd64.s's loops: sixteen lanes per zmm
// register, the same instructions in the same order per lane (so the same
// bits), the last n mod 16 elements through masked loads and stores (K1),
// and products that would be subnormal computed without the microcode
// assist (EXP_FINISH16).
//
// Offsets of the rows of avx512Const (sixteen float32 lanes, 64 bytes
// each): avxConst's rows widened.
#define Z_LO 0
#define Z_HI 64
#define Z_INVLN2 128
#define Z_MAGIC 192
#define Z_LN2HI 256
#define Z_LN2LO 320
#define Z_P0 384
#define Z_P1 448
#define Z_P2 512
#define Z_P3 576
#define Z_P4 640
#define Z_ONE 704
#define Z_BIAS 768
#define Z_ABS 832
#define Z_SPLIT 896
#define Z_TOP 960
#define Z_IDXMUL 1024
#define Z_IDXADD 1088
#define Z_IDXMAX 1152
#define Z_R0 1216
#define Z_R1 1280
#define Z_R2 1344
#define Z_R3 1408
#define Z_R4 1472
#define Z_CENTRE 1536
#define Z_C0H 1600
#define Z_C0L 1664
#define Z_Q0 1728
#define Z_Q1 1792
#define Z_Q2 1856
#define Z_Q3 1920
#define Z_Q4 1984
#define Z_Q5 2048
#define Z_KMIN 2112
#define Z_I128 2176
#define Z_MINNORM 2240
#define Z_KMINF 2304
#define Z_KRANGE 2368
#define Z_KSUBF 2432
#define Z_K64 2496
#define Z_M64 2560
#define Z_TINY 2624
#define Z_SMALLIDX 2688

// EXP_REDUCE16 is EXP_REDUCE on sixteen lanes.
#define EXP_REDUCE16(X, T, K) \
	VMOVUPS Z_MAGIC(R8), T \
	VFMADD231PS Z_INVLN2(R8), X, T \
	VSUBPS Z_MAGIC(R8), T, K \
	VFNMADD231PS Z_LN2HI(R8), K, X

// EXP_FINISH16 ends EXP_FINISH's computation on sixteen lanes with the
// same bits and fewer instructions (K3-K6 and the flags clobbered; LF, LD
// labels unique to the use): r = X - k·ln2Lo, p = 1 + (r + r²·P(r)) as
// there, then p·2^k rounded once by one VSCALEFPS with k = K (a float).
// That is the bits of EXP_FINISH's p·2^k1·2^k2: p·2^k1 is exact and the
// second multiply rounds once, to +Inf past MaxFloat32 and to nearest
// among the subnormals below 2^-126. VSCALEFPS takes the microcode assist
// where its result is below 2^-126 (zero included) unless the lane is
// masked off, so:
//
//   - K3 is the lanes with k > -151 or NaN (VCMPPS NLE_US: a NaN k, from a
//     NaN x, keeps p's NaN as the multiply does); the others are below half
//     the smallest subnormal (p < 1.42) and become +0 through the zeroing
//     mask, as EXP_FINISH's 2^k2 = +0 makes them;
//   - K4 is the lanes of K3 with k < -125 (the band where the result may be
//     subnormal); in blocks with none (one KORTESTW, the common path) the
//     masked VSCALEFPS is all. Otherwise the band lanes take EXP_FINISH's
//     FMA: t = p·2^(k+64) (normal and exact), q = t·2^-64 + c rounded once
//     with c = 2^-126 where t < 2^-62 (the result subnormal) and +0
//     elsewhere, and q's bits minus c's: p·2^k rounded to nearest even
//     among the subnormals, carry into 2^-126 included (see EXP_FINISH);
//     the other lanes of K3 take VSCALEFPS. No subnormal in or out of any
//     unmasked lane.
//
// EXP_REDUCE16's T (x/ln2 + magic) is not used.
#define EXP_FINISH16(X, T, K, P, LF, LD) \
	VFNMADD231PS Z_LN2LO(R8), K, X \
	VMULPS X, X, T \
	VMOVUPS Z_P0(R8), P \
	VFMADD213PS Z_P1(R8), X, P \
	VFMADD213PS Z_P2(R8), X, P \
	VFMADD213PS Z_P3(R8), X, P \
	VFMADD213PS Z_P4(R8), X, P \
	VFMADD213PS X, T, P \
	VADDPS Z_ONE(R8), P, P \
	VCMPPS $6, Z_KMINF(R8), K, K3 \
	VCMPPS $1, Z_KSUBF(R8), K, K3, K4 \
	KORTESTW K4, K4 \
	JZ LF \
	KANDNW K3, K4, K5 \
	VADDPS Z_K64(R8), K, T \
	VSCALEFPS.Z T, P, K4, T \
	VSCALEFPS.Z K, P, K5, P \
	VCMPPS $1, Z_TINY(R8), T, K4, K6 \
	VMOVDQU32.Z Z_MINNORM(R8), K6, K \
	VFMADD132PS Z_M64(R8), K, T \
	VPSUBD K, T, T \
	VMOVAPS T, K4, P \
	JMP LD \
LF: \
	VSCALEFPS.Z K, P, K3, P \
LD:

// EXP16 sets P = e^X for sixteen lanes (X, T, K clobbered; LF, LD labels):
// X is clamped to expHi with x as the second source (a NaN passes); below
// expLo EXP_FINISH16's K3 makes the result +0 (what clamping to expLo
// gives), whatever the reduction made of such an x (-Inf included).
#define EXP16(X, T, K, P, LF, LD) \
	VMINPS X, Z31, X \
	EXP_REDUCE16(X, T, K) \
	EXP_FINISH16(X, T, K, P, LF, LD)

// TAILK sets K1 to the first CX (1-15) lanes; AX is clobbered.
#define TAILK \
	MOVL $1, AX \
	SHLL CX, AX \
	DECL AX \
	KMOVW AX, K1

#define EXP_CONSTS \
	VMOVUPS Z_HI(R8), Z31

// func exp512(dst, src *float32, n int, consts *[16]float32)
TEXT ·exp512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ consts+24(FP), R8
	EXP_CONSTS

exp32:
	CMPQ CX, $32
	JLT exp16
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z4
	EXP16(Z0, Z1, Z2, Z3, zm1, zd1)
	EXP16(Z4, Z5, Z6, Z7, zm2, zd2)
	VMOVUPS Z3, (DI)
	VMOVUPS Z7, 64(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP exp32

exp16:
	TESTQ CX, CX
	JLE expDone
	KXNORW K1, K1, K1
	CMPQ CX, $16
	JGE expBody
	TAILK

expBody:
	VMOVUPS.Z (SI), K1, Z0
	EXP16(Z0, Z1, Z2, Z3, zm3, zd3)
	VMOVUPS Z3, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP exp16

expDone:
	VZEROUPPER
	RET

// EXPSHIFT16R is EXPSHIFT8R on sixteen lanes: O = e^(I - m), m = mh + ml
// in Z13 and Z12 (I, A, B, C clobbered; K3-K6 too; LM, LD labels): the
// rounding error C is added where the clamp to expHi left s as it was.
#define EXPSHIFT16R(I, A, B, C, O, LM, LD) \
	VSUBPS Z13, I, A \
	VSUBPS I, A, B \
	VSUBPS B, A, C \
	VSUBPS C, I, C \
	VADDPS Z13, B, B \
	VSUBPS B, C, C \
	VSUBPS Z12, C, C \
	VMINPS A, Z31, I \
	VCMPPS $0, A, I, K5 \
	EXP_REDUCE16(I, A, B) \
	VADDPS C, I, K5, I \
	EXP_FINISH16(I, A, B, O, LM, LD)

// SUM16 adds the sixteen float32 lanes of ZR (YR its low half), widened to
// float64, to the eight float64 lane sums in Z10: lanes 0-7 first, then
// 8-15, so that lane sum j takes elements j, j+8, j+16, ... in order, as
// the AVX2 loop's Y10 (j < 4) and Y11 do. ZT (YT its low half) is
// clobbered.
#define SUM16(ZR, YR, ZT, YT) \
	VCVTPS2PD YR, ZT \
	VADDPD ZT, Z10, Z10 \
	VEXTRACTF64X4 $1, ZR, YT \
	VCVTPS2PD YT, ZT \
	VADDPD ZT, Z10, Z10

// PF_START loads the prefetch pointer at off(FP) into DX, or SI (the
// source: lines already on their way) where it is nil.
#define PF_START(off) \
	MOVQ off(FP), DX \
	TESTQ DX, DX \
	CMOVQEQ SI, DX

// EXPSHIFT_ROW is expShift512's loop over the CX elements at SI: the
// exponentials e^(x-mh-ml) (mh in Z13, ml in Z12, Z31 and R8 as EXP_CONSTS
// leaves them) stored at DI, each 128 bytes asking for the next 128 bytes
// from DX and BX (PREFETCHT1); the last blocks through masked loads and
// stores (lanes past the end are zero, and +0 leaves a lane sum as it is:
// they are never -0); the float64 sum, folded as the AVX2 loop folds it
// ((s0+s4, s1+s5, s2+s6, s3+s7), then the two halves of that, then the two
// lanes left), in X0. Z10 must be zero. The labels are the caller's.
#define EXPSHIFT_ROW(L32, L16, LBODY, LSUM, M1, D1, M2, D2, M3, D3) \
L32: \
	CMPQ CX, $32 \
	JLT L16 \
	PREFETCHT1 (DX) \
	PREFETCHT1 64(DX) \
	PREFETCHT1 (BX) \
	PREFETCHT1 64(BX) \
	VMOVUPS (SI), Z0 \
	VMOVUPS 64(SI), Z5 \
	EXPSHIFT16R(Z0, Z1, Z2, Z3, Z4, M1, D1) \
	EXPSHIFT16R(Z5, Z6, Z7, Z8, Z9, M2, D2) \
	VMOVUPS Z4, (DI) \
	VMOVUPS Z9, 64(DI) \
	SUM16(Z4, Y4, Z0, Y0) \
	SUM16(Z9, Y9, Z5, Y5) \
	ADDQ $128, SI \
	ADDQ $128, DI \
	ADDQ $128, DX \
	ADDQ $128, BX \
	SUBQ $32, CX \
	JMP L32 \
L16: \
	TESTQ CX, CX \
	JLE LSUM \
	KXNORW K1, K1, K1 \
	CMPQ CX, $16 \
	JGE LBODY \
	TAILK \
LBODY: \
	VMOVUPS.Z (SI), K1, Z0 \
	EXPSHIFT16R(Z0, Z1, Z2, Z3, Z4, M3, D3) \
	VMOVUPS.Z Z4, K1, Z4 \
	VMOVUPS Z4, K1, (DI) \
	SUM16(Z4, Y4, Z0, Y0) \
	ADDQ $64, SI \
	ADDQ $64, DI \
	SUBQ $16, CX \
	JMP L16 \
LSUM: \
	VEXTRACTF64X4 $1, Z10, Y0 \
	VADDPD Y0, Y10, Y10 \
	VEXTRACTF128 $1, Y10, X0 \
	VADDPD X0, X10, X0 \
	VUNPCKHPD X0, X0, X1 \
	VADDSD X1, X0, X0

// func expShift512(dst, src *float32, n int, mh, ml float32, consts *[16]float32, pf, pfDst *float32) float64
// Any n > 0. Each 128 bytes of src in the main loop also ask for the next
// 128 bytes from pf and from pfDst into L2 (PREFETCHT1; nil: src), as in
// expShiftAVX2.
TEXT ·expShift512(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	PF_START(pf+40)
	MOVQ pfDst+48(FP), BX
	TESTQ BX, BX
	CMOVQEQ SI, BX
	MOVQ n+16(FP), CX
	VBROADCASTSS mh+24(FP), Z13
	VBROADCASTSS ml+28(FP), Z12
	MOVQ consts+32(FP), R8
	EXP_CONSTS
	VPXORQ Z10, Z10, Z10

	EXPSHIFT_ROW(shift32, shift16, shiftBody, shiftSum, zm4, zd4, zm5, zd5, zm6, zd6)
	VMOVSD X0, ret+56(FP)
	VZEROUPPER
	RET

// func sumExpShift512(src *float32, n int, m float32, consts *[16]float32, pf *float32) float64
// n a multiple of 8; pf as in expShift512. The float32 lane sums of sumExpShiftAVX2's Y10 (even
// blocks of eight) and Y11 (odd blocks) are Z10's low and high halves: a
// block of sixteen adds its first eight terms to the first and its last
// eight to the second, and a last block of eight only to the first.
TEXT ·sumExpShift512(SB), NOSPLIT, $0-48
	MOVQ src+0(FP), SI
	PF_START(pf+32)
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Z13
	MOVQ consts+24(FP), R8
	EXP_CONSTS
	VPXORD Z10, Z10, Z10

sumExp32:
	CMPQ CX, $32
	JLT sumExp16
	PREFETCHT1 (DX)
	PREFETCHT1 64(DX)
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z4
	VSUBPS Z13, Z0, Z0
	VSUBPS Z13, Z4, Z4
	EXP16(Z0, Z1, Z2, Z3, zm7, zd7)
	EXP16(Z4, Z5, Z6, Z7, zm8, zd8)
	VADDPS Z3, Z10, Z10
	VADDPS Z7, Z10, Z10
	ADDQ $128, SI
	ADDQ $128, DX
	SUBQ $32, CX
	JMP sumExp32

sumExp16:
	TESTQ CX, CX
	JLE sumExpFold
	KXNORW K1, K1, K1
	CMPQ CX, $16
	JGE sumExpBody
	TAILK

sumExpBody:
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS Z13, Z0, Z0
	EXP16(Z0, Z1, Z2, Z3, zm9, zd9)
	VADDPS Z3, Z10, K1, Z10
	ADDQ $64, SI
	SUBQ $16, CX
	JMP sumExp16

sumExpFold:
	VCVTPS2PD Y10, Z0
	VEXTRACTF64X4 $1, Z10, Y2
	VCVTPS2PD Y2, Z2
	VEXTRACTF64X4 $1, Z0, Y1
	VEXTRACTF64X4 $1, Z2, Y3
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

// ERF16 is ERF8 on sixteen lanes in one chain of dependent operations:
// Z5 = erf(Z0); Z0-Z4, Z6 and K2 are clobbered. Needs Z29 = |x| mask, Z28
// = 4 and R8 = avx512Const. The index trunc((b - 0.5)·8/3.5) is 0-8 where
// a ≥ 0.5 (8 only at b = 4) and 0x80000000 for a NaN; VPERMPS on zmm reads
// its low four bits, and avx512Const's interval rows hold interval 7 in
// lanes 8-14 (see there), so every such lane reads ERF8's clamped interval
// (0 for a NaN). Lanes with a < 0.5 (K2) take index 15, whose lane holds
// the small form's R as the chain's last five coefficients (the first two
// and c0h are 0) with t = a²: the chain's FMAs then compute R(a²) with
// the small form's operations (0·t + 0 and 0·t + R0 are exact), and a
// last FMA on those lanes alone gives a + a·R(a²), the bits ERF8 blends in.
#define ERF16 \
	VPANDD Z29, Z0, Z1 \
	VPXORD Z1, Z0, Z0 \
	VMINPS Z1, Z28, Z2 \
	VMOVUPS Z_IDXMUL(R8), Z3 \
	VFMADD213PS Z_IDXADD(R8), Z2, Z3 \
	VCVTTPS2DQ Z3, Z3 \
	VCMPPS $1, Z_SPLIT(R8), Z1, K2 \
	VMOVDQU32 Z_SMALLIDX(R8), K2, Z3 \
	VPERMPS Z_CENTRE(R8), Z3, Z4 \
	VSUBPS Z4, Z2, Z4 \
	VMULPS Z1, Z1, K2, Z4 \
	VPERMPS Z_Q0(R8), Z3, Z5 \
	VPERMPS Z_Q1(R8), Z3, Z6 \
	VFMADD213PS Z6, Z4, Z5 \
	VPERMPS Z_Q2(R8), Z3, Z6 \
	VFMADD213PS Z6, Z4, Z5 \
	VPERMPS Z_Q3(R8), Z3, Z6 \
	VFMADD213PS Z6, Z4, Z5 \
	VPERMPS Z_Q4(R8), Z3, Z6 \
	VFMADD213PS Z6, Z4, Z5 \
	VPERMPS Z_Q5(R8), Z3, Z6 \
	VFMADD213PS Z6, Z4, Z5 \
	VPERMPS Z_C0L(R8), Z3, Z6 \
	VFMADD213PS Z6, Z4, Z5 \
	VPERMPS Z_C0H(R8), Z3, Z6 \
	VADDPS Z6, Z5, Z5 \
	VFMADD213PS Z1, Z1, K2, Z5 \
	VPORD Z0, Z5, Z5

#define ERF_CONSTS16 \
	VMOVUPS Z_ABS(R8), Z29 \
	VMOVUPS Z_TOP(R8), Z28

// NEXT16 ends a loop body over CX (> 0) elements, which starts at top with
// K1 set for its first block: all ones, or TAILK's mask when CX < 16. It
// counts 16 off and goes to done, or back to top, with TAILK's mask before
// the last, short, block.
#define NEXT16(top, done) \
	SUBQ $16, CX \
	JLE done \
	CMPQ CX, $16 \
	JGE top \
	TAILK \
	JMP top

// func erf512(dst, src *float32, n int, consts *[16]float32)
TEXT ·erf512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ consts+24(FP), R8
	ERF_CONSTS16
	KXNORW K1, K1, K1
	CMPQ CX, $16
	JGE erfLoop
	TAILK

erfLoop:
	VMOVUPS.Z (SI), K1, Z0
	ERF16
	VMOVUPS Z5, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	NEXT16(erfLoop, erfDone)

erfDone:
	VZEROUPPER
	RET

// func geluErf512(y, d, a, x *float32, n int, c1, c2, c3 float32, consts *[16]float32)
// d = x/c1, a = erf(d) + c2, y = (x·a)·c3, each operation rounded.
TEXT ·geluErf512(SB), NOSPLIT, $0-64
	MOVQ y+0(FP), DI
	MOVQ d+8(FP), DX
	MOVQ a+16(FP), BX
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), CX
	VBROADCASTSS c1+40(FP), Z9
	VBROADCASTSS c2+44(FP), Z10
	VBROADCASTSS c3+48(FP), Z11
	MOVQ consts+56(FP), R8
	ERF_CONSTS16
	KXNORW K1, K1, K1
	CMPQ CX, $16
	JGE geluLoop
	TAILK

geluLoop:
	VMOVUPS.Z (SI), K1, Z8
	VDIVPS Z9, Z8, Z0
	VMOVUPS Z0, K1, (DX)
	ERF16
	VADDPS Z10, Z5, Z5
	VMOVUPS Z5, K1, (BX)
	VMULPS Z5, Z8, Z5
	VMULPS Z11, Z5, Z5
	VMOVUPS Z5, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, DX
	ADDQ $64, BX
	NEXT16(geluLoop, geluDone)

geluDone:
	VZEROUPPER
	RET

// SIGN16 sets Z11 to the float32 sign bit in every lane (AX clobbered).
#define SIGN16 \
	MOVL $0x80000000, AX \
	VPBROADCASTD AX, Z11

// func erfGrad512(dst, dy, x *float32, n int, c float32, consts *[16]float32)
// dst = dy·(c·e^-(x·x)), each operation rounded.
TEXT ·erfGrad512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	VBROADCASTSS c+32(FP), Z10
	MOVQ consts+40(FP), R8
	EXP_CONSTS
	SIGN16
	KXNORW K1, K1, K1
	CMPQ CX, $16
	JGE gradLoop
	TAILK

gradLoop:
	VMOVUPS.Z (SI), K1, Z0
	VMULPS Z0, Z0, Z0
	VPXORD Z11, Z0, Z0 // -(x·x)
	EXP16(Z0, Z1, Z2, Z3, zm10, zd10)
	VMULPS Z10, Z3, Z3
	VMOVUPS.Z (DX), K1, Z4
	VMULPS Z4, Z3, Z3
	VMOVUPS Z3, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	NEXT16(gradLoop, gradDone)

gradDone:
	VZEROUPPER
	RET

// func geluErfGrad512(dst, dy, x, d, a *float32, n int, c1, c3, k float32, consts *[16]float32)
// m = dy·c3; dst = m·a + ((m·x)·(k·e^-(d·d)))/c1, each operation rounded.
TEXT ·geluErfGrad512(SB), NOSPLIT, $0-72
	MOVQ dst+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ d+24(FP), BX
	MOVQ a+32(FP), R9
	MOVQ n+40(FP), CX
	VBROADCASTSS c1+48(FP), Z9
	VBROADCASTSS c3+52(FP), Z10
	VBROADCASTSS k+56(FP), Z12
	MOVQ consts+64(FP), R8
	EXP_CONSTS
	SIGN16
	KXNORW K1, K1, K1
	CMPQ CX, $16
	JGE ggLoop
	TAILK

ggLoop:
	VMOVUPS.Z (BX), K1, Z0
	VMULPS Z0, Z0, Z0
	VPXORD Z11, Z0, Z0 // -(d·d)
	EXP16(Z0, Z1, Z2, Z3, zm11, zd11)
	VMULPS Z12, Z3, Z3 // k·e
	VMOVUPS.Z (DX), K1, Z8
	VMULPS Z10, Z8, Z8 // m = dy·c3
	VMOVUPS.Z (SI), K1, Z4
	VMULPS Z4, Z8, Z4 // m·x
	VMULPS Z3, Z4, Z4
	VDIVPS Z9, Z4, Z4
	VMOVUPS.Z (R9), K1, Z5
	VMULPS Z5, Z8, Z5 // m·a
	VADDPS Z4, Z5, Z5
	VMOVUPS Z5, K1, (DI)
	ADDQ $64, DI
	ADDQ $64, DX
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, R9
	NEXT16(ggLoop, ggDone)

ggDone:
	VZEROUPPER
	RET

// NEXTK sets K7 to the mask of the block after this one (CX elements
// are left from this block on) and jumps to this_ when there is none;
// full is a label unique to the use. AX and R11 are clobbered.
#define NEXTK(this_, full) \
	MOVQ CX, R11 \
	SUBQ $16, R11 \
	JLE this_ \
	KXNORW K7, K7, K7 \
	CMPQ R11, $16 \
	JGE full \
	XCHGQ CX, R11 \
	MOVL $1, AX \
	SHLL CX, AX \
	DECL AX \
	KMOVW AX, K7 \
	XCHGQ CX, R11 \
full:

// func geluErfBias512(y, p, bias *float32, n int, c1, c2, c3 float32, consts *[16]float32)
// p = p + bias (where bias is not nil; stored), then y = GeluErf32's y of
// p: d = p/c1, a = erf(d) + c2, y = (p·a)·c3, each operation rounded. The
// next block's p and d (Z18, Z17, under its mask K7) are computed before
// this block's erf: the loop runs at the latency of its chain of dependent
// operations, and the division, at the chain's head, then overlaps the
// erf of the block before (geluErfBiasAVX2 does the same).
TEXT ·geluErfBias512(SB), NOSPLIT, $0-56
	MOVQ y+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ bias+16(FP), R10
	MOVQ n+24(FP), CX
	VBROADCASTSS c1+32(FP), Z9
	VBROADCASTSS c2+36(FP), Z10
	VBROADCASTSS c3+40(FP), Z11
	MOVQ consts+48(FP), R8
	ERF_CONSTS16
	KXNORW K1, K1, K1
	CMPQ CX, $16
	JGE gbFirst
	TAILK

gbFirst:
	VMOVUPS.Z (SI), K1, Z18
	TESTQ R10, R10
	JZ gbFirstDiv
	VMOVUPS.Z (R10), K1, Z7
	VADDPS Z7, Z18, Z18
	VMOVUPS Z18, K1, (SI)

gbFirstDiv:
	VDIVPS Z9, Z18, Z17

gbLoop:
	VMOVAPS Z18, Z8
	VMOVAPS Z17, Z0
	NEXTK(gbThis, gbFull)
	VMOVUPS.Z 64(SI), K7, Z18
	TESTQ R10, R10
	JZ gbNextDiv
	VMOVUPS.Z 64(R10), K7, Z7
	VADDPS Z7, Z18, Z18
	VMOVUPS Z18, K7, 64(SI)

gbNextDiv:
	VDIVPS Z9, Z18, Z17

gbThis:
	ERF16
	VADDPS Z10, Z5, Z5
	VMULPS Z5, Z8, Z5
	VMULPS Z11, Z5, Z5
	VMOVUPS Z5, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	TESTQ R10, R10
	JZ gbNoBias
	ADDQ $64, R10

gbNoBias:
	SUBQ $16, CX
	JLE gbDone
	KMOVW K7, K1
	JMP gbLoop

gbDone:
	VZEROUPPER
	RET

// func geluErfGradX512(dst, y, dy, x *float32, n int, c1, c2, c3, k float32, consts *[16]float32)
// geluErf512 and geluErfGrad512 in one pass, d and a kept in registers: d
// = x/c1, a = erf(d) + c2, y = (x·a)·c3 (stored where y is not nil), m =
// dy·c3, dst = m·a + ((m·x)·(k·e^-(d·d)))/c1, each operation rounded.
// dst may be dy. As in geluErfBias512, the next block's x and d (Z18,
// Z17, mask K7) are computed before this block's erf.
TEXT ·geluErfGradX512(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ y+8(FP), BX
	MOVQ dy+16(FP), DX
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), CX
	VBROADCASTSS c1+40(FP), Z9
	VBROADCASTSS c2+44(FP), Z10
	VBROADCASTSS c3+48(FP), Z11
	VBROADCASTSS k+52(FP), Z12
	MOVQ consts+56(FP), R8
	ERF_CONSTS16
	EXP_CONSTS
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z13
	KXNORW K1, K1, K1
	CMPQ CX, $16
	JGE gxFirst
	TAILK

gxFirst:
	VMOVUPS.Z (SI), K1, Z18
	VDIVPS Z9, Z18, Z17

gxLoop:
	VMOVAPS Z18, Z8
	VMOVAPS Z17, Z0
	VMOVAPS Z17, Z14 // d
	NEXTK(gxThis, gxFull)
	VMOVUPS.Z 64(SI), K7, Z18
	VDIVPS Z9, Z18, Z17 // the next block's d

gxThis:
	ERF16
	VADDPS Z10, Z5, Z15 // a
	TESTQ BX, BX
	JZ gxNoY
	VMULPS Z15, Z8, Z5
	VMULPS Z11, Z5, Z5
	VMOVUPS Z5, K1, (BX)
	ADDQ $64, BX

gxNoY:
	VMULPS Z14, Z14, Z0
	VPXORD Z13, Z0, Z0 // -(d·d)
	EXP16(Z0, Z1, Z2, Z3, zm12, zd12)
	VMULPS Z12, Z3, Z3 // k·e
	VMOVUPS.Z (DX), K1, Z16
	VMULPS Z11, Z16, Z16 // m = dy·c3
	VMULPS Z8, Z16, Z4 // m·x
	VMULPS Z3, Z4, Z4
	VDIVPS Z9, Z4, Z4
	VMULPS Z15, Z16, Z5 // m·a
	VADDPS Z4, Z5, Z5
	VMOVUPS Z5, K1, (DI)
	ADDQ $64, DI
	ADDQ $64, DX
	ADDQ $64, SI
	SUBQ $16, CX
	JLE gxDone
	KMOVW K7, K1
	JMP gxLoop

gxDone:
	VZEROUPPER
	RET

// MAXROW16 sets X0 to the largest of the CX (≥ 16) elements at DX (DX and
// CX are used up; Z0-Z3, K1 and AX clobbered): four lane maxima over the
// blocks of sixteen, the last 1-15 elements merged into one of them
// through K1 (the other lanes keep theirs; masked-off lanes of the load
// do not fault), folded. Exact in any order but for the sign of a zero
// maximum and which of several NaNs wins. The labels are the caller's.
#define MAXROW16(L64, L16, LTAIL, LFOLD) \
	VMOVUPS (DX), Z0 \
	VMOVAPS Z0, Z1 \
	VMOVAPS Z0, Z2 \
	VMOVAPS Z0, Z3 \
	ADDQ    $64, DX \
	SUBQ    $16, CX \
L64: \
	CMPQ   CX, $64 \
	JLT    L16 \
	VMAXPS (DX), Z0, Z0 \
	VMAXPS 64(DX), Z1, Z1 \
	VMAXPS 128(DX), Z2, Z2 \
	VMAXPS 192(DX), Z3, Z3 \
	ADDQ   $256, DX \
	SUBQ   $64, CX \
	JMP    L64 \
L16: \
	CMPQ   CX, $16 \
	JLT    LTAIL \
	VMAXPS (DX), Z1, Z1 \
	ADDQ   $64, DX \
	SUBQ   $16, CX \
	JMP    L16 \
LTAIL: \
	TESTQ  CX, CX \
	JLE    LFOLD \
	TAILK \
	VMAXPS (DX), Z2, K1, Z2 \
LFOLD: \
	VMAXPS        Z1, Z0, Z0 \
	VMAXPS        Z3, Z2, Z2 \
	VMAXPS        Z2, Z0, Z0 \
	VEXTRACTF64X4 $1, Z0, Y1 \
	VMAXPS        Y1, Y0, Y0 \
	VEXTRACTF128  $1, Y0, X1 \
	VMAXPS        X1, X0, X0 \
	VPERMILPS     $0x4E, X0, X1 \
	VMAXPS        X1, X0, X0 \
	VPERMILPS     $0xB1, X0, X1 \
	VMAXPS        X1, X0, X0

// SCALEROW16 sets each of the CX elements at P (advanced) to
// float32(float64(x)·s) with s in Z2, the product rounded once: 32 a
// step, then eight at a time, the last 1-7 through the mask K1 (AX, Z0,
// Z1, Z3 and Z4 clobbered); it ends at LDONE, a label of the caller's, as
// are the others.
#define SCALEROW16(P, L32, L8, LSTEP, LDONE) \
L32: \
	CMPQ      CX, $32 \
	JLT       L8 \
	VCVTPS2PD (P), Z0 \
	VCVTPS2PD 32(P), Z1 \
	VCVTPS2PD 64(P), Z3 \
	VCVTPS2PD 96(P), Z4 \
	VMULPD    Z2, Z0, Z0 \
	VMULPD    Z2, Z1, Z1 \
	VMULPD    Z2, Z3, Z3 \
	VMULPD    Z2, Z4, Z4 \
	VCVTPD2PS Z0, Y0 \
	VCVTPD2PS Z1, Y1 \
	VCVTPD2PS Z3, Y3 \
	VCVTPD2PS Z4, Y4 \
	VMOVUPS   Y0, (P) \
	VMOVUPS   Y1, 32(P) \
	VMOVUPS   Y3, 64(P) \
	VMOVUPS   Y4, 96(P) \
	ADDQ      $128, P \
	SUBQ      $32, CX \
	JMP       L32 \
L8: \
	TESTQ CX, CX \
	JLE   LDONE \
	MOVL  $0xff, AX \
	CMPQ  CX, $8 \
	JGE   LSTEP \
	MOVL  $1, AX \
	SHLL  CX, AX \
	DECL  AX \
LSTEP: \
	KMOVW       AX, K1 \
	VCVTPS2PD.Z (P), K1, Z0 \
	VMULPD      Z2, Z0, Z0 \
	VCVTPD2PS   Z0, Y0 \
	VMOVUPS     Y0, K1, (P) \
	ADDQ        $32, P \
	SUBQ        $8, CX \
	JMP         L8

// func scaleRow512(x *float32, n int, s float64)
// n ≥ 1: x[i] = float32(float64(x[i])·s) (SCALEROW16).
TEXT ·scaleRow512(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSD s+16(FP), Z2
	SCALEROW16(SI, sclz32, sclz8, sclzStep, sclzDone)

sclzDone:
	VZEROUPPER
	RET

// func maxRow512(x *float32, n int) float32
// n ≥ 16: the largest element (MAXROW16).
TEXT ·maxRow512(SB), NOSPLIT, $0-20
	MOVQ   x+0(FP), DX
	MOVQ   n+8(FP), CX
	MAXROW16(mxz64, mxz16, mxzTail, mxzFold)
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func softmaxRow512(dst, src *float32, n int, consts *[16]float32, pf int)
// n ≥ 16, dst not overlapping src. The softmax of a row in one call, what
// reduce's three AVX-512 steps give apart (maxRow512, ExpShift32 through
// expShift512, scaleRow512): (1) m, the largest element (MAXROW16; the
// sign of a zero maximum changes no exponential); (2) expShift512's loop
// (EXPSHIFT_ROW) with mh = m and ml = +0 (ExpShift32's split of a float32
// m), the exponentials into dst and their float64 sum s in the AVX2 loop's
// order, its prefetches pointed at the lines in hand; (3) dst[i] =
// float32(float64(dst[i])·(1/s)), 1/s rounded once in float64. The
// loop's second prefetch stream points pf bytes past dst (PREFETCHT1):
// with pf the row's length in bytes, the next row's destination (0: the
// lines in hand).
TEXT ·softmaxRow512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), BX
	MOVQ consts+24(FP), R8

	// (1) The maximum.
	MOVQ SI, DX
	MOVQ BX, CX
	MAXROW16(smz64, smz16, smzTail, smzFold)

	// (2) The exponentials: expShift512 with mh = m, ml = +0.
	VBROADCASTSS X0, Z13
	VPXORD       Z12, Z12, Z12
	EXP_CONSTS
	VPXORQ       Z10, Z10, Z10
	MOVQ         DI, R9 // dst, for (3)
	MOVQ         BX, R10 // n, for (3)
	MOVQ         BX, CX
	MOVQ         SI, DX
	MOVQ         pf+32(FP), BX
	ADDQ         DI, BX
	EXPSHIFT_ROW(smzShift32, smzShift16, smzShiftBody, smzSum, smzm1, smzd1, smzm2, smzd2, smzm3, smzd3)

	// (3) The products with 1/s, rounded once each (scaleRow512).
	MOVQ $0x3ff0000000000000, AX
	VMOVQ AX, X1
	VDIVSD X0, X1, X2
	VBROADCASTSD X2, Z2
	MOVQ R10, CX
	SCALEROW16(R9, smzScale32, smzScale8, smzScaleStep, smzDone)

smzDone:
	VZEROUPPER
	RET
