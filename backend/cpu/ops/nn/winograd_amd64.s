//go:build amd64 && !purego

#include "textflag.h"

// WINO_IN_ARGS loads the input transforms' shared arguments (dst,
// dstStride, src, offs, plane, wp, channels: the same offsets in both):
// AX = dst, BX = dstStride in bytes, R12 = 3 of them, SI = src, DX =
// offs, DI = plane in bytes, R10 = wp in bytes, R11 = 3 of them, CX =
// channels.
#define WINO_IN_ARGS \
	MOVQ dst+0(FP), AX \
	MOVQ dstStride+8(FP), BX \
	SHLQ $2, BX \
	MOVQ src+16(FP), SI \
	MOVQ offs+24(FP), DX \
	MOVQ plane+32(FP), DI \
	SHLQ $2, DI \
	MOVQ wp+40(FP), R10 \
	SHLQ $2, R10 \
	LEAQ (R10)(R10*2), R11 \
	MOVQ channels+48(FP), CX \
	LEAQ (BX)(BX*2), R12

// PARKW combines the 4 rows V0 … V3 of a patch (Bᵀ·d: d0−d2, d1+d2,
// d2−d1, d1−d3, into V4 … V7) and parks combined row k of tile group p
// at ((k·4+p)·sz)(SP), vectors of sz bytes: ymm (two tiles) or zmm
// (four).
#define PARKW(p, sz, V0, V1, V2, V3, V4, V5, V6, V7) \
	VSUBPS V2, V0, V4; \
	VADDPS V2, V1, V5; \
	VSUBPS V1, V2, V6; \
	VSUBPS V3, V1, V7; \
	VMOVUPS V4, ((0*4+p)*sz)(SP); \
	VMOVUPS V5, ((1*4+p)*sz)(SP); \
	VMOVUPS V6, ((2*4+p)*sz)(SP); \
	VMOVUPS V7, ((3*4+p)*sz)(SP)

// func winoInputAVX2(dst *float32, dstStride int, src *float32, offs *int, plane, wp, channels, chStride, groups int)
//
// Transforms the 4×4 patches of groups·8 tiles (groups 1 or 2) over
// channels channels: tile j's patch in channel c has its rows wp floats
// apart from src[offs[j] + c·plane]; position ξ of the transform Bᵀ·d·B
// of channel c goes to dst[ξ·dstStride + c·chStride + j] (8 floats per
// group, position and channel, tiles in lanes). Both groups of a channel
// are done before the next channel, so that 16 tiles write whole cache
// lines. The patches are loaded two tiles to a
// register (tile p in the low lane, tile p+4 in the high one), combined
// over rows, parked on the stack, transposed 4×4 within each lane (tiles
// into lanes) and combined over columns.
TEXT ·winoInputAVX2(SB), $520-72
	WINO_IN_ARGS

inChannel:
	TESTQ CX, CX
	JEQ   inDone
	MOVQ  groups+64(FP), R14
	MOVQ  offs+24(FP), DX
	MOVQ  AX, 512(SP)

inGroup:

#define LOADPAIR(p) \
	MOVQ (p*8)(DX), R8; \
	MOVQ ((p+4)*8)(DX), R9; \
	LEAQ (SI)(R8*4), R8; \
	LEAQ (SI)(R9*4), R9; \
	VMOVUPS (R8), X0; \
	VINSERTF128 $1, (R9), Y0, Y0; \
	VMOVUPS (R8)(R10*1), X1; \
	VINSERTF128 $1, (R9)(R10*1), Y1, Y1; \
	VMOVUPS (R8)(R10*2), X2; \
	VINSERTF128 $1, (R9)(R10*2), Y2, Y2; \
	VMOVUPS (R8)(R11*1), X3; \
	VINSERTF128 $1, (R9)(R11*1), Y3, Y3; \
	PARKW(p, 32, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)

	LOADPAIR(0)
	LOADPAIR(1)
	LOADPAIR(2)
	LOADPAIR(3)

	MOVQ 512(SP), R13

