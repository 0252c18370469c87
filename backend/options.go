package backend

import (
	"fmt"
	"strings"
)

// Tuning holds the compile options that choose between equivalent ways of
// computing a graph: they change speed and memory, never which ops a graph
// may use, and a backend that has no such choice ignores them. They are
// embedded in CompileOptions; commands fill them from flags or the
// environment (cmd/onnxtrain: ONNXTRAIN_WINOGRAD, ONNXTRAIN_NO_MEMPLAN) and
// libraries pass them along, so no backend keeps a process-wide policy.
type Tuning struct {
	// Winograd chooses when 3×3 stride-1 convolutions and their input and
	// filter gradients go through the Winograd F(2×2, 3×3) transform
	// instead of a direct or implicit GEMM (WinogradAuto: where the
	// backend measured it faster).
	Winograd WinogradPolicy
	// NoMemoryPlan turns off the backend's memory plan: every tensor a
	// step makes comes from the allocator (for debugging and for
	// measuring what the plan saves).
	NoMemoryPlan bool
	// Workers is how many cores the executable's kernels use at once
	// (0: all of them, runtime.GOMAXPROCS, as without it). Executables
	// compiled with the same Device and Workers share one pool of worker
	// goroutines: an in-process pipeline gives each of its CPU devices
	// (cpu:0, cpu:1) its own share of the cores this way.
	Workers int
	// Device names the device whose worker pool the executable uses
	// (with Workers > 0).
	Device string
	// RecomputeAttention makes every attention gradient the backend fuses
	// compute its probabilities again instead of keeping them from the
	// forward pass (graph.RecomputeAttentionProbs at ratio 0), where
	// without it only those of long sequences do: less memory, more time.
	// train.ProgramConfig.Recompute sets it.
	RecomputeAttention bool
}

// WinogradPolicy is the choice of Tuning.Winograd.
type WinogradPolicy int32

const (
	// WinogradAuto uses the transform for the layer shapes where it was
	// measured to be faster (the zero value).
	WinogradAuto WinogradPolicy = iota
	// WinogradOff never uses it.
	WinogradOff
	// WinogradForce uses it for every convolution it can compute (tests
	// use this to run small models through it).
	WinogradForce
)

// String returns the policy's name as ParseWinograd reads it.
func (p WinogradPolicy) String() string {
	switch p {
	case WinogradAuto:
		return "auto"
	case WinogradOff:
		return "off"
	case WinogradForce:
		return "force"
	}
	return fmt.Sprintf("WinogradPolicy(%d)", int32(p))
}

// ParseWinograd reads a policy name: auto (or empty), off or force, in any
// case and with surrounding spaces.
func ParseWinograd(s string) (WinogradPolicy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return WinogradAuto, nil
	case "off":
		return WinogradOff, nil
	case "force":
		return WinogradForce, nil
	}
	return 0, fmt.Errorf("winograd policy %q: want auto, off or force", s)
}
