//go:build amd64 && !purego

#include "textflag.h"

// The float32 arithmetic row loops: 32 elements a step while there are,
// then 8 (n is a multiple of 8). VADDPS, VSUBPS, VMULPS and VDIVPS round
// each lane as the scalar instruction rounds it, so every loop gives the
// bits of the Go loop it replaces. DI: dst, SI: a, DX: b, CX: n; Y15 the
// broadcast scalar of the VS and SV loops.

// VV_LOOP: dst[i] = a[i] OP b[i].
#define VV_LOOP(OP, L32, L8, DONE) \
L32: \
	CMPQ    CX, $32 \
	JL      L8 \
	VMOVUPS 0(SI), Y0 \
	VMOVUPS 32(SI), Y1 \
	VMOVUPS 64(SI), Y2 \
	VMOVUPS 96(SI), Y3 \
	OP      0(DX), Y0, Y0 \
	OP      32(DX), Y1, Y1 \
	OP      64(DX), Y2, Y2 \
	OP      96(DX), Y3, Y3 \
	VMOVUPS Y0, 0(DI) \
	VMOVUPS Y1, 32(DI) \
	VMOVUPS Y2, 64(DI) \
	VMOVUPS Y3, 96(DI) \
	ADDQ    $128, SI \
	ADDQ    $128, DX \
	ADDQ    $128, DI \
	SUBQ    $32, CX \
	JMP     L32 \
L8: \
	CMPQ    CX, $8 \
	JL      DONE \
	VMOVUPS 0(SI), Y0 \
	OP      0(DX), Y0, Y0 \
	VMOVUPS Y0, 0(DI) \
	ADDQ    $32, SI \
	ADDQ    $32, DX \
	ADDQ    $32, DI \
	SUBQ    $8, CX \
	JMP     L8 \
DONE: \
	VZEROUPPER \
	RET

// VS_LOOP: dst[i] = a[i] OP s (s in Y15).
#define VS_LOOP(OP, L32, L8, DONE) \
L32: \
	CMPQ    CX, $32 \
	JL      L8 \
	VMOVUPS 0(SI), Y0 \
	VMOVUPS 32(SI), Y1 \
	VMOVUPS 64(SI), Y2 \
	VMOVUPS 96(SI), Y3 \
	OP      Y15, Y0, Y0 \
	OP      Y15, Y1, Y1 \
	OP      Y15, Y2, Y2 \
	OP      Y15, Y3, Y3 \
	VMOVUPS Y0, 0(DI) \
	VMOVUPS Y1, 32(DI) \
	VMOVUPS Y2, 64(DI) \
	VMOVUPS Y3, 96(DI) \
	ADDQ    $128, SI \
	ADDQ    $128, DI \
	SUBQ    $32, CX \
	JMP     L32 \
L8: \
	CMPQ    CX, $8 \
	JL      DONE \
	VMOVUPS 0(SI), Y0 \
	OP      Y15, Y0, Y0 \
	VMOVUPS Y0, 0(DI) \
	ADDQ    $32, SI \
	ADDQ    $32, DI \
	SUBQ    $8, CX \
	JMP     L8 \
DONE: \
	VZEROUPPER \
	RET

// SV_LOOP: dst[i] = s OP b[i] (s in Y15, b at SI).
#define SV_LOOP(OP, L32, L8, DONE) \
L32: \
	CMPQ    CX, $32 \
	JL      L8 \
	VMOVUPS 0(SI), Y0 \
	VMOVUPS 32(SI), Y1 \
	VMOVUPS 64(SI), Y2 \
	VMOVUPS 96(SI), Y3 \
	OP      Y0, Y15, Y0 \
	OP      Y1, Y15, Y1 \
	OP      Y2, Y15, Y2 \
	OP      Y3, Y15, Y3 \
	VMOVUPS Y0, 0(DI) \
	VMOVUPS Y1, 32(DI) \
	VMOVUPS Y2, 64(DI) \
	VMOVUPS Y3, 96(DI) \
	ADDQ    $128, SI \
	ADDQ    $128, DI \
	SUBQ    $32, CX \
	JMP     L32 \
L8: \
	CMPQ    CX, $8 \
	JL      DONE \
	VMOVUPS 0(SI), Y0 \
	OP      Y0, Y15, Y0 \
	VMOVUPS Y0, 0(DI) \
	ADDQ    $32, SI \
	ADDQ    $32, DI \
	SUBQ    $8, CX \
	JMP     L8 \
DONE: \
	VZEROUPPER \
	RET

#define VV_ARGS \
	MOVQ dst+0(FP), DI \
	MOVQ a+8(FP), SI \
	MOVQ b+16(FP), DX \
	MOVQ n+24(FP), CX

#define VS_ARGS \
	MOVQ         dst+0(FP), DI \
	MOVQ         a+8(FP), SI \
	MOVQ         n+16(FP), CX \
	VBROADCASTSS s+24(FP), Y15

// func addVVAVX2(dst, a, b *float32, n int)
TEXT ·addVVAVX2(SB), NOSPLIT, $0-32
	VV_ARGS
	VV_LOOP(VADDPS, addvv32, addvv8, addvvDone)

// func subVVAVX2(dst, a, b *float32, n int)
TEXT ·subVVAVX2(SB), NOSPLIT, $0-32
	VV_ARGS
	VV_LOOP(VSUBPS, subvv32, subvv8, subvvDone)

// func mulVVAVX2(dst, a, b *float32, n int)
TEXT ·mulVVAVX2(SB), NOSPLIT, $0-32
	VV_ARGS
	VV_LOOP(VMULPS, mulvv32, mulvv8, mulvvDone)

// func divVVAVX2(dst, a, b *float32, n int)
TEXT ·divVVAVX2(SB), NOSPLIT, $0-32
	VV_ARGS
	VV_LOOP(VDIVPS, divvv32, divvv8, divvvDone)

// func addVSAVX2(dst, a *float32, n int, s float32)
TEXT ·addVSAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	VS_LOOP(VADDPS, addvs32, addvs8, addvsDone)

// func subVSAVX2(dst, a *float32, n int, s float32)
TEXT ·subVSAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	VS_LOOP(VSUBPS, subvs32, subvs8, subvsDone)

// func mulVSAVX2(dst, a *float32, n int, s float32)
TEXT ·mulVSAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	VS_LOOP(VMULPS, mulvs32, mulvs8, mulvsDone)

// func divVSAVX2(dst, a *float32, n int, s float32)
TEXT ·divVSAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	VS_LOOP(VDIVPS, divvs32, divvs8, divvsDone)

// func subSVAVX2(dst, a *float32, n int, s float32)  (a is b: dst[i] = s - a[i])
TEXT ·subSVAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	SV_LOOP(VSUBPS, subsv32, subsv8, subsvDone)

// func divSVAVX2(dst, a *float32, n int, s float32)  (dst[i] = s / a[i])
TEXT ·divSVAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	SV_LOOP(VDIVPS, divsv32, divsv8, divsvDone)