// ROWOUTW turns combined row i of 4 vectors of sz bytes parked on the
// stack (a pair or quad of tiles each) into positions 4i … 4i+3 of the
// tiles: transposed 4×4 within each 128-bit lane (tiles into lanes),
// combined over columns, stored at R13 (BX bytes apart), R13 moved 4
// positions on. V0 … V7 are ymm (8 tiles) or zmm (16) registers.
#define ROWOUTW(i, sz, V0, V1, V2, V3, V4, V5, V6, V7) \
	VMOVUPS ((i*4+0)*sz)(SP), V0; \
	VMOVUPS ((i*4+1)*sz)(SP), V1; \
	VMOVUPS ((i*4+2)*sz)(SP), V2; \
	VMOVUPS ((i*4+3)*sz)(SP), V3; \
	VUNPCKLPS V1, V0, V4; \
	VUNPCKHPS V1, V0, V5; \
	VUNPCKLPS V3, V2, V6; \
	VUNPCKHPS V3, V2, V7; \
	VUNPCKLPD V6, V4, V0; \
	VUNPCKHPD V6, V4, V1; \
	VUNPCKLPD V7, V5, V2; \
	VUNPCKHPD V7, V5, V3; \
	VSUBPS V2, V0, V4; \
	VADDPS V2, V1, V5; \
	VSUBPS V1, V2, V6; \
	VSUBPS V3, V1, V7; \
	VMOVUPS V4, (R13); \
	VMOVUPS V5, (R13)(BX*1); \
	VMOVUPS V6, (R13)(BX*2); \
	VMOVUPS V7, (R13)(R12*1); \
	LEAQ (R13)(BX*4), R13

#define ROWOUT(i) ROWOUTW(i, 32, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)

	ROWOUT(0)
	ROWOUT(1)
	ROWOUT(2)
	ROWOUT(3)

	ADDQ $64, DX
	ADDQ $32, 512(SP)
	DECQ R14
	JNE  inGroup

	MOVQ chStride+56(FP), R8
	LEAQ (AX)(R8*4), AX
	ADDQ DI, SI
	DECQ CX
	JMP  inChannel

inDone:
	VZEROUPPER
	RET

// func winoOutput8AVX2(y *float32, offs *int, p *float32, ps, pm, oplane, ow, channels int, acc bool, pfa, pfb int)
//
// The output transform of 8 tiles over channels channels: position ξ of
// channel m's products for tile j is p[ξ·ps + m·pm + j]; the tile's 2×2
// outputs Aᵀ·M·A go to y[offs[j] + m·oplane] (and the next row, ow
// floats on), added to what is there when acc is set. Each channel also
// asks (PREFETCHT0) for the lines pfa and pfb bytes past its first output,
// and the same in the next row: the caller passes the next 8 tiles' first
// and last outputs, so that their stores find y's lines owned instead of
// each waiting on memory (y, the size of the layer's output, is out of
// the caches; Go's assembler has no PREFETCHW, and a line no other core
// holds arrives exclusive).
TEXT ·winoOutput8AVX2(SB), NOSPLIT, $0-88
	MOVQ y+0(FP), DI
	MOVQ offs+8(FP), DX
	MOVQ p+16(FP), SI
	MOVQ ps+24(FP), BX
	SHLQ $2, BX
	LEAQ (BX)(BX*2), R12
	MOVQ ow+48(FP), R10
	SHLQ $2, R10
	MOVQ channels+56(FP), CX
	MOVBQZX acc+64(FP), R11

