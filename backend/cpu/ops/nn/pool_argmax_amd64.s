//go:build amd64 && !purego

#include "textflag.h"

// Tap vectors of one window row for 8 windows two columns apart: left
// (v[2i]), middle (v[2i+1]) and right (v[2i+2]) in the order 0 1 4 5 | 2 3
// 6 7 of the shuffles, from the row at R (as in pool_amd64.s).
#define ATAPS(R, L, M, RT) \
	VMOVUPS 0(R), Y12 \
	VMOVUPS 32(R), Y13 \
	VSHUFPS $0x88, Y13, Y12, L \
	VSHUFPS $0xDD, Y13, Y12, M \
	VMOVUPS 4(R), Y12 \
	VMOVUPS 36(R), Y13 \
	VSHUFPS $0xDD, Y13, Y12, RT

// The row-major scan's step for tap T (index t): where T is strictly
// greater than the running maximum Y9 (never for a NaN T, nor over a NaN
// Y9), Y9 = T and the code Y10 = t. VMAXPS gives Y9 that blend: it
// returns its second source, Y9, for a NaN in either and for equal
// values (zeros of both signs too), and T only where T > Y9.
#define ASTEP(T, t) \
	VCMPPS $0x1E, Y9, T, Y12 \
	VMAXPS Y9, T, Y9 \
	VBLENDVPS Y12, argmaxTap<>+(32*(t-1))(SB), Y10, Y10

// argmaxTap holds eight int32 vectors: 1s, 2s, ..., 8s.
DATA argmaxTap<>+0(SB)/8, $0x0000000100000001
DATA argmaxTap<>+8(SB)/8, $0x0000000100000001
DATA argmaxTap<>+16(SB)/8, $0x0000000100000001
DATA argmaxTap<>+24(SB)/8, $0x0000000100000001
DATA argmaxTap<>+32(SB)/8, $0x0000000200000002
DATA argmaxTap<>+40(SB)/8, $0x0000000200000002
DATA argmaxTap<>+48(SB)/8, $0x0000000200000002
DATA argmaxTap<>+56(SB)/8, $0x0000000200000002
DATA argmaxTap<>+64(SB)/8, $0x0000000300000003
DATA argmaxTap<>+72(SB)/8, $0x0000000300000003
DATA argmaxTap<>+80(SB)/8, $0x0000000300000003
DATA argmaxTap<>+88(SB)/8, $0x0000000300000003
DATA argmaxTap<>+96(SB)/8, $0x0000000400000004
DATA argmaxTap<>+104(SB)/8, $0x0000000400000004
DATA argmaxTap<>+112(SB)/8, $0x0000000400000004
DATA argmaxTap<>+120(SB)/8, $0x0000000400000004
DATA argmaxTap<>+128(SB)/8, $0x0000000500000005
DATA argmaxTap<>+136(SB)/8, $0x0000000500000005
DATA argmaxTap<>+144(SB)/8, $0x0000000500000005
DATA argmaxTap<>+152(SB)/8, $0x0000000500000005
DATA argmaxTap<>+160(SB)/8, $0x0000000600000006
DATA argmaxTap<>+168(SB)/8, $0x0000000600000006
DATA argmaxTap<>+176(SB)/8, $0x0000000600000006
DATA argmaxTap<>+184(SB)/8, $0x0000000600000006
DATA argmaxTap<>+192(SB)/8, $0x0000000700000007
DATA argmaxTap<>+200(SB)/8, $0x0000000700000007
DATA argmaxTap<>+208(SB)/8, $0x0000000700000007
DATA argmaxTap<>+216(SB)/8, $0x0000000700000007
DATA argmaxTap<>+224(SB)/8, $0x0000000800000008
DATA argmaxTap<>+232(SB)/8, $0x0000000800000008
DATA argmaxTap<>+240(SB)/8, $0x0000000800000008
DATA argmaxTap<>+248(SB)/8, $0x0000000800000008
GLOBL argmaxTap<>(SB), RODATA|NOPTR, $256

