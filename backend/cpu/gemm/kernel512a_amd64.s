//go:build amd64 && !purego

#include "textflag.h"
#include "tile_amd64.h"

// One k step of the 6×32 tile with A read in place: the six A values
// broadcast from rows AX, AX+R11, AX+2·R11, R12, R12+R11, R12+2·R11
// (R12 = AX + 3·R11), then AX and R12 advance by R13 (one step of the
// shared dimension). Per element the FMA sequence of sgemmKernel6x32Pair's
// ZSTEP, so both store the same bits.
#define ZSTEPA(boff) \
	VMOVUPS      (boff)(BX), Z12;      \
	VMOVUPS      (boff)(R10), Z13;     \
	VBROADCASTSS (AX), Z14;            \
	VFMADD231PS  Z12, Z14, Z0;         \
	VFMADD231PS  Z13, Z14, Z1;         \
	VBROADCASTSS (AX)(R11*1), Z15;     \
	VFMADD231PS  Z12, Z15, Z2;         \
	VFMADD231PS  Z13, Z15, Z3;         \
	VBROADCASTSS (AX)(R11*2), Z14;     \
	VFMADD231PS  Z12, Z14, Z4;         \
	VFMADD231PS  Z13, Z14, Z5;         \
	VBROADCASTSS (R12), Z15;           \
	VFMADD231PS  Z12, Z15, Z6;         \
	VFMADD231PS  Z13, Z15, Z7;         \
	VBROADCASTSS (R12)(R11*1), Z14;    \
	VFMADD231PS  Z12, Z14, Z8;         \
	VFMADD231PS  Z13, Z14, Z9;         \
	VBROADCASTSS (R12)(R11*2), Z15;    \
	VFMADD231PS  Z12, Z15, Z10;        \
	VFMADD231PS  Z13, Z15, Z11;        \
	ADDQ         R13, AX;              \
	ADDQ         R13, R12

// func sgemmKernel6x32PairA(kc int, a *float32, rs, ks int, bp, c *float32, ldc int, alpha, beta float32)
//
// sgemmKernel6x32Pair with A read in place instead of from a packed
// strip: element (i, q) of the 6×kc strip at a[i*rs + q*ks]. A row-major
// A (rs = lda, ks = 1) and a transposed one (rs = 1, ks = lda) both take
// it, so that a product whose A block is used by one or two strip pairs
// does not copy it first. Two consecutive B strips packed 16 wide (the
// second 16*kc floats after the first), C a 6×32 tile ldc elements apart.
TEXT ·sgemmKernel6x32PairA(SB), NOSPLIT, $0-64
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ rs+16(FP), R11
	SHLQ $2, R11             // row stride of A in bytes
	MOVQ ks+24(FP), R13
	SHLQ $2, R13             // step of the shared dimension in bytes
	LEAQ (AX)(R11*2), R12
	ADDQ R11, R12            // R12 = row 3 of A
	MOVQ bp+32(FP), BX
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), SI
	MOVQ CX, R10
	SHLQ $6, R10
	ADDQ BX, R10             // R10 = second B strip
	SHLQ $2, SI              // row stride of C in bytes
	LEAQ (DI)(SI*2), R8
	ADDQ SI, R8              // R8 = row 3 of C

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
	SHRQ $3, DX
	JZ   atail

aloop8:
	ZSTEPA(0)
	ZSTEPA(64)
	ZSTEPA(128)
	ZSTEPA(192)
	PREFETCHT0 512(BX)
	PREFETCHT0 512(R10)
	ZSTEPA(256)
	ZSTEPA(320)
	ZSTEPA(384)
	ZSTEPA(448)
	ADDQ $512, BX
	ADDQ $512, R10
	DECQ DX
	JNZ  aloop8

atail:
	ANDQ $7, CX
	JZ   astore

aloop1:
	ZSTEPA(0)
	ADDQ $64, BX
	ADDQ $64, R10
	DECQ CX
	JNZ  aloop1

astore:
	ZSCALE12(alpha+56(FP))

	// beta == 0 (either sign) overwrites C without reading it.
	MOVL beta+60(FP), R9
	ANDL $0x7fffffff, R9
	JZ   aoverwrite

	VBROADCASTSS beta+60(FP), Z15
	ZUPDATE6
	VZEROUPPER
	RET

aoverwrite:
	ZSTORE6
	VZEROUPPER
	RET
