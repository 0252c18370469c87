//go:build amd64 && !purego

#include "textflag.h"

// The float32 arithmetic row loops: 32 elements a step while there are,
// then 8 (n is a multiple of 8). VADDPS, VSUBPS, VMULPS and VDIVPS round
// each lane as the scalar instruction rounds it, so every loop gives the
// bits of the Go loop it replaces. DI: dst, SI: a, DX: b, CX: n; Y15 the
// broadcast scalar of the VS and SV loops.

// The step of each form on register R, loaded from a[i] (OFF: the
// register's byte offset in the step): VV_STEP R OP b[i] (b at DX),
// VS_STEP R OP s, SV_STEP s OP R (s in Y15).
#define VV_STEP(OP, R, OFF) OP OFF(DX), R, R
#define VS_STEP(OP, R, OFF) OP Y15, R, R
#define SV_STEP(OP, R, OFF) OP R, Y15, R

// LOOP: dst[i] = STEP(OP) of a[i] (at SI), 32 a step, then 8. DX moves
// with SI (the VS and SV forms do not read it).
#define LOOP(STEP, OP, L32, L8, DONE) \
L32: \
	CMPQ    CX, $32 \
	JL      L8 \
	VMOVUPS 0(SI), Y0 \
	VMOVUPS 32(SI), Y1 \
	VMOVUPS 64(SI), Y2 \
	VMOVUPS 96(SI), Y3 \
	STEP(OP, Y0, 0) \
	STEP(OP, Y1, 32) \
	STEP(OP, Y2, 64) \
	STEP(OP, Y3, 96) \
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
	STEP(OP, Y0, 0) \
	VMOVUPS Y0, 0(DI) \
	ADDQ    $32, SI \
	ADDQ    $32, DX \
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
	LOOP(VV_STEP, VADDPS, addvv32, addvv8, addvvDone)

// func subVVAVX2(dst, a, b *float32, n int)
TEXT ·subVVAVX2(SB), NOSPLIT, $0-32
	VV_ARGS
	LOOP(VV_STEP, VSUBPS, subvv32, subvv8, subvvDone)

// func mulVVAVX2(dst, a, b *float32, n int)
TEXT ·mulVVAVX2(SB), NOSPLIT, $0-32
	VV_ARGS
	LOOP(VV_STEP, VMULPS, mulvv32, mulvv8, mulvvDone)

// func divVVAVX2(dst, a, b *float32, n int)
TEXT ·divVVAVX2(SB), NOSPLIT, $0-32
	VV_ARGS
	LOOP(VV_STEP, VDIVPS, divvv32, divvv8, divvvDone)

// func addVSAVX2(dst, a *float32, n int, s float32)
TEXT ·addVSAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	LOOP(VS_STEP, VADDPS, addvs32, addvs8, addvsDone)

// func subVSAVX2(dst, a *float32, n int, s float32)
TEXT ·subVSAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	LOOP(VS_STEP, VSUBPS, subvs32, subvs8, subvsDone)

// func mulVSAVX2(dst, a *float32, n int, s float32)
TEXT ·mulVSAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	LOOP(VS_STEP, VMULPS, mulvs32, mulvs8, mulvsDone)

// func divVSAVX2(dst, a *float32, n int, s float32)
TEXT ·divVSAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	LOOP(VS_STEP, VDIVPS, divvs32, divvs8, divvsDone)

// func subSVAVX2(dst, a *float32, n int, s float32)  (a is b: dst[i] = s - a[i])
TEXT ·subSVAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	LOOP(SV_STEP, VSUBPS, subsv32, subsv8, subsvDone)

// func divSVAVX2(dst, a *float32, n int, s float32)  (dst[i] = s / a[i])
TEXT ·divSVAVX2(SB), NOSPLIT, $0-28
	VS_ARGS
	LOOP(SV_STEP, VDIVPS, divsv32, divsv8, divsvDone)
