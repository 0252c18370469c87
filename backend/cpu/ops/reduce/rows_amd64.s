//go:build amd64 && !purego

#include "textflag.h"

// Row kernels of Softmax and LayerNormalization (rows.go describes them).
// n is a positive multiple of 8 in every function.

// func maxRowAVX2(x *float32, n int) float32
TEXT ·maxRowAVX2(SB), NOSPLIT, $0-20
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Y0
	VMOVAPS Y0, Y1
	ADDQ    $32, SI
	SUBQ    $8, CX

max16:
	CMPQ   CX, $16
	JLT    max8
	VMAXPS (SI), Y0, Y0
	VMAXPS 32(SI), Y1, Y1
	ADDQ   $64, SI
	SUBQ   $16, CX
	JMP    max16

max8:
	CMPQ   CX, $8
	JLT    maxDone
	VMAXPS (SI), Y0, Y0

maxDone:
	VMAXPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4E, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xB1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleRowAVX2(x *float32, n int, s float64)
TEXT ·scaleRowAVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSD s+16(FP), Y2

scaleLoop:
	VCVTPS2PD  (SI), Y0
	VCVTPS2PD  16(SI), Y1
	VMULPD     Y2, Y0, Y0
	VMULPD     Y2, Y1, Y1
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS    X0, (SI)
	VMOVUPS    X1, 16(SI)
	ADDQ       $32, SI
	SUBQ       $8, CX
	JNZ        scaleLoop
	VZEROUPPER
	RET

// func statsRowAVX2(x *float32, n int, x0 float64) (s, q float64)
TEXT ·statsRowAVX2(SB), NOSPLIT, $0-40
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSD x0+16(FP), Y15
	VXORPD       Y0, Y0, Y0
	VXORPD       Y1, Y1, Y1
	VXORPD       Y2, Y2, Y2
	VXORPD       Y3, Y3, Y3

statsLoop:
	VCVTPS2PD   (SI), Y4
	VCVTPS2PD   16(SI), Y5
	VSUBPD      Y15, Y4, Y4
	VSUBPD      Y15, Y5, Y5
	VADDPD      Y4, Y0, Y0
	VADDPD      Y5, Y1, Y1
	VFMADD231PD Y4, Y4, Y2
	VFMADD231PD Y5, Y5, Y3
	ADDQ        $32, SI
	SUBQ        $8, CX
	JNZ         statsLoop

	VADDPD       Y1, Y0, Y0
	VADDPD       Y3, Y2, Y2
	VEXTRACTF128 $1, Y0, X1
	VADDPD       X1, X0, X0
	VUNPCKHPD    X0, X0, X1
	VADDSD       X1, X0, X0
	VMOVSD       X0, s+24(FP)
	VEXTRACTF128 $1, Y2, X3
	VADDPD       X3, X2, X2
	VUNPCKHPD    X2, X2, X3
	VADDSD       X3, X2, X2
	VMOVSD       X2, q+32(FP)
	VZEROUPPER
	RET

// func affineRowAVX2(x, y, scale, bias *float32, n int, c *[3]float32, pf int)
//
// y = ((x − c[0]) − c[1])·c[2]·scale + bias, bias skipped when nil. Each
// 32 bytes also ask (PREFETCHT0) for the line pf bytes on of y and 2·pf
// bytes on of x: with pf a row's length in bytes, the next row's
// destination and the row whose statistics come next (layerNormRows32
// takes row j+1's before it writes row j), so that neither waits on
// memory (0: the lines in hand).
TEXT ·affineRowAVX2(SB), NOSPLIT, $0-56
	MOVQ         x+0(FP), SI
	MOVQ         y+8(FP), DI
	MOVQ         scale+16(FP), R8
	MOVQ         bias+24(FP), R9
	MOVQ         n+32(FP), CX
	MOVQ         c+40(FP), AX
	MOVQ         pf+48(FP), DX
	LEAQ         (DX)(DX*1), BX
	VBROADCASTSS 0(AX), Y13
	VBROADCASTSS 4(AX), Y14
	VBROADCASTSS 8(AX), Y15
	TESTQ        R9, R9
	JZ           affineNoBias

affineLoop:
	PREFETCHT0 (DI)(DX*1)
	PREFETCHT0 (SI)(BX*1)
	VMOVUPS (SI), Y0
	VSUBPS  Y13, Y0, Y0
	VSUBPS  Y14, Y0, Y0
	VMULPS  Y15, Y0, Y0
	VMULPS  (R8), Y0, Y0
	VADDPS  (R9), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	ADDQ    $32, R8
	ADDQ    $32, R9
	SUBQ    $8, CX
	JNZ     affineLoop
	VZEROUPPER
	RET

affineNoBias:
	PREFETCHT0 (DI)(DX*1)
	PREFETCHT0 (SI)(BX*1)
	VMOVUPS (SI), Y0
	VSUBPS  Y13, Y0, Y0
	VSUBPS  Y14, Y0, Y0
	VMULPS  Y15, Y0, Y0
	VMULPS  (R8), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	ADDQ    $32, R8
	SUBQ    $8, CX
	JNZ     affineNoBias
	VZEROUPPER
	RET
