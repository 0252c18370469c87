package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

const bnDropoutDir = "../../models/bn_dropout"

// bnDropoutRecipe is the training run whose weights
// models/bn_dropout/trained.safetensors holds (models/inference_export.py).
func bnDropoutRecipe(out string) []string {
	return []string{"train", "--model", filepath.Join(bnDropoutDir, "bn_dropout_train.onnx"),
		"--data", filepath.Join(bnDropoutDir, "train_case.npz"), "--batch-size", "16", "--epochs", "20",
		"--lr", "0.01", "--seed", "7", "--output", out}
}

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.Execute()
	return out.String() + errOut.String(), err
}

func maxAbsDiff(t *testing.T, a, b *graph.Tensor) float64 {
	t.Helper()
	require.Equal(t, b.Shape, a.Shape)
	m := 0.0
	for i := 0; i < a.Size(); i++ {
		d := a.Float(i) - b.Float(i)
		if d < 0 {
			d = -d
		}
		m = max(m, d)
	}
	return m
}

// A BatchNorm + Dropout model trained with --output: model.onnx is the
// inference graph, `onnxtrain run` on it matches PyTorch's model.eval()
// with the trained weights (models/bn_dropout/eval_golden.npz), a sample's
// output is the same alone and in a batch, and the training graph is
// written too when asked.
func TestOutputIsInferenceGraph(t *testing.T) {
	dir := t.TempDir()
	out, err := execute(t, append(bnDropoutRecipe(dir), "--save-training-graph")...)
	require.NoError(t, err, out)

	// Training is deterministic: the same weights as the committed run the
	// goldens were computed from (tolerance for other CPUs' kernels).
	got, _, err := tensorio.ReadSafetensors(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	want, _, err := tensorio.ReadSafetensors(filepath.Join(bnDropoutDir, "trained.safetensors"))
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for name, w := range want {
		require.Contains(t, got, name)
		assert.Less(t, maxAbsDiff(t, got[name], w), 1e-4, name)
	}

	// The inference graph: BatchNormalization in inference mode with one
	// output, Dropout without its training_mode input.
	m, err := importer.Load(filepath.Join(dir, "model.onnx"))
	require.NoError(t, err)
	bn, drop := 0, 0
	for _, n := range m.Graph.Nodes {
		switch n.OpType {
		case "BatchNormalization":
			bn++
			assert.Zero(t, n.AttrInt("training_mode", 0), n.Label())
			assert.Len(t, n.Outputs, 1, n.Label())
		case "Dropout":
			drop++
			assert.LessOrEqual(t, len(n.Inputs), 2, n.Label())
		}
	}
	assert.Equal(t, 2, bn)
	assert.Equal(t, 2, drop)
	assert.Equal(t, []string{"output"}, m.Graph.OutputNames())
	// The training graph keeps training mode.
	tm, err := importer.Load(filepath.Join(dir, "model.train.onnx"))
	require.NoError(t, err)
	for _, n := range tm.Graph.Nodes {
		if n.OpType == "BatchNormalization" {
			assert.Equal(t, int64(1), n.AttrInt("training_mode", 0))
		}
	}

	// onnxtrain run against PyTorch's eval-mode forward.
	preds := filepath.Join(dir, "preds.npz")
	out, err = execute(t, "run", "--model", filepath.Join(dir, "model.onnx"), "--input", filepath.Join(bnDropoutDir, "probe.npz"), "--output", preds)
	require.NoError(t, err, out)
	golden, err := tensorio.ReadNPZ(filepath.Join(bnDropoutDir, "eval_golden.npz"))
	require.NoError(t, err)
	res, err := tensorio.ReadNPZ(preds)
	require.NoError(t, err)
	assert.Less(t, maxAbsDiff(t, res["output"], golden["output"]), 2e-4)

	// One sample alone gives what it gave in the batch of 6.
	one, err := graph.NewTensor(graph.Float32, []int{1, 1, 8, 8})
	require.NoError(t, err)
	copy(one.Float32s(), golden["input"].Float32s()[2*64:3*64])
	single := filepath.Join(dir, "single.npz")
	require.NoError(t, tensorio.WriteNPZ(single, map[string]*graph.Tensor{"input": one}))
	singleOut := filepath.Join(dir, "single_out.npz")
	out, err = execute(t, "run", "--model", filepath.Join(dir, "model.onnx"), "--input", single, "--output", singleOut)
	require.NoError(t, err, out)
	alone, err := tensorio.ReadNPZ(singleOut)
	require.NoError(t, err)
	inBatch := res["output"].Float32s()[2*4 : 3*4]
	for i, v := range alone["output"].Float32s() {
		assert.InDelta(t, inBatch[i], v, 1e-6, "class %d", i)
	}

	// Debian's python3-onnx, where present, accepts the file.
	checkWithONNXChecker(t, filepath.Join(dir, "model.onnx"))
}

// checkWithONNXChecker runs onnx.checker (full check) on path when a
// python3 with the onnx package is installed (.ci/run installs
// python3-onnx); without one it logs that the check did not run.
func checkWithONNXChecker(t *testing.T, path string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if _, statErr := os.Stat("/usr/bin/python3"); statErr == nil {
		py, err = "/usr/bin/python3", nil
	}
	if err != nil || exec.Command(py, "-c", "import onnx").Run() != nil {
		t.Logf("no python3 with onnx: onnx.checker not run on %s", path)
		return
	}
	out, err := exec.Command(py, "-c", "import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)", path).CombinedOutput()
	assert.NoError(t, err, "onnx.checker on %s: %s", path, strings.TrimSpace(string(out)))
}
