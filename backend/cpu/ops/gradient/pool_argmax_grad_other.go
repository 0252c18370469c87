//go:build !amd64 || purego

package gradient

// argmaxGradAsm is false: there is no vector loop for MaxPoolArgmaxGrad
// here, and the stub below is never called.
var argmaxGradAsm = false

func argmaxGrad3x3S2([]float32, int, []float32, []uint8, int, int) bool {
	panic("no vector loop for MaxPoolArgmaxGrad")
}
