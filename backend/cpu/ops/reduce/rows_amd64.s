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

// func affineRowAVX2(x, y, scale, bias *float32, n int, c *[3]float32)
//
// y = ((x − c[0]) − c[1])·c[2]·scale + bias, bias skipped when nil.
TEXT ·affineRowAVX2(SB), NOSPLIT, $0-48
	MOVQ         x+0(FP), SI
	MOVQ         y+8(FP), DI
	MOVQ         scale+16(FP), R8
	MOVQ         bias+24(FP), R9
	MOVQ         n+32(FP), CX
	MOVQ         c+40(FP), AX
	VBROADCASTSS 0(AX), Y13
	VBROADCASTSS 4(AX), Y14
	VBROADCASTSS 8(AX), Y15
	TESTQ        R9, R9
	JZ           affineNoBias

affineLoop:
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

// The AVX-512F forms of maxRowAVX2 and scaleRowAVX2 (sixteen lanes per
// zmm register): n ≥ 16 for maxRow512 and n ≥ 1 for scaleRow512, the
// last elements through masked loads and stores (K1), so that a row needs
// no Go tail. The maximum is exact in any order; each product is the same
// float64 multiply rounded once to float32 as in the AVX2 loop: the same
// bits.

// func maxRow512(x *float32, n int) float32
TEXT ·maxRow512(SB), NOSPLIT, $0-20
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Z0
	VMOVAPS Z0, Z1
	VMOVAPS Z0, Z2
	VMOVAPS Z0, Z3
	ADDQ    $64, SI
	SUBQ    $16, CX

max64z:
	CMPQ   CX, $64
	JLT    max16z
	VMAXPS (SI), Z0, Z0
	VMAXPS 64(SI), Z1, Z1
	VMAXPS 128(SI), Z2, Z2
	VMAXPS 192(SI), Z3, Z3
	ADDQ   $256, SI
	SUBQ   $64, CX
	JMP    max64z

max16z:
	CMPQ   CX, $16
	JLT    maxTailz
	VMAXPS (SI), Z1, Z1
	ADDQ   $64, SI
	SUBQ   $16, CX
	JMP    max16z

maxTailz:
	// The last 1-15 elements merged into Z2's lanes (the others keep
	// theirs; masked-off lanes of the load do not fault).
	TESTQ  CX, CX
	JLE    maxFoldz
	MOVL   $1, AX
	SHLL   CX, AX
	DECL   AX
	KMOVW  AX, K1
	VMAXPS (SI), Z2, K1, Z2

maxFoldz:
	VMAXPS        Z1, Z0, Z0
	VMAXPS        Z3, Z2, Z2
	VMAXPS        Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0x4E, X0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0xB1, X0, X1
	VMAXPS        X1, X0, X0
	VMOVSS        X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleRow512(x *float32, n int, s float64)
TEXT ·scaleRow512(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSD s+16(FP), Z2

scale32z:
	CMPQ       CX, $32
	JLT        scale8z
	VCVTPS2PD  (SI), Z0
	VCVTPS2PD  32(SI), Z1
	VCVTPS2PD  64(SI), Z3
	VCVTPS2PD  96(SI), Z4
	VMULPD     Z2, Z0, Z0
	VMULPD     Z2, Z1, Z1
	VMULPD     Z2, Z3, Z3
	VMULPD     Z2, Z4, Z4
	VCVTPD2PS  Z0, Y0
	VCVTPD2PS  Z1, Y1
	VCVTPD2PS  Z3, Y3
	VCVTPD2PS  Z4, Y4
	VMOVUPS    Y0, (SI)
	VMOVUPS    Y1, 32(SI)
	VMOVUPS    Y3, 64(SI)
	VMOVUPS    Y4, 96(SI)
	ADDQ       $128, SI
	SUBQ       $32, CX
	JMP        scale32z

scale8z:
	// Eight lanes at a time, the last 1-7 through the mask K1.
	TESTQ      CX, CX
	JLE        scaleDonez
	MOVL       $0xff, AX
	CMPQ       CX, $8
	JGE        scaleStepz
	MOVL       $1, AX
	SHLL       CX, AX
	DECL       AX

scaleStepz:
	KMOVW      AX, K1
	VCVTPS2PD.Z (SI), K1, Z0
	VMULPD     Z2, Z0, Z0
	VCVTPD2PS  Z0, Y0
	VMOVUPS    Y0, K1, (SI)
	ADDQ       $32, SI
	SUBQ       $8, CX
	JMP        scale8z

scaleDonez:
	VZEROUPPER
	RET
