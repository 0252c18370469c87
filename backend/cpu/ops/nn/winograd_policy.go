package nn

import "sync/atomic"

// WinogradPolicy chooses when 3×3 stride-1 convolutions (and their input
// and filter gradients) run through the Winograd F(2×2, 3×3) transform
// instead of the implicit GEMM.
type WinogradPolicy int32

const (
	// WinogradAuto uses the transform for the layer shapes where it was
	// measured to be faster.
	WinogradAuto WinogradPolicy = iota
	// WinogradOff never uses it.
	WinogradOff
	// WinogradForce uses it for every convolution it can compute (tests
	// use this to run small models through it).
	WinogradForce
)

var winogradPolicy atomic.Int32

// SetWinograd sets the policy for the convolutions that run after it and
// returns the previous one.
func SetWinograd(p WinogradPolicy) WinogradPolicy {
	return WinogradPolicy(winogradPolicy.Swap(int32(p)))
}

// Winograd returns the current policy.
func Winograd() WinogradPolicy { return WinogradPolicy(winogradPolicy.Load()) }
