//go:build amd64 && !purego

#include "textflag.h"
#include "tile_amd64.h"

// One k step of the 6×32 tile: one B vector from each of the two strips
// (16 columns each, at BX+boff and R10+boff) times six broadcast A values
// into the twelve accumulators Z0–Z11 (row i in Z(2i) for the first strip,
// Z(2i+1) for the second). Per element the FMA sequence of the 6×16 AVX2
// kernel's STEP, so both store the same bits.
#define ZSTEP(aoff, boff) \
	VMOVUPS      (boff)(BX), Z12;     \
	VMOVUPS      (boff)(R10), Z13;    \
	VBROADCASTSS (aoff)(AX), Z14;     \
	VFMADD231PS  Z12, Z14, Z0;        \
	VFMADD231PS  Z13, Z14, Z1;        \
	VBROADCASTSS (aoff+4)(AX), Z15;   \
	VFMADD231PS  Z12, Z15, Z2;        \
	VFMADD231PS  Z13, Z15, Z3;        \
	VBROADCASTSS (aoff+8)(AX), Z14;   \
	VFMADD231PS  Z12, Z14, Z4;        \
	VFMADD231PS  Z13, Z14, Z5;        \
	VBROADCASTSS (aoff+12)(AX), Z15;  \
	VFMADD231PS  Z12, Z15, Z6;        \
	VFMADD231PS  Z13, Z15, Z7;        \
	VBROADCASTSS (aoff+16)(AX), Z14;  \
	VFMADD231PS  Z12, Z14, Z8;        \
	VFMADD231PS  Z13, Z14, Z9;        \
	VBROADCASTSS (aoff+20)(AX), Z15;  \
	VFMADD231PS  Z12, Z15, Z10;       \
	VFMADD231PS  Z13, Z15, Z11

// func sgemmKernel6x32Pair(kc int, ap, bp, bp2, c *float32, ldc int, alpha, beta float32)
//
// Two adjacent 6×16 tiles of C (32 columns) from one A strip packed 6 wide
// and two B strips packed 16 wide (bp for the first tile's columns, bp2
// for the second's), with AVX-512: each zmm accumulator holds a whole
// 16-column row of one tile.
TEXT ·sgemmKernel6x32Pair(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ ap+8(FP), AX
	MOVQ bp+16(FP), BX
	MOVQ bp2+24(FP), R10
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), SI
	SHLQ $2, SI              // row stride in bytes
	LEAQ (DI)(SI*2), R8
	ADDQ SI, R8              // R8 = row 3

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
	JZ   ztail

zloop8:
	PREFETCHT0 384(AX)
	ZSTEP(0, 0)
	ZSTEP(24, 64)
	ZSTEP(48, 128)
	ZSTEP(72, 192)
	PREFETCHT0 512(BX)
	PREFETCHT0 512(R10)
	ZSTEP(96, 256)
	ZSTEP(120, 320)
	ZSTEP(144, 384)
	ZSTEP(168, 448)
	ADDQ $192, AX
	ADDQ $512, BX
	ADDQ $512, R10
	DECQ DX
	JNZ  zloop8

ztail:
	ANDQ $7, CX
	JZ   zstore

zloop1:
	ZSTEP(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	ADDQ $64, R10
	DECQ CX
	JNZ  zloop1

zstore:
	ZSCALE12(alpha+48(FP))

	// beta == 0 (either sign) overwrites C without reading it.
	MOVL beta+52(FP), R9
	ANDL $0x7fffffff, R9
	JZ   zoverwrite

	VBROADCASTSS beta+52(FP), Z15
	ZUPDATE6
	VZEROUPPER
	RET

zoverwrite:
	ZSTORE6
	VZEROUPPER
	RET

#define ZSTREAMROW(lo, hi, addr, addr2) \
	VMOVNTPS lo, addr;  \
	VMOVNTPS hi, addr2

// func sgemmKernel6x32PairNT(kc int, ap, bp, c *float32, ldc int, alpha float32)
//
// sgemmKernel6x32Pair with beta = 0, storing C with non-temporal stores
// (VMOVNTPS: no read for ownership, the lines go to memory without
// displacing the cache) and without prefetching C. Every row of the tile
// must start on a 64-byte boundary. The products are the pair kernel's,
// bit for bit; the caller issues SFENCE before C is read elsewhere.
TEXT ·sgemmKernel6x32PairNT(SB), NOSPLIT, $0-44
	MOVQ kc+0(FP), CX
	MOVQ ap+8(FP), AX
	MOVQ bp+16(FP), BX
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), SI
	MOVQ CX, R10
	SHLQ $6, R10
	ADDQ BX, R10             // R10 = second B strip
	SHLQ $2, SI              // row stride in bytes
	LEAQ (DI)(SI*2), R8
	ADDQ SI, R8              // R8 = row 3

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
	JZ   nttail

ntloop8:
	PREFETCHT0 384(AX)
	ZSTEP(0, 0)
	ZSTEP(24, 64)
	ZSTEP(48, 128)
	ZSTEP(72, 192)
	PREFETCHT0 512(BX)
	PREFETCHT0 512(R10)
	ZSTEP(96, 256)
	ZSTEP(120, 320)
	ZSTEP(144, 384)
	ZSTEP(168, 448)
	ADDQ $192, AX
	ADDQ $512, BX
	ADDQ $512, R10
	DECQ DX
	JNZ  ntloop8

nttail:
	ANDQ $7, CX
	JZ   ntstore

ntloop1:
	ZSTEP(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	ADDQ $64, R10
	DECQ CX
	JNZ  ntloop1

ntstore:
	ZSCALE12(alpha+40(FP))
	ZSTREAMROW(Z0, Z1, (DI), 64(DI))
	ZSTREAMROW(Z2, Z3, (DI)(SI*1), 64(DI)(SI*1))
	ZSTREAMROW(Z4, Z5, (DI)(SI*2), 64(DI)(SI*2))
	ZSTREAMROW(Z6, Z7, (R8), 64(R8))
	ZSTREAMROW(Z8, Z9, (R8)(SI*1), 64(R8)(SI*1))
	ZSTREAMROW(Z10, Z11, (R8)(SI*2), 64(R8)(SI*2))
	VZEROUPPER
	RET
