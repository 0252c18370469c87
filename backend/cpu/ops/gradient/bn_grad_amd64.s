//go:build amd64 && !purego

#include "textflag.h"

// func bnGradSumsAVX2(dy, x *float32, n int, x0 float64, pf *float32) (sd, sdd, sg, sgd float64)
//
// With d = x[i]-x0 and g = dy[i], in float64 over n elements (a multiple
// of 8): sd = Σd, sdd = Σd², sg = Σg, sgd = Σg·d; two accumulators of
// four lanes for each sum. Each 32 bytes of x also ask (PREFETCHT0) for
// the line at the same offset from pf (nil: x), the row of dx that the
// apply pass writes next.
TEXT ·bnGradSumsAVX2(SB), NOSPLIT, $0-72
	MOVQ dy+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD x0+24(FP), Y15
	MOVQ pf+32(FP), BX
	TESTQ BX, BX
	CMOVQEQ SI, BX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7

gsums8:
	CMPQ CX, $8
	JL   gsumsDone
	PREFETCHT0 (BX)
	VCVTPS2PD 0(SI), Y8
	VCVTPS2PD 16(SI), Y9
	VCVTPS2PD 0(DI), Y10
	VCVTPS2PD 16(DI), Y11
	VSUBPD Y15, Y8, Y8
	VSUBPD Y15, Y9, Y9
	VADDPD Y8, Y0, Y0
	VADDPD Y9, Y1, Y1
	VFMADD231PD Y8, Y8, Y2
	VFMADD231PD Y9, Y9, Y3
	VADDPD Y10, Y4, Y4
	VADDPD Y11, Y5, Y5
	VFMADD231PD Y10, Y8, Y6
	VFMADD231PD Y11, Y9, Y7
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, BX
	SUBQ $8, CX
	JMP  gsums8

gsumsDone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y5, Y4, Y4
	VADDPD Y7, Y6, Y6
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VEXTRACTF128 $1, Y2, X3
	VADDPD X3, X2, X2
	VHADDPD X2, X2, X2
	VEXTRACTF128 $1, Y4, X5
	VADDPD X5, X4, X4
	VHADDPD X4, X4, X4
	VEXTRACTF128 $1, Y6, X7
	VADDPD X7, X6, X6
	VHADDPD X6, X6, X6
	VMOVSD X0, sd+40(FP)
	VMOVSD X2, sdd+48(FP)
	VMOVSD X4, sg+56(FP)
	VMOVSD X6, sgd+64(FP)
	VZEROUPPER
	RET

// func bnGradApplyAVX2(dx, dy, x *float32, n int, k1, k2, k0 float64, pf int)
//
// dx[i] = float32((k1·dy[i] + k2·x[i]) + k0), each operation rounded in
// float64 as the Go loop does, over n elements (a multiple of 8). Each 32
// bytes also ask (PREFETCHT1, into L2) for the lines pf bytes on of dy and
// x: the next channel's rows, which the next sums pass reads (pf 0: the
// lines in hand).
TEXT ·bnGradApplyAVX2(SB), NOSPLIT, $0-64
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	VBROADCASTSD k1+32(FP), Y13
	VBROADCASTSD k2+40(FP), Y14
	VBROADCASTSD k0+48(FP), Y15
	MOVQ pf+56(FP), BX

gapply8:
	CMPQ CX, $8
	JL   gapplyDone
	PREFETCHT1 (DX)(BX*1)
	PREFETCHT1 (SI)(BX*1)
	VCVTPS2PD 0(DX), Y0
	VCVTPS2PD 16(DX), Y1
	VCVTPS2PD 0(SI), Y2
	VCVTPS2PD 16(SI), Y3
	VMULPD Y13, Y0, Y0
	VMULPD Y13, Y1, Y1
	VMULPD Y14, Y2, Y2
	VMULPD Y14, Y3, Y3
	VADDPD Y2, Y0, Y0
	VADDPD Y3, Y1, Y1
	VADDPD Y15, Y0, Y0
	VADDPD Y15, Y1, Y1
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS X0, 0(DI)
	VMOVUPS X1, 16(DI)
	ADDQ $32, DX
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  gapply8

gapplyDone:
	VZEROUPPER
	RET

