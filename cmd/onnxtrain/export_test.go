package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
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

	// The run trained every weight and running statistic the committed
	// weights have, and model.onnx holds what model.safetensors holds.
	got, _, err := tensorio.ReadSafetensors(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	want, _, err := tensorio.ReadSafetensors(filepath.Join(bnDropoutDir, "trained.safetensors"))
	require.NoError(t, err)
	require.Len(t, got, len(want))
	initial, err := importer.Load(filepath.Join(bnDropoutDir, "bn_dropout_train.onnx"))
	require.NoError(t, err)
	written, err := importer.Load(filepath.Join(dir, "model.onnx"))
	require.NoError(t, err)
	for name := range want {
		require.Contains(t, got, name)
		assert.Greater(t, maxAbsDiff(t, got[name], initial.Graph.Initializers[name]), 0.0, "%s did not train", name)
		assert.Zero(t, maxAbsDiff(t, got[name], written.Graph.Initializers[name]), "%s: model.onnx and model.safetensors differ", name)
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

	// onnxtrain run against PyTorch's eval-mode forward, on the inference
	// graph of the committed trained weights.
	dir = trainedBNDropout(t)
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
	py := testutil.FindPython("onnx")
	if py == "" {
		if testutil.CI() {
			t.Fatalf("no python3 with onnx under CI=true (.ci/run installs python3-onnx): onnx.checker not run on %s", path)
		}
		t.Logf("no python3 with onnx: onnx.checker not run on %s", path)
		return
	}
	out, err := exec.Command(py, "-c", "import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)", path).CombinedOutput()
	assert.NoError(t, err, "onnx.checker on %s: %s", path, strings.TrimSpace(string(out)))
}

// trainBNDropout runs the fixture's recipe into a fresh folder.
func trainBNDropout(t *testing.T, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := execute(t, append(bnDropoutRecipe(dir), extra...)...)
	require.NoError(t, err, out)
	return dir
}

// trainedBNDropout writes the committed trained weights
// (models/bn_dropout/trained.safetensors, the weights PyTorch's
// eval_golden.npz was computed with) as a checkpoint and exports it with
// `onnxtrain export`: a folder holding model.onnx and model.safetensors of
// exactly those weights. Comparisons with PyTorch go through it rather than
// through a fresh 20-epoch run, whose weights move with every change of
// float rounding anywhere in training.
func trainedBNDropout(t *testing.T) string {
	t.Helper()
	weights, _, err := tensorio.ReadSafetensors(filepath.Join(bnDropoutDir, "trained.safetensors"))
	require.NoError(t, err)
	st := &train.State{Step: 1, Params: map[string]*graph.Tensor{}, Buffers: map[string]*graph.Tensor{}}
	for name, w := range weights {
		if strings.Contains(name, "running_") {
			st.Buffers[name] = w
		} else {
			st.Params[name] = w
		}
	}
	root := t.TempDir()
	ckpt := filepath.Join(root, train.CheckpointName(1))
	require.NoError(t, train.SaveState(ckpt, st))
	dir := filepath.Join(root, "exported")
	out, err := execute(t, "export", ckpt, "--model", filepath.Join(bnDropoutDir, "bn_dropout_train.onnx"), "--output", dir)
	require.NoError(t, err, out)
	return dir
}

// `onnxtrain eval` reports PyTorch's cross-entropy and accuracy for the
// trained model (eval_golden.npz), prints no top-5 for 4 classes, and for
// --loss mse only the loss, never an accuracy.
func TestEvalMatchesPyTorch(t *testing.T) {
	dir := trainedBNDropout(t)
	golden, err := tensorio.ReadNPZ(filepath.Join(bnDropoutDir, "eval_golden.npz"))
	require.NoError(t, err)
	model := filepath.Join(dir, "model.onnx")
	out, err := execute(t, "eval", "--model", model, "--data", filepath.Join(bnDropoutDir, "eval_case.npz"), "--json")
	require.NoError(t, err, out)
	var rep train.EvalReport
	require.NoError(t, json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &rep), out)
	assert.InDelta(t, golden["ce_loss"].Float(0), rep.Value, 2e-4)
	require.NotNil(t, rep.Accuracy)
	assert.InDelta(t, golden["accuracy"].Float(0), *rep.Accuracy, 1e-9)
	assert.Nil(t, rep.Top5Accuracy, "4 classes: top-5 is always 100%")
	assert.Equal(t, 6, rep.Samples)
	require.Len(t, rep.Confusion, 4)
	total := 0
	for _, row := range rep.PerClass {
		total += row.Support
	}
	assert.Equal(t, 6, total)

	text, err := execute(t, "eval", "--model", model, "--data", filepath.Join(bnDropoutDir, "eval_case.npz"))
	require.NoError(t, err, text)
	assert.Contains(t, text, "accuracy")
	assert.Contains(t, text, "confusion matrix")

	// mse against zero targets is the mean square of PyTorch's outputs.
	targets := filepath.Join(dir, "targets.npz")
	require.NoError(t, tensorio.WriteNPZ(targets, map[string]*graph.Tensor{"input": golden["input"], "labels": graph.Zeros(graph.Float32, 6, 4)}))
	var want float64
	for _, v := range golden["output"].Float32s() {
		want += float64(v) * float64(v)
	}
	want /= 24
	text, err = execute(t, "eval", "--model", model, "--data", targets, "--loss", "mse")
	require.NoError(t, err, text)
	assert.NotContains(t, text, "accuracy")
	out, err = execute(t, "eval", "--model", model, "--data", targets, "--loss", "mse", "--json")
	require.NoError(t, err, out)
	rep = train.EvalReport{}
	require.NoError(t, json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &rep), out)
	assert.InDelta(t, want, rep.Value, 1e-4)
	assert.Nil(t, rep.Accuracy)
	assert.NotContains(t, out, "accuracy")
}

