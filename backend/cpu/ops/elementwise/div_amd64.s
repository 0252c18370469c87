//go:build amd64 && !purego

#include "textflag.h"

// func divVVAVX2(dst, a, b *float32, n int)
//
// dst[i] = a[i] / b[i] over n elements (a multiple of 8), 16 a step while
// there are.
TEXT ·divVVAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX

divvv16:
	CMPQ CX, $16
	JL   divvv8
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VDIVPS 0(DX), Y0, Y0  // Y0 / b
	VDIVPS 32(DX), Y1, Y1
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  divvv16

divvv8:
	CMPQ CX, $8
	JL   divvvDone
	VMOVUPS 0(SI), Y0
	VDIVPS 0(DX), Y0, Y0
	VMOVUPS Y0, 0(DI)

divvvDone:
	VZEROUPPER
	RET

// func divVSAVX2(dst, a *float32, n int, b float32)
//
// dst[i] = a[i] / b over n elements (a multiple of 8).
TEXT ·divVSAVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS b+24(FP), Y15

divvs16:
	CMPQ CX, $16
	JL   divvs8
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VDIVPS Y15, Y0, Y0
	VDIVPS Y15, Y1, Y1
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  divvs16

divvs8:
	CMPQ CX, $8
	JL   divvsDone
	VMOVUPS 0(SI), Y0
	VDIVPS Y15, Y0, Y0
	VMOVUPS Y0, 0(DI)

divvsDone:
	VZEROUPPER
	RET
