//go:build amd64 && !purego

#include "textflag.h"

// The vector loop of MaxPoolArgmaxGrad (pool_argmax_grad.go) for runs of
// 3×3 windows two columns apart whose three rows are inside the input.

// argmaxGradCode holds nine int32 vectors: 0s, 1s, ..., 8s (the codes of
// a 3×3 window's taps).
DATA argmaxGradCode<>+0(SB)/8, $0x0000000000000000
DATA argmaxGradCode<>+8(SB)/8, $0x0000000000000000
DATA argmaxGradCode<>+16(SB)/8, $0x0000000000000000
DATA argmaxGradCode<>+24(SB)/8, $0x0000000000000000
DATA argmaxGradCode<>+32(SB)/8, $0x0000000100000001
DATA argmaxGradCode<>+40(SB)/8, $0x0000000100000001
DATA argmaxGradCode<>+48(SB)/8, $0x0000000100000001
DATA argmaxGradCode<>+56(SB)/8, $0x0000000100000001
DATA argmaxGradCode<>+64(SB)/8, $0x0000000200000002
DATA argmaxGradCode<>+72(SB)/8, $0x0000000200000002
DATA argmaxGradCode<>+80(SB)/8, $0x0000000200000002
DATA argmaxGradCode<>+88(SB)/8, $0x0000000200000002
DATA argmaxGradCode<>+96(SB)/8, $0x0000000300000003
DATA argmaxGradCode<>+104(SB)/8, $0x0000000300000003
DATA argmaxGradCode<>+112(SB)/8, $0x0000000300000003
DATA argmaxGradCode<>+120(SB)/8, $0x0000000300000003
DATA argmaxGradCode<>+128(SB)/8, $0x0000000400000004
DATA argmaxGradCode<>+136(SB)/8, $0x0000000400000004
DATA argmaxGradCode<>+144(SB)/8, $0x0000000400000004
DATA argmaxGradCode<>+152(SB)/8, $0x0000000400000004
DATA argmaxGradCode<>+160(SB)/8, $0x0000000500000005
DATA argmaxGradCode<>+168(SB)/8, $0x0000000500000005
DATA argmaxGradCode<>+176(SB)/8, $0x0000000500000005
DATA argmaxGradCode<>+184(SB)/8, $0x0000000500000005
DATA argmaxGradCode<>+192(SB)/8, $0x0000000600000006
DATA argmaxGradCode<>+200(SB)/8, $0x0000000600000006
DATA argmaxGradCode<>+208(SB)/8, $0x0000000600000006
DATA argmaxGradCode<>+216(SB)/8, $0x0000000600000006
DATA argmaxGradCode<>+224(SB)/8, $0x0000000700000007
DATA argmaxGradCode<>+232(SB)/8, $0x0000000700000007
DATA argmaxGradCode<>+240(SB)/8, $0x0000000700000007
DATA argmaxGradCode<>+248(SB)/8, $0x0000000700000007
DATA argmaxGradCode<>+256(SB)/8, $0x0000000800000008
DATA argmaxGradCode<>+264(SB)/8, $0x0000000800000008
DATA argmaxGradCode<>+272(SB)/8, $0x0000000800000008
DATA argmaxGradCode<>+280(SB)/8, $0x0000000800000008
GLOBL argmaxGradCode<>(SB), RODATA|NOPTR, $288

// argmaxGradLane holds the int32 vector 0, 1, ..., 7.
DATA argmaxGradLane<>+0(SB)/8, $0x0000000100000000
DATA argmaxGradLane<>+8(SB)/8, $0x0000000300000002
DATA argmaxGradLane<>+16(SB)/8, $0x0000000500000004
DATA argmaxGradLane<>+24(SB)/8, $0x0000000700000006
GLOBL argmaxGradLane<>(SB), RODATA|NOPTR, $32

