//go:build !amd64 || purego

package gradient

// rowAsm is false: there are no assembly row kernels on this platform,
// and the stubs below are never called.
var rowAsm = false

func colSumAVX2(*float64, *float32, int, int)                   { panic("no AVX2 row kernels") }
func colSumRoundAVX2(_, _ *float32, _, _, _ int)                { panic("no AVX2 row kernels") }
func softmaxGradRowAVX2(_, _, _ *float32, _ int, _ int) float64 { panic("no AVX2 row kernels") }
func lnGradStatsAVX2(_, _ *float32, _ *float64, _ int, _ float64, _ *[4]float64) {
	panic("no AVX2 row kernels")
}
func lnGradApplyAVX2(_, _, _, _, _, _, _ *float32, _ int, _ *[5]float32, _ int) {
	panic("no AVX2 row kernels")
}
