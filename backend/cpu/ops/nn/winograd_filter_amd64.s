//go:build amd64 && !purego

#include "textflag.h"

// The transform passes of the Winograd filter gradient
// (winograd_filter.go), one row of Bᵀ·d·B or A·dY·Aᵀ at a time. Vertical
// passes combine two image rows element by element, 8 columns at a time,
// for several tile rows; horizontal passes take the tiles (2 columns
// apart) of a combined row 8 at a time, splitting even and odd columns
// with VSHUFPS or gathering them. The shuffles leave the 8 tiles of a
// group in the lane order 0 1 4 5 2 3 6 7, the same in the image and the
// output-gradient passes, so the sums over tiles that follow do not
// depend on it.

// VTAB_ARGS loads the arguments of the vertical passes,
// func(s *float32, seg int, x, zero *float32, ta, tb *int, rows, full int, mask *int32):
// tile row q combines row a, x[ta[q]:] (zero when ta[q] < 0), with row
// b, x[tb[q]:] likewise, into s + q·seg, full groups of 8 columns and,
// when mask is not nil, one more group of the columns whose mask lanes
// are set. DI = s, R13 = seg in bytes, SI = x, R9 = zero, R10 = ta,
// R11 = tb, CX = rows, DX = 32·full, R15 = mask (its lanes in Y14),
// Y15 = 0.
#define VTAB_ARGS \
	MOVQ   s+0(FP), DI \
	MOVQ   seg+8(FP), R13 \
	SHLQ   $2, R13 \
	MOVQ   x+16(FP), SI \
	MOVQ   zero+24(FP), R9 \
	MOVQ   ta+32(FP), R10 \
	MOVQ   tb+40(FP), R11 \
	MOVQ   rows+48(FP), CX \
	MOVQ   full+56(FP), DX \
	SHLQ   $5, DX \
	MOVQ   mask+64(FP), R15 \
	VXORPS Y15, Y15, Y15 \
	TESTQ  R15, R15 \
	JZ     2(PC) \
	VMOVDQU (R15), Y14

// VTAB_ROW points R12 at tile row q's row a and R8 at its row b, and
// R14 at column 0.
#define VTAB_ROW \
	MOVQ    (R10), AX \
	LEAQ    (SI)(AX*4), R12 \
	TESTQ   AX, AX \
	CMOVQLT R9, R12 \
	MOVQ    (R11), BX \
	LEAQ    (SI)(BX*4), R8 \
	TESTQ   BX, BX \
	CMOVQLT R9, R8 \
	XORQ    R14, R14

// VTAB_NEXT moves on to the next tile row and counts it off.
#define VTAB_NEXT \
	ADDQ $8, R10 \
	ADDQ $8, R11 \
	ADDQ R13, DI \
	DECQ CX

// func wgradVertAddAVX2(s *float32, seg int, x, zero *float32, ta, tb *int, rows, full int, mask *int32)
//
// s = a + b, over tile rows as VTAB_ARGS describes.
TEXT ·wgradVertAddAVX2(SB), NOSPLIT, $0-72
	VTAB_ARGS

vertAddRow:
	VTAB_ROW
	TESTQ DX, DX
	JZ    vertAddTail

vertAddCol:
	VMOVUPS (R12)(R14*1), Y0
	VMOVUPS (R8)(R14*1), Y1
	VADDPS  Y1, Y0, Y2
	VMOVUPS Y2, (DI)(R14*1)
	ADDQ    $32, R14
	CMPQ    R14, DX
	JLT     vertAddCol

vertAddTail:
	TESTQ      R15, R15
	JZ         vertAddNext
	VMASKMOVPS (R12)(R14*1), Y14, Y0
	VMASKMOVPS (R8)(R14*1), Y14, Y1
	VADDPS  Y1, Y0, Y2
	VMASKMOVPS Y2, Y14, (DI)(R14*1)

vertAddNext:
	VTAB_NEXT
	JNZ vertAddRow
	VZEROUPPER
	RET

// func wgradVertSubAVX2(s *float32, seg int, x, zero *float32, ta, tb *int, rows, full int, mask *int32)
//
// s = a − b, over tile rows as VTAB_ARGS describes.
TEXT ·wgradVertSubAVX2(SB), NOSPLIT, $0-72
	VTAB_ARGS

vertSubRow:
	VTAB_ROW
	TESTQ DX, DX
	JZ    vertSubTail

vertSubCol:
	VMOVUPS (R12)(R14*1), Y0
	VMOVUPS (R8)(R14*1), Y1
	VSUBPS  Y1, Y0, Y2
	VMOVUPS Y2, (DI)(R14*1)
	ADDQ    $32, R14
	CMPQ    R14, DX
	JLT     vertSubCol