// One tap row T of eight windows: with the codes Y0 (window i) and Y1
// (window i−1) and the gradients Y2 and Y3 in the same order, masked to
// A = Y3 where Y1 names the row's third tap, B = Y2 where Y0 names its
// first and C = Y2 where Y0 names its second, the 16 elements at M0 and
// M1 (the row's taps of the eight windows but the last window's third)
// take d[2i] += A then += B and d[2i+1] += C: the order in which the
// windows, taken one after another, add to them. The even elements come
// out of the shuffle in the order 0 1 4 5 | 2 3 6 7, which is why the
// caller permutes the codes and gradients the same way; the unpacks put
// them back.
#define TAPROW(T, M0, M1) \
	VPCMPEQD argmaxGradCode<>+(32*(3*T+2))(SB), Y1, Y5 \
	VANDPS   Y3, Y5, Y5 \
	VPCMPEQD argmaxGradCode<>+(32*(3*T))(SB), Y0, Y6 \
	VANDPS   Y2, Y6, Y6 \
	VPCMPEQD argmaxGradCode<>+(32*(3*T+1))(SB), Y0, Y7 \
	VANDPS   Y2, Y7, Y7 \
	VMOVUPS  M0, Y8 \
	VMOVUPS  M1, Y9 \
	VSHUFPS  $0x88, Y9, Y8, Y10 \
	VSHUFPS  $0xDD, Y9, Y8, Y11 \
	VADDPS   Y5, Y10, Y10 \
	VADDPS   Y6, Y10, Y10 \
	VADDPS   Y7, Y11, Y11 \
	VUNPCKLPS Y11, Y10, Y8 \
	VUNPCKHPS Y11, Y10, Y9 \
	VMOVUPS  Y8, M0 \
	VMOVUPS  Y9, M1

// func argmaxGrad3x3S2AVX2(d *float32, iw int, dy *float32, c *uint8, blocks, skip int) (bad bool)
//
// For 8·blocks 3×3 windows two columns apart, window i with code c[i]
// (tap 3·row + column) and gradient dy[i], its taps at d[2i], d[2i+1],
// d[2i+2] of the rows at d, d+iw and d+2·iw: adds dy[i] to the tap its code
// names, except window 8·blocks−1's third column, and dy[−1] (the window
// before, read at c[−1] and dy[−1]) to d[0] of the row its code names when
// it names its third column. Each element takes its windows' gradients in
// window order, as MaxPoolGrad adds them. With skip > 0 the first block's
// first skip lanes are masked off: windows 0 … skip−1 add their first two
// columns and windows −1 … skip−2 their third column nothing (a block over
// windows already added, whose last one's third column is still to come).
// Reports whether a code of the 8·blocks windows is above 8.
TEXT ·argmaxGrad3x3S2AVX2(SB), NOSPLIT, $0-49
	MOVQ d+0(FP), DI
	MOVQ iw+8(FP), DX
	SHLQ $2, DX
	MOVQ dy+16(FP), SI
	MOVQ c+24(FP), BX
	MOVQ blocks+32(FP), CX
	VPBROADCASTD skip+40(FP), Y12
	VMOVDQU argmaxGradLane<>(SB), Y13
	VPCMPEQD Y14, Y14, Y14
	VPADDD   Y14, Y12, Y12              // skip − 1
	VPCMPGTD Y12, Y13, Y12              // lane ≥ skip: the windows added
	VPBROADCASTD argmaxGradCode<>+256(SB), Y14 // 8s
	VPXOR    Y15, Y15, Y15

ag3Block:
	VPMOVZXBD (BX), Y0
	VPMOVZXBD -1(BX), Y1
	VANDPS    (SI), Y12, Y2
	VANDPS    -4(SI), Y12, Y3
	VPCMPGTD  Y14, Y0, Y4
	VPOR      Y4, Y15, Y15
	VPERMQ    $0xD8, Y0, Y0
	VPERMQ    $0xD8, Y1, Y1
	VPERMQ    $0xD8, Y2, Y2
	VPERMQ    $0xD8, Y3, Y3
	TAPROW(0, (DI), 32(DI))
	LEAQ      (DI)(DX*1), R8
	LEAQ      (R8)(DX*1), R9
	TAPROW(1, (R8), 32(R8))
	TAPROW(2, (R9), 32(R9))
	VPCMPEQD  Y12, Y12, Y12
	ADDQ      $8, BX
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       ag3Block

	VPTEST    Y15, Y15
	SETNE     bad+48(FP)
	VZEROUPPER
	RET
