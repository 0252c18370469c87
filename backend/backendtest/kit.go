package backendtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// checker runs the kit's checks on one backend, chosen by the name it is
// registered under (backend.Open).
type checker struct {
	backend string
}

// check is one named check of a part of the kit.
type check struct {
	name string
	run  func(*testing.T)
}

// runAll runs each check as a subtest of t.
func runAll(t *testing.T, checks []check) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, c.run)
	}
}

// Run runs every part of the kit on the backend registered under name, as
// subtests of t: Gradients, Fusion, Conformance (with the memory-plan
// check) and Training. A backend's package runs the whole kit with one
// test:
//
//	func TestKit(t *testing.T) { backendtest.Run(t, "cpu") }
//
// and one part or check with -run, e.g. -run 'TestKit/Gradients/Conv'.
func Run(t *testing.T, name string) {
	t.Run("Gradients", func(t *testing.T) { Gradients(t, name) })
	t.Run("Fusion", func(t *testing.T) { Fusion(t, name) })
	t.Run("Conformance", func(t *testing.T) { Conformance(t, name) })
	t.Run("Training", func(t *testing.T) { Training(t, name) })
}

// Gradients checks the gradient rules autodiff emits (graph/grad_*.go)
// and the backend's gradient kernels against central finite differences
// in float64, and the backend's float32 gradients against its float64
// ones: elementwise ops, reductions, convolutions and pools, Resize,
// normalisations, losses, Dropout, shape and data-movement ops, products
// and recurrent layers.
func Gradients(t *testing.T, name string) {
	k := checker{backend: name}
	runAll(t, []check{
		{"Elementwise", k.gradElementwise},
		{"Reduce", k.gradReduce},
		{"ConvConv", k.gradConvConv},
		{"ConvTranspose", k.gradConvTranspose},
		{"ConvPool", k.gradConvPool},
		{"ConvResize", k.gradConvResize},
		{"ConvGridSample", k.gradConvGridSample},
		{"ConvRoiAlign", k.gradConvRoiAlign},
		{"ConvMaxPoolTies", k.gradConvMaxPoolTies},
		{"ConvLarge", k.gradConvLarge},
		{"ConvErrors", k.gradConvErrors},
		{"NormSoftmax", k.gradNormSoftmax},
		{"NormBatchNorm", k.gradNormBatchNorm},
		{"NormLayerNorm", k.gradNormLayerNorm},
		{"NormInstanceGroupNorm", k.gradNormInstanceGroupNorm},
		{"NormLosses", k.gradNormLosses},
		{"NormCumSumTopK", k.gradNormCumSumTopK},
		{"NormTopKUnnamedIndices", k.gradNormTopKUnnamedIndices},
		{"NormDropout", k.gradNormDropout},
		{"NormFloat32", k.gradNormFloat32},
		{"Recurrent", k.gradRecurrent},
		{"Linalg", k.gradLinalg},
		{"Shape", k.gradShape},
		{"MatMulLarge", k.gradMatMulLarge},
		{"Folded", k.gradFolded},
		{"EinsumDiagonal", k.gradEinsumDiagonal},
		{"GatherOutOfRange", k.gradGatherOutOfRange},
	})
}

// open opens the backend under test.
func (kc checker) open(t *testing.T) backend.Backend {
	t.Helper()
	b, err := backend.Open(kc.backend)
	require.NoError(t, err)
	return b
}

// fuses reports whether a graph compiled with DisableFused = disable runs
// the fused ops: the backend declares every one of them
// (backend.FusedOpsDeclarer) and fusion is on.
func (kc checker) fuses(disable bool, ops ...string) bool {
	b, err := backend.Open(kc.backend)
	if err != nil || disable {
		return false
	}
	declared := backend.DeclaredFusedOps(b, backend.CompileOptions{})
	for _, op := range ops {
		if !declared[op] {
			return false
		}
	}
	return true
}