// func poolArgmaxMax3x3S2AVX2(codes *uint8, y, x *float32, s1, s2 int, blocks int, pf int)
//
// For 8·blocks 3×3 windows whose top-left taps are x[2i], with the window
// rows at x, x+s1 and x+s1+s2: codes[i] = the index 0..8, in row-major
// order, of the tap the row-major scan keeps (the first tap, replaced only
// by a strictly greater one: ties keep the earliest, a NaN counts only as
// the first tap) and y[i] = its value. Each block also asks (PREFETCHT0)
// for the lines pf and pf + 4·s1 bytes past its first row's: the caller
// points them at the rows a later output row reads first, so that they
// come from memory while this row computes (0: lines in hand).
TEXT ·poolArgmaxMax3x3S2AVX2(SB), NOSPLIT, $0-56
	MOVQ codes+0(FP), DI
	MOVQ y+8(FP), R9
	MOVQ x+16(FP), SI
	MOVQ s1+24(FP), DX
	SHLQ $2, DX
	MOVQ s2+32(FP), BX
	SHLQ $2, BX
	MOVQ blocks+40(FP), CX
	MOVQ pf+48(FP), R10
	LEAQ (R10)(DX*1), R11

amm:
	TESTQ CX, CX
	JE    ammDone
	PREFETCHT0 (SI)(R10*1)
	PREFETCHT0 (SI)(R11*1)
	MOVQ SI, R8
	ATAPS(R8, Y0, Y1, Y2)
	ADDQ DX, R8
	ATAPS(R8, Y3, Y4, Y5)
	ADDQ BX, R8
	ATAPS(R8, Y6, Y7, Y8)
	VMOVAPS Y0, Y9
	VPXOR Y10, Y10, Y10
	ASTEP(Y1, 1)
	ASTEP(Y2, 2)
	ASTEP(Y3, 3)
	ASTEP(Y4, 4)
	ASTEP(Y5, 5)
	ASTEP(Y6, 6)
	ASTEP(Y7, 7)
	ASTEP(Y8, 8)
	VPERMPD $0xD8, Y10, Y10
	VPERMPD $0xD8, Y9, Y9
	VMOVUPS Y9, (R9)
	VEXTRACTI128 $1, Y10, X13
	VPACKSSDW X13, X10, X10
	VPACKUSWB X10, X10, X10
	VMOVQ X10, (DI)
	ADDQ $64, SI
	ADDQ $8, DI
	ADDQ $32, R9
	DECQ CX
	JMP  amm

ammDone:
	VZEROUPPER
	RET

// argmaxIdx512 holds VPERMT2PS's indices picking the even (0, 2, ..., 30)
// and then the odd (1, 3, ..., 31) floats of two zmm registers.
DATA argmaxIdx512<>+0(SB)/8, $0x0000000200000000
DATA argmaxIdx512<>+8(SB)/8, $0x0000000600000004
DATA argmaxIdx512<>+16(SB)/8, $0x0000000a00000008
DATA argmaxIdx512<>+24(SB)/8, $0x0000000e0000000c
DATA argmaxIdx512<>+32(SB)/8, $0x0000001200000010
DATA argmaxIdx512<>+40(SB)/8, $0x0000001600000014
DATA argmaxIdx512<>+48(SB)/8, $0x0000001a00000018
DATA argmaxIdx512<>+56(SB)/8, $0x0000001e0000001c
DATA argmaxIdx512<>+64(SB)/8, $0x0000000300000001
DATA argmaxIdx512<>+72(SB)/8, $0x0000000700000005
DATA argmaxIdx512<>+80(SB)/8, $0x0000000b00000009
DATA argmaxIdx512<>+88(SB)/8, $0x0000000f0000000d
DATA argmaxIdx512<>+96(SB)/8, $0x0000001300000011
DATA argmaxIdx512<>+104(SB)/8, $0x0000001700000015
DATA argmaxIdx512<>+112(SB)/8, $0x0000001b00000019
DATA argmaxIdx512<>+120(SB)/8, $0x0000001f0000001d
GLOBL argmaxIdx512<>(SB), RODATA|NOPTR, $128

