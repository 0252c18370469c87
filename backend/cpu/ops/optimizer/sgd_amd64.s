//go:build !purego

#include "textflag.h"

// func sgdMomentumAVX2(p, gr, b *float32, n int, c *sgdVec, mode int)
//
// One SGD-with-momentum update of n elements (a multiple of 8), eight
// lanes at a time, rounding as sgdRun does (fma32 is VFMADD231PS). mode
// bits: 1 maximize, 2 weight decay, 4 first step (b = d), 8 Nesterov.
//
// sgdVec: momentum 0, 1-dampening 4, -lr 8, wd 12, signmask 16.
TEXT ·sgdMomentumAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ b+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), AX
	MOVQ mode+40(FP), DX
	VBROADCASTSS 0(AX), Y7
	VBROADCASTSS 4(AX), Y8
	VBROADCASTSS 8(AX), Y9
	VBROADCASTSS 12(AX), Y10
	VBROADCASTSS 16(AX), Y11
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS (SI), Y0 // d = g
	VMOVUPS (DI), Y1 // p
	TESTQ   $1, DX
	JZ      nomax
	VXORPS  Y11, Y0, Y0 // d = -d

nomax:
	TESTQ $2, DX
	JZ    nowd
	VFMADD231PS Y10, Y1, Y0 // d = fma(wd, p, d)

nowd:
	TESTQ $4, DX
	JZ    notfirst
	VMOVUPS Y0, Y2 // b = d
	JMP     stored

notfirst:
	VMOVUPS     (R8), Y2
	VMULPS      Y7, Y2, Y2 // b*m
	VFMADD231PS Y8, Y0, Y2 // b = fma(1-damp, d, b*m)

stored:
	VMOVUPS Y2, (R8)
	TESTQ   $8, DX
	JZ      plain
	VFMADD231PS Y7, Y2, Y0 // d = fma(m, b, d)
	JMP         update

plain:
	VMOVUPS Y2, Y0 // d = b

update:
	VFMADD231PS Y9, Y0, Y1 // p = fma(-lr, d, p)
	VMOVUPS     Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R8
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET
