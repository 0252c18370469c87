package nn

import "github.com/onnxtrain/onnxtrain/backend"

// WinogradPolicy chooses when 3×3 stride-1 convolutions (and their input
// and filter gradients) run through the Winograd F(2×2, 3×3) transform
// instead of the implicit GEMM. It is a compile option
// (backend.Tuning.Winograd), which kernels read from kern.Context and set
// on the Conv2D they run.
type WinogradPolicy = backend.WinogradPolicy

const (
	// WinogradAuto uses the transform for the layer shapes where it was
	// measured to be faster.
	WinogradAuto = backend.WinogradAuto
	// WinogradOff never uses it.
	WinogradOff = backend.WinogradOff
	// WinogradForce uses it for every convolution it can compute (tests
	// use this to run small models through it).
	WinogradForce = backend.WinogradForce
)

// winogradTakes applies policy p to a convolution the transform can
// compute: never (Off), always (Force), or where it measured faster
// (Auto: faster).
func winogradTakes(p WinogradPolicy, faster bool) bool {
	switch p {
	case WinogradOff:
		return false
	case WinogradForce:
		return true
	}
	return faster
}

// winograd3x3 reports whether g is a 3×3, stride-1, undilated
// correlation with unflipped taps: the products F(2×2, 3×3) computes
// (its input gradient is one such product over dy).
func (g *Conv2D) winograd3x3() bool {
	return g.KH == 3 && g.KW == 3 && g.SH == 1 && g.SW == 1 && g.DH == 1 && g.DW == 1 && !g.flipTaps
}
