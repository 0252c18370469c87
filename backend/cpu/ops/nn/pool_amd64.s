//go:build amd64 && !purego

#include "textflag.h"

// func poolVMaxAVX2(dst, a, b *float32, n int) (nan bool)
//
// dst[i] = max(a[i], b[i]) over n elements (a multiple of 8); reports
// whether any a[i] or b[i] is NaN (the value written for such an i is
// unspecified). dst may be a.
TEXT ·poolVMaxAVX2(SB), NOSPLIT, $0-33
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	VXORPS Y3, Y3, Y3

vmax8:
	CMPQ CX, $8
	JL   vmaxDone
	VMOVUPS (SI), Y0
	VMOVUPS (DX), Y1
	VCMPPS $3, Y1, Y0, Y2
	VORPS Y2, Y3, Y3
	VMAXPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  vmax8

vmaxDone:
	VMOVMSKPS Y3, AX
	TESTL AX, AX
	SETNE nan+32(FP)
	VZEROUPPER
	RET

// func poolHMax3S2AVX2(dst, v *float32, blocks int)
//
// dst[i] = max(v[2i], v[2i+1], v[2i+2]) for i < 8·blocks (reads v up to
// v[16·blocks]); v holds no NaN.
TEXT ·poolHMax3S2AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ blocks+16(FP), CX

h3:
	TESTQ CX, CX
	JE    h3Done
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 4(SI), Y2
	VMOVUPS 36(SI), Y3
	VMAXPS Y2, Y0, Y0
	VMAXPS Y3, Y1, Y1
	// Evens of the pair maxima: max(v[2i], v[2i+1]) for i = 0 1 4 5 | 2 3 6 7.
	VSHUFPS $0x88, Y1, Y0, Y4
	// Odds of v shifted by one: v[2i+2] in the same order.
	VSHUFPS $0xDD, Y3, Y2, Y5
	VMAXPS Y5, Y4, Y4
	VPERMPD $0xD8, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JMP  h3

h3Done:
	VZEROUPPER
	RET

// func poolHMax2S2AVX2(dst, v *float32, blocks int)
//
// dst[i] = max(v[2i], v[2i+1]) for i < 8·blocks; v holds no NaN.
TEXT ·poolHMax2S2AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ blocks+16(FP), CX

h2:
	TESTQ CX, CX
	JE    h2Done
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VSHUFPS $0x88, Y1, Y0, Y4
	VSHUFPS $0xDD, Y1, Y0, Y5
	VMAXPS Y5, Y4, Y4
	VPERMPD $0xD8, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JMP  h2

h2Done:
	VZEROUPPER
	RET

// Tap vectors of one window row for 8 windows two columns apart: left
// (v[2i]), middle (v[2i+1]) and right (v[2i+2]) in the order 0 1 4 5 | 2 3
// 6 7 of the shuffles, from the row at R.
#define TAPS(R, L, M, RT) \
	VMOVUPS 0(R), Y12 \
	VMOVUPS 32(R), Y13 \
	VSHUFPS $0x88, Y13, Y12, L \
	VSHUFPS $0xDD, Y13, Y12, M \
	VMOVUPS 4(R), Y12 \
	VMOVUPS 36(R), Y13 \
	VSHUFPS $0xDD, Y13, Y12, RT

// idx = t where the tap T equals the maximum Y9 (taps visited from last
// to first, so the first equal one stays).
#define PICK(T, t) \
	VCMPPS $0, Y9, T, Y12 \
	MOVL $t, AX \
	VMOVD AX, X13 \
	VPBROADCASTD X13, Y13 \
	VBLENDVPS Y12, Y13, Y10, Y10

// func poolArgmax3x3S2AVX2(dst *int32, x *float32, s1, s2 int, blocks int) (nan bool)
//
// For 8·blocks 3×3 windows whose top-left taps are x[2i], with the window
// rows at x, x+s1 and x+s1+s2, dst[i] = the index 0..8, in row-major
// order, of the window's first tap holding its maximum; reports whether
// any tap is NaN (then dst is unspecified).
TEXT ·poolArgmax3x3S2AVX2(SB), NOSPLIT, $0-41
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ s1+16(FP), DX
	SHLQ $2, DX
	MOVQ s2+24(FP), BX
	SHLQ $2, BX
	MOVQ blocks+32(FP), CX
	VXORPS Y11, Y11, Y11

