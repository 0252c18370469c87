//go:build amd64 && !purego

package gemm

// bInKernels are the micro-kernels with B read in place that this CPU
// runs: the one the GEMM uses, and the AVX2 one also where AVX-512 took
// its place (so that an AVX-512 host tests both).
func bInKernels() []microKernel {
	var ks []microKernel
	if kernel.bIn != nil {
		ks = append(ks, kernel)
	}
	if hasAVX2FMA && kernel.bInCols != 16 {
		mk := avx2Kernel6x16
		mk.pair, mk.pairA, mk.pairNT = nil, nil, nil
		mk.bIn, mk.bInCols = kernel6x16B, 16
		ks = append(ks, mk)
	}
	return ks
}
