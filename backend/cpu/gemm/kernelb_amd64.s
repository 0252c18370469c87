//go:build amd64 && !purego

#include "textflag.h"
#include "tile_amd64.h"

// One k step of the 6×16 tile with B read in place: the row's 16 B values
// at BX (two vectors) times six A values of the packed strip at AX+aoff,
// in the FMA sequence of sgemmKernel6x16's STEP, so both store the same
// bits; then BX moves one row on (R13 bytes) after asking for the lines
// R14 bytes from the row's.
#define STEPB(aoff) \
	VMOVUPS      (BX), Y12;          \
	VMOVUPS      32(BX), Y13;        \
	PREFETCHT0   (BX)(R14*1);        \
	PREFETCHT0   60(BX)(R14*1);      \
	VBROADCASTSS (aoff)(AX), Y14;    \
	VFMADD231PS  Y12, Y14, Y0;       \
	VFMADD231PS  Y13, Y14, Y1;       \
	VBROADCASTSS (aoff+4)(AX), Y15;  \
	VFMADD231PS  Y12, Y15, Y2;       \
	VFMADD231PS  Y13, Y15, Y3;       \
	VBROADCASTSS (aoff+8)(AX), Y14;  \
	VFMADD231PS  Y12, Y14, Y4;       \
	VFMADD231PS  Y13, Y14, Y5;       \
	VBROADCASTSS (aoff+12)(AX), Y15; \
	VFMADD231PS  Y12, Y15, Y6;       \
	VFMADD231PS  Y13, Y15, Y7;       \
	VBROADCASTSS (aoff+16)(AX), Y14; \
	VFMADD231PS  Y12, Y14, Y8;       \
	VFMADD231PS  Y13, Y14, Y9;       \
	VBROADCASTSS (aoff+20)(AX), Y15; \
	VFMADD231PS  Y12, Y15, Y10;      \
	VFMADD231PS  Y13, Y15, Y11;      \
	ADDQ         R13, BX

// func sgemmKernel6x16B(kc int, ap, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, pf int)
//
// sgemmKernel6x16 with B read in place instead of from a packed strip:
// row q of the kc×16 block is the 16 floats at b[q*ldb]. Each step also
// prefetches the lines pf elements on from its row (0: the row being
// read). The AVX2 counterpart of sgemmKernel6x32PairB.
TEXT ·sgemmKernel6x16B(SB), NOSPLIT, $0-64
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

	PREFETCHC

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

	MOVQ CX, DX
	SHRQ $2, DX
	JZ   tailb

loopb4:
	STEPB(0)
	STEPB(24)
	STEPB(48)
	STEPB(72)
	ADDQ $96, AX
	DECQ DX
	JNZ  loopb4

tailb:
	ANDQ $3, CX
	JZ   storeb

loopb1:
	STEPB(0)
	ADDQ $24, AX
	DECQ CX
	JNZ  loopb1

storeb:
	SCALE12(alpha+48(FP))

	// beta == 0 (either sign) overwrites C without reading it.
	MOVL beta+52(FP), R9
	ANDL $0x7fffffff, R9
	JZ   overwriteb

	VBROADCASTSS beta+52(FP), Y15
	UPDATE6
	VZEROUPPER
	RET

overwriteb:
	STORE6
	VZEROUPPER
	RET
