//go:build amd64 && !purego

#include "textflag.h"

// func bnSumsAVX2(x *float32, n int, x0 float64, pf1, pf2 *float32) (s, q float64)
//
// s = Σ(x[i]-x0), q = Σ(x[i]-x0)² over n elements (a multiple of 8), in
// float64: four lanes per accumulator, two accumulators of each sum. Each
// 32 bytes of x also ask (PREFETCHT0) for the line at the same offset from
// pf1 and from pf2 (nil: x itself, lines already on their way): the rows
// the caller's next pass writes or reads.
TEXT ·bnSumsAVX2(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD x0+16(FP), Y15
	MOVQ pf1+24(FP), DX
	TESTQ DX, DX
	CMOVQEQ SI, DX
	MOVQ pf2+32(FP), BX
	TESTQ BX, BX
	CMOVQEQ SI, BX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3

sums8:
	CMPQ CX, $8
	JL   sumsDone
	PREFETCHT0 (DX)
	PREFETCHT0 (BX)
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VSUBPD Y15, Y4, Y4
	VSUBPD Y15, Y5, Y5
	VADDPD Y4, Y0, Y0
	VADDPD Y5, Y1, Y1
	VFMADD231PD Y4, Y4, Y2
	VFMADD231PD Y5, Y5, Y3
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	SUBQ $8, CX
	JMP  sums8

sumsDone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VEXTRACTF128 $1, Y2, X3
	VADDPD X3, X2, X2
	VHADDPD X2, X2, X2
	VMOVSD X0, s+40(FP)
	VMOVSD X2, q+48(FP)
	VZEROUPPER
	RET

// func bnApplyAVX2(dst, src *float32, n int, mul, add float32, relu bool, pf *float32)
//
// dst[i] = src[i]·mul + add in float32, rounded after the product and the
// sum (as the Go loop), over n elements (a multiple of 8); with relu set,
// negative results become +0 (bits cleared, as Relu: -0 and NaN stay).
// Each 32 bytes of src also ask (PREFETCHT1, into L2) for the line at the
// same offset from pf (nil: src): the row the caller reads next.
TEXT ·bnApplyAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS mul+24(FP), Y14
	VBROADCASTSS add+28(FP), Y15
	MOVQ pf+40(FP), DX
	TESTQ DX, DX
	CMOVQEQ SI, DX
	VXORPS Y13, Y13, Y13
	MOVBLZX relu+32(FP), AX
	TESTQ AX, AX
	JNZ   relu8

apply8:
	CMPQ CX, $8
	JL   applyDone
	PREFETCHT1 (DX)
	VMULPS 0(SI), Y14, Y0
	VADDPS Y15, Y0, Y0
	VMOVUPS Y0, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  apply8

relu8:
	CMPQ CX, $8
	JL   applyDone
	PREFETCHT1 (DX)
	VMULPS 0(SI), Y14, Y0
	VADDPS Y15, Y0, Y0
	VCMPPS $1, Y13, Y0, Y1 // Y1 = Y0 < 0 (ordered, so NaN gives 0)
	VANDNPS Y0, Y1, Y0     // Y0 &^ Y1
	VMOVUPS Y0, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  relu8

applyDone:
	VZEROUPPER
	RET

// func bnShortSumsAVX2(x *float32, stride, rows, n int, x0, s, q *float64)
//
// For each column j < n (a multiple of 8) of the rows rows (at least 1)
// that start stride elements apart: s[j] = Σ(x[j]-x0[j]) and
// q[j] = Σ(x[j]-x0[j])² in float64, the rows added in order. Sixteen
// columns at a time keep their sums in registers over all the rows, then
// eight.
TEXT ·bnShortSumsAVX2(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ stride+8(FP), R8
	SHLQ $2, R8
	MOVQ rows+16(FP), R9
	MOVQ n+24(FP), CX
	MOVQ x0+32(FP), DX
	MOVQ s+40(FP), DI
	MOVQ q+48(FP), R10

cols16:
	CMPQ CX, $16
	JL   cols8
	VMOVUPD 0(DX), Y8
	VMOVUPD 32(DX), Y9
	VMOVUPD 64(DX), Y10
	VMOVUPD 96(DX), Y11
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
	MOVQ SI, AX
	MOVQ R9, BX

rows16:
	VCVTPS2PD 0(AX), Y12
	VCVTPS2PD 16(AX), Y13
	VCVTPS2PD 32(AX), Y14
	VCVTPS2PD 48(AX), Y15
	VSUBPD Y8, Y12, Y12
	VSUBPD Y9, Y13, Y13
	VSUBPD Y10, Y14, Y14
	VSUBPD Y11, Y15, Y15
	VADDPD Y12, Y0, Y0
	VADDPD Y13, Y1, Y1
	VADDPD Y14, Y2, Y2
	VADDPD Y15, Y3, Y3
	VFMADD231PD Y12, Y12, Y4
	VFMADD231PD Y13, Y13, Y5
	VFMADD231PD Y14, Y14, Y6
	VFMADD231PD Y15, Y15, Y7
	ADDQ R8, AX
	DECQ BX
	JNZ  rows16

	VMOVUPD Y0, 0(DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	VMOVUPD Y4, 0(R10)
	VMOVUPD Y5, 32(R10)
	VMOVUPD Y6, 64(R10)
	VMOVUPD Y7, 96(R10)
	ADDQ $64, SI
	ADDQ $128, DX
	ADDQ $128, DI
	ADDQ $128, R10
	SUBQ $16, CX
	JMP  cols16

cols8:
	CMPQ CX, $8
	JL   shortSumsDone
	VMOVUPD 0(DX), Y8
	VMOVUPD 32(DX), Y9
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	MOVQ SI, AX
	MOVQ R9, BX

rows8:
	VCVTPS2PD 0(AX), Y12
	VCVTPS2PD 16(AX), Y13
	VSUBPD Y8, Y12, Y12
	VSUBPD Y9, Y13, Y13
	VADDPD Y12, Y0, Y0
	VADDPD Y13, Y1, Y1
	VFMADD231PD Y12, Y12, Y4
	VFMADD231PD Y13, Y13, Y5
	ADDQ R8, AX
	DECQ BX
	JNZ  rows8

	VMOVUPD Y0, 0(DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y4, 0(R10)
	VMOVUPD Y5, 32(R10)
	ADDQ $32, SI
	ADDQ $64, DX
	ADDQ $64, DI
	ADDQ $64, R10
	SUBQ $8, CX
	JMP  cols8

shortSumsDone:
	VZEROUPPER
	RET

// func bnShortApplyAVX2(dst, src *float32, stride, rows, n int, mul, add *float32, relu bool)
//
// For each of the rows rows (at least 1) that start stride elements apart
// in src and dst, and each column j < n (a multiple of 8):
// dst[j] = src[j]·mul[j] + add[j], rounded after the product and the sum,
// with relu set negative results become +0 (as bnApplyAVX2).
TEXT ·bnShortApplyAVX2(SB), NOSPLIT, $0-57
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), R8
	SHLQ $2, R8
	MOVQ rows+24(FP), R9
	MOVQ n+32(FP), R11
	MOVQ mul+40(FP), DX
	MOVQ add+48(FP), R10
	MOVBLZX relu+56(FP), AX
	VXORPS Y13, Y13, Y13

shortRow:
	XORQ BX, BX
	MOVQ R11, CX
	TESTQ AX, AX
	JNZ   shortRelu16

short16:
	CMPQ CX, $16
	JL   short8
	VMOVUPS 0(SI)(BX*1), Y0
	VMOVUPS 32(SI)(BX*1), Y1
	VMULPS 0(DX)(BX*1), Y0, Y0
	VMULPS 32(DX)(BX*1), Y1, Y1
	VADDPS 0(R10)(BX*1), Y0, Y0
	VADDPS 32(R10)(BX*1), Y1, Y1
	VMOVUPS Y0, 0(DI)(BX*1)
	VMOVUPS Y1, 32(DI)(BX*1)
	ADDQ $64, BX
	SUBQ $16, CX
	JMP  short16

short8:
	CMPQ CX, $8
	JL   shortRowDone
	VMOVUPS 0(SI)(BX*1), Y0
	VMULPS 0(DX)(BX*1), Y0, Y0
	VADDPS 0(R10)(BX*1), Y0, Y0
	VMOVUPS Y0, 0(DI)(BX*1)
	ADDQ $32, BX
	SUBQ $8, CX
	JMP  short8

shortRelu16:
	CMPQ CX, $16
	JL   shortRelu8
	VMOVUPS 0(SI)(BX*1), Y0
	VMOVUPS 32(SI)(BX*1), Y1
	VMULPS 0(DX)(BX*1), Y0, Y0
	VMULPS 32(DX)(BX*1), Y1, Y1
	VADDPS 0(R10)(BX*1), Y0, Y0
	VADDPS 32(R10)(BX*1), Y1, Y1
	VCMPPS $1, Y13, Y0, Y2 // Y2 = Y0 < 0 (ordered, so NaN gives 0)
	VCMPPS $1, Y13, Y1, Y3
	VANDNPS Y0, Y2, Y0     // Y0 &^ Y2
	VANDNPS Y1, Y3, Y1
	VMOVUPS Y0, 0(DI)(BX*1)
	VMOVUPS Y1, 32(DI)(BX*1)
	ADDQ $64, BX
	SUBQ $16, CX
	JMP  shortRelu16

shortRelu8:
	CMPQ CX, $8
	JL   shortRowDone
	VMOVUPS 0(SI)(BX*1), Y0
	VMULPS 0(DX)(BX*1), Y0, Y0
	VADDPS 0(R10)(BX*1), Y0, Y0
	VCMPPS $1, Y13, Y0, Y2
	VANDNPS Y0, Y2, Y0
	VMOVUPS Y0, 0(DI)(BX*1)
	ADDQ $32, BX
	SUBQ $8, CX
	JMP  shortRelu8

shortRowDone:
	ADDQ R8, SI
	ADDQ R8, DI
	DECQ R9
	JNZ  shortRow
	VZEROUPPER
	RET

// func bnApplyAddReluAVX2(dst, src, res *float32, n int, mul, add float32, pf *float32)
//
// dst[i] = Relu(src[i]·mul + add + res[i]) in float32, rounded after the
// product and each sum (as bnRowApplyAddReluGo), over n elements (a
// multiple of 8); negative sums become +0 (bits cleared: -0 and NaN stay).
// pf as in bnApplyAVX2.
TEXT ·bnApplyAddReluAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ res+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS mul+32(FP), Y14
	VBROADCASTSS add+36(FP), Y15
	MOVQ pf+40(FP), BX
	TESTQ BX, BX
	CMOVQEQ SI, BX
	VXORPS Y13, Y13, Y13

addRelu16:
	CMPQ CX, $16
	JL   addRelu8
	PREFETCHT1 (BX)
	VMULPS 0(SI), Y14, Y0
	VMULPS 32(SI), Y14, Y1
	VADDPS Y15, Y0, Y0
	VADDPS Y15, Y1, Y1
	VADDPS 0(DX), Y0, Y0
	VADDPS 32(DX), Y1, Y1
	VCMPPS $1, Y13, Y0, Y2 // Y2 = Y0 < 0 (ordered, so NaN gives 0)
	VCMPPS $1, Y13, Y1, Y3
	VANDNPS Y0, Y2, Y0     // Y0 &^ Y2
	VANDNPS Y1, Y3, Y1
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	ADDQ $64, BX
	SUBQ $16, CX
	JMP  addRelu16

addRelu8:
	CMPQ CX, $8
	JL   addReluDone
	VMULPS 0(SI), Y14, Y0
	VADDPS Y15, Y0, Y0
	VADDPS 0(DX), Y0, Y0
	VCMPPS $1, Y13, Y0, Y2
	VANDNPS Y0, Y2, Y0
	VMOVUPS Y0, 0(DI)

addReluDone:
	VZEROUPPER
	RET

// func bnShortApplyAddReluAVX2(dst, src, res *float32, stride, rows, n int, mul, add *float32)
//
// bnShortApplyAVX2 with relu set and res (dst's layout) added to each
// result before the Relu: dst[j] = Relu(src[j]·mul[j] + add[j] + res[j]),
// rounded after the product and each sum.
TEXT ·bnShortApplyAddReluAVX2(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ res+16(FP), R12
	MOVQ stride+24(FP), R8
	SHLQ $2, R8
	MOVQ rows+32(FP), R9
	MOVQ n+40(FP), R11
	MOVQ mul+48(FP), DX
	MOVQ add+56(FP), R10
	VXORPS Y13, Y13, Y13

shortAddRow:
	XORQ BX, BX
	MOVQ R11, CX

shortAdd16:
	CMPQ CX, $16
	JL   shortAdd8
	VMOVUPS 0(SI)(BX*1), Y0
	VMOVUPS 32(SI)(BX*1), Y1
	VMULPS 0(DX)(BX*1), Y0, Y0
	VMULPS 32(DX)(BX*1), Y1, Y1
	VADDPS 0(R10)(BX*1), Y0, Y0
	VADDPS 32(R10)(BX*1), Y1, Y1
	VADDPS 0(R12)(BX*1), Y0, Y0
	VADDPS 32(R12)(BX*1), Y1, Y1
	VCMPPS $1, Y13, Y0, Y2
	VCMPPS $1, Y13, Y1, Y3
	VANDNPS Y0, Y2, Y0
	VANDNPS Y1, Y3, Y1
	VMOVUPS Y0, 0(DI)(BX*1)
	VMOVUPS Y1, 32(DI)(BX*1)
	ADDQ $64, BX
	SUBQ $16, CX
	JMP  shortAdd16

shortAdd8:
	CMPQ CX, $8
	JL   shortAddRowDone
	VMOVUPS 0(SI)(BX*1), Y0
	VMULPS 0(DX)(BX*1), Y0, Y0
	VADDPS 0(R10)(BX*1), Y0, Y0
	VADDPS 0(R12)(BX*1), Y0, Y0
	VCMPPS $1, Y13, Y0, Y2
	VANDNPS Y0, Y2, Y0
	VMOVUPS Y0, 0(DI)(BX*1)
	ADDQ $32, BX
	SUBQ $8, CX
	JMP  shortAdd8

shortAddRowDone:
	ADDQ R8, SI
	ADDQ R8, DI
	ADDQ R8, R12
	DECQ R9
	JNZ  shortAddRow
	VZEROUPPER
	RET