vertSubTail:
	TESTQ      R15, R15
	JZ         vertSubNext
	VMASKMOVPS (R12)(R14*1), Y14, Y0
	VMASKMOVPS (R8)(R14*1), Y14, Y1
	VSUBPS  Y1, Y0, Y2
	VMASKMOVPS Y2, Y14, (DI)(R14*1)

vertSubNext:
	VTAB_NEXT
	JNZ vertSubRow
	VZEROUPPER
	RET

// func wgradVertCopyAVX2(s *float32, seg int, x, zero *float32, ta, tb *int, rows, full int, mask *int32)
//
// s = a, over tile rows as VTAB_ARGS describes.
TEXT ·wgradVertCopyAVX2(SB), NOSPLIT, $0-72
	VTAB_ARGS

vertCopyRow:
	VTAB_ROW
	TESTQ DX, DX
	JZ    vertCopyTail

vertCopyCol:
	VMOVUPS (R12)(R14*1), Y0
	VMOVUPS (R8)(R14*1), Y1
	VMOVAPS Y0, Y2
	VMOVUPS Y2, (DI)(R14*1)
	ADDQ    $32, R14
	CMPQ    R14, DX
	JLT     vertCopyCol

vertCopyTail:
	TESTQ      R15, R15
	JZ         vertCopyNext
	VMASKMOVPS (R12)(R14*1), Y14, Y0
	VMASKMOVPS (R8)(R14*1), Y14, Y1
	VMOVAPS Y0, Y2
	VMASKMOVPS Y2, Y14, (DI)(R14*1)

vertCopyNext:
	VTAB_NEXT
	JNZ vertCopyRow
	VZEROUPPER
	RET

// func wgradVertNegAVX2(s *float32, seg int, x, zero *float32, ta, tb *int, rows, full int, mask *int32)
//
// s = −b, over tile rows as VTAB_ARGS describes.
TEXT ·wgradVertNegAVX2(SB), NOSPLIT, $0-72
	VTAB_ARGS

vertNegRow:
	VTAB_ROW
	TESTQ DX, DX
	JZ    vertNegTail

vertNegCol:
	VMOVUPS (R12)(R14*1), Y0
	VMOVUPS (R8)(R14*1), Y1
	VSUBPS  Y1, Y15, Y2
	VMOVUPS Y2, (DI)(R14*1)
	ADDQ    $32, R14
	CMPQ    R14, DX
	JLT     vertNegCol

vertNegTail:
	TESTQ      R15, R15
	JZ         vertNegNext
	VMASKMOVPS (R12)(R14*1), Y14, Y0
	VMASKMOVPS (R8)(R14*1), Y14, Y1
	VSUBPS  Y1, Y15, Y2
	VMASKMOVPS Y2, Y14, (DI)(R14*1)

vertNegNext:
	VTAB_NEXT
	JNZ vertNegRow
	VZEROUPPER
	RET

// func wgradHorzXAVX2(out *float32, ld int, s *float32, nsg, gps, sgstride, boff int)
//
// ·B along the row s: tile j reads a, b, c, d = s[2j … 2j+3] and writes
// a−c, b+c, c−b, b−d to out rows 0 … 3 (ld elements apart). The tiles
// come in nsg (>= 1) runs sgstride elements apart of gps (>= 1) groups 16
// elements apart; a group's first 4 tiles start at its start and its last
// 4 boff elements on. Each group writes 8 consecutive slots of the out
// rows.
TEXT ·wgradHorzXAVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ ld+8(FP), R8
	SHLQ $2, R8
	MOVQ s+16(FP), SI
	MOVQ nsg+24(FP), R11
	MOVQ sgstride+40(FP), R12
	SHLQ $2, R12
	MOVQ boff+48(FP), R13
	SHLQ $2, R13
	LEAQ (R8)(R8*2), R10

horzXRun:
	MOVQ gps+32(FP), CX
	MOVQ SI, AX

horzXGroup:
	VMOVUPS (AX), Y0
	VMOVUPS (AX)(R13*1), Y1
	VMOVUPS 8(AX), Y2
	VMOVUPS 8(AX)(R13*1), Y3
	VSHUFPS $0x88, Y1, Y0, Y4 // a
	VSHUFPS $0xDD, Y1, Y0, Y5 // b
	VSHUFPS $0x88, Y3, Y2, Y6 // c
	VSHUFPS $0xDD, Y3, Y2, Y7 // d
	VSUBPS  Y6, Y4, Y8
	VADDPS  Y6, Y5, Y9
	VSUBPS  Y5, Y6, Y10
	VSUBPS  Y7, Y5, Y11
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(R8*1)
	VMOVUPS Y10, (DI)(R8*2)
	VMOVUPS Y11, (DI)(R10*1)
	ADDQ    $64, AX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     horzXGroup

	ADDQ R12, SI
	DECQ R11
	JNZ  horzXRun
	VZEROUPPER
	RET

