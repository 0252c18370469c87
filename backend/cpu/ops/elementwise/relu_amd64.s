//go:build amd64 && !purego

#include "textflag.h"

// func reluAVX2(dst, src *float32, n int)
//
// dst[i] = src[i] with its bits cleared where src[i] < 0 (ordered, so -0
// and NaN pass unchanged), over n elements (a multiple of 8).
TEXT ·reluAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VXORPS Y15, Y15, Y15

relu16:
	CMPQ CX, $16
	JL   relu8
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VCMPPS $1, Y15, Y0, Y2 // Y2 = Y0 < 0
	VCMPPS $1, Y15, Y1, Y3
	VANDNPS Y0, Y2, Y0     // Y0 &^ Y2
	VANDNPS Y1, Y3, Y1
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  relu16

relu8:
	CMPQ CX, $8
	JL   reluDone
	VMOVUPS 0(SI), Y0
	VCMPPS $1, Y15, Y0, Y2
	VANDNPS Y0, Y2, Y0
	VMOVUPS Y0, 0(DI)

reluDone:
	VZEROUPPER
	RET

// func reluGradAVX2(d, dy, x *float32, n int)
//
// d[i] = dy[i] where x[i] > 0 (ordered, so NaN gives +0), else +0, over n
// elements (a multiple of 8).
TEXT ·reluGradAVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	VXORPS Y15, Y15, Y15

rgrad16:
	CMPQ CX, $16
	JL   rgrad8
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VCMPPS $14, Y15, Y0, Y0 // Y0 = x > 0
	VCMPPS $14, Y15, Y1, Y1
	VANDPS 0(DX), Y0, Y0
	VANDPS 32(DX), Y1, Y1
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  rgrad16

rgrad8:
	CMPQ CX, $8
	JL   rgradDone
	VMOVUPS 0(SI), Y0
	VCMPPS $14, Y15, Y0, Y0
	VANDPS 0(DX), Y0, Y0
	VMOVUPS Y0, 0(DI)

rgradDone:
	VZEROUPPER
	RET
