package cpu_test

import (
	"testing"

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
