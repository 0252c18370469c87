// Package backendtest is the test kit every backend runs: the checks that
// tell whether a backend computes what onnxtrain's graphs mean, written
// once and taking the backend by the name it is registered under
// (backend.Register). A new backend runs the whole kit with one test file:
//
//	package mybackend_test
//
//	import (
//		"testing"
//
//		"github.com/onnxtrain/onnxtrain/backend/backendtest"
//		_ "example.com/mybackend" // registers "mine"
//	)
//
//	func TestKit(t *testing.T) { backendtest.Run(t, "mine") }
//
// The parts, each a subtest selectable with -run (TestKit/Gradients/Conv):
//
//   - Gradients: finite-difference checks of every gradient rule autodiff
//     emits, in float64, and float32 against float64.
//   - Fusion: each fusion of the pass pipeline on a graph built for it; the
//     fused ops appear exactly where the backend declares them
//     (backend.FusedOpsDeclarer, seen through backend.PlanInspector), and
//     the fused graph computes what the unfused one does.
//   - Conformance: the ONNX conformance suites (testdata/onnx), every case
//     run twice with the random state restored; the second run (in the
//     memory plan, for a backend that has one) must equal the first bit
//     for bit.
//   - Training: the committed fixtures trained through package train and
//     compared with PyTorch 1.13's goldens (models/).
//
// Conformance reads the ONNX cases from testdata/onnx (or $ONNX_TESTDATA)
// and Training the fixtures from models/, both found from the working
// directory's module: a backend kept in this repository (backend/<name>)
// finds them. Checks about one backend's internals (its kernels, assembly,
// arenas) stay in that backend's package.
package backendtest
