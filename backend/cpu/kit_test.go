package cpu_test

import (
	"testing"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/backendtest"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
)

// TestKit runs the backend test kit (backend/backendtest) on the CPU
// backend: gradient checks, fusion checks, the conformance suites with the
// memory-plan check, and the PyTorch training goldens. Select a part or a
// check with -run, e.g. -run 'TestKit/Gradients/Conv' or
// -run 'TestKit/Conformance/Node'. Storage that kernels declare they
// overwrite comes poisoned (0xff bytes), so that a kernel reading it before
// writing it changes its results.
func TestKit(t *testing.T) {
	cpu.SetPoisonUninit(true)
	defer cpu.SetPoisonUninit(false)
	backendtest.Run(t, "cpu")
}

func init() {
	// The CPU backend declaring no fused op: the pass pipeline keeps every
	// chain decomposed.
	backend.Register("cpu-unfused", func() (backend.Backend, error) { return &cpu.Backend{FusedOnly: []string{}}, nil })
}

// TestKitFusionUndeclared runs the kit's fusion checks on a CPU backend
// that declares no fused op: none may appear, and the results stay those
// of the references.
func TestKitFusionUndeclared(t *testing.T) {
	backendtest.Fusion(t, "cpu-unfused")
}
