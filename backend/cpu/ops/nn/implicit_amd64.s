//go:build amd64 && !purego

#include "textflag.h"

// DEINT2_BLOCK is the deinterleave loops' block: 16 values at SI from
// byte 2·OFF split into the 8 evens at DI and the 8 odds at BX, both
// from byte OFF (OFF a register).
#define DEINT2_BLOCK(OFF) \
	VMOVUPS (SI)(OFF*2), Y0 \
	VMOVUPS 32(SI)(OFF*2), Y1 \
	VSHUFPS $0x88, Y1, Y0, Y2 \
	VSHUFPS $0xDD, Y1, Y0, Y3 \
	VPERMPD $0xD8, Y2, Y2 \
	VPERMPD $0xD8, Y3, Y3 \
	VMOVUPS Y2, (DI)(OFF*1) \
	VMOVUPS Y3, (BX)(OFF*1)

// func deinterleave2AVX2(ev, od, s *float32, blocks int)
//
// Each block loads 16 values of s, x0 … x15, as two registers; VSHUFPS
// picks (x0 x2 x8 x10 | x4 x6 x12 x14) and the odd ones likewise, and
// VPERMPD puts the 64-bit pairs back in order (x0 x2 x4 … x14).
TEXT ·deinterleave2AVX2(SB), NOSPLIT, $0-32
	MOVQ ev+0(FP), DI
	MOVQ od+8(FP), BX
	MOVQ s+16(FP), SI
	MOVQ blocks+24(FP), CX
	TESTQ CX, CX
	JLE  dnone
	XORQ AX, AX

dloop:
	DEINT2_BLOCK(AX)
	ADDQ $32, AX
	DECQ CX
	JNZ  dloop
	VZEROUPPER

dnone:
	RET

// func deinterleave2RowsAVX2(dst, src *float32, rows, dstStride, srcStride, pw int)
//
// deinterleave2AVX2's block on each row's pairs 0, 8, 16, … below pw − 8,
// then on pairs pw − 8 … pw − 1 (overlapping the block before: the same
// values written again).
TEXT ·deinterleave2RowsAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rows+16(FP), CX
	MOVQ dstStride+24(FP), R8
	SHLQ $2, R8
	MOVQ srcStride+32(FP), R9
	SHLQ $2, R9
	MOVQ pw+40(FP), R10
	LEAQ -8(R10), R11
	SHLQ $2, R10 // od's offset in bytes
	SHLQ $2, R11 // the last block's offset in dst, bytes

drow:
	LEAQ (DI)(R10*1), BX
	XORQ AX, AX

dblock:
	CMPQ AX, R11
	JGE  dlast
	DEINT2_BLOCK(AX)
	ADDQ $32, AX
	JMP  dblock

dlast:
	DEINT2_BLOCK(R11)
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ CX
	JNZ  drow
	VZEROUPPER
	RET

// func interleave2AVX2(d, ev, od *float32, blocks int)
//
// Each block loads 8 values of ev and of od; VUNPCKLPS and VUNPCKHPS pair
// them within each 128-bit lane (e0 o0 e1 o1 | e4 o4 e5 o5 and e2 o2 e3
// o3 | e6 o6 e7 o7), and VPERM2F128 joins the lanes in order.
TEXT ·interleave2AVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ ev+8(FP), SI
	MOVQ od+16(FP), DX
	MOVQ blocks+24(FP), CX
	TESTQ CX, CX
	JLE  inone

iloop:
	VMOVUPS (SI), Y0
	VMOVUPS (DX), Y1
	VUNPCKLPS Y1, Y0, Y2
	VUNPCKHPS Y1, Y0, Y3
	VPERM2F128 $0x20, Y3, Y2, Y4
	VPERM2F128 $0x31, Y3, Y2, Y5
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $64, DI
	DECQ CX
	JNZ  iloop
	VZEROUPPER

inone:
	RET

// func evens2AVX2(d, s *float32, blocks int)
//
// d[v] = s[2v] for blocks·8 values: deinterleave2AVX2's even half.
TEXT ·evens2AVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ blocks+16(FP), CX
	TESTQ CX, CX
	JLE  enone

eloop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VSHUFPS $0x88, Y1, Y0, Y2
	VPERMPD $0xD8, Y2, Y2
	VMOVUPS Y2, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  eloop
	VZEROUPPER

enone:
	RET

// func spread2AVX2(d, s *float32, blocks int)
//
// d[2v] = s[v], d[2v+1] = 0 for blocks·8 values of s: interleave2AVX2
// with a zero odd half.
TEXT ·spread2AVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ blocks+16(FP), CX
	TESTQ CX, CX
	JLE  snone
	VXORPS Y1, Y1, Y1

sloop:
	VMOVUPS (SI), Y0
	VUNPCKLPS Y1, Y0, Y2
	VUNPCKHPS Y1, Y0, Y3
	VPERM2F128 $0x20, Y3, Y2, Y4
	VPERM2F128 $0x31, Y3, Y2, Y5
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  sloop
	VZEROUPPER

snone:
	RET
