//go:build amd64 && !purego

#include "textflag.h"

// func addF32AVX2(dst, src *float32, n int)
// dst[i] += src[i], 16 elements per iteration; n is a multiple of 16.
TEXT ·addF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   addDone

addLoop:
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VADDPS  (SI), Y0, Y0
	VADDPS  32(SI), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    $64, DI
	ADDQ    $64, SI
	DECQ    CX
	JNZ     addLoop

addDone:
	VZEROUPPER
	RET

// BF16CONSTS loads the rounding constants:
// Y10 = 0x7fff, Y11 = 1, Y12 = 0x7fffffff, Y13 = 0x7f800000, Y14 = 0x40.
#define BF16CONSTS \
	MOVL         $0x7fff, AX     \
	MOVQ         AX, X10         \
	VPBROADCASTD X10, Y10        \
	MOVL         $1, AX          \
	MOVQ         AX, X11         \
	VPBROADCASTD X11, Y11        \
	MOVL         $0x7fffffff, AX \
	MOVQ         AX, X12         \
	VPBROADCASTD X12, Y12        \
	MOVL         $0x7f800000, AX \
	MOVQ         AX, X13         \
	VPBROADCASTD X13, Y13        \
	MOVL         $0x40, AX       \
	MOVQ         AX, X14         \
	VPBROADCASTD X14, Y14

// BF16ROUND turns the float32 bits in IN into bfloat16 bits (in the low
// half of each dword) in OUT, rounding to nearest even; a NaN keeps its
// top bits and becomes quiet. Uses T1, T2. Step by step:
// T1 = b >> 16; T2 = T1 & 1 (the lsb of the result); OUT = (b + 0x7fff + T2)
// >> 16; T2 = NaN mask (|b| > 0x7f800000); T1 = quiet NaN (T1 | 0x40);
// OUT = T2 ? T1 : OUT.
#define BF16ROUND(IN, OUT, T1, T2) \
	VPSRLD    $16, IN, T1   \
	VPAND     Y11, T1, T2   \
	VPADDD    Y10, IN, OUT  \
	VPADDD    T2, OUT, OUT  \
	VPSRLD    $16, OUT, OUT \
	VPAND     Y12, IN, T2   \
	VPCMPGTD  Y13, T2, T2   \
	VPOR      Y14, T1, T1   \
	VPBLENDVB T2, T1, OUT, OUT

// func toBF16AVX2(dst *uint16, src *float32, n int)
// 16 elements per iteration; n is a multiple of 16.
TEXT ·toBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   toDone
	BF16CONSTS

toLoop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	BF16ROUND(Y0, Y2, Y4, Y5)
	BF16ROUND(Y1, Y3, Y6, Y7)
	// Pack the 2×8 dwords to 16 words: per 128-bit lane, then restore the
	// element order across lanes.
	VPACKUSDW Y3, Y2, Y2
	VPERMQ    $0xD8, Y2, Y2
	VMOVDQU   Y2, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       toLoop

toDone:
	VZEROUPPER
	RET

// func roundBF16AVX2(x *float32, n int)
// 8 elements per iteration; n is a multiple of 8.
TEXT ·roundBF16AVX2(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	SHRQ $3, CX
	JZ   roundDone
	BF16CONSTS

roundLoop:
	VMOVDQU (DI), Y0
	BF16ROUND(Y0, Y2, Y4, Y5)
	VPSLLD  $16, Y2, Y2
	VMOVDQU Y2, (DI)
	ADDQ    $32, DI
	DECQ    CX
	JNZ     roundLoop

roundDone:
	VZEROUPPER
	RET

// func fromBF16AVX2(dst *float32, src *uint16, n int)
// 8 elements per iteration; n is a multiple of 8.
TEXT ·fromBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   fromDone

fromLoop:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       fromLoop

fromDone:
	VZEROUPPER
	RET

// func addBF16AVX2(dst *float32, src *uint16, n int)
// 8 elements per iteration; n is a multiple of 8.
TEXT ·addBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   addbDone

addbLoop:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   (DI), Y1
	VADDPS    Y0, Y1, Y1
	VMOVUPS   Y1, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       addbLoop

addbDone:
	VZEROUPPER
	RET
