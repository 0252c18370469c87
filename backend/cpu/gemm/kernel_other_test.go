//go:build !amd64 || purego

package gemm

func wantAsmKernel() bool { return false }
