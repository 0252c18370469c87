//go:build amd64 && !purego

#include "textflag.h"

// func bnSumsAVX2(x *float32, n int, x0 float64) (s, q float64)
//
// s = Σ(x[i]-x0), q = Σ(x[i]-x0)² over n elements (a multiple of 8), in
// float64: four lanes per accumulator, two accumulators of each sum.
TEXT ·bnSumsAVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD x0+16(FP), Y15
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3

sums8:
	CMPQ CX, $8
	JL   sumsDone
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VSUBPD Y15, Y4, Y4
	VSUBPD Y15, Y5, Y5
	VADDPD Y4, Y0, Y0
	VADDPD Y5, Y1, Y1
	VFMADD231PD Y4, Y4, Y2
	VFMADD231PD Y5, Y5, Y3
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  sums8

sumsDone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VEXTRACTF128 $1, Y2, X3
	VADDPD X3, X2, X2
	VHADDPD X2, X2, X2
	VMOVSD X0, s+24(FP)
	VMOVSD X2, q+32(FP)
	VZEROUPPER
	RET

// func bnApplyAVX2(dst, src *float32, n int, mul, add float32, relu bool)
//
// dst[i] = src[i]·mul + add in float32, rounded after the product and the
// sum (as the Go loop), over n elements (a multiple of 8); with relu set,
// negative results become +0 (bits cleared, as Relu: -0 and NaN stay).
TEXT ·bnApplyAVX2(SB), NOSPLIT, $0-33
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS mul+24(FP), Y14
	VBROADCASTSS add+28(FP), Y15
	VXORPS Y13, Y13, Y13
	MOVBLZX relu+32(FP), AX
	TESTQ AX, AX
	JNZ   relu8

apply8:
	CMPQ CX, $8
	JL   applyDone
	VMULPS 0(SI), Y14, Y0
	VADDPS Y15, Y0, Y0
	VMOVUPS Y0, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  apply8

relu8:
	CMPQ CX, $8
	JL   applyDone
	VMULPS 0(SI), Y14, Y0
	VADDPS Y15, Y0, Y0
	VCMPPS $1, Y13, Y0, Y1 // Y1 = Y0 < 0 (ordered, so NaN gives 0)
	VANDNPS Y0, Y1, Y0     // Y0 &^ Y1
	VMOVUPS Y0, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  relu8

applyDone:
	VZEROUPPER
	RET