am:
	TESTQ CX, CX
	JE    amDone
	MOVQ SI, R8
	TAPS(R8, Y0, Y1, Y2)
	ADDQ DX, R8
	TAPS(R8, Y3, Y4, Y5)
	ADDQ BX, R8
	TAPS(R8, Y6, Y7, Y8)
	VCMPPS $3, Y1, Y0, Y14
	VORPS Y14, Y11, Y11
	VCMPPS $3, Y3, Y2, Y14
	VORPS Y14, Y11, Y11
	VCMPPS $3, Y5, Y4, Y14
	VORPS Y14, Y11, Y11
	VCMPPS $3, Y7, Y6, Y14
	VORPS Y14, Y11, Y11
	VCMPPS $3, Y8, Y8, Y14
	VORPS Y14, Y11, Y11
	VMAXPS Y1, Y0, Y9
	VMAXPS Y2, Y9, Y9
	VMAXPS Y3, Y9, Y9
	VMAXPS Y4, Y9, Y9
	VMAXPS Y5, Y9, Y9
	VMAXPS Y6, Y9, Y9
	VMAXPS Y7, Y9, Y9
	VMAXPS Y8, Y9, Y9
	// Tap 8 is the maximum when no earlier tap is.
	MOVL $8, AX
	VMOVD AX, X10
	VPBROADCASTD X10, Y10
	PICK(Y7, 7)
	PICK(Y6, 6)
	PICK(Y5, 5)
	PICK(Y4, 4)
	PICK(Y3, 3)
	PICK(Y2, 2)
	PICK(Y1, 1)
	PICK(Y0, 0)
	VPERMPD $0xD8, Y10, Y10
	VMOVDQU Y10, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JMP  am

amDone:
	VMOVMSKPS Y11, AX
	TESTL AX, AX
	SETNE nan+40(FP)
	VZEROUPPER
	RET

// func poolMax3S2PlaneAVX2(y, x, v *float32, iw, ow, colOff int, rows *span, nrows int) (bad bool)
//
// MaxPool of one plane for windows 3 columns wide two columns apart: for
// each of the nrows output rows, whose window covers the rows.lo ..
// rows.lo+rows.n-1 of x (n = 1, 2 or 3; rows iw wide, iw >= 8), v[1+j]
// = the maximum of column j over those rows, then y[q] = max(v[colOff+2q],
// v[colOff+2q+1], v[colOff+2q+2]) for the ow >= 8 outputs of the row (y
// advances by ow per row). v[0] and v[iw+1 ..] hold -Inf (set by the
// caller) and are never written. Reports whether a tap it read is NaN or
// -0, whose maxima VMAXPS does not order as the scan does (the caller
// then recomputes the plane).
TEXT ·poolMax3S2PlaneAVX2(SB), NOSPLIT, $0-65
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ v+16(FP), R8
	MOVQ iw+24(FP), R9
	SHLQ $2, R9
	MOVQ colOff+40(FP), R11
	LEAQ (R8)(R11*4), R11
	MOVQ rows+48(FP), R12
	MOVQ nrows+56(FP), R13
	MOVQ R9, R10
	SUBQ $32, R10
	VXORPS Y15, Y15, Y15
	MOVL $0x80000000, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14

prow:
	TESTQ R13, R13
	JE    pdone
	MOVLQSX 0(R12), AX
	MOVLQSX 4(R12), DX
	IMULQ R9, AX
	ADDQ  SI, AX
	MOVQ  AX, BX
	CMPQ  DX, $2
	JL    p1
	ADDQ  R9, BX

p1:
	MOVQ BX, CX
	CMPQ DX, $3
	JL   p2
	ADDQ R9, CX

p2:
	XORQ DX, DX

