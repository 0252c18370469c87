//go:build !amd64 || purego

package reduce

// useAVX2 is false: there are no assembly row kernels on this platform,
// and the stubs below are never called.
var useAVX2 = false

func maxRowAVX2(*float32, int) float32                       { panic("no AVX2 row kernels") }
func scaleRowAVX2(*float32, int, float64)                    { panic("no AVX2 row kernels") }
func statsRowAVX2(*float32, int, float64) (float64, float64) { panic("no AVX2 row kernels") }
func affineRowAVX2(_, _, _, _ *float32, _ int, _ *[3]float32, _ int) {
	panic("no AVX2 row kernels")
}

var use512 = false