// MASKDY loads dy[0:8] from DI into Y10 (low four lanes) and Y11 (high
// four) as float64, each lane zeroed where r[i] (R) is not > 0: the Relu
// gradient ReluGrad(dy, r) that BatchNormReluGrad folds in. Y12 must be 0.
#define MASKDY \
	VMOVUPS 0(R8), Y9 \
	VCMPPS $14, Y12, Y9, Y9 \
	VANDPS 0(DI), Y9, Y9 \
	VCVTPS2PD X9, Y10 \
	VEXTRACTF128 $1, Y9, X9 \
	VCVTPS2PD X9, Y11

// func bnGradSumsReluAVX2(dy, r, x *float32, n int, x0 float64, pf *float32) (sd, sdd, sg, sgd float64)
//
// bnGradSumsAVX2 with g = (r[i] > 0 ? dy[i] : 0).
TEXT ·bnGradSumsReluAVX2(SB), NOSPLIT, $0-80
	MOVQ dy+0(FP), DI
	MOVQ r+8(FP), R8
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	VBROADCASTSD x0+32(FP), Y15
	MOVQ pf+40(FP), BX
	TESTQ BX, BX
	CMOVQEQ SI, BX
	VXORPS Y12, Y12, Y12
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7

rsums8:
	CMPQ CX, $8
	JL   rsumsDone
	PREFETCHT0 (BX)
	VCVTPS2PD 0(SI), Y8
	VCVTPS2PD 16(SI), Y13
	MASKDY
	VSUBPD Y15, Y8, Y8
	VSUBPD Y15, Y13, Y13
	VADDPD Y8, Y0, Y0
	VADDPD Y13, Y1, Y1
	VFMADD231PD Y8, Y8, Y2
	VFMADD231PD Y13, Y13, Y3
	VADDPD Y10, Y4, Y4
	VADDPD Y11, Y5, Y5
	VFMADD231PD Y10, Y8, Y6
	VFMADD231PD Y11, Y13, Y7
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $32, BX
	SUBQ $8, CX
	JMP  rsums8

rsumsDone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y5, Y4, Y4
	VADDPD Y7, Y6, Y6
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VEXTRACTF128 $1, Y2, X3
	VADDPD X3, X2, X2
	VHADDPD X2, X2, X2
	VEXTRACTF128 $1, Y4, X5
	VADDPD X5, X4, X4
	VHADDPD X4, X4, X4
	VEXTRACTF128 $1, Y6, X7
	VADDPD X7, X6, X6
	VHADDPD X6, X6, X6
	VMOVSD X0, sd+48(FP)
	VMOVSD X2, sdd+56(FP)
	VMOVSD X4, sg+64(FP)
	VMOVSD X6, sgd+72(FP)
	VZEROUPPER
	RET

// func bnGradApplyReluAVX2(dx, dy, r, x *float32, n int, k1, k2, k0 float64, pf int)
//
// bnGradApplyAVX2 with dy[i] replaced by (r[i] > 0 ? dy[i] : 0); pf as
// there, for dy, r and x.
TEXT ·bnGradApplyReluAVX2(SB), NOSPLIT, $0-72
	MOVQ dx+0(FP), DX
	MOVQ dy+8(FP), DI
	MOVQ r+16(FP), R8
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), CX
	VBROADCASTSD k1+40(FP), Y13
	VBROADCASTSD k2+48(FP), Y14
	VBROADCASTSD k0+56(FP), Y15
	MOVQ pf+64(FP), BX
	VXORPS Y12, Y12, Y12

rapply8:
	CMPQ CX, $8
	JL   rapplyDone
	PREFETCHT1 (DI)(BX*1)
	PREFETCHT1 (R8)(BX*1)
	PREFETCHT1 (SI)(BX*1)
	MASKDY
	VCVTPS2PD 0(SI), Y2
	VCVTPS2PD 16(SI), Y3
	VMULPD Y13, Y10, Y0
	VMULPD Y13, Y11, Y1
	VMULPD Y14, Y2, Y2
	VMULPD Y14, Y3, Y3
	VADDPD Y2, Y0, Y0
	VADDPD Y3, Y1, Y1
	VADDPD Y15, Y0, Y0
	VADDPD Y15, Y1, Y1
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS X0, 0(DX)
	VMOVUPS X1, 16(DX)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  rapply8

rapplyDone:
	VZEROUPPER
	RET

// func bnGradApplyCoefAVX2(dx, dy, x *float32, k1, k2, k0 *float64, n int)
//
// bnGradApplyAVX2 with a coefficient per element: dx[i] =
// float32((k1[i]·dy[i] + k2[i]·x[i]) + k0[i]), each operation rounded in
// float64, over n elements (a multiple of 8).
TEXT ·bnGradApplyCoefAVX2(SB), NOSPLIT, $0-56
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ k1+24(FP), R9
	MOVQ k2+32(FP), R10
	MOVQ k0+40(FP), R11
	MOVQ n+48(FP), CX