pv:
	VMOVUPS (AX)(DX*1), Y0
	VMOVUPS (BX)(DX*1), Y1
	VMOVUPS (CX)(DX*1), Y2
	VCMPPS $3, Y1, Y0, Y3
	VORPS Y3, Y15, Y15
	VCMPPS $3, Y2, Y2, Y3
	VORPS Y3, Y15, Y15
	VPCMPEQD Y14, Y0, Y3
	VPOR Y3, Y15, Y15
	VPCMPEQD Y14, Y1, Y3
	VPOR Y3, Y15, Y15
	VPCMPEQD Y14, Y2, Y3
	VPOR Y3, Y15, Y15
	VMAXPS Y1, Y0, Y0
	VMAXPS Y2, Y0, Y0
	VMOVUPS Y0, 4(R8)(DX*1)
	CMPQ DX, R10
	JE   ph
	ADDQ $32, DX
	CMPQ DX, R10
	JLE  pv
	MOVQ R10, DX
	JMP  pv

ph:
	MOVQ ow+32(FP), CX
	SUBQ $8, CX
	XORQ AX, AX

phl:
	LEAQ (R11)(AX*8), BX
	VMOVUPS 0(BX), Y0
	VMOVUPS 32(BX), Y1
	VMOVUPS 4(BX), Y2
	VMOVUPS 36(BX), Y3
	VMAXPS Y2, Y0, Y0
	VMAXPS Y3, Y1, Y1
	VSHUFPS $0x88, Y1, Y0, Y4
	VSHUFPS $0xDD, Y3, Y2, Y5
	VMAXPS Y5, Y4, Y4
	VPERMPD $0xD8, Y4, Y4
	VMOVUPS Y4, (DI)(AX*4)
	CMPQ AX, CX
	JE   pnext
	ADDQ $8, AX
	CMPQ AX, CX
	JLE  phl
	MOVQ CX, AX
	JMP  phl

pnext:
	MOVQ ow+32(FP), CX
	LEAQ (DI)(CX*4), DI
	ADDQ $8, R12
	DECQ R13
	JMP  prow

pdone:
	VMOVMSKPS Y15, AX
	TESTL AX, AX
	SETNE bad+64(FP)
	VZEROUPPER
	RET

// Lane indices 0..7.
DATA poolLane1<>+0(SB)/4, $0
DATA poolLane1<>+4(SB)/4, $1
DATA poolLane1<>+8(SB)/4, $2
DATA poolLane1<>+12(SB)/4, $3
DATA poolLane1<>+16(SB)/4, $4
DATA poolLane1<>+20(SB)/4, $5
DATA poolLane1<>+24(SB)/4, $6
DATA poolLane1<>+28(SB)/4, $7
GLOBL poolLane1<>(SB), RODATA|NOPTR, $32

// Lane k's column within a block of 8 windows two columns apart: 2k.
DATA poolLane2<>+0(SB)/4, $0
DATA poolLane2<>+4(SB)/4, $2
DATA poolLane2<>+8(SB)/4, $4
DATA poolLane2<>+12(SB)/4, $6
DATA poolLane2<>+16(SB)/4, $8
DATA poolLane2<>+20(SB)/4, $10
DATA poolLane2<>+24(SB)/4, $12
DATA poolLane2<>+28(SB)/4, $14
GLOBL poolLane2<>(SB), RODATA|NOPTR, $32

// func poolArgmaxScatter3x3S2AVX2(dx, dy, x *float32, s1, s2, n int) (nan bool)
//
// For the n >= 8 3×3 windows whose top-left taps are x[2i], with the
// window rows at x, x+s1 and x+s1+s2, adds dy[i] to dx at the offset of
// the window's first tap (row-major) holding its maximum, window after
// window (dx lies as x does). Blocks of 8 windows; the last block
// overlaps the one before and adds only its new windows. A block with a
// NaN tap stops it before that block's adds, reporting true.
TEXT ·poolArgmaxScatter3x3S2AVX2(SB), NOSPLIT, $0-49
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), R9
	MOVQ x+16(FP), SI
	MOVQ s1+24(FP), DX
	MOVQ s2+32(FP), BX
	MOVQ n+40(FP), R10
	// Y14 = s1-3 and Y15 = s2-3: tap t's offset is t + (t>2)·(s1-3) + (t>5)·(s2-3).
	LEAQ -3(DX), AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	LEAQ -3(BX), AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	SHLQ $2, DX
	SHLQ $2, BX
	XORQ R11, R11 // first window of the block
	XORQ CX, CX   // lanes to skip