// inspector returns exe's backend.PlanInspector. A backend that declares
// fused ops must let the kit see whether they applied; one that declares
// none is checked to run no fused op, and an executable without an
// inspector runs none that the kit can see.
func (kc checker) inspector(t *testing.T, exe backend.Executable) backend.PlanInspector {
	t.Helper()
	pi, ok := exe.(backend.PlanInspector)
	if !ok {
		require.Empty(t, backend.DeclaredFusedOps(kc.open(t), backend.CompileOptions{}),
			"backend %s declares fused ops, so its executables must implement backend.PlanInspector", kc.backend)
	}
	return pi
}

// compiledNodes are the nodes of exe's compiled graph (nil without an
// inspector).
func (kc checker) compiledNodes(t *testing.T, exe backend.Executable) []*graph.Node {
	t.Helper()
	if pi := kc.inspector(t, exe); pi != nil {
		return pi.CompiledNodes()
	}
	return nil
}

// countCompiled counts exe's compiled nodes of type op (0 without an
// inspector).
func (kc checker) countCompiled(t *testing.T, exe backend.Executable, op string) int {
	t.Helper()
	n := 0
	for _, st := range kc.compiledNodes(t, exe) {
		if st.OpType == op {
			n++
		}
	}
	return n
}

// lastRunNodes are the nodes exe's latest Run executed (nil without an
// inspector).
func (kc checker) lastRunNodes(t *testing.T, exe backend.Executable) []*graph.Node {
	t.Helper()
	if pi := kc.inspector(t, exe); pi != nil {
		nodes := pi.LastRunNodes()
		require.NotNil(t, nodes, "LastRunNodes after a Run")
		return nodes
	}
	return nil
}

// Fusion checks each fusion of the pass pipeline (graph/passes) on small
// graphs built for it: where the backend declares the fused ops
// (backend.FusedOpsDeclarer), the compiled graph runs them in place of the
// chains they replace (and leaves the chains whose intermediate values are
// graph outputs); where it does not, or under DisableFused, none appears;
// and the fused graph's results equal the unfused graph's (bit for bit
// where the fused kernel rounds as the chain does) and a float64
// reference.
func Fusion(t *testing.T, name string) {
	k := checker{backend: name}
	runAll(t, []check{
		{"TransposedMatMul", k.fusedTransposedMatMul},
		{"WeightTranspose", k.fusedWeightTranspose},
		{"ReluGrad", k.fusedReluGrad},
		{"ErfGrad", k.fusedErfGrad},
		{"MatMulBias", k.fusedMatMulBias},
		{"GemmRelu", k.fusedGemmRelu},
		{"GeluErf", k.fusedGeluErf},
		{"GeluErfGrad", k.fusedGeluErfGrad},
		{"MLPGelu", k.fusedMLPGelu},
		{"LayerNormGradAdd", k.fusedLayerNormGradAdd},
		{"PermutedMatMulBias", k.fusedPermutedMatMulBias},
		{"ScaledQueries", k.fusedScaledQueries},
		{"BatchNormRelu", k.fusedBatchNormRelu},
		{"BatchNormAddRelu", k.fusedBatchNormAddRelu},
		{"MaxPoolArgmax", k.fusedMaxPoolArgmax},
	})
}

// Training trains the committed fixtures (models/) through the train
// package on the backend and compares with PyTorch 1.13's goldens
// (models/train_golden.py, extra_golden.py, amp_golden.py): per-step
// losses and gradient norms of every fixture and optimizer configuration,
// the other losses, BatchNorm's running statistics, one bf16 autocast
// step, and the convolutional fixtures with the Winograd compile option
// forced on.
func Training(t *testing.T, name string) {
	k := checker{backend: name}
	runAll(t, []check{
		{"PyTorch", func(t *testing.T) { k.trainingPyTorch(t) }},
		{"Losses", k.trainingLosses},
		{"BatchNormRunningStats", k.trainingBatchNormRunningStats},
		{"BF16Autocast", k.trainingBF16Autocast},
		{"Winograd", k.trainingWinograd},
	})
}
