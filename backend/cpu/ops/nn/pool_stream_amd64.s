//go:build amd64 && !purego

#include "textflag.h"

// func poolStreamCopyAVX(dst, src *float32, n int)
//
// Copies n floats (a multiple of 32) from src to dst with non-temporal
// stores; dst is 32-byte aligned. Ends with SFENCE, so the stores are
// ordered before whatever the caller does next.
TEXT ·poolStreamCopyAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

copy32:
	CMPQ CX, $32
	JL   copyDone
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VMOVNTPS Y0, (DI)
	VMOVNTPS Y1, 32(DI)
	VMOVNTPS Y2, 64(DI)
	VMOVNTPS Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  copy32

copyDone:
	SFENCE
	VZEROUPPER
	RET
