//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

// avx2Kernel6x16 is the amd64 micro-kernel: a 6×16 tile held in twelve ymm
// accumulators (6 rows × two 8-float vectors), updated per k step by two
// B vector loads, six A broadcasts and twelve FMAs, so the two FMA pipes
// stay busy while loads use the remaining ports. Block sizes: a kc×16 B
// strip (16 KiB at kc=256) plus a 6×kc A strip stay in the 32 KiB L1, the
// mc×kc A block (144 KiB) in the 512 KiB L2, and the kc×nc B panel in L3.
var avx2Kernel6x16 = microKernel{name: "avx2fma6x16", mr: 6, nr: 16, mc: 144, kc: 256, nc: 4096, fn: kernel6x16}

// hasAVX2FMA reports whether the CPU (and OS) support the assembly kernel.
var hasAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

func init() {
	if hasAVX2FMA {
		kernel = avx2Kernel6x16
	}
}

// sgemmKernel6x16 is implemented in kernel_amd64.s. It stores
// C = alpha*(A·B) + beta*C for one 6×16 tile from an A strip packed 6 wide
// and a B strip packed 16 wide, both kc (>= 1) deep; ldc is in elements.
// beta == 0 never reads C.
//
//go:noescape
func sgemmKernel6x16(kc int, ap, bp, c *float32, ldc int, alpha, beta float32)

// kernel6x16 checks the bounds the assembly relies on and calls it.
func kernel6x16(kc int, ap, bp, c []float32, ldc int, alpha, beta float32) {
	_ = ap[6*kc-1]
	_ = bp[16*kc-1]
	_ = c[5*ldc+15]
	sgemmKernel6x16(kc, &ap[0], &bp[0], &c[0], ldc, alpha, beta)
}