// Tap vectors of one window row for 16 windows two columns apart: left
// (x[2i]), middle (x[2i+1]) and right (x[2i+2]), in order, from the row
// at R (reads x[0..33]).
#define ZTAPS(R, L, M, RT) \
	VMOVUPS 0(R), L \
	VPERMT2PS 64(R), Z11, L \
	VMOVUPS 0(R), M \
	VPERMT2PS 64(R), Z12, M \
	VMOVUPS 8(R), RT \
	VPERMT2PS 72(R), Z11, RT

// The scan's step for tap T: where T > Z9 (ordered), Z9 = T and the code
// Z10 = C.
#define ZSTEP(T, C) \
	VCMPPS $0x1E, Z9, T, K1 \
	VMOVAPS T, K1, Z9 \
	VMOVDQA32 C, K1, Z10

// func poolArgmaxMax3x3S2AVX512(codes *uint8, y, x *float32, s1, s2 int, n int, pf int)
//
// poolArgmaxMax3x3S2AVX2 for n windows, sixteen at a time, the last block
// storing only its windows below n; it reads x up to x[32·⌈n/16⌉+1] in
// each window row, and prefetches as the AVX2 loop does (two lines a row
// a block).
TEXT ·poolArgmaxMax3x3S2AVX512(SB), NOSPLIT, $0-56
	MOVQ codes+0(FP), DI
	MOVQ y+8(FP), R9
	MOVQ x+16(FP), SI
	MOVQ s1+24(FP), DX
	SHLQ $2, DX
	MOVQ s2+32(FP), BX
	SHLQ $2, BX
	MOVQ n+40(FP), CX
	MOVQ pf+48(FP), R10
	LEAQ (R10)(DX*1), R11
	VMOVDQU32 argmaxIdx512<>+0(SB), Z11
	VMOVDQU32 argmaxIdx512<>+64(SB), Z12
	MOVL $1, AX
	VPBROADCASTD AX, Z21
	MOVL $2, AX
	VPBROADCASTD AX, Z22
	MOVL $3, AX
	VPBROADCASTD AX, Z23
	MOVL $4, AX
	VPBROADCASTD AX, Z24
	MOVL $5, AX
	VPBROADCASTD AX, Z25
	MOVL $6, AX
	VPBROADCASTD AX, Z26
	MOVL $7, AX
	VPBROADCASTD AX, Z27
	MOVL $8, AX
	VPBROADCASTD AX, Z28
	MOVL $0xFFFF, AX
	KMOVW AX, K2

zmm:
	TESTQ CX, CX
	JLE   zmmDone
	CMPQ  CX, $16
	JGE   zmmFull
	// The last block: K2 keeps its CX windows.
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K2

zmmFull:
	PREFETCHT0 (SI)(R10*1)
	PREFETCHT0 64(SI)(R10*1)
	PREFETCHT0 (SI)(R11*1)
	PREFETCHT0 64(SI)(R11*1)
	MOVQ SI, R8
	ZTAPS(R8, Z0, Z1, Z2)
	ADDQ DX, R8
	ZTAPS(R8, Z3, Z4, Z5)
	ADDQ BX, R8
	ZTAPS(R8, Z6, Z7, Z8)
	VMOVAPS Z0, Z9
	VPXORD Z10, Z10, Z10
	ZSTEP(Z1, Z21)
	ZSTEP(Z2, Z22)
	ZSTEP(Z3, Z23)
	ZSTEP(Z4, Z24)
	ZSTEP(Z5, Z25)
	ZSTEP(Z6, Z26)
	ZSTEP(Z7, Z27)
	ZSTEP(Z8, Z28)
	VMOVUPS Z9, K2, (R9)
	VPMOVDB Z10, K2, (DI)
	ADDQ $128, SI
	ADDQ $16, DI
	ADDQ $64, R9
	SUBQ $16, CX
	JMP  zmm

zmmDone:
	VZEROUPPER
	RET