// `onnxtrain predict` gives PyTorch's argmax and softmax probability for
// every sample, in order, as .npz and .csv; `run` accepts the same file,
// which also holds labels, and says it ignores them.
func TestPredictAndRunWithLabels(t *testing.T) {
	dir := trainedBNDropout(t)
	golden, err := tensorio.ReadNPZ(filepath.Join(bnDropoutDir, "eval_golden.npz"))
	require.NoError(t, err)
	model := filepath.Join(dir, "model.onnx")
	data := filepath.Join(bnDropoutDir, "eval_case.npz")
	npz := filepath.Join(dir, "preds.npz")
	out, err := execute(t, "predict", "--model", model, "--data", data, "--output", npz)
	require.NoError(t, err, out)
	p, err := tensorio.ReadNPZ(npz)
	require.NoError(t, err)
	g := golden["output"].Float32s()
	for i := 0; i < 6; i++ {
		row := g[i*4 : i*4+4]
		best, z := 0, 0.0
		for k, v := range row {
			if v > row[best] {
				best = k
			}
		}
		for _, v := range row {
			z += math.Exp(float64(v - row[best]))
		}
		assert.Equal(t, int64(best), p["prediction"].Int(i), "sample %d", i)
		assert.InDelta(t, 1/z, p["probability"].Float(i), 1e-4, "sample %d", i)
	}
	csvPath := filepath.Join(dir, "preds.csv")
	out, err = execute(t, "predict", "--model", model, "--data", data, "--output", csvPath)
	require.NoError(t, err, out)
	b, err := os.ReadFile(csvPath)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 7)
	assert.Equal(t, "index,prediction,probability", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "0,"+strconv.FormatInt(p["prediction"].Int(0), 10)+","), lines[1])

	out, err = execute(t, "run", "--model", model, "--input", data)
	require.NoError(t, err, out)
	assert.Contains(t, out, "ignoring array(s) [labels]")
}

// `onnxtrain export` writes the inference graph of a checkpoint (found
// through the run's --output folder) with the checkpoint's weights: at the
// last step it computes what the run's own model.onnx computes. A run with
// --num-classes exports with its new head.
func TestExportCheckpoint(t *testing.T) {
	dir := trainBNDropout(t, "--checkpoint-every", "4")
	exported := filepath.Join(t.TempDir(), "deploy", "model.onnx")
	out, err := execute(t, "export", dir, "--output", exported)
	require.NoError(t, err, out)
	assert.Contains(t, out, "checkpoint-")
	probe := filepath.Join(bnDropoutDir, "probe.npz")
	a, b := filepath.Join(t.TempDir(), "a.npz"), filepath.Join(t.TempDir(), "b.npz")
	_, err = execute(t, "run", "--model", filepath.Join(dir, "model.onnx"), "--input", probe, "--output", a)
	require.NoError(t, err)
	_, err = execute(t, "run", "--model", exported, "--input", probe, "--output", b)
	require.NoError(t, err)
	ra, _ := tensorio.ReadNPZ(a)
	rb, _ := tensorio.ReadNPZ(b)
	assert.Equal(t, ra["output"].Float32s(), rb["output"].Float32s())
	m, err := importer.Load(exported)
	require.NoError(t, err)
	for _, n := range m.Graph.Nodes {
		if n.OpType == "BatchNormalization" {
			assert.Zero(t, n.AttrInt("training_mode", 0))
		}
	}

	// A new head: the export has the run's class count.
	ft := t.TempDir()
	out, err = execute(t, "train", "--model", filepath.Join(bnDropoutDir, "bn_dropout_train.onnx"), "--data", filepath.Join(bnDropoutDir, "train_case.npz"),
		"--batch-size", "16", "--steps", "2", "--num-classes", "5", "--checkpoint-every", "2", "--output", ft)
	require.NoError(t, err, out)
	folder := t.TempDir()
	out, err = execute(t, "export", filepath.Join(ft, train.CheckpointName(2)) /* named by step */, "--output", folder)
	require.NoError(t, err, out)
	m, err = importer.Load(filepath.Join(folder, "model.onnx"))
	require.NoError(t, err)
	assert.Equal(t, []int{5, 16}, m.Graph.Initializers["fc2.weight"].Shape)

	_, err = execute(t, "export", t.TempDir(), "--output", exported)
	assert.ErrorContains(t, err, "is not a checkpoint")
}