outChannel:
	TESTQ CX, CX
	JEQ   outDone
	MOVQ  SI, R13
	MOVQ  pfa+72(FP), R8
	MOVQ  pfb+80(FP), R9
	ADDQ  DI, R8
	ADDQ  DI, R9
	PREFETCHT0 (R8)
	PREFETCHT0 (R8)(R10*1)
	PREFETCHT0 (R9)
	PREFETCHT0 (R9)(R10*1)

	// Rows of M: s0 = m0 + m1 + m2, s1 = m1 − m2 − m3 (four columns
	// each, Y0..Y3 and Y4..Y7).
	VMOVUPS (R13), Y0
	VMOVUPS (R13)(BX*1), Y1
	VMOVUPS (R13)(BX*2), Y2
	VMOVUPS (R13)(R12*1), Y3
	LEAQ    (R13)(BX*4), R13
	VMOVUPS (R13), Y8
	VMOVUPS (R13)(BX*1), Y9
	VMOVUPS (R13)(BX*2), Y10
	VMOVUPS (R13)(R12*1), Y11
	LEAQ    (R13)(BX*4), R13
	VADDPS  Y8, Y0, Y0
	VADDPS  Y9, Y1, Y1
	VADDPS  Y10, Y2, Y2
	VADDPS  Y11, Y3, Y3
	VMOVAPS Y8, Y4
	VMOVAPS Y9, Y5
	VMOVAPS Y10, Y6
	VMOVAPS Y11, Y7
	VMOVUPS (R13), Y8
	VMOVUPS (R13)(BX*1), Y9
	VMOVUPS (R13)(BX*2), Y10
	VMOVUPS (R13)(R12*1), Y11
	LEAQ    (R13)(BX*4), R13
	VADDPS  Y8, Y0, Y0
	VADDPS  Y9, Y1, Y1
	VADDPS  Y10, Y2, Y2
	VADDPS  Y11, Y3, Y3
	VSUBPS  Y8, Y4, Y4
	VSUBPS  Y9, Y5, Y5
	VSUBPS  Y10, Y6, Y6
	VSUBPS  Y11, Y7, Y7
	VSUBPS  (R13), Y4, Y4
	VSUBPS  (R13)(BX*1), Y5, Y5
	VSUBPS  (R13)(BX*2), Y6, Y6
	VSUBPS  (R13)(R12*1), Y7, Y7

	// Columns: y00 = s00 + s01 + s02, y01 = s01 − s02 − s03, and the
	// same for row 1.
	VADDPS Y1, Y0, Y8
	VADDPS Y2, Y8, Y8
	VSUBPS Y2, Y1, Y9
	VSUBPS Y3, Y9, Y9
	VADDPS Y5, Y4, Y10
	VADDPS Y6, Y10, Y10
	VSUBPS Y6, Y5, Y11
	VSUBPS Y7, Y11, Y11

	// Pairs (y00, y01) and (y10, y11) per tile: tiles 0, 1 | 4, 5 in
	// the low halves, 2, 3 | 6, 7 in the high ones.
	VUNPCKLPS Y9, Y8, Y0
	VUNPCKHPS Y9, Y8, Y1
	VUNPCKLPS Y11, Y10, Y2
	VUNPCKHPS Y11, Y10, Y3
	VEXTRACTF128 $1, Y0, X4
	VEXTRACTF128 $1, Y1, X5
	VEXTRACTF128 $1, Y2, X6
	VEXTRACTF128 $1, Y3, X7

	TESTQ R11, R11
	JNE   outAcc

#define STORE2(t, lo0, lo1) \
	MOVQ (t*8)(DX), R8; \
	MOVQ ((t+1)*8)(DX), R9; \
	LEAQ (DI)(R8*4), R8; \
	LEAQ (DI)(R9*4), R9; \
	VMOVLPS lo0, (R8); \
	VMOVHPS lo0, (R9); \
	VMOVLPS lo1, (R8)(R10*1); \
	VMOVHPS lo1, (R9)(R10*1)

	STORE2(0, X0, X2)
	STORE2(2, X1, X3)
	STORE2(4, X4, X6)
	STORE2(6, X5, X7)
	JMP outNext