capply8:
	CMPQ CX, $8
	JL   capplyDone
	VCVTPS2PD 0(DX), Y0
	VCVTPS2PD 16(DX), Y1
	VCVTPS2PD 0(SI), Y2
	VCVTPS2PD 16(SI), Y3
	VMULPD 0(R9), Y0, Y0
	VMULPD 32(R9), Y1, Y1
	VMULPD 0(R10), Y2, Y2
	VMULPD 32(R10), Y3, Y3
	VADDPD Y2, Y0, Y0
	VADDPD Y3, Y1, Y1
	VADDPD 0(R11), Y0, Y0
	VADDPD 32(R11), Y1, Y1
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS X0, 0(DI)
	VMOVUPS X1, 16(DI)
	ADDQ $32, DX
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $64, R9
	ADDQ $64, R10
	ADDQ $64, R11
	SUBQ $8, CX
	JMP  capply8

capplyDone:
	VZEROUPPER
	RET

// func bnGradApplyCoefReluAVX2(dx, dy, r, x *float32, k1, k2, k0 *float64, n int)
//
// bnGradApplyCoefAVX2 with dy[i] replaced by (r[i] > 0 ? dy[i] : 0).
TEXT ·bnGradApplyCoefReluAVX2(SB), NOSPLIT, $0-64
	MOVQ dx+0(FP), DX
	MOVQ dy+8(FP), DI
	MOVQ r+16(FP), R8
	MOVQ x+24(FP), SI
	MOVQ k1+32(FP), R9
	MOVQ k2+40(FP), R10
	MOVQ k0+48(FP), R11
	MOVQ n+56(FP), CX
	VXORPS Y12, Y12, Y12

crapply8:
	CMPQ CX, $8
	JL   crapplyDone
	MASKDY
	VCVTPS2PD 0(SI), Y2
	VCVTPS2PD 16(SI), Y3
	VMULPD 0(R9), Y10, Y0
	VMULPD 32(R9), Y11, Y1
	VMULPD 0(R10), Y2, Y2
	VMULPD 32(R10), Y3, Y3
	VADDPD Y2, Y0, Y0
	VADDPD Y3, Y1, Y1
	VADDPD 0(R11), Y0, Y0
	VADDPD 32(R11), Y1, Y1
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS X0, 0(DX)
	VMOVUPS X1, 16(DX)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, DX
	ADDQ $64, R9
	ADDQ $64, R10
	ADDQ $64, R11
	SUBQ $8, CX
	JMP  crapply8

crapplyDone:
	VZEROUPPER
	RET

// TRANSPOSE4 transposes the 4×4 float64 matrix whose rows are A, B, C, D
// into its columns, left in A, B, C, D; T0 and T1 are scratch.
#define TRANSPOSE4(A, B, C, D, T0, T1) \
	VUNPCKLPD B, A, T0 \
	VUNPCKHPD B, A, T1 \
	VUNPCKLPD D, C, A \
	VUNPCKHPD D, C, B \
	VPERM2F128 $0x31, A, T0, C \
	VPERM2F128 $0x31, B, T1, D \
	VPERM2F128 $0x20, A, T0, A \
	VPERM2F128 $0x20, B, T1, B

// SHORTSTEP adds column D (x - x0) and G (dy) of four rows to the row
// sums: Y0 += D, Y1 += D·D, Y2 += G, Y3 += G·D, each product rounded
// before the sum (as the Go loop, which does not fuse them); Y14 is
// scratch.
#define SHORTSTEP(D, G) \
	VADDPD D, Y0, Y0 \
	VMULPD D, D, Y14 \
	VADDPD Y14, Y1, Y1 \
	VADDPD G, Y2, Y2 \
	VMULPD G, D, Y14 \
	VADDPD Y14, Y3, Y3

// SHORTX loads elements 0..3 of the four rows of x at SI (rows R12 bytes
// apart, R13 = 3·R12) as float64 into Y4..Y7, transposes them into
// columns and subtracts the rows' x0 (Y15).
#define SHORTX \
	VCVTPS2PD 0(SI), Y4 \
	VCVTPS2PD 0(SI)(R12*1), Y5 \
	VCVTPS2PD 0(SI)(R12*2), Y6 \
	VCVTPS2PD 0(SI)(R13*1), Y7 \
	TRANSPOSE4(Y4, Y5, Y6, Y7, Y8, Y9) \
	VSUBPD Y15, Y4, Y4 \
	VSUBPD Y15, Y5, Y5 \
	VSUBPD Y15, Y6, Y6 \
	VSUBPD Y15, Y7, Y7

