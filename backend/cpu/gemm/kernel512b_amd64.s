//go:build amd64 && !purego

#include "textflag.h"
#include "tile_amd64.h"

// One k step of the 6×32 tile with B read in place: the step's 32 B values
// from the row at BX (two vectors), times six A values of the packed strip
// at AX+aoff, into Z0–Z11 in the FMA sequence of sgemmKernel6x32Pair's
// ZSTEP, so both store the same bits; then BX moves one row on (R13 bytes)
// after asking for the two lines R14 bytes from the row's.
#define ZSTEPB(aoff) \
	VMOVUPS      (BX), Z12;          \
	VMOVUPS      64(BX), Z13;        \
	PREFETCHT0   (BX)(R14*1);        \
	PREFETCHT0   64(BX)(R14*1);      \
	VBROADCASTSS (aoff)(AX), Z14;    \
	VFMADD231PS  Z12, Z14, Z0;       \
	VFMADD231PS  Z13, Z14, Z1;       \
	VBROADCASTSS (aoff+4)(AX), Z15;  \
	VFMADD231PS  Z12, Z15, Z2;       \
	VFMADD231PS  Z13, Z15, Z3;       \
	VBROADCASTSS (aoff+8)(AX), Z14;  \
	VFMADD231PS  Z12, Z14, Z4;       \
	VFMADD231PS  Z13, Z14, Z5;       \
	VBROADCASTSS (aoff+12)(AX), Z15; \
	VFMADD231PS  Z12, Z15, Z6;       \
	VFMADD231PS  Z13, Z15, Z7;       \
	VBROADCASTSS (aoff+16)(AX), Z14; \
	VFMADD231PS  Z12, Z14, Z8;       \
	VFMADD231PS  Z13, Z14, Z9;       \
	VBROADCASTSS (aoff+20)(AX), Z15; \
	VFMADD231PS  Z12, Z15, Z10;      \
	VFMADD231PS  Z13, Z15, Z11;      \
	ADDQ         R13, BX

// func sgemmKernel6x32PairB(kc int, ap, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, pf int)
//
// sgemmKernel6x32Pair with B read in place instead of from two packed
// strips: row q of the kc×32 block is the 32 floats at b[q*ldb]. A
// product whose B block serves few A strips (a 1×1 convolution with 64
// output channels: every B value feeds 64 rows) then does not copy B
// first. Each step also prefetches the two lines pf elements on from its
// row's (the caller's choice: the next block's columns of the same row,
// or the rows ahead; 0 asks for the row being read).
TEXT ·sgemmKernel6x32PairB(SB), NOSPLIT, $0-64
	MOVQ kc+0(FP), CX
	MOVQ ap+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ ldb+24(FP), R13
	SHLQ $2, R13             // row stride of B in bytes
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), SI
	SHLQ $2, SI              // row stride of C in bytes
	LEAQ (DI)(SI*2), R8
	ADDQ SI, R8              // R8 = row 3 of C
	MOVQ pf+56(FP), R14
	SHLQ $2, R14             // the prefetch offset in bytes

	ZPREFETCHC

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11

	MOVQ CX, DX
	SHRQ $2, DX
	JZ   btail

bloop4:
	ZSTEPB(0)
	ZSTEPB(24)
	ZSTEPB(48)
	ZSTEPB(72)
	ADDQ $96, AX
	DECQ DX
	JNZ  bloop4

btail:
	ANDQ $3, CX
	JZ   bstore

bloop1:
	ZSTEPB(0)
	ADDQ $24, AX
	DECQ CX
	JNZ  bloop1

bstore:
	ZSCALE12(alpha+48(FP))

	// beta == 0 (either sign) overwrites C without reading it.
	MOVL beta+52(FP), R9
	ANDL $0x7fffffff, R9
	JZ   boverwrite

	VBROADCASTSS beta+52(FP), Z15
	ZUPDATE6
	VZEROUPPER
	RET

boverwrite:
	ZSTORE6
	VZEROUPPER
	RET
