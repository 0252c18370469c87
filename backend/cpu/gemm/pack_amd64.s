//go:build amd64 && !purego

#include "textflag.h"

// func packInterleave6(dst, src *float32, ld, kc int)
//
// Interleaves six rows of a row-major matrix (src, ld elements apart, kc
// long) into dst[q*6+i] = row i [q]. Four k steps at a time: one 4-float
// load per row, a 4×4 transpose of rows 0–3 and a 2×4 one of rows 4–5.
TEXT ·packInterleave6(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8             // row stride in bytes
	MOVQ kc+24(FP), CX
	LEAQ (SI)(R8*2), R9
	ADDQ R8, R9             // R9 = row 3
	MOVQ CX, DX
	SHRQ $2, DX
	JZ   tail6

loop6:
	PREFETCHT0 256(SI)
	PREFETCHT0 256(SI)(R8*1)
	PREFETCHT0 256(SI)(R8*2)
	PREFETCHT0 256(R9)
	PREFETCHT0 256(R9)(R8*1)
	PREFETCHT0 256(R9)(R8*2)
	VMOVUPS (SI), X0          // a0 a1 a2 a3
	VMOVUPS (SI)(R8*1), X1    // b
	VMOVUPS (SI)(R8*2), X2    // c
	VMOVUPS (R9), X3          // d
	VMOVUPS (R9)(R8*1), X4    // e
	VMOVUPS (R9)(R8*2), X5    // f
	VUNPCKLPS X1, X0, X6      // a0 b0 a1 b1
	VUNPCKHPS X1, X0, X7      // a2 b2 a3 b3
	VUNPCKLPS X3, X2, X8      // c0 d0 c1 d1
	VUNPCKHPS X3, X2, X9      // c2 d2 c3 d3
	VUNPCKLPS X5, X4, X10     // e0 f0 e1 f1
	VUNPCKHPS X5, X4, X11     // e2 f2 e3 f3
	VSHUFPS   $0x44, X8, X6, X0 // a0 b0 c0 d0
	VSHUFPS   $0xEE, X8, X6, X1 // a1 b1 c1 d1
	VSHUFPS   $0x44, X9, X7, X2 // a2 b2 c2 d2
	VSHUFPS   $0xEE, X9, X7, X3 // a3 b3 c3 d3
	VMOVUPS   X0, (DI)
	VMOVLPS   X10, 16(DI)
	VMOVUPS   X1, 24(DI)
	VMOVHPS   X10, 40(DI)
	VMOVUPS   X2, 48(DI)
	VMOVLPS   X11, 64(DI)
	VMOVUPS   X3, 72(DI)
	VMOVHPS   X11, 88(DI)
	ADDQ      $16, SI
	ADDQ      $16, R9
	ADDQ      $96, DI
	DECQ      DX
	JNZ       loop6

tail6:
	ANDQ $3, CX
	JZ   done6

step6:
	VMOVSS (SI), X0
	VMOVSS X0, (DI)
	VMOVSS (SI)(R8*1), X0
	VMOVSS X0, 4(DI)
	VMOVSS (SI)(R8*2), X0
	VMOVSS X0, 8(DI)
	VMOVSS (R9), X0
	VMOVSS X0, 12(DI)
	VMOVSS (R9)(R8*1), X0
	VMOVSS X0, 16(DI)
	VMOVSS (R9)(R8*2), X0
	VMOVSS X0, 20(DI)
	ADDQ   $4, SI
	ADDQ   $4, R9
	ADDQ   $24, DI
	DECQ   CX
	JNZ    step6

done6:
	RET

// An 8×8 transpose: eight k steps of eight rows (at the eight addresses)
// into the eight columns at DI+off of eight consecutive 16-wide strip
// rows (64 bytes apart).
#define TRANS8X8(a0, a1, a2, a3, a4, a5, a6, a7, off) \
	VMOVUPS    a0, Y0;                 \
	VMOVUPS    a1, Y1;                 \
	VMOVUPS    a2, Y2;                 \
	VMOVUPS    a3, Y3;                 \
	VMOVUPS    a4, Y4;                 \
	VMOVUPS    a5, Y5;                 \
	VMOVUPS    a6, Y6;                 \
	VMOVUPS    a7, Y7;                 \
	VUNPCKLPS  Y1, Y0, Y8;             \
	VUNPCKHPS  Y1, Y0, Y9;             \
	VUNPCKLPS  Y3, Y2, Y10;            \
	VUNPCKHPS  Y3, Y2, Y11;            \
	VUNPCKLPS  Y5, Y4, Y12;            \
	VUNPCKHPS  Y5, Y4, Y13;            \
	VUNPCKLPS  Y7, Y6, Y14;            \
	VUNPCKHPS  Y7, Y6, Y15;            \
	VSHUFPS    $0x44, Y10, Y8, Y0;     \
	VSHUFPS    $0xEE, Y10, Y8, Y1;     \
	VSHUFPS    $0x44, Y11, Y9, Y2;     \
	VSHUFPS    $0xEE, Y11, Y9, Y3;     \
	VSHUFPS    $0x44, Y14, Y12, Y4;    \
	VSHUFPS    $0xEE, Y14, Y12, Y5;    \
	VSHUFPS    $0x44, Y15, Y13, Y6;    \
	VSHUFPS    $0xEE, Y15, Y13, Y7;    \
	VPERM2F128 $0x20, Y4, Y0, Y8;      \
	VPERM2F128 $0x20, Y5, Y1, Y9;      \
	VPERM2F128 $0x20, Y6, Y2, Y10;     \
	VPERM2F128 $0x20, Y7, Y3, Y11;     \
	VPERM2F128 $0x31, Y4, Y0, Y12;     \
	VPERM2F128 $0x31, Y5, Y1, Y13;     \
	VPERM2F128 $0x31, Y6, Y2, Y14;     \
	VPERM2F128 $0x31, Y7, Y3, Y15;     \
	VMOVUPS    Y8, (off)(DI);          \
	VMOVUPS    Y9, (off+64)(DI);       \
	VMOVUPS    Y10, (off+128)(DI);     \
	VMOVUPS    Y11, (off+192)(DI);     \
	VMOVUPS    Y12, (off+256)(DI);     \
	VMOVUPS    Y13, (off+320)(DI);     \
	VMOVUPS    Y14, (off+384)(DI);     \
	VMOVUPS    Y15, (off+448)(DI)

// func packTranspose8(dst, src *float32, ld, kc16 int)
//
// Transposes eight rows of a row-major matrix (src, ld elements apart) into
// eight columns of a 16-wide k-major strip: dst[q*16+j] = row j [q] for
// q < kc16 (a multiple of 16). Each step reads one 64-byte line of every
// row (sixteen k values) and writes them with two 8×8 transposes, so every
// source line is used up at once even when power-of-two strides make the
// rows compete for the same L1 sets.
TEXT ·packTranspose8(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8             // row stride in bytes
	MOVQ kc16+24(FP), CX
	SHRQ $4, CX
	JZ   donet
	LEAQ (R8)(R8*2), AX     // three rows
	LEAQ (SI)(R8*4), R10    // row 4

loopt:
	TRANS8X8((SI), (SI)(R8*1), (SI)(R8*2), (SI)(AX*1), (R10), (R10)(R8*1), (R10)(R8*2), (R10)(AX*1), 0)
	TRANS8X8(32(SI), 32(SI)(R8*1), 32(SI)(R8*2), 32(SI)(AX*1), 32(R10), 32(R10)(R8*1), 32(R10)(R8*2), 32(R10)(AX*1), 512)
	ADDQ $64, SI
	ADDQ $64, R10
	ADDQ $1024, DI
	DECQ CX
	JNZ  loopt
	VZEROUPPER

donet:
	RET

// func packPanel16(dst, src *float32, ld, kc, rows, strips int)
//
// Copies rows [0, rows) of a kc×(16·strips) block of a row-major matrix
// (row stride ld elements; rows a multiple of 4) into strips 16 wide, each
// stored k-major: element (q, 16s+j) goes to dst[s*16*kc + q*16 + j].
// Four rows at a time are copied strip by strip, so each strip receives
// four whole cache lines in a row. (Visiting all strips per row would
// thrash L1: the strips lie 16·kc floats apart, the same L1 set for
// power-of-two kc.)
TEXT ·packPanel16(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8             // source row stride in bytes
	LEAQ (R8)(R8*2), R13    // three rows
	MOVQ kc+24(FP), R9
	SHLQ $6, R9             // strip size in bytes (16 floats per k)
	MOVQ rows+32(FP), CX
	SHRQ $2, CX
	JZ   done16
	MOVQ strips+40(FP), R10

tile16:
	MOVQ SI, R11
	MOVQ DI, R12
	MOVQ R10, DX
	LEAQ (SI)(R8*8), AX     // rows 8–11 ahead, prefetched as we go

strip16:
	PREFETCHT0 (AX)
	PREFETCHT0 (AX)(R8*1)
	PREFETCHT0 (AX)(R8*2)
	PREFETCHT0 (AX)(R13*1)
	ADDQ    $64, AX
	VMOVUPS (R11), Y0
	VMOVUPS 32(R11), Y1
	VMOVUPS (R11)(R8*1), Y2
	VMOVUPS 32(R11)(R8*1), Y3
	VMOVUPS (R11)(R8*2), Y4
	VMOVUPS 32(R11)(R8*2), Y5
	VMOVUPS (R11)(R13*1), Y6
	VMOVUPS 32(R11)(R13*1), Y7
	VMOVUPS Y0, (R12)
	VMOVUPS Y1, 32(R12)
	VMOVUPS Y2, 64(R12)
	VMOVUPS Y3, 96(R12)
	VMOVUPS Y4, 128(R12)
	VMOVUPS Y5, 160(R12)
	VMOVUPS Y6, 192(R12)
	VMOVUPS Y7, 224(R12)
	ADDQ    $64, R11
	ADDQ    R9, R12
	DECQ    DX
	JNZ     strip16

	LEAQ (SI)(R8*4), SI
	ADDQ $256, DI
	DECQ CX
	JNZ  tile16
	VZEROUPPER

done16:
	RET

// Copies the six floats at src to dst+off.
#define COPY6(src, src16, off) \
	VMOVUPS src, X0;      \
	MOVQ    src16, AX;    \
	VMOVUPS X0, off(R12); \
	MOVQ    AX, (off+16)(R12)

// func packPanel6(dst, src *float32, ld, kc, rows, strips int)
//
// Copies rows [0, rows) of a kc×(6·strips) block of a row-major matrix
// (row stride ld elements; rows a multiple of 8) into strips 6 wide, each
// stored k-major: element (q, 6s+i) goes to dst[s*6*kc + q*6 + i]. This
// packs a transposed A. Eight rows at a time are copied strip by strip,
// so each strip receives three whole cache lines in a row.
TEXT ·packPanel6(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8             // source row stride in bytes
	LEAQ (R8)(R8*2), R13    // three rows
	MOVQ kc+24(FP), R9
	LEAQ (R9)(R9*2), R9
	SHLQ $3, R9             // strip size in bytes (6 floats per k)
	MOVQ rows+32(FP), CX
	SHRQ $3, CX
	JZ   done6p
	MOVQ strips+40(FP), R10

tile6:
	MOVQ SI, R11
	MOVQ DI, R12
	MOVQ R10, DX

strip6:
	// Prefetch the next tile's rows (8 ahead) at this column.
	LEAQ       (R11)(R8*8), BX
	PREFETCHT0 (BX)
	PREFETCHT0 (BX)(R8*1)
	PREFETCHT0 (BX)(R8*2)
	PREFETCHT0 (BX)(R13*1)
	LEAQ       (BX)(R8*4), BX
	PREFETCHT0 (BX)
	PREFETCHT0 (BX)(R8*1)
	PREFETCHT0 (BX)(R8*2)
	PREFETCHT0 (BX)(R13*1)
	LEAQ  (R11)(R8*4), BX
	COPY6((R11), 16(R11), 0)
	COPY6((R11)(R8*1), 16(R11)(R8*1), 24)
	COPY6((R11)(R8*2), 16(R11)(R8*2), 48)
	COPY6((R11)(R13*1), 16(R11)(R13*1), 72)
	COPY6((BX), 16(BX), 96)
	COPY6((BX)(R8*1), 16(BX)(R8*1), 120)
	COPY6((BX)(R8*2), 16(BX)(R8*2), 144)
	COPY6((BX)(R13*1), 16(BX)(R13*1), 168)
	ADDQ  $24, R11
	ADDQ  R9, R12
	DECQ  DX
	JNZ   strip6

	LEAQ (SI)(R8*8), SI
	ADDQ $192, DI
	DECQ CX
	JNZ  tile6

done6p:
	RET

// func prefetchRows(p *float32, ld, rows, bytes int)
//
// Prefetches the cache lines holding bytes [0, bytes) of rows rows that
// start ld elements apart from p.
TEXT ·prefetchRows(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ ld+8(FP), R8
	SHLQ $2, R8
	MOVQ rows+16(FP), CX
	MOVQ bytes+24(FP), DX

pfrow:
	MOVQ SI, AX
	LEAQ (SI)(DX*1), BX

pfline:
	PREFETCHT1 (AX)
	ADDQ       $64, AX
	CMPQ       AX, BX
	JB         pfline

	ADDQ R8, SI
	DECQ CX
	JNZ  pfrow
	RET

// func gatherRows16(dst *float32, ldd int, src *float32, offs *int, n, limit int) (ok bool)
//
// Copies n runs of 16 floats, run q from src[offs[q]:] to dst[q*ldd:],
// as two 32-byte moves each (n >= 1). It stops and reports false at the
// first offset outside [0, limit] (an unsigned compare catches negative
// ones), before reading through it.
TEXT ·gatherRows16(SB), NOSPLIT, $0-49
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), DX
	SHLQ $2, DX
	MOVQ src+16(FP), SI
	MOVQ offs+24(FP), BX
	MOVQ n+32(FP), CX
	MOVQ limit+40(FP), R8

g16loop:
	MOVQ    (BX), AX
	CMPQ    AX, R8
	JHI     g16bad
	VMOVUPS (SI)(AX*4), Y0
	VMOVUPS 32(SI)(AX*4), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    $8, BX
	ADDQ    DX, DI
	DECQ    CX
	JNZ     g16loop
	VZEROUPPER
	MOVB    $1, ok+48(FP)
	RET

g16bad:
	VZEROUPPER
	MOVB $0, ok+48(FP)
	RET

// func gatherRows8(dst *float32, ldd int, src *float32, offs *int, n, limit int) (ok bool)
//
// gatherRows16 for runs of 8 floats (one 32-byte move each).
TEXT ·gatherRows8(SB), NOSPLIT, $0-49
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), DX
	SHLQ $2, DX
	MOVQ src+16(FP), SI
	MOVQ offs+24(FP), BX
	MOVQ n+32(FP), CX
	MOVQ limit+40(FP), R8

g8loop:
	MOVQ    (BX), AX
	CMPQ    AX, R8
	JHI     g8bad
	VMOVUPS (SI)(AX*4), Y0
	VMOVUPS Y0, (DI)
	ADDQ    $8, BX
	ADDQ    DX, DI
	DECQ    CX
	JNZ     g8loop
	VZEROUPPER
	MOVB    $1, ok+48(FP)
	RET

g8bad:
	VZEROUPPER
	MOVB $0, ok+48(FP)
	RET

// func gatherTransposed16(dst, src *float32, offs *int, blocks, limit int) (ok bool)
//
// Writes blocks·8 rows of 16 floats: dst[p*16+j] = src[offs[j]+p] for
// j < 16 and p < 8·blocks, eight positions at a time with TRANS8X8, taps
// 0–7 in a first pass and taps 8–15 in a second. It reports false,
// having written nothing, when an offset lies outside [0, limit].
TEXT ·gatherTransposed16(SB), NOSPLIT, $0-41
	MOVQ offs+16(FP), R8
	MOVQ limit+32(FP), R13
	// All sixteen offsets first.
	XORQ AX, AX

gtcheck:
	MOVQ (R8)(AX*8), BX
	CMPQ BX, R13
	JHI  gtbad
	INCQ AX
	CMPQ AX, $16
	JLT  gtcheck
	MOVQ $0, R13            // pass: 0 taps 0-7, 1 taps 8-15

gtpass:
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+24(FP), R8
	MOVQ offs+16(FP), CX
	MOVQ R13, DX
	SHLQ $6, DX             // 64 bytes of offsets per pass
	ADDQ DX, CX
	MOVQ R13, DX
	SHLQ $5, DX             // 32 bytes into each dst row per pass
	ADDQ DX, DI
	MOVQ 0(CX), AX
	MOVQ 8(CX), BX
	MOVQ 24(CX), DX
	MOVQ 32(CX), R9
	MOVQ 40(CX), R10
	MOVQ 48(CX), R11
	MOVQ 56(CX), R12
	MOVQ 16(CX), CX

gtloop:
	TRANS8X8((SI)(AX*4), (SI)(BX*4), (SI)(CX*4), (SI)(DX*4), (SI)(R9*4), (SI)(R10*4), (SI)(R11*4), (SI)(R12*4), 0)
	ADDQ $32, SI
	ADDQ $512, DI
	DECQ R8
	JNZ  gtloop
	INCQ R13
	CMPQ R13, $2
	JLT  gtpass
	VZEROUPPER
	MOVB $1, ok+40(FP)
	RET

gtbad:
	MOVB $0, ok+40(FP)
	RET
