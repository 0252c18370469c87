//go:build !purego

#include "textflag.h"

// func fmaAxpy32AVX2(alpha float32, x, y []float32)
//
// y[i] = fma(alpha, x[i], y[i]) for i < len(y) &^ 7, eight lanes at a time
// with VFMADD231PS (one rounding, as fma32). The caller does the tail.
TEXT ·fmaAxpy32AVX2(SB), NOSPLIT, $0-56
	VBROADCASTSS alpha+0(FP), Y0
	MOVQ x_base+8(FP), SI
	MOVQ y_base+32(FP), DI
	MOVQ y_len+40(FP), CX
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS     (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNZ         loop

done:
	VZEROUPPER
	RET