outAcc:
#define ACC2(t, lo0, lo1) \
	MOVQ (t*8)(DX), R8; \
	MOVQ ((t+1)*8)(DX), R9; \
	LEAQ (DI)(R8*4), R8; \
	LEAQ (DI)(R9*4), R9; \
	VMOVSD (R8), X8; \
	VMOVHPS (R9), X8, X8; \
	VADDPS X8, lo0, lo0; \
	VMOVSD (R8)(R10*1), X9; \
	VMOVHPS (R9)(R10*1), X9, X9; \
	VADDPS X9, lo1, lo1; \
	VMOVLPS lo0, (R8); \
	VMOVHPS lo0, (R9); \
	VMOVLPS lo1, (R8)(R10*1); \
	VMOVHPS lo1, (R9)(R10*1)

	ACC2(0, X0, X2)
	ACC2(2, X1, X3)
	ACC2(4, X4, X6)
	ACC2(6, X5, X7)

outNext:
	MOVQ pm+32(FP), R8
	LEAQ (SI)(R8*4), SI
	MOVQ oplane+40(FP), R8
	LEAQ (DI)(R8*4), DI
	DECQ CX
	JMP  outChannel

outDone:
	VZEROUPPER
	RET

// func winoKernelsAVX2(dst *float32, pos *int, src *float32, idx *int32, mask *int32, qStride, k int, smask *int32)
//
// Transforms the kernels of one A strip of 6 rows over k shared indices:
// lane i of index q reads the 3×3 kernel at src[q·qStride + idx[i] + tap]
// (lanes whose mask is 0 read nothing and transform zeros), and position
// ξ of its transform G·g·Gᵀ goes to dst[q·6 + i] + pos[ξ] bytes. Each
// store but the last index's writes 8 lanes: lanes 6 and 7 land on the
// next index's first two rows, which that index then overwrites; the last
// index stores the 6 lanes of smask (all ones) only.
TEXT ·winoKernelsAVX2(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ pos+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ idx+24(FP), R8
	VMOVDQU (R8), Y13
	MOVQ mask+32(FP), R8
	VMOVDQU (R8), Y14
	MOVQ qStride+40(FP), AX
	SHLQ $2, AX
	MOVQ k+48(FP), CX
	MOVL $0x3f000000, R9
	MOVQ R9, X15
	VBROADCASTSS X15, Y15

#define GATHER(tap, reg) \
	VXORPS reg, reg, reg; \
	VMOVAPS Y14, Y12; \
	VGATHERDPS Y12, ((tap)*4)(SI)(Y13*4), reg

#define KSTORE(xi, reg) \
	MOVQ ((xi)*8)(DX), R9; \
	VMOVUPS reg, (DI)(R9*1)

// KSTOREM is KSTORE through the store mask in Y13.
#define KSTOREM(xi, reg) \
	MOVQ ((xi)*8)(DX), R9; \
	VMASKMOVPS reg, Y13, (DI)(R9*1)

// KROW transforms one row (r0, r1, r2) of G·g into positions 4a..4a+3,
// stored with st.
#define KROW(st, a, r0, r1, r2) \
	VADDPS r2, r0, Y9; \
	VMULPS Y15, Y9, Y9; \
	VMULPS Y15, r1, Y10; \
	VADDPS Y10, Y9, Y11; \
	VSUBPS Y10, Y9, Y12; \
	st(4*a, r0); \
	st(4*a+1, Y11); \
	st(4*a+2, Y12); \
	st(4*a+3, r2)

// KMID turns column j of g (rows r0, r1, r2) into rows 1 and 2 of G·g:
// r0 = ½(g0 + g2) + ½g1, r1 = ½(g0 + g2) − ½g1.
#define KMID(r0, r1, r2) \
	VADDPS r2, r0, Y9; \
	VMULPS Y15, Y9, Y9; \
	VMULPS Y15, r1, Y10; \
	VADDPS Y10, Y9, r0; \
	VSUBPS Y10, Y9, r1

#define KGATHER \
	GATHER(0, Y0); \
	GATHER(1, Y1); \
	GATHER(2, Y2); \
	GATHER(3, Y3); \
	GATHER(4, Y4); \
	GATHER(5, Y5); \
	GATHER(6, Y6); \
	GATHER(7, Y7); \
	GATHER(8, Y8)

#define KTRANSFORM(st) \
	KROW(st, 0, Y0, Y1, Y2); \
	KROW(st, 3, Y6, Y7, Y8); \
	KMID(Y0, Y3, Y6); \
	KMID(Y1, Y4, Y7); \
	KMID(Y2, Y5, Y8); \
	KROW(st, 1, Y0, Y1, Y2); \
	KROW(st, 2, Y3, Y4, Y5)

kernelQ:
	CMPQ CX, $1
	JLE  kernelLast
	KGATHER
	KTRANSFORM(KSTORE)
	ADDQ AX, SI
	ADDQ $24, DI
	DECQ CX
	JMP  kernelQ

kernelLast:
	TESTQ CX, CX
	JEQ   kernelDone
	KGATHER
	MOVQ    smask+56(FP), R8
	VMOVDQU (R8), Y13
	KTRANSFORM(KSTOREM)

kernelDone:
	VZEROUPPER
	RET

// func winoInput16AVX512(dst *float32, dstStride int, src *float32, offs *int, plane, wp, channels, chStride int)
//
// winoInputAVX2 for 16 tiles (two groups) with AVX-512, the same
// arithmetic in the same order (the same bits): the patches are loaded
// four tiles to a register (tile p in lane 0, p+4, p+8 and p+12 in lanes
// 1 to 3), combined over rows, parked on the stack, transposed 4×4 within
// each 128-bit lane (tiles into lanes) and combined over columns, and
// each position of a channel's 16 tiles is stored as one register: half
// the row combinations, transposes and stores of two 8-tile groups.
TEXT ·winoInput16AVX512(SB), $1024-64
	WINO_IN_ARGS

in16Channel:
	TESTQ CX, CX
	JEQ   in16Done

#define LOADQUAD(p) \
	MOVQ (p*8)(DX), R8; \
	MOVQ ((p+4)*8)(DX), R9; \
	MOVQ ((p+8)*8)(DX), R14; \
	MOVQ ((p+12)*8)(DX), R15; \
	LEAQ (SI)(R8*4), R8; \
	LEAQ (SI)(R9*4), R9; \
	LEAQ (SI)(R14*4), R14; \
	LEAQ (SI)(R15*4), R15; \
	VMOVUPS (R8), X0; \
	VINSERTF32X4 $1, (R9), Z0, Z0; \
	VINSERTF32X4 $2, (R14), Z0, Z0; \
	VINSERTF32X4 $3, (R15), Z0, Z0; \
	VMOVUPS (R8)(R10*1), X1; \
	VINSERTF32X4 $1, (R9)(R10*1), Z1, Z1; \
	VINSERTF32X4 $2, (R14)(R10*1), Z1, Z1; \
	VINSERTF32X4 $3, (R15)(R10*1), Z1, Z1; \
	VMOVUPS (R8)(R10*2), X2; \
	VINSERTF32X4 $1, (R9)(R10*2), Z2, Z2; \
	VINSERTF32X4 $2, (R14)(R10*2), Z2, Z2; \
	VINSERTF32X4 $3, (R15)(R10*2), Z2, Z2; \
	VMOVUPS (R8)(R11*1), X3; \
	VINSERTF32X4 $1, (R9)(R11*1), Z3, Z3; \
	VINSERTF32X4 $2, (R14)(R11*1), Z3, Z3; \
	VINSERTF32X4 $3, (R15)(R11*1), Z3, Z3; \
	PARKW(p, 64, Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)

	LOADQUAD(0)
	LOADQUAD(1)
	LOADQUAD(2)
	LOADQUAD(3)

	MOVQ AX, R13

#define ROWOUT16(i) ROWOUTW(i, 64, Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)

	ROWOUT16(0)
	ROWOUT16(1)
	ROWOUT16(2)
	ROWOUT16(3)

	MOVQ chStride+56(FP), R8
	LEAQ (AX)(R8*4), AX
	ADDQ DI, SI
	DECQ CX
	JMP  in16Channel

in16Done:
	VZEROUPPER
	RET