asBlock:
	LEAQ (SI)(R11*8), R8
	TAPS(R8, Y0, Y1, Y2)
	ADDQ DX, R8
	TAPS(R8, Y3, Y4, Y5)
	ADDQ BX, R8
	TAPS(R8, Y6, Y7, Y8)
	VCMPPS $3, Y1, Y0, Y11
	VCMPPS $3, Y3, Y2, Y12
	VORPS Y12, Y11, Y11
	VCMPPS $3, Y5, Y4, Y12
	VORPS Y12, Y11, Y11
	VCMPPS $3, Y7, Y6, Y12
	VORPS Y12, Y11, Y11
	VCMPPS $3, Y8, Y8, Y12
	VORPS Y12, Y11, Y11
	VMOVMSKPS Y11, AX
	TESTL AX, AX
	JNE   asNaN
	VMAXPS Y1, Y0, Y9
	VMAXPS Y2, Y9, Y9
	VMAXPS Y3, Y9, Y9
	VMAXPS Y4, Y9, Y9
	VMAXPS Y5, Y9, Y9
	VMAXPS Y6, Y9, Y9
	VMAXPS Y7, Y9, Y9
	VMAXPS Y8, Y9, Y9
	MOVL $8, AX
	VMOVD AX, X10
	VPBROADCASTD X10, Y10
	PICK(Y7, 7)
	PICK(Y6, 6)
	PICK(Y5, 5)
	PICK(Y4, 4)
	PICK(Y3, 3)
	PICK(Y2, 2)
	PICK(Y1, 1)
	PICK(Y0, 0)
	VPERMPD $0xD8, Y10, Y10
	// Tap index -> offset from the window's top-left tap, plus 2k.
	MOVL $2, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	VPCMPGTD Y12, Y10, Y13
	VPAND Y14, Y13, Y13
	VPADDD Y13, Y10, Y11
	MOVL $5, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	VPCMPGTD Y12, Y10, Y13
	VPAND Y15, Y13, Y13
	VPADDD Y13, Y11, Y11
	VPADDD poolLane2<>(SB), Y11, Y11
	LEAQ (DI)(R11*8), R8
	LEAQ (R9)(R11*4), R12
	// The block's gradients, the lanes already added (the last block's
	// first CX) set to +0: adding +0 leaves any sum but -0 as it is, and
	// a sum that starts from +0 is never -0.
	VMOVUPS (R12), Y13
	TESTQ CX, CX
	JE    asAdd
	VMOVD CX, X3
	VPBROADCASTD X3, Y3
	VPCMPGTD poolLane1<>(SB), Y3, Y4
	VPANDN Y13, Y4, Y13

asAdd:
	// Lane by lane in window order, offsets and gradients straight
	// from the registers.
	VMOVD X11, AX
	VADDSS (R8)(AX*4), X13, X0
	VMOVSS X0, (R8)(AX*4)
	VPEXTRD $1, X11, AX
	VPERMILPS $1, X13, X1
	VADDSS (R8)(AX*4), X1, X0
	VMOVSS X0, (R8)(AX*4)
	VPEXTRD $2, X11, AX
	VPERMILPS $2, X13, X1
	VADDSS (R8)(AX*4), X1, X0
	VMOVSS X0, (R8)(AX*4)
	VPEXTRD $3, X11, AX
	VPERMILPS $3, X13, X1
	VADDSS (R8)(AX*4), X1, X0
	VMOVSS X0, (R8)(AX*4)
	VEXTRACTI128 $1, Y11, X12
	VEXTRACTF128 $1, Y13, X2
	VMOVD X12, AX
	VADDSS (R8)(AX*4), X2, X0
	VMOVSS X0, (R8)(AX*4)
	VPEXTRD $1, X12, AX
	VPERMILPS $1, X2, X1
	VADDSS (R8)(AX*4), X1, X0
	VMOVSS X0, (R8)(AX*4)
	VPEXTRD $2, X12, AX
	VPERMILPS $2, X2, X1
	VADDSS (R8)(AX*4), X1, X0
	VMOVSS X0, (R8)(AX*4)
	VPEXTRD $3, X12, AX
	VPERMILPS $3, X2, X1
	VADDSS (R8)(AX*4), X1, X0
	VMOVSS X0, (R8)(AX*4)

