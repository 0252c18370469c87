//go:build amd64 && !purego

#include "textflag.h"

// Offsets into consts (four-lane float64 vectors, 32 bytes each).
#define C_LO 0
#define C_HI 32
#define C_INVLN2 64
#define C_MAGIC 96
#define C_BIAS 128
#define C_ONE 160
#define C_FOUR 192
#define C_HALF 224
#define C_CENTRE 256
#define C_HI32 288
#define C_THREE 320

// EXP4 turns the four float64 x-m in X into e^(x-m) in P; T and S are
// scratch. Needs Y8 = poly pointer base in R8 (memory), Y13 = lo clamp,
// Y14 = hi clamp, Y12 = 1/ln2, Y11 = magic, Y10 = ln2, Y9 = bias.
#define EXP4(X, T, S, P) \
	VMAXPD X, Y13, X \
	VMINPD X, Y14, X \
	VMOVAPD Y11, T \
	VFMADD231PD Y12, X, T \
	VSUBPD Y11, T, S \
	VFNMADD231PD Y10, S, X \
	VPADDQ Y9, T, T \
	VPSLLQ $52, T, T \
	VMOVUPD 0(R8), P \
	VFMADD213PD 32(R8), X, P \
	VFMADD213PD 64(R8), X, P \
	VFMADD213PD 96(R8), X, P \
	VFMADD213PD 128(R8), X, P \
	VFMADD213PD 160(R8), X, P \
	VFMADD213PD 192(R8), X, P \
	VFMADD213PD 224(R8), X, P \
	VFMADD213PD 256(R8), X, P \
	VFMADD213PD 288(R8), X, P \
	VMULPD T, P, P

// func expShiftAVX2(dst, src *float32, n int, m float64, poly, consts *[4]float64) float64
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD m+24(FP), Y15
	MOVQ poly+32(FP), R8
	MOVQ consts+40(FP), R9
	VMOVUPD C_LO(R9), Y13
	VMOVUPD C_HI(R9), Y14
	VMOVUPD C_INVLN2(R9), Y12
	VMOVUPD C_MAGIC(R9), Y11
	VMOVUPD C_BIAS(R9), Y9
	MOVQ $0x3FE62E42FEFA39EF, AX // ln2
	MOVQ AX, X10
	VBROADCASTSD X10, Y10
	VXORPD Y8, Y8, Y8
	VXORPD Y7, Y7, Y7

