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

// func addReluGradAVX2(d, a, b, x *float32, n int)
//
// d[i] = a[i] + b[i] (rounded to float32) where x[i] > 0 (ordered, so NaN
// gives +0), else +0, over n elements (a multiple of 8).
TEXT ·addReluGradAVX2(SB), NOSPLIT, $0-40
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), DX
	MOVQ b+16(FP), R8
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), CX
	VXORPS Y15, Y15, Y15

argrad16:
	CMPQ CX, $16
	JL   argrad8
	VMOVUPS 0(DX), Y0
	VMOVUPS 32(DX), Y1
	VADDPS 0(R8), Y0, Y0
	VADDPS 32(R8), Y1, Y1
	VMOVUPS 0(SI), Y2
	VMOVUPS 32(SI), Y3
	VCMPPS $14, Y15, Y2, Y2 // Y2 = x > 0
	VCMPPS $14, Y15, Y3, Y3
	VANDPS Y2, Y0, Y0
	VANDPS Y3, Y1, Y1
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, DX
	ADDQ $64, R8
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  argrad16

argrad8:
	CMPQ CX, $8
	JL   argradDone
	VMOVUPS 0(DX), Y0
	VADDPS 0(R8), Y0, Y0
	VMOVUPS 0(SI), Y2
	VCMPPS $14, Y15, Y2, Y2
	VANDPS Y2, Y0, Y0
	VMOVUPS Y0, 0(DI)

argradDone:
	VZEROUPPER
	RET

// func reluGradPlanesAVX2(d, gy, x *float32, planes, inner int)
//
// ReluGrad of a dY broadcast over planes: for each of planes (≥ 1) planes
// of inner (≥ 1) elements, d = x > 0 ? gy[p] : +0, element by element as
// reluGradAVX2 does (the comparison's mask keeps gy[p]'s bits), eight lanes
// at a time and the plane's last inner % 8 one at a time.
TEXT ·reluGradPlanesAVX2(SB), NOSPLIT, $0-40
	MOVQ d+0(FP), DI
	MOVQ gy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ planes+24(FP), CX
	MOVQ inner+32(FP), R8
	MOVQ R8, R9
	SHRQ $3, R9              // full vectors a plane
	ANDQ $7, R8              // the rest
	VXORPS Y15, Y15, Y15

rpPlane:
	VBROADCASTSS (DX), Y1
	MOVQ R9, AX
	TESTQ AX, AX
	JZ   rpTail

rpVec:
	VMOVUPS 0(SI), Y0
	VCMPPS  $14, Y15, Y0, Y0 // Y0 = x > 0
	VANDPS  Y1, Y0, Y0
	VMOVUPS Y0, 0(DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    AX
	JNZ     rpVec

rpTail:
	MOVQ R8, AX
	TESTQ AX, AX
	JZ   rpNext

rpOne:
	VMOVSS  0(SI), X0
	VCMPSS  $14, X15, X0, X0
	VANDPS  X1, X0, X0
	VMOVSS  X0, 0(DI)
	ADDQ    $4, SI
	ADDQ    $4, DI
	DECQ    AX
	JNZ     rpOne

rpNext:
	ADDQ $4, DX
	DECQ CX
	JNZ  rpPlane
	VZEROUPPER
	RET
