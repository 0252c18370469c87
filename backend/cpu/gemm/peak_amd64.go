//go:build amd64 && !purego

package gemm

// fmaPeakZmm and fmaPeakYmm (peak_amd64.s) run n iterations of
// register-only FMAs, 16 on zmm and 14 on ymm registers: the FMA units'
// ceiling, which BenchmarkFMAPeak sets the micro-kernels beside.
func fmaPeakZmm(n int)
func fmaPeakYmm(n int)
