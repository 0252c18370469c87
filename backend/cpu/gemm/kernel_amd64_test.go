//go:build amd64 && !purego

package gemm

func wantAsmKernel() bool { return hasAVX2FMA }
