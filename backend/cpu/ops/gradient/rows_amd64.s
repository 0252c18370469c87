//go:build amd64 && !purego

#include "textflag.h"

// Row kernels of SumToShape, SoftmaxGrad and LayerNormalizationGrad
// (rows.go describes them). n is a positive multiple of the step each
// function states.

// func colSumAVX2(acc *float64, src *float32, n int, pf int)
//
// acc[i] += src[i] in float64 for i < n, 16 elements a step; n is a
// multiple of 4. Each 64 bytes of src in the main loop also ask
// (PREFETCHT0) for the line pf bytes on (the caller's next row, whose
// start the hardware prefetchers would find late; pf 0: the line in hand).
TEXT ·colSumAVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ pf+24(FP), DX

colSum16:
	CMPQ      CX, $16
	JLT       colSum4
	PREFETCHT0 (SI)(DX*1)
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y1
	VCVTPS2PD 32(SI), Y2
	VCVTPS2PD 48(SI), Y3
	VADDPD    (DI), Y0, Y0
	VADDPD    32(DI), Y1, Y1
	VADDPD    64(DI), Y2, Y2
	VADDPD    96(DI), Y3, Y3
	VMOVUPD   Y0, (DI)
	VMOVUPD   Y1, 32(DI)
	VMOVUPD   Y2, 64(DI)
	VMOVUPD   Y3, 96(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	SUBQ      $16, CX
	JMP       colSum16

colSum4:
	CMPQ      CX, $4
	JLT       colSumDone
	VCVTPS2PD (SI), Y0
	VADDPD    (DI), Y0, Y0
	VMOVUPD   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $4, CX
	JMP       colSum4

colSumDone:
	VZEROUPPER
	RET

// func colSumRoundAVX2(dst, src *float32, n, rows, stride int)
//
// dst[i] = float32(Σ_r float64(src[r·stride + i])) for i < n, the sum
// from +0 in row order (rows ≥ 1), eight columns a step in two float64
// halves; n is a multiple of 8.
TEXT ·colSumRoundAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ rows+24(FP), R8
	MOVQ stride+32(FP), R9
	SHLQ $2, R9 // the row stride in bytes

colSumRoundCol:
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	MOVQ   SI, AX
	MOVQ   R8, DX

colSumRoundRow:
	VCVTPS2PD (AX), Y2
	VCVTPS2PD 16(AX), Y3
	VADDPD    Y2, Y0, Y0
	VADDPD    Y3, Y1, Y1
	ADDQ      R9, AX
	DECQ      DX
	JNZ       colSumRoundRow

	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS    X0, (DI)
	VMOVUPS    X1, 16(DI)
	ADDQ       $32, SI
	ADDQ       $32, DI
	SUBQ       $8, CX
	JNZ        colSumRoundCol
	VZEROUPPER
	RET

// func lnGradStatsAVX2(x, dy *float32, scale *float64, n int, x0 float64, out *[4]float64)
//
// out = Σd, Σd², Σg, Σg·d in float64 with d = x − x0 and g = dy·scale;
// n is a multiple of 4.
TEXT ·lnGradStatsAVX2(SB), NOSPLIT, $0-48
	MOVQ         x+0(FP), SI
	MOVQ         dy+8(FP), DI
	MOVQ         scale+16(FP), R8
	MOVQ         n+24(FP), CX
	VBROADCASTSD x0+32(FP), Y15
	VXORPD       Y0, Y0, Y0
	VXORPD       Y1, Y1, Y1
	VXORPD       Y2, Y2, Y2
	VXORPD       Y3, Y3, Y3
	VXORPD       Y8, Y8, Y8
	VXORPD       Y9, Y9, Y9
	VXORPD       Y10, Y10, Y10
	VXORPD       Y11, Y11, Y11

lnStats8:
	CMPQ        CX, $8
	JLT         lnStats4
	VCVTPS2PD   (SI), Y4
	VCVTPS2PD   16(SI), Y12
	VCVTPS2PD   (DI), Y5
	VCVTPS2PD   16(DI), Y13
	VSUBPD      Y15, Y4, Y4
	VSUBPD      Y15, Y12, Y12
	VMULPD      (R8), Y5, Y5
	VMULPD      32(R8), Y13, Y13
	VADDPD      Y4, Y0, Y0
	VADDPD      Y12, Y8, Y8
	VFMADD231PD Y4, Y4, Y1
	VFMADD231PD Y12, Y12, Y9
	VADDPD      Y5, Y2, Y2
	VADDPD      Y13, Y10, Y10
	VFMADD231PD Y4, Y5, Y3
	VFMADD231PD Y12, Y13, Y11
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $64, R8
	SUBQ        $8, CX
	JMP         lnStats8

lnStats4:
	CMPQ        CX, $4
	JLT         lnStatsDone
	VCVTPS2PD   (SI), Y4
	VCVTPS2PD   (DI), Y5
	VSUBPD      Y15, Y4, Y4
	VMULPD      (R8), Y5, Y5
	VADDPD      Y4, Y0, Y0
	VFMADD231PD Y4, Y4, Y1
	VADDPD      Y5, Y2, Y2
	VFMADD231PD Y4, Y5, Y3

lnStatsDone:
	MOVQ         out+40(FP), AX
	VADDPD       Y8, Y0, Y0
	VADDPD       Y9, Y1, Y1
	VADDPD       Y10, Y2, Y2
	VADDPD       Y11, Y3, Y3
	// Transpose-add the four vectors into (Σ0, Σ1, Σ2, Σ3).
	VHADDPD      Y1, Y0, Y0 // (a0+a1, b0+b1, a2+a3, b2+b3)
	VHADDPD      Y3, Y2, Y2 // (c0+c1, d0+d1, c2+c3, d2+d3)
	VPERM2F128   $0x20, Y2, Y0, Y4 // (a01, b01, c01, d01)
	VPERM2F128   $0x31, Y2, Y0, Y5 // (a23, b23, c23, d23)
	VADDPD       Y5, Y4, Y4
	VMOVUPD      Y4, (AX)
	VZEROUPPER
	RET

// func lnGradApplyAVX2(x, dy, scale, dx, ds, db, r *float32, n int, c *[5]float32, pf int)
//
// With h = ((x − c[0]) − c[1])·c[2]: dx = c[2]·(dy·scale − c[3]) + c[4]·h,
// plus r (rounded after the sum, as the Add kernel adds) when r is not
// nil, ds += dy·h, db += dy, in float32; n is a multiple of 8. Without r
// the loop adds -0, which leaves every float32 as it is (-0 included), from
// one constant block. With pf not 0, each 64 bytes of the row also ask
// (PREFETCHT0) for the line pf bytes on of dx and of r, and the line 2·pf
// bytes on of x and dy: the caller passes a row's length in bytes, so that
// the next row's stores and the statistics of the row after it find their
// lines on their way instead of stalling on memory. (Go's assembler has no
// PREFETCHW; a line read that no other core holds arrives exclusive, and
// the store needs no second request.)
TEXT ·lnGradApplyAVX2(SB), NOSPLIT, $0-80
	MOVQ         x+0(FP), SI
	MOVQ         dy+8(FP), DI
	MOVQ         scale+16(FP), R8
	MOVQ         dx+24(FP), R9
	MOVQ         ds+32(FP), R10
	MOVQ         db+40(FP), R11
	MOVQ         r+48(FP), R12
	MOVQ         n+56(FP), CX
	MOVQ         c+64(FP), AX
	MOVQ         pf+72(FP), DX
	VBROADCASTSS 0(AX), Y11
	VBROADCASTSS 4(AX), Y12
	VBROADCASTSS 8(AX), Y13
	VBROADCASTSS 12(AX), Y14
	VBROADCASTSS 16(AX), Y15
	// BX: the prefetch distance for x and dy (2·pf); R13: a counter of
	// 8-element steps, prefetching on the even ones (one per line); R14:
	// r's step (32 bytes, or 0 on the -0 block).
	LEAQ         (DX)(DX*1), BX
	XORQ         R13, R13
	MOVQ         $32, R14
	TESTQ        R12, R12
	JNZ          lnApplyLoop
	LEAQ         lnNegZero<>(SB), R12
	XORQ         R14, R14

lnApplyLoop:
	TESTQ       DX, DX
	JZ          lnApplyBody
	TESTQ       $1, R13
	JNZ         lnApplyBody
	PREFETCHT0  (R9)(DX*1)
	PREFETCHT0  (R12)(DX*1)
	PREFETCHT0  (SI)(BX*1)
	PREFETCHT0  (DI)(BX*1)

lnApplyBody:
	VMOVUPS     (SI), Y0
	VMOVUPS     (DI), Y1
	VSUBPS      Y11, Y0, Y0
	VSUBPS      Y12, Y0, Y0
	VMULPS      Y13, Y0, Y0         // h
	VMULPS      (R8), Y1, Y2        // g = dy·scale
	VSUBPS      Y14, Y2, Y2         // g − mean(g)
	VMULPS      Y13, Y2, Y2         // inv·(g − mean(g))
	VFMADD231PS Y15, Y0, Y2         // + c·h
	VADDPS      (R12), Y2, Y2       // + r (or -0)
	VMOVUPS     Y2, (R9)
	VMOVUPS     (R10), Y3
	VFMADD231PS Y1, Y0, Y3          // ds += dy·h
	VMOVUPS     Y3, (R10)
	VADDPS      (R11), Y1, Y1       // db += dy
	VMOVUPS     Y1, (R11)
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, R8
	ADDQ        $32, R9
	ADDQ        $32, R10
	ADDQ        $32, R11
	ADDQ        R14, R12
	INCQ        R13
	SUBQ        $8, CX
	JNZ         lnApplyLoop
	VZEROUPPER
	RET

// lnNegZero is eight float32 -0s: x + (-0) is x for every x.
DATA lnNegZero<>+0(SB)/4, $0x80000000
DATA lnNegZero<>+4(SB)/4, $0x80000000
DATA lnNegZero<>+8(SB)/4, $0x80000000
DATA lnNegZero<>+12(SB)/4, $0x80000000
DATA lnNegZero<>+16(SB)/4, $0x80000000
DATA lnNegZero<>+20(SB)/4, $0x80000000
DATA lnNegZero<>+24(SB)/4, $0x80000000
DATA lnNegZero<>+28(SB)/4, $0x80000000
GLOBL lnNegZero<>(SB), RODATA|NOPTR, $32

// func softmaxGradRowAVX2(dy, y, dx *float32, n int, pf int) float64
//
// n ≥ 8. One softmax-gradient row in one call: s = Σ dy·y in float64,
// then dx = float32(y·(dy − s)) (the difference and the product in
// float64, rounded once); dx may be dy. The sum's order: over the first
// n&^7 elements two accumulators of four lanes (element 8i+j into lane j
// of the first for j < 4, lane j−4 of the second otherwise; the products
// are exact, so the fused multiply-adds round as adds do), added lane by
// lane, then (l0 + l2) + (l1 + l3); the rest as dot32 takes a row: pairs
// into s0 and s1, an odd last element into s0; s + (s0 + s1). While the sum runs, the lines pf bytes past
// those of dy and y it reads are prefetched (PREFETCHT0): with pf the
// row length in bytes, the next row's, so that a row read first from L2
// or memory does not wait for each line (0: the lines in hand). It
// returns s (for the tests).
TEXT ·softmaxGradRowAVX2(SB), NOSPLIT, $0-48
	MOVQ dy+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ dx+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ pf+32(FP), R8
	LEAQ (SI)(R8*1), R9 // dy's prefetch base
	ADDQ DI, R8         // y's
	MOVQ CX, BX
	ANDQ $-8, BX        // n &^ 7
	MOVQ BX, R11
	SHLQ $2, R11        // its bytes
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	XORQ R10, R10

sgDot:
	PREFETCHT0  (R9)(R10*1)
	PREFETCHT0  (R8)(R10*1)
	VCVTPS2PD   (SI)(R10*1), Y2
	VCVTPS2PD   16(SI)(R10*1), Y3
	VCVTPS2PD   (DI)(R10*1), Y4
	VCVTPS2PD   16(DI)(R10*1), Y5
	VFMADD231PD Y4, Y2, Y0
	VFMADD231PD Y5, Y3, Y1
	ADDQ        $32, R10
	CMPQ        R10, R11
	JB          sgDot

	VADDPD       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD       X1, X0, X0
	VUNPCKHPD    X0, X0, X1
	VADDSD       X1, X0, X0 // the body's sum

	// dot32's tail: pairs into s0 (X2) and s1 (X3), an odd last one
	// into s0.
	VXORPD X2, X2, X2
	VXORPD X3, X3, X3
	MOVQ   BX, R12

sgPair:
	LEAQ      2(R12), R13
	CMPQ      R13, CX
	JA        sgOdd
	VCVTSS2SD (SI)(R12*4), X4, X4
	VCVTSS2SD (DI)(R12*4), X5, X5
	VMULSD    X5, X4, X4
	VADDSD    X4, X2, X2
	VCVTSS2SD 4(SI)(R12*4), X4, X4
	VCVTSS2SD 4(DI)(R12*4), X5, X5
	VMULSD    X5, X4, X4
	VADDSD    X4, X3, X3
	MOVQ      R13, R12
	JMP       sgPair

sgOdd:
	CMPQ      R12, CX
	JAE       sgSum
	VCVTSS2SD (SI)(R12*4), X4, X4
	VCVTSS2SD (DI)(R12*4), X5, X5
	VMULSD    X5, X4, X4
	VADDSD    X4, X2, X2

sgSum:
	VADDSD       X3, X2, X2
	VADDSD       X2, X0, X0 // s
	VMOVSD       X0, ret+40(FP)
	VBROADCASTSD X0, Y15
	XORQ         R10, R10

sgGrad:
	VCVTPS2PD  (SI)(R10*1), Y0
	VCVTPS2PD  16(SI)(R10*1), Y1
	VCVTPS2PD  (DI)(R10*1), Y2
	VCVTPS2PD  16(DI)(R10*1), Y3
	VSUBPD     Y15, Y0, Y0
	VSUBPD     Y15, Y1, Y1
	VMULPD     Y2, Y0, Y0
	VMULPD     Y3, Y1, Y1
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS    X0, (DX)(R10*1)
	VMOVUPS    X1, 16(DX)(R10*1)
	ADDQ       $32, R10
	CMPQ       R10, R11
	JB         sgGrad

	// softmaxRowGrad32's tail, one element at a time.
	MOVQ BX, R12

sgTail:
	CMPQ      R12, CX
	JAE       sgDone
	VCVTSS2SD (SI)(R12*4), X4, X4
	VSUBSD    X15, X4, X4
	VCVTSS2SD (DI)(R12*4), X5, X5
	VMULSD    X5, X4, X4
	VCVTSD2SS X4, X4, X4
	VMOVSS    X4, (DX)(R12*4)
	INCQ      R12
	JMP       sgTail

sgDone:
	VZEROUPPER
	RET