// An image-folder run saves the class -> index mapping next to the model
// (classes.json); predict names its predictions with it, and eval maps a
// folder whose class folders list the classes in another order back to
// the model's indices by name.
func TestImageFolderClassNames(t *testing.T) {
	root := t.TempDir()
	for ci, class := range []string{"cat", "dog"} {
		for k := 0; k < 3; k++ {
			im := image.NewRGBA(image.Rect(0, 0, 40, 36))
			for i := range im.Pix {
				im.Pix[i] = uint8(60*ci + 7*k + i%50)
			}
			p := filepath.Join(root, class, fmt.Sprintf("%d.png", k))
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			f, err := os.Create(p)
			require.NoError(t, err)
			require.NoError(t, png.Encode(f, im))
			require.NoError(t, f.Close())
		}
	}
	out := t.TempDir()
	log, err := execute(t, "train", "--model", "../../models/cifar_resnet/cifar_resnet_train.onnx", "--data", root,
		"--num-classes", "2", "--image-size", "32", "--random-resized-crop", "--random-flip", "--workers", "2",
		"--batch-size", "3", "--steps", "2", "--output", out)
	require.NoError(t, err, log)
	classes, err := train.ReadClasses(filepath.Join(out, "classes.json"))
	require.NoError(t, err)
	assert.Equal(t, []string{"cat", "dog"}, classes)

	csvPath := filepath.Join(t.TempDir(), "p.csv")
	log, err = execute(t, "predict", "--model", filepath.Join(out, "model.onnx"), "--data", root, "--image-size", "32", "--resize", "36", "--output", csvPath)
	require.NoError(t, err, log)
	b, err := os.ReadFile(csvPath)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 7)
	assert.Equal(t, "index,source,prediction,class,probability", lines[0])
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		assert.Equal(t, map[string]string{"0": "cat", "1": "dog"}[f[2]], f[3], l)
	}

	// The same images under class folders in another sorted order: eval
	// counts a "dog" image as class 1, as the model learnt it.
	other := t.TempDir()
	require.NoError(t, os.Rename(filepath.Join(root, "cat"), filepath.Join(other, "zcat")))
	require.NoError(t, os.Rename(filepath.Join(root, "dog"), filepath.Join(other, "dog")))
	log, err = execute(t, "eval", "--model", filepath.Join(out, "model.onnx"), "--data", other, "--image-size", "32")
	assert.ErrorContains(t, err, `class folder "zcat" is not one of the model's classes`)
	require.NoError(t, os.Rename(filepath.Join(other, "zcat"), filepath.Join(other, "cat")))
	require.NoError(t, os.WriteFile(filepath.Join(out, "classes.json"), []byte(`["dog", "cat"]`), 0o644))
	log, err = execute(t, "eval", "--model", filepath.Join(out, "model.onnx"), "--data", other, "--image-size", "32", "--json")
	require.NoError(t, err, log)
	var rep train.EvalReport
	require.NoError(t, json.Unmarshal([]byte(log[:strings.LastIndex(log, "}")+1]), &rep), log)
	assert.Equal(t, []string{"dog", "cat"}, rep.Classes)
	require.Len(t, rep.PerClass, 2)
	assert.Equal(t, "dog", rep.PerClass[0].Class)
	assert.Equal(t, 3, rep.PerClass[0].Support)
}

// A fixed-batch export (batch 4, no dynamic_axes) runs, evaluates and
// benchmarks at other batch sizes when nothing depends on its size; the
// one whose Reshape holds the constant batch is refused, naming the node.
func TestFixedBatchRunEvalBench(t *testing.T) {
	model := filepath.Join(bnDropoutDir, "fixed_batch_train.onnx")
	data := filepath.Join(bnDropoutDir, "eval_case.npz") // 6 samples
	out, err := execute(t, "run", "--model", model, "--input", data)
	require.NoError(t, err, out)
	assert.Contains(t, out, "output: float32[6 4]")
	assert.Contains(t, out, "fixed batch of 4")
	out, err = execute(t, "eval", "--model", model, "--data", data, "--batch-size", "5")
	require.NoError(t, err, out)
	assert.Contains(t, out, "6 samples")
	out, err = execute(t, "bench", "--model", model, "--batch-size", "7", "--steps", "1", "--warmup", "0")
	require.NoError(t, err, out)
	assert.Contains(t, out, "batch 7")

	_, err = execute(t, "run", "--model", filepath.Join(bnDropoutDir, "fixed_batch_eval.onnx"), "--input", data)
	assert.ErrorContains(t, err, "node /Reshape (Reshape)")
	assert.ErrorContains(t, err, "dynamic_axes")
}