asNext:
	ADDQ $8, R11
	XORQ CX, CX
	CMPQ R11, R10
	JGE  asDone
	LEAQ 8(R11), AX
	CMPQ AX, R10
	JLE  asBlock
	// The last block at n-8 adds its windows from R11 on.
	MOVQ R10, AX
	SUBQ $8, AX
	MOVQ R11, CX
	SUBQ AX, CX
	MOVQ AX, R11
	JMP  asBlock

asDone:
	MOVB $0, nan+48(FP)
	VZEROUPPER
	RET

asNaN:
	MOVB $1, nan+48(FP)
	VZEROUPPER
	RET

// func avgPlanes16AVX2(y, x *float32, size int, n float64)
//
// The means of 16 consecutive planes of size (≥ 1) float32 elements each
// (x the first plane's first element, planes end to end): plane j's
// elements summed in order in float64, the sum divided by n and rounded to
// float32 into y[j] — avgPlanes's loop, bit for bit, with each lane of
// four float64 accumulators one plane and the element of eight planes at
// a time gathered (VGATHERDPS at offsets 0, size, ..., 7·size).
TEXT ·avgPlanes16AVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ size+16(FP), CX
	// Y8 = [0, size, ..., 7·size] (element offsets of the first eight
	// planes); R8 = the second group of eight, 8·size elements on.
	MOVQ    CX, AX
	VMOVD   AX, X8
	VPBROADCASTD X8, Y9            // size in every lane
	VMOVDQU poolLane1<>(SB), Y8     // 0..7
	VPMULLD Y9, Y8, Y8
	MOVQ    CX, R8
	SHLQ    $5, R8
	ADDQ    SI, R8                  // the second group: 8·size elements on
	VXORPD  Y0, Y0, Y0
	VXORPD  Y1, Y1, Y1
	VXORPD  Y2, Y2, Y2
	VXORPD  Y3, Y3, Y3

avgloop:
	VPCMPEQD     Y10, Y10, Y10
	VPCMPEQD     Y11, Y11, Y11
	VGATHERDPS   Y10, (SI)(Y8*4), Y4
	VGATHERDPS   Y11, (R8)(Y8*4), Y5
	VCVTPS2PD    X4, Y6
	VEXTRACTF128 $1, Y4, X4
	VCVTPS2PD    X4, Y7
	VADDPD       Y6, Y0, Y0
	VADDPD       Y7, Y1, Y1
	VCVTPS2PD    X5, Y6
	VEXTRACTF128 $1, Y5, X5
	VCVTPS2PD    X5, Y7
	VADDPD       Y6, Y2, Y2
	VADDPD       Y7, Y3, Y3
	ADDQ         $4, SI
	ADDQ         $4, R8
	DECQ         CX
	JNZ          avgloop

	VBROADCASTSD n+24(FP), Y9
	VDIVPD       Y9, Y0, Y0
	VDIVPD       Y9, Y1, Y1
	VDIVPD       Y9, Y2, Y2
	VDIVPD       Y9, Y3, Y3
	VCVTPD2PSY   Y0, X0
	VCVTPD2PSY   Y1, X1
	VCVTPD2PSY   Y2, X2
	VCVTPD2PSY   Y3, X3
	VMOVUPS      X0, (DI)
	VMOVUPS      X1, 16(DI)
	VMOVUPS      X2, 32(DI)
	VMOVUPS      X3, 48(DI)
	VZEROUPPER
	RET
