//go:build !purego

#include "textflag.h"

// func adamAVX2(p, gr, m, v *float32, n int, c *adamVec, mode int)
//
// One Adam/AdamW update of n elements (n a multiple of 8), eight lanes at a
// time, rounding as adamRun does: every product, quotient, sum and square
// root is one IEEE single-precision operation (VSQRTPS and VDIVPS are
// correctly rounded, as float32(math.Sqrt(float64(x))) and float32
// division are), and fma32 is VFMADD231PS. mode bits: 1 maximize (negate g),
// 2 decoupled (p *= decay), 4 L2 (g = fma(wd, p, g)).
//
// adamVec: b1 0, b2 4, omb1 8, omb2 12, eps 16, negStep 20, bc2 24,
// decay 28, wd 32, signmask 36.
TEXT ·adamAVX2(SB), NOSPLIT, $0-56
	MOVQ p+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	MOVQ mode+48(FP), DX
	VBROADCASTSS 0(AX), Y7
	VBROADCASTSS 4(AX), Y8
	VBROADCASTSS 8(AX), Y9
	VBROADCASTSS 12(AX), Y10
	VBROADCASTSS 16(AX), Y11
	VBROADCASTSS 20(AX), Y12
	VBROADCASTSS 24(AX), Y13
	VBROADCASTSS 28(AX), Y14
	VBROADCASTSS 32(AX), Y15
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS (SI), Y0 // g
	VMOVUPS (DI), Y1 // p
	TESTQ   $1, DX
	JZ      nomax
	VBROADCASTSS 36(AX), Y4
	VXORPS  Y4, Y0, Y0 // g = -g

nomax:
	TESTQ $2, DX
	JZ    nodecoupled
	VMULPS Y14, Y1, Y1 // p *= decay
	JMP   moments

nodecoupled:
	TESTQ $4, DX
	JZ    moments
	VFMADD231PS Y15, Y1, Y0 // g = fma(wd, p, g)

moments:
	VMOVUPS     (R8), Y2
	VMULPS      Y7, Y2, Y2 // m*b1
	VFMADD231PS Y9, Y0, Y2 // m = fma(omb1, g, m*b1)
	VMOVUPS     Y2, (R8)
	VMOVUPS     (R9), Y3
	VMULPS      Y8, Y3, Y3 // v*b2
	VMULPS      Y10, Y0, Y4 // omb2*g
	VFMADD231PS Y4, Y0, Y3 // v = fma(omb2*g, g, v*b2)
	VMOVUPS     Y3, (R9)
	VSQRTPS     Y3, Y5
	VDIVPS      Y13, Y5, Y5 // sqrt(v)/bc2
	VADDPS      Y11, Y5, Y5 // + eps
	VMULPS      Y12, Y2, Y6 // negStep*m
	VDIVPS      Y5, Y6, Y6 // / denom
	VADDPS      Y6, Y1, Y1 // p += ...
	VMOVUPS     Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $32, R9
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET
