//go:build !amd64 || purego

package nn

// winoAVX2 is false: the transforms run in Go.
const winoAVX2 = false

func winoInput(dst []float32, dstStride int, src []float32, offs []int, plane, wp, channels, chStride int) {
	panic("nn: winoInput without assembly")
}

func winoOutput8(y []float32, offs []int, p []float32, ps, pm, oplane, ow, channels int, acc bool, next []int) {
	panic("nn: winoOutput8 without assembly")
}

func winoKernels(dst []float32, pos *[16]int, src []float32, rowStride, qStride, rows, k int) int {
	return 0
}