expLoop:
	CMPQ CX, $8
	JLT expDone
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y4
	VSUBPD Y15, Y0, Y0
	VSUBPD Y15, Y4, Y4
	EXP4(Y0, Y1, Y2, Y3)
	EXP4(Y4, Y5, Y6, Y2)
	VADDPD Y3, Y8, Y8
	VADDPD Y2, Y7, Y7
	VCVTPD2PSY Y3, X3
	VCVTPD2PSY Y2, X2
	VMOVUPS X3, (DI)
	VMOVUPS X2, 16(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP expLoop

expDone:
	VADDPD Y7, Y8, Y8
	VEXTRACTF128 $1, Y8, X0
	VADDPD X0, X8, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0
	VMOVSD X0, ret+48(FP)
	VZEROUPPER
	RET

// func erfAVX2(dst, src *float32, n int, mid *[8]float64, poly, consts *[4]float64)
TEXT ·erfAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ mid+24(FP), AX
	MOVQ poly+32(FP), R8
	MOVQ consts+40(FP), R9
	MOVQ $0x7FFFFFFFFFFFFFFF, DX
	MOVQ DX, X15
	VBROADCASTSD X15, Y15           // |x| mask
	VMOVUPD C_ONE(R9), Y14
	VMOVUPD C_FOUR(R9), Y13
	VMOVUPD C_HALF(R9), Y12
	VMOVUPD C_CENTRE(R9), Y11
	VPXOR X10, X10, X10             // int32 zeros
	MOVL $5, DX
	MOVQ DX, X9
	VPBROADCASTD X9, X9             // int32 fives

erfLoop:
	CMPQ CX, $4
	JLT erfDone
	VCVTPS2PD (SI), Y0              // x
	VANDPD Y15, Y0, Y1              // a = |x|

	// Middle range: i = clamp(trunc((a-1)·2), 0, 5), d = a - (1.25 + i/2).
	VSUBPD Y14, Y1, Y2
	VADDPD Y2, Y2, Y2
	VCVTTPD2DQY Y2, X2
	VPMAXSD X10, X2, X2
	VPMINSD X9, X2, X2
	VCVTDQ2PD X2, Y3
	VFMADD213PD Y11, Y12, Y3        // Y3 = i·0.5 + 1.25
	VSUBPD Y3, Y1, Y3               // d
	// Coefficient j of row i: VPERMD picks the float64 (as two dwords
	// 2i, 2i+1, taken mod 8) from rows 0-3 and from rows 4-5; a blend
	// keeps the second where i > 3.
	VPMOVZXDQ X2, Y6
	VPCMPGTQ C_THREE(R9), Y6, Y8    // i > 3
	VPADDQ Y6, Y6, Y7               // 2i
	VPSLLQ $32, Y7, Y5
	VPADDQ Y5, Y7, Y7
	VPADDQ C_HI32(R9), Y7, Y7       // dwords 2i, 2i+1
	VPERMD 448(AX), Y7, Y4
	VPERMD 480(AX), Y7, Y6
	VBLENDVPD Y8, Y6, Y4, Y4        // mid = c7
	VPERMD 384(AX), Y7, Y5
	VPERMD 416(AX), Y7, Y6
	VBLENDVPD Y8, Y6, Y5, Y5
	VFMADD213PD Y5, Y3, Y4
	VPERMD 320(AX), Y7, Y5
	VPERMD 352(AX), Y7, Y6
	VBLENDVPD Y8, Y6, Y5, Y5
	VFMADD213PD Y5, Y3, Y4
	VPERMD 256(AX), Y7, Y5
	VPERMD 288(AX), Y7, Y6
	VBLENDVPD Y8, Y6, Y5, Y5
	VFMADD213PD Y5, Y3, Y4
	VPERMD 192(AX), Y7, Y5
	VPERMD 224(AX), Y7, Y6
	VBLENDVPD Y8, Y6, Y5, Y5
	VFMADD213PD Y5, Y3, Y4
	VPERMD 128(AX), Y7, Y5
	VPERMD 160(AX), Y7, Y6
	VBLENDVPD Y8, Y6, Y5, Y5
	VFMADD213PD Y5, Y3, Y4
	VPERMD 64(AX), Y7, Y5
	VPERMD 96(AX), Y7, Y6
	VBLENDVPD Y8, Y6, Y5, Y5
	VFMADD213PD Y5, Y3, Y4
	VPERMD 0(AX), Y7, Y5
	VPERMD 32(AX), Y7, Y6
	VBLENDVPD Y8, Y6, Y5, Y5
	VFMADD213PD Y5, Y3, Y4

	// Small range: a·P(a²).
	VMULPD Y1, Y1, Y2               // s
	VMOVUPD 0(R8), Y3
	VFMADD213PD 32(R8), Y2, Y3
	VFMADD213PD 64(R8), Y2, Y3
	VFMADD213PD 96(R8), Y2, Y3
	VFMADD213PD 128(R8), Y2, Y3
	VFMADD213PD 160(R8), Y2, Y3
	VFMADD213PD 192(R8), Y2, Y3
	VMULPD Y1, Y3, Y3               // small

	// Select: a < 1 → small; !(a ≥ 4) (also NaN) → mid; else 1.
	VCMPPD $9, Y13, Y1, Y5          // !(a >= 4)
	VBLENDVPD Y5, Y4, Y14, Y4
	VCMPPD $1, Y14, Y1, Y5          // a < 1
	VBLENDVPD Y5, Y3, Y4, Y4
	VANDNPD Y0, Y15, Y0             // sign of x
	VORPD Y0, Y4, Y4
	VCVTPD2PSY Y4, X4
	VMOVUPS X4, (DI)
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $4, CX
	JMP erfLoop

erfDone:
	VZEROUPPER
	RET
