//go:build amd64 && !purego

#include "textflag.h"
#include "tile_amd64.h"

// One k step of the 6×16 tile: two B vectors (16 columns) times six
// broadcast A values (6 rows) into the twelve accumulators Y0–Y11 (row i in
// Y(2i), Y(2i+1)). A is read at AX+aoff, B at BX+boff.
#define STEP(aoff, boff) \
	VMOVUPS      (boff)(BX), Y12;     \
	VMOVUPS      (boff+32)(BX), Y13;  \
	VBROADCASTSS (aoff)(AX), Y14;     \
	VFMADD231PS  Y12, Y14, Y0;        \
	VFMADD231PS  Y13, Y14, Y1;        \
	VBROADCASTSS (aoff+4)(AX), Y15;   \
	VFMADD231PS  Y12, Y15, Y2;        \
	VFMADD231PS  Y13, Y15, Y3;        \
	VBROADCASTSS (aoff+8)(AX), Y14;   \
	VFMADD231PS  Y12, Y14, Y4;        \
	VFMADD231PS  Y13, Y14, Y5;        \
	VBROADCASTSS (aoff+12)(AX), Y15;  \
	VFMADD231PS  Y12, Y15, Y6;        \
	VFMADD231PS  Y13, Y15, Y7;        \
	VBROADCASTSS (aoff+16)(AX), Y14;  \
	VFMADD231PS  Y12, Y14, Y8;        \
	VFMADD231PS  Y13, Y14, Y9;        \
	VBROADCASTSS (aoff+20)(AX), Y15;  \
	VFMADD231PS  Y12, Y15, Y10;       \
	VFMADD231PS  Y13, Y15, Y11

// func sgemmKernel6x16(kc int, ap, bp, c *float32, ldc int, alpha, beta float32)
TEXT ·sgemmKernel6x16(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ ap+8(FP), AX
	MOVQ bp+16(FP), BX
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), SI
	SHLQ $2, SI              // row stride in bytes
	LEAQ (DI)(SI*2), R8
	ADDQ SI, R8              // R8 = row 3

	// Bring the C tile towards L1 while the products run.
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
	SHRQ $3, DX
	JZ   tail

loop8:
	PREFETCHT0 384(AX)
	STEP(0, 0)
	STEP(24, 64)
	STEP(48, 128)
	STEP(72, 192)
	PREFETCHT0 512(BX)
	STEP(96, 256)
	STEP(120, 320)
	STEP(144, 384)
	STEP(168, 448)
	ADDQ $192, AX
	ADDQ $512, BX
	DECQ DX
	JNZ  loop8

tail:
	ANDQ $7, CX
	JZ   store

