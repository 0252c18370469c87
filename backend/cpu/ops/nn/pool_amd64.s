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