// SHORTSUMS adds the group's row sums Y0..Y3 to sd, sdd, sg and sgd at
// R9 (R10 bytes apart; R11 = 3·R10).
#define SHORTSUMS \
	VADDPD 0(R9), Y0, Y0 \
	VMOVUPD Y0, 0(R9) \
	VADDPD 0(R9)(R10*1), Y1, Y1 \
	VMOVUPD Y1, 0(R9)(R10*1) \
	VADDPD 0(R9)(R10*2), Y2, Y2 \
	VMOVUPD Y2, 0(R9)(R10*2) \
	VADDPD 0(R9)(R11*1), Y3, Y3 \
	VMOVUPD Y3, 0(R9)(R11*1)

// func bnGradShortSumsAVX2(dy, r, x *float32, w, nc int, x0, acc *float64, stride int)
//
// For each of nc rows of w floats (nc and w multiples of 4) at x and dy,
// the row sums Σd, Σd², Σg, Σg·d in float64 with d = x - x0[k] and g = dy
// (masked by r > 0 when r is not nil), each taken in element order from
// zero, then added to acc[k], acc[stride+k], acc[2·stride+k] and
// acc[3·stride+k]: four rows at a time, one row to a lane.
TEXT ·bnGradShortSumsAVX2(SB), NOSPLIT, $0-64
	MOVQ dy+0(FP), DI
	MOVQ r+8(FP), R8
	MOVQ x+16(FP), SI
	MOVQ w+24(FP), R12
	MOVQ nc+32(FP), CX
	MOVQ x0+40(FP), DX
	MOVQ acc+48(FP), R9
	MOVQ stride+56(FP), R10
	SHLQ $3, R10
	LEAQ (R10)(R10*2), R11
	SHLQ $2, R12
	LEAQ (R12)(R12*2), R13

sgroup:
	CMPQ CX, $4
	JL   sdone
	VMOVUPD 0(DX), Y15
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	MOVQ R12, BX
	TESTQ R8, R8
	JNZ  srelu

splain:
	SHORTX
	VCVTPS2PD 0(DI), Y10
	VCVTPS2PD 0(DI)(R12*1), Y11
	VCVTPS2PD 0(DI)(R12*2), Y12
	VCVTPS2PD 0(DI)(R13*1), Y13
	TRANSPOSE4(Y10, Y11, Y12, Y13, Y8, Y9)
	SHORTSTEP(Y4, Y10)
	SHORTSTEP(Y5, Y11)
	SHORTSTEP(Y6, Y12)
	SHORTSTEP(Y7, Y13)
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $16, BX
	JNZ  splain
	JMP  snext

srelu:
	SHORTX
	VXORPS X14, X14, X14
	VMOVUPS 0(R8), X10
	VCMPPS $14, X14, X10, X10
	VANDPS 0(DI), X10, X10
	VCVTPS2PD X10, Y10
	VMOVUPS 0(R8)(R12*1), X11
	VCMPPS $14, X14, X11, X11
	VANDPS 0(DI)(R12*1), X11, X11
	VCVTPS2PD X11, Y11
	VMOVUPS 0(R8)(R12*2), X12
	VCMPPS $14, X14, X12, X12
	VANDPS 0(DI)(R12*2), X12, X12
	VCVTPS2PD X12, Y12
	VMOVUPS 0(R8)(R13*1), X13
	VCMPPS $14, X14, X13, X13
	VANDPS 0(DI)(R13*1), X13, X13
	VCVTPS2PD X13, Y13
	TRANSPOSE4(Y10, Y11, Y12, Y13, Y8, Y9)
	SHORTSTEP(Y4, Y10)
	SHORTSTEP(Y5, Y11)
	SHORTSTEP(Y6, Y12)
	SHORTSTEP(Y7, Y13)
	ADDQ $16, SI
	ADDQ $16, DI
	ADDQ $16, R8
	SUBQ $16, BX
	JNZ  srelu
	ADDQ R13, R8

snext:
	SHORTSUMS
	ADDQ R13, SI
	ADDQ R13, DI
	ADDQ $32, DX
	ADDQ $32, R9
	SUBQ $4, CX
	JMP  sgroup

sdone:
	VZEROUPPER
	RET