// func wgradHorzYAVX2(out *float32, ld int, s *float32, nsg, gps, sgstride, boff int)
//
// ·Aᵀ along the row s: tile j reads a, b = s[2j], s[2j+1] and writes a,
// a+b, a−b, −b to out rows 0 … 3 (ld elements apart), the tiles laid out
// as in wgradHorzXAVX2.
TEXT ·wgradHorzYAVX2(SB), NOSPLIT, $0-56
	MOVQ   out+0(FP), DI
	MOVQ   ld+8(FP), R8
	SHLQ   $2, R8
	MOVQ   s+16(FP), SI
	MOVQ   nsg+24(FP), R11
	MOVQ   sgstride+40(FP), R12
	SHLQ   $2, R12
	MOVQ   boff+48(FP), R13
	SHLQ   $2, R13
	LEAQ   (R8)(R8*2), R10
	VXORPS Y15, Y15, Y15

horzYRun:
	MOVQ gps+32(FP), CX
	MOVQ SI, AX

horzYGroup:
	VMOVUPS (AX), Y0
	VMOVUPS (AX)(R13*1), Y1
	VSHUFPS $0x88, Y1, Y0, Y4 // a
	VSHUFPS $0xDD, Y1, Y0, Y5 // b
	VADDPS  Y5, Y4, Y9
	VSUBPS  Y5, Y4, Y10
	VSUBPS  Y5, Y15, Y11
	VMOVUPS Y4, (DI)
	VMOVUPS Y9, (DI)(R8*1)
	VMOVUPS Y10, (DI)(R8*2)
	VMOVUPS Y11, (DI)(R10*1)
	ADDQ    $64, AX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     horzYGroup

	ADDQ R12, SI
	DECQ R11
	JNZ  horzYRun
	VZEROUPPER
	RET

// func wgradHorzXGatherAVX2(out *float32, ld int, s *float32, idx *int32, groups int)
//
// wgradHorzXAVX2 for tiles anywhere in the row s: tile t of the groups
// (>= 1) of 8 starts at element idx[t], read with VGATHERDPS; its results
// go to slot t of the out rows.
TEXT ·wgradHorzXGatherAVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ ld+8(FP), R8
	SHLQ $2, R8
	MOVQ s+16(FP), SI
	MOVQ idx+24(FP), R11
	MOVQ groups+32(FP), CX
	LEAQ (R8)(R8*2), R10

gatherXGroup:
	VMOVDQU    (R11), Y12
	VPCMPEQD   Y13, Y13, Y13
	VGATHERDPS Y13, (SI)(Y12*4), Y4 // a
	VPCMPEQD   Y13, Y13, Y13
	VGATHERDPS Y13, 4(SI)(Y12*4), Y5 // b
	VPCMPEQD   Y13, Y13, Y13
	VGATHERDPS Y13, 8(SI)(Y12*4), Y6 // c
	VPCMPEQD   Y13, Y13, Y13
	VGATHERDPS Y13, 12(SI)(Y12*4), Y7 // d
	VSUBPS     Y6, Y4, Y8
	VADDPS     Y6, Y5, Y9
	VSUBPS     Y5, Y6, Y10
	VSUBPS     Y7, Y5, Y11
	VMOVUPS    Y8, (DI)
	VMOVUPS    Y9, (DI)(R8*1)
	VMOVUPS    Y10, (DI)(R8*2)
	VMOVUPS    Y11, (DI)(R10*1)
	ADDQ       $32, R11
	ADDQ       $32, DI
	DECQ       CX
	JNZ        gatherXGroup
	VZEROUPPER
	RET

// func wgradHorzYGatherAVX2(out *float32, ld int, s *float32, idx *int32, groups int)
//
// wgradHorzYAVX2 for tiles anywhere in the row s, as wgradHorzXGatherAVX2
// reads them.
TEXT ·wgradHorzYGatherAVX2(SB), NOSPLIT, $0-40
	MOVQ   out+0(FP), DI
	MOVQ   ld+8(FP), R8
	SHLQ   $2, R8
	MOVQ   s+16(FP), SI
	MOVQ   idx+24(FP), R11
	MOVQ   groups+32(FP), CX
	LEAQ   (R8)(R8*2), R10
	VXORPS Y15, Y15, Y15

gatherYGroup:
	VMOVDQU    (R11), Y12
	VPCMPEQD   Y13, Y13, Y13
	VGATHERDPS Y13, (SI)(Y12*4), Y4 // a
	VPCMPEQD   Y13, Y13, Y13
	VGATHERDPS Y13, 4(SI)(Y12*4), Y5 // b
	VADDPS     Y5, Y4, Y9
	VSUBPS     Y5, Y4, Y10
	VSUBPS     Y5, Y15, Y11
	VMOVUPS    Y4, (DI)
	VMOVUPS    Y9, (DI)(R8*1)
	VMOVUPS    Y10, (DI)(R8*2)
	VMOVUPS    Y11, (DI)(R10*1)
	ADDQ       $32, R11
	ADDQ       $32, DI
	DECQ       CX
	JNZ        gatherYGroup
	VZEROUPPER
	RET

// func wgradOutputAVX2(dw, u *float32, ld, groups int, acc bool)
//
// Gᵀ·U·G for groups (>= 1) of 8 channels: channel j's position ξ is
// u[ξ·ld + j]; its 3×3 result goes to dw[9j … 9j+8], or is added there
// when acc is set. The 9 results of 8 channels are computed as 9 vectors,
// the first 8 transposed into the channels' rows and the ninth stored
// lane by lane from the stack.
TEXT ·wgradOutputAVX2(SB), NOSPLIT, $32-33
	MOVQ  dw+0(FP), DI
	MOVQ  u+8(FP), SI
	MOVQ  ld+16(FP), R8
	SHLQ  $2, R8
	MOVQ  groups+24(FP), CX
	MOVBQZX acc+32(FP), R9
	LEAQ  (R8)(R8*2), R10

outGroup:
	MOVL         $0x3f000000, AX
	VMOVD        AX, X15
	VBROADCASTSS X15, Y15 // 0.5
	LEAQ         (SI)(R8*4), R11 // u4
	LEAQ         (R11)(R8*4), R12 // u8
	LEAQ         (R12)(R8*4), R13 // u12

	// Row 0 of Gᵀ·U: t_k = u_k + (u_{4+k} + u_{8+k})/2.
	VMOVUPS (R11), Y13
	VADDPS  (R12), Y13, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  (SI), Y13, Y9
	VMOVUPS (R11)(R8*1), Y13
	VADDPS  (R12)(R8*1), Y13, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  (SI)(R8*1), Y13, Y10
	VMOVUPS (R11)(R8*2), Y13
	VADDPS  (R12)(R8*2), Y13, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  (SI)(R8*2), Y13, Y11
	VMOVUPS (R11)(R10*1), Y13
	VADDPS  (R12)(R10*1), Y13, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  (SI)(R10*1), Y13, Y12
	// ·G: t0 + (t1+t2)/2, (t1−t2)/2, (t1+t2)/2 + t3.
	VADDPS Y11, Y10, Y13
	VMULPS Y15, Y13, Y13
	VADDPS Y13, Y9, Y0
	VADDPS Y13, Y12, Y2
	VSUBPS Y11, Y10, Y14
	VMULPS Y15, Y14, Y1

	// Row 1: t_k = (u_{4+k} − u_{8+k})/2.
	VMOVUPS (R11), Y13
	VSUBPS  (R12), Y13, Y13
	VMULPS  Y15, Y13, Y9
	VMOVUPS (R11)(R8*1), Y13
	VSUBPS  (R12)(R8*1), Y13, Y13
	VMULPS  Y15, Y13, Y10
	VMOVUPS (R11)(R8*2), Y13
	VSUBPS  (R12)(R8*2), Y13, Y13
	VMULPS  Y15, Y13, Y11
	VMOVUPS (R11)(R10*1), Y13
	VSUBPS  (R12)(R10*1), Y13, Y13
	VMULPS  Y15, Y13, Y12
	VADDPS  Y11, Y10, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  Y13, Y9, Y3
	VADDPS  Y13, Y12, Y5
	VSUBPS  Y11, Y10, Y14
	VMULPS  Y15, Y14, Y4

	// Row 2: t_k = (u_{4+k} + u_{8+k})/2 + u_{12+k}.
	VMOVUPS (R11), Y13
	VADDPS  (R12), Y13, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  (R13), Y13, Y9
	VMOVUPS (R11)(R8*1), Y13
	VADDPS  (R12)(R8*1), Y13, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  (R13)(R8*1), Y13, Y10
	VMOVUPS (R11)(R8*2), Y13
	VADDPS  (R12)(R8*2), Y13, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  (R13)(R8*2), Y13, Y11
	VMOVUPS (R11)(R10*1), Y13
	VADDPS  (R12)(R10*1), Y13, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  (R13)(R10*1), Y13, Y12
	VADDPS  Y11, Y10, Y13
	VMULPS  Y15, Y13, Y13
	VADDPS  Y13, Y9, Y6
	VADDPS  Y13, Y12, Y8
	VSUBPS  Y11, Y10, Y14
	VMULPS  Y15, Y14, Y7

	// Results 0 … 7 (Y0 … Y7, lane j: channel j) transposed into rows
	// of channels; result 8 waits on the stack.
	VMOVUPS    Y8, (SP)
	VUNPCKLPS  Y1, Y0, Y8
	VUNPCKHPS  Y1, Y0, Y9
	VUNPCKLPS  Y3, Y2, Y10
	VUNPCKHPS  Y3, Y2, Y11
	VUNPCKLPS  Y5, Y4, Y12
	VUNPCKHPS  Y5, Y4, Y13
	VUNPCKLPS  Y7, Y6, Y14
	VUNPCKHPS  Y7, Y6, Y15
	VSHUFPS    $0x44, Y10, Y8, Y0
	VSHUFPS    $0xEE, Y10, Y8, Y1
	VSHUFPS    $0x44, Y11, Y9, Y2
	VSHUFPS    $0xEE, Y11, Y9, Y3
	VSHUFPS    $0x44, Y14, Y12, Y4
	VSHUFPS    $0xEE, Y14, Y12, Y5
	VSHUFPS    $0x44, Y15, Y13, Y6
	VSHUFPS    $0xEE, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15

	TESTQ R9, R9
	JNZ   outAcc
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, 36(DI)
	VMOVUPS Y10, 72(DI)
	VMOVUPS Y11, 108(DI)
	VMOVUPS Y12, 144(DI)
	VMOVUPS Y13, 180(DI)
	VMOVUPS Y14, 216(DI)
	VMOVUPS Y15, 252(DI)
	MOVL    (SP), AX
	MOVL    AX, 32(DI)
	MOVL    4(SP), AX
	MOVL    AX, 68(DI)
	MOVL    8(SP), AX
	MOVL    AX, 104(DI)
	MOVL    12(SP), AX
	MOVL    AX, 140(DI)
	MOVL    16(SP), AX
	MOVL    AX, 176(DI)
	MOVL    20(SP), AX
	MOVL    AX, 212(DI)
	MOVL    24(SP), AX
	MOVL    AX, 248(DI)
	MOVL    28(SP), AX
	MOVL    AX, 284(DI)
	JMP     outNext

outAcc:
	VADDPS  (DI), Y8, Y8
	VMOVUPS Y8, (DI)
	VADDPS  36(DI), Y9, Y9
	VMOVUPS Y9, 36(DI)
	VADDPS  72(DI), Y10, Y10
	VMOVUPS Y10, 72(DI)
	VADDPS  108(DI), Y11, Y11
	VMOVUPS Y11, 108(DI)
	VADDPS  144(DI), Y12, Y12
	VMOVUPS Y12, 144(DI)
	VADDPS  180(DI), Y13, Y13
	VMOVUPS Y13, 180(DI)
	VADDPS  216(DI), Y14, Y14
	VMOVUPS Y14, 216(DI)
	VADDPS  252(DI), Y15, Y15
	VMOVUPS Y15, 252(DI)
	VMOVSS  (SP), X0
	VADDSS  32(DI), X0, X0
	VMOVSS  X0, 32(DI)
	VMOVSS  4(SP), X0
	VADDSS  68(DI), X0, X0
	VMOVSS  X0, 68(DI)
	VMOVSS  8(SP), X0
	VADDSS  104(DI), X0, X0
	VMOVSS  X0, 104(DI)
	VMOVSS  12(SP), X0
	VADDSS  140(DI), X0, X0
	VMOVSS  X0, 140(DI)
	VMOVSS  16(SP), X0
	VADDSS  176(DI), X0, X0
	VMOVSS  X0, 176(DI)
	VMOVSS  20(SP), X0
	VADDSS  212(DI), X0, X0
	VMOVSS  X0, 212(DI)
	VMOVSS  24(SP), X0
	VADDSS  248(DI), X0, X0
	VMOVSS  X0, 248(DI)
	VMOVSS  28(SP), X0
	VADDSS  284(DI), X0, X0
	VMOVSS  X0, 284(DI)

outNext:
	ADDQ $32, SI
	ADDQ $288, DI
	DECQ CX
	JNZ  outGroup
	VZEROUPPER
	RET
