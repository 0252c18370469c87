//go:build amd64 && !purego

#include "textflag.h"

// func bnGradSumsAVX2(dy, x *float32, n int, x0 float64) (sd, sdd, sg, sgd float64)
//
// With d = x[i]-x0 and g = dy[i], in float64 over n elements (a multiple
// of 8): sd = Σd, sdd = Σd², sg = Σg, sgd = Σg·d; two accumulators of
// four lanes for each sum.
TEXT ·bnGradSumsAVX2(SB), NOSPLIT, $0-64
	MOVQ dy+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD x0+24(FP), Y15
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
	VMOVSD X0, sd+32(FP)
	VMOVSD X2, sdd+40(FP)
	VMOVSD X4, sg+48(FP)
	VMOVSD X6, sgd+56(FP)
	VZEROUPPER
	RET

// func bnGradApplyAVX2(dx, dy, x *float32, n int, k1, k2, k0 float64)
//
// dx[i] = float32((k1·dy[i] + k2·x[i]) + k0), each operation rounded in
// float64 as the Go loop does, over n elements (a multiple of 8).
TEXT ·bnGradApplyAVX2(SB), NOSPLIT, $0-56
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	VBROADCASTSD k1+32(FP), Y13
	VBROADCASTSD k2+40(FP), Y14
	VBROADCASTSD k0+48(FP), Y15

gapply8:
	CMPQ CX, $8
	JL   gapplyDone
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

// func bnGradSumsReluAVX2(dy, r, x *float32, n int, x0 float64) (sd, sdd, sg, sgd float64)
//
// bnGradSumsAVX2 with g = (r[i] > 0 ? dy[i] : 0).
TEXT ·bnGradSumsReluAVX2(SB), NOSPLIT, $0-72
	MOVQ dy+0(FP), DI
	MOVQ r+8(FP), R8
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	VBROADCASTSD x0+32(FP), Y15
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
	VMOVSD X0, sd+40(FP)
	VMOVSD X2, sdd+48(FP)
	VMOVSD X4, sg+56(FP)
	VMOVSD X6, sgd+64(FP)
	VZEROUPPER
	RET

// func bnGradApplyReluAVX2(dx, dy, r, x *float32, n int, k1, k2, k0 float64)
//
// bnGradApplyAVX2 with dy[i] replaced by (r[i] > 0 ? dy[i] : 0).
TEXT ·bnGradApplyReluAVX2(SB), NOSPLIT, $0-64
	MOVQ dx+0(FP), DX
	MOVQ dy+8(FP), DI
	MOVQ r+16(FP), R8
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), CX
	VBROADCASTSD k1+40(FP), Y13
	VBROADCASTSD k2+48(FP), Y14
	VBROADCASTSD k0+56(FP), Y15
	VXORPS Y12, Y12, Y12

rapply8:
	CMPQ CX, $8
	JL   rapplyDone
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