loop1:
	STEP(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	DECQ CX
	JNZ  loop1

store:
	SCALE12(alpha+40(FP))

	// beta == 0 (either sign) overwrites C without reading it.
	MOVL beta+44(FP), R9
	ANDL $0x7fffffff, R9
	JZ   overwrite

	VBROADCASTSS beta+44(FP), Y15
	UPDATE6
	VZEROUPPER
	RET

overwrite:
	STORE6
	VZEROUPPER
	RET

// One k step of the left half of the 6×16 tile: the first B vector (8
// columns of a strip packed 16 wide) times six broadcast A values into
// Y0–Y5 (row i in Y(i)). Per element the same FMA sequence as STEP, so
// the half tile is bit for bit the left half of the full one.
#define HSTEP(aoff, boff) \
	VMOVUPS      (boff)(BX), Y12;     \
	VBROADCASTSS (aoff)(AX), Y14;     \
	VFMADD231PS  Y12, Y14, Y0;        \
	VBROADCASTSS (aoff+4)(AX), Y15;   \
	VFMADD231PS  Y12, Y15, Y1;        \
	VBROADCASTSS (aoff+8)(AX), Y14;   \
	VFMADD231PS  Y12, Y14, Y2;        \
	VBROADCASTSS (aoff+12)(AX), Y15;  \
	VFMADD231PS  Y12, Y15, Y3;        \
	VBROADCASTSS (aoff+16)(AX), Y14;  \
	VFMADD231PS  Y12, Y14, Y4;        \
	VBROADCASTSS (aoff+20)(AX), Y15;  \
	VFMADD231PS  Y12, Y15, Y5

// func sgemmKernel6x8of16(kc int, ap, bp, c *float32, ldc int, alpha, beta float32)
//
// The 6×8 left half of sgemmKernel6x16's tile, for the edge strips of C
// that have at most 8 columns: half the work of the full tile.
TEXT ·sgemmKernel6x8of16(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ ap+8(FP), AX
	MOVQ bp+16(FP), BX
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), SI
	SHLQ $2, SI              // row stride in bytes
	LEAQ (DI)(SI*2), R8
	ADDQ SI, R8              // R8 = row 3

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5

	MOVQ CX, DX
	SHRQ $2, DX
	JZ   htail

hloop4:
	HSTEP(0, 0)
	HSTEP(24, 64)
	HSTEP(48, 128)
	HSTEP(72, 192)
	ADDQ $96, AX
	ADDQ $256, BX
	DECQ DX
	JNZ  hloop4

htail:
	ANDQ $3, CX
	JZ   hstore

hloop1:
	HSTEP(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	DECQ CX
	JNZ  hloop1

hstore:
	VBROADCASTSS alpha+40(FP), Y14
	VMULPS       Y14, Y0, Y0
	VMULPS       Y14, Y1, Y1
	VMULPS       Y14, Y2, Y2
	VMULPS       Y14, Y3, Y3
	VMULPS       Y14, Y4, Y4
	VMULPS       Y14, Y5, Y5

	MOVL beta+44(FP), R9
	ANDL $0x7fffffff, R9
	JZ   hoverwrite

	VBROADCASTSS beta+44(FP), Y15
	VFMADD231PS  (DI), Y15, Y0
	VFMADD231PS  (DI)(SI*1), Y15, Y1
	VFMADD231PS  (DI)(SI*2), Y15, Y2
	VFMADD231PS  (R8), Y15, Y3
	VFMADD231PS  (R8)(SI*1), Y15, Y4
	VFMADD231PS  (R8)(SI*2), Y15, Y5

hoverwrite:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, (DI)(SI*1)
	VMOVUPS Y2, (DI)(SI*2)
	VMOVUPS Y3, (R8)
	VMOVUPS Y4, (R8)(SI*1)
	VMOVUPS Y5, (R8)(SI*2)
	VZEROUPPER
	RET

// One k step of the 6×16 tile with A read in place: rows 0–2 of A at
// AX, AX+R9, AX+2·R9 and rows 3–5 at R10, R10+R9, R10+2·R9 (R9 the row
// stride in bytes), element aoff/4 of each row. Same FMAs in the same
// order as STEP.
#define USTEP(aoff, boff) \
	VMOVUPS      (boff)(BX), Y12;          \
	VMOVUPS      (boff+32)(BX), Y13;       \
	VBROADCASTSS (aoff)(AX), Y14;          \
	VFMADD231PS  Y12, Y14, Y0;             \
	VFMADD231PS  Y13, Y14, Y1;             \
	VBROADCASTSS (aoff)(AX)(R9*1), Y15;    \
	VFMADD231PS  Y12, Y15, Y2;             \
	VFMADD231PS  Y13, Y15, Y3;             \
	VBROADCASTSS (aoff)(AX)(R9*2), Y14;    \
	VFMADD231PS  Y12, Y14, Y4;             \
	VFMADD231PS  Y13, Y14, Y5;             \
	VBROADCASTSS (aoff)(R10), Y15;         \
	VFMADD231PS  Y12, Y15, Y6;             \
	VFMADD231PS  Y13, Y15, Y7;             \
	VBROADCASTSS (aoff)(R10)(R9*1), Y14;   \
	VFMADD231PS  Y12, Y14, Y8;             \
	VFMADD231PS  Y13, Y14, Y9;             \
	VBROADCASTSS (aoff)(R10)(R9*2), Y15;   \
	VFMADD231PS  Y12, Y15, Y10;            \
	VFMADD231PS  Y13, Y15, Y11

// The left-half (6×8) version of USTEP, as HSTEP is of STEP.
#define UHSTEP(aoff, boff) \
	VMOVUPS      (boff)(BX), Y12;          \
	VBROADCASTSS (aoff)(AX), Y14;          \
	VFMADD231PS  Y12, Y14, Y0;             \
	VBROADCASTSS (aoff)(AX)(R9*1), Y15;    \
	VFMADD231PS  Y12, Y15, Y1;             \
	VBROADCASTSS (aoff)(AX)(R9*2), Y14;    \
	VFMADD231PS  Y12, Y14, Y2;             \
	VBROADCASTSS (aoff)(R10), Y15;         \
	VFMADD231PS  Y12, Y15, Y3;             \
	VBROADCASTSS (aoff)(R10)(R9*1), Y14;   \
	VFMADD231PS  Y12, Y14, Y4;             \
	VBROADCASTSS (aoff)(R10)(R9*2), Y15;   \
	VFMADD231PS  Y12, Y15, Y5

// func sgemmKernel6x16RowA(kc int, a *float32, lda int, bp, c *float32, ldc int, alpha, beta float32)
//
// sgemmKernel6x16 with A not packed: six rows of a row-major A, lda
// elements apart, kc long each. Bit for bit the packed kernel's result.
TEXT ·sgemmKernel6x16RowA(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ lda+16(FP), R9
	MOVQ bp+24(FP), BX
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), SI
	SHLQ $2, R9              // A row stride in bytes
	LEAQ (AX)(R9*2), R10
	ADDQ R9, R10             // R10 = A row 3
	SHLQ $2, SI              // C row stride in bytes
	LEAQ (DI)(SI*2), R8
	ADDQ SI, R8              // R8 = C row 3

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
	SHRQ $3, DX
	JZ   rtail

rloop8:
	USTEP(0, 0)
	USTEP(4, 64)
	USTEP(8, 128)
	USTEP(12, 192)
	USTEP(16, 256)
	USTEP(20, 320)
	USTEP(24, 384)
	USTEP(28, 448)
	ADDQ $32, AX
	ADDQ $32, R10
	ADDQ $512, BX
	DECQ DX
	JNZ  rloop8

rtail:
	ANDQ $7, CX
	JZ   rstore

rloop1:
	USTEP(0, 0)
	ADDQ $4, AX
	ADDQ $4, R10
	ADDQ $64, BX
	DECQ CX
	JNZ  rloop1

rstore:
	SCALE12(alpha+48(FP))

	MOVL beta+52(FP), R11
	ANDL $0x7fffffff, R11
	JZ   roverwrite

	VBROADCASTSS beta+52(FP), Y15
	UPDATE6
	VZEROUPPER
	RET

roverwrite:
	STORE6
	VZEROUPPER
	RET

// func sgemmKernel6x8of16RowA(kc int, a *float32, lda int, bp, c *float32, ldc int, alpha, beta float32)
//
// sgemmKernel6x8of16 with A not packed, as sgemmKernel6x16RowA.
TEXT ·sgemmKernel6x8of16RowA(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ lda+16(FP), R9
	MOVQ bp+24(FP), BX
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), SI
	SHLQ $2, R9
	LEAQ (AX)(R9*2), R10
	ADDQ R9, R10
	SHLQ $2, SI
	LEAQ (DI)(SI*2), R8
	ADDQ SI, R8

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5

	MOVQ CX, DX
	SHRQ $2, DX
	JZ   rhtail

rhloop4:
	UHSTEP(0, 0)
	UHSTEP(4, 64)
	UHSTEP(8, 128)
	UHSTEP(12, 192)
	ADDQ $16, AX
	ADDQ $16, R10
	ADDQ $256, BX
	DECQ DX
	JNZ  rhloop4

rhtail:
	ANDQ $3, CX
	JZ   rhstore

rhloop1:
	UHSTEP(0, 0)
	ADDQ $4, AX
	ADDQ $4, R10
	ADDQ $64, BX
	DECQ CX
	JNZ  rhloop1

rhstore:
	VBROADCASTSS alpha+48(FP), Y14
	VMULPS       Y14, Y0, Y0
	VMULPS       Y14, Y1, Y1
	VMULPS       Y14, Y2, Y2
	VMULPS       Y14, Y3, Y3
	VMULPS       Y14, Y4, Y4
	VMULPS       Y14, Y5, Y5

	MOVL beta+52(FP), R11
	ANDL $0x7fffffff, R11
	JZ   rhoverwrite

	VBROADCASTSS beta+52(FP), Y15
	VFMADD231PS  (DI), Y15, Y0
	VFMADD231PS  (DI)(SI*1), Y15, Y1
	VFMADD231PS  (DI)(SI*2), Y15, Y2
	VFMADD231PS  (R8), Y15, Y3
	VFMADD231PS  (R8)(SI*1), Y15, Y4
	VFMADD231PS  (R8)(SI*2), Y15, Y5

rhoverwrite:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, (DI)(SI*1)
	VMOVUPS Y2, (DI)(SI*2)
	VMOVUPS Y3, (R8)
	VMOVUPS Y4, (R8)(SI*1)
	VMOVUPS Y5, (R8)(SI*2)
	VZEROUPPER
	RET

#define STREAMROW(lo, hi, addr, addr2) \
	VMOVNTPS lo, addr;  \
	VMOVNTPS hi, addr2

// func sgemmKernel6x16NT(kc int, ap, bp, c *float32, ldc int, alpha float32)
//
// sgemmKernel6x16 with beta = 0, storing C with non-temporal stores
// (VMOVNTPS: no read for ownership) and without prefetching C. Every row
// of the tile must start on a 64-byte boundary (so that each row is one
// whole cache line). Bit for bit sgemmKernel6x16's products; the caller
// issues SFENCE before C is read elsewhere.
TEXT ·sgemmKernel6x16NT(SB), NOSPLIT, $0-44
	MOVQ kc+0(FP), CX
	MOVQ ap+8(FP), AX
	MOVQ bp+16(FP), BX
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), SI
	SHLQ $2, SI              // row stride in bytes
	LEAQ (DI)(SI*2), R8
	ADDQ SI, R8              // R8 = row 3

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
	SHRQ $3, DX
	JZ   nttail

ntloop8:
	PREFETCHT0 384(AX)
	STEP(0, 0)
	STEP(24, 64)
	STEP(48, 128)
	STEP(72, 192)
	PREFETCHT0 512(BX)
	STEP(96, 256)
	STEP(120, 320)
	STEP(144, 384)
	STEP(168, 448)
	ADDQ $192, AX
	ADDQ $512, BX
	DECQ DX
	JNZ  ntloop8

nttail:
	ANDQ $7, CX
	JZ   ntstore

ntloop1:
	STEP(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	DECQ CX
	JNZ  ntloop1

ntstore:
	SCALE12(alpha+40(FP))
	STREAMROW(Y0, Y1, (DI), 32(DI))
	STREAMROW(Y2, Y3, (DI)(SI*1), 32(DI)(SI*1))
	STREAMROW(Y4, Y5, (DI)(SI*2), 32(DI)(SI*2))
	STREAMROW(Y6, Y7, (R8), 32(R8))
	STREAMROW(Y8, Y9, (R8)(SI*1), 32(R8)(SI*1))
	STREAMROW(Y10, Y11, (R8)(SI*2), 32(R8)(SI*2))
	VZEROUPPER
	RET

// func storeFence()
TEXT ·storeFence(SB), NOSPLIT, $0-0
	SFENCE
	RET

// func cpuid(leaf, sub uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET
