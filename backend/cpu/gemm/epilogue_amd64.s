//go:build amd64 && !purego

#include "textflag.h"

// func epilogueRows8(c *float32, ldc, rows, n8 int, bias *float32, relu bool)
//
// For rows rows of C (ldc elements apart) and their first n8 (a multiple
// of 8) columns: adds bias[j] to column j when bias is not nil, then
// replaces negatives by 0 when relu is set. VMAXPS with the value as its
// second source returns it when it is NaN (and -0 for -0), so NaN and
// negative zero pass as in the Go loop (v < 0 is false for both).
TEXT ·epilogueRows8(SB), NOSPLIT, $0-41
	MOVQ    c+0(FP), DI
	MOVQ    ldc+8(FP), SI
	SHLQ    $2, SI
	MOVQ    rows+16(FP), R8
	MOVQ    n8+24(FP), R9
	MOVQ    bias+32(FP), R10
	MOVBLZX relu+40(FP), R11
	VXORPS  Y15, Y15, Y15
	TESTQ   R8, R8
	JZ      done
	TESTQ   R9, R9
	JZ      done

row:
	XORQ CX, CX

col:
	VMOVUPS (DI)(CX*4), Y0
	TESTQ   R10, R10
	JZ      nobias
	VADDPS  (R10)(CX*4), Y0, Y0

nobias:
	TESTQ  R11, R11
	JZ     norelu
	VMAXPS Y0, Y15, Y0

norelu:
	VMOVUPS Y0, (DI)(CX*4)
	ADDQ    $8, CX
	CMPQ    CX, R9
	JLT     col
	ADDQ    SI, DI
	DECQ    R8
	JNZ     row

done:
	VZEROUPPER
	RET
