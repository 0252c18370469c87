package train_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

const bnDropout = "../models/bn_dropout/"

// --num-classes replaces the last Gemm's weight and bias with tensors of
// the new class count drawn as nn.Linear draws them: uniform in
// ±1/sqrt(fan_in) (kaiming_uniform with a=sqrt(5) reduces to that bound),
// seeded, and says which node it replaced.
func TestReplaceHeadGemm(t *testing.T) {
	m, err := importer.Load("../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	h, err := train.ReplaceHead(m, "", 7, 3)
	require.NoError(t, err)
	assert.Equal(t, "fc3.weight", h.Weight)
	assert.Equal(t, "fc3.bias", h.Bias)
	assert.Equal(t, 10, h.OldClasses)
	w, b := m.Graph.Initializers["fc3.weight"], m.Graph.Initializers["fc3.bias"]
	require.Equal(t, []int{7, 32}, w.Shape) // transB=1: [out, in] as nn.Linear
	require.Equal(t, []int{7}, b.Shape)
	bound := 1 / math.Sqrt(32)
	var maxAbs, sumSq float64
	for _, v := range w.Float32s() {
		maxAbs = max(maxAbs, math.Abs(float64(v)))
		sumSq += float64(v) * float64(v)
	}
	assert.LessOrEqual(t, maxAbs, bound)
	assert.Greater(t, maxAbs, 0.8*bound, "the draws span the interval")
	// Uniform(-a, a) has standard deviation a/sqrt(3).
	assert.InDelta(t, bound/math.Sqrt(3), math.Sqrt(sumSq/float64(w.Size())), 0.2*bound/math.Sqrt(3))
	for _, v := range b.Float32s() {
		assert.LessOrEqual(t, math.Abs(float64(v)), bound)
	}
	out := m.Graph.Outputs[0].Type
	assert.Equal(t, int64(7), out.Shape[1].Value)

	// Seeded: the same seed draws the same head, another seed another.
	m2, _ := importer.Load("../models/mlp/mlp_train.onnx")
	_, err = train.ReplaceHead(m2, "", 7, 3)
	require.NoError(t, err)
	assert.Equal(t, w.Float32s(), m2.Graph.Initializers["fc3.weight"].Float32s())
	m3, _ := importer.Load("../models/mlp/mlp_train.onnx")
	_, err = train.ReplaceHead(m3, "", 7, 4)
	require.NoError(t, err)
	assert.NotEqual(t, w.Float32s(), m3.Graph.Initializers["fc3.weight"].Float32s())
}

// A MatMul + Add head (nn.Linear on a 3-D input exports that way) is found
// through the Add; a head that is neither is refused, naming the node.
func TestReplaceHeadMatMulAdd(t *testing.T) {
	g := graph.NewGraph("g")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Param: "batch"}, {Value: 5, Known: true}}}}}
	g.Initializers["W"] = graph.Zeros(graph.Float32, 5, 3)
	g.Initializers["b"] = graph.Zeros(graph.Float32, 3)
	g.Nodes = []*graph.Node{
		{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "W"}, Outputs: []string{"h"}},
		{Name: "add", OpType: "Add", Inputs: []string{"h", "b"}, Outputs: []string{"y"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"y"}, Outputs: []string{"z"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: "z"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	h, err := train.ReplaceHead(m, "y", 2, 0)
	require.NoError(t, err)
	assert.Equal(t, "MatMul+Add", h.OpType)
	assert.Equal(t, []int{5, 2}, g.Initializers["W"].Shape)
	assert.Equal(t, []int{2}, g.Initializers["b"].Shape)
	_, err = train.ReplaceHead(m, "z", 2, 0)
	assert.ErrorContains(t, err, `relu (Relu), not by a Gemm or MatMul(+Add)`)
}

// A run with --num-classes trains the new head on labels of the new class
// count and writes a model with that many outputs.
func TestNumClassesTrains(t *testing.T) {
	cfg := mlpConfig(mlpCase(t, 12, func(x []float32, y []int64) {
		for i := range y {
			y[i] %= 3
		}
	}))
	cfg.NumClasses, cfg.Steps, cfg.Output = 3, 3, t.TempDir()
	var msg bytes.Buffer
	_, err := train.Run(context.Background(), cfg, io.Discard, &msg)
	require.NoError(t, err)
	assert.Contains(t, msg.String(), `--num-classes 3: replaced the classifier head`)
	assert.Contains(t, msg.String(), `"fc3.weight" [3 32]`)
	w, _, err := tensorio.ReadSafetensors(filepath.Join(cfg.Output, "model.safetensors"))
	require.NoError(t, err)
	assert.Equal(t, []int{3, 32}, w["fc3.weight"].Shape)
	m, err := importer.Load(filepath.Join(cfg.Output, "model.onnx"))
	require.NoError(t, err)
	assert.Equal(t, int64(3), m.Graph.Outputs[0].Type.Shape[1].Value)
}

// --freeze leaves exactly the parameters it matches unchanged.
func TestFreeze(t *testing.T) {
	cfg := mlpConfig(mlpCase(t, 8, nil))
	cfg.Freeze = `^fc[12]\.`
	cfg.Output = t.TempDir()
	cfg.Optimizer, cfg.LR = "sgd", 0.1
	before, err := loadInit(cfg.Model)
	require.NoError(t, err)
	_, err = train.Run(context.Background(), cfg, io.Discard, io.Discard)
	require.NoError(t, err)
	after, _, err := tensorio.ReadSafetensors(filepath.Join(cfg.Output, "model.safetensors"))
	require.NoError(t, err)
	assert.NotContains(t, after, "fc1.weight", "frozen tensors are not trained parameters")
	m, err := importer.Load(filepath.Join(cfg.Output, "model.onnx"))
	require.NoError(t, err)
	for name, b := range before {
		changed := !assert.ObjectsAreEqual(b.Data, m.Graph.Initializers[name].Data)
		assert.Equal(t, name == "fc3.weight" || name == "fc3.bias", changed, "%s changed=%v", name, changed)
	}
	cfg.Freeze = `^nothing`
	_, err = train.Run(context.Background(), cfg, io.Discard, io.Discard)
	assert.ErrorContains(t, err, `--freeze "^nothing" matches no parameter`)
	cfg.Freeze = `.`
	_, err = train.Run(context.Background(), cfg, io.Discard, io.Discard)
	assert.ErrorContains(t, err, `freezes every parameter`)
}

// --lr-group: one plain SGD step moves a parameter by lr*grad with its
// group's rate. Against a run at --lr 0.1, a run at --lr 0.05 with fc3 at
// 0.1 moves fc3 by the same amount and everything else by half.
func TestLRGroup(t *testing.T) {
	data := mlpCase(t, 4, nil)
	run := func(lr float64, groups ...string) map[string]*graph.Tensor {
		cfg := mlpConfig(data)
		cfg.Steps, cfg.Optimizer, cfg.LR, cfg.LRGroups, cfg.Output = 1, "sgd", lr, groups, t.TempDir()
		_, err := train.Run(context.Background(), cfg, io.Discard, io.Discard)
		require.NoError(t, err)
		w, _, err := tensorio.ReadSafetensors(filepath.Join(cfg.Output, "model.safetensors"))
		require.NoError(t, err)
		return w
	}
	before, err := loadInit("../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	a := run(0.1)
	b := run(0.05, `^fc3\.=0.1`)
	for name, w0 := range before {
		ratio := 0.5
		if name == "fc3.weight" || name == "fc3.bias" {
			ratio = 1
		}
		var num, den float64
		for i := 0; i < w0.Size(); i++ {
			da, db := a[name].Float(i)-w0.Float(i), b[name].Float(i)-w0.Float(i)
			num += da * db
			den += da * da
		}
		require.Greater(t, den, 0.0, name)
		assert.InDelta(t, ratio, num/den, 1e-3, name)
	}
	cfg := mlpConfig(data)
	cfg.LRGroups = []string{"^zzz=0.1"}
	_, err = train.Run(context.Background(), cfg, io.Discard, io.Discard)
	assert.ErrorContains(t, err, `--lr-group "^zzz=0.1" matches no trainable parameter`)
	cfg.LRGroups = []string{"fc3=0"}
	_, err = train.Run(context.Background(), cfg, io.Discard, io.Discard)
	assert.ErrorContains(t, err, `must be a positive number`)
}

// --freeze-bn: BatchNorm runs in inference mode while training, so the
// running statistics stay as exported; without it they move.
func TestFreezeBN(t *testing.T) {
	before, err := loadInit(bnDropout + "bn_dropout_train.onnx")
	require.NoError(t, err)
	for _, freeze := range []bool{false, true} {
		cfg := train.DefaultConfig()
		cfg.Model, cfg.Data, cfg.BatchSize, cfg.Steps, cfg.Output = bnDropout+"bn_dropout_train.onnx", bnDropout+"train_case.npz", 16, 2, t.TempDir()
		cfg.FreezeBN = freeze
		var msg bytes.Buffer
		_, err := train.Run(context.Background(), cfg, io.Discard, &msg)
		require.NoError(t, err)
		after, _, err := tensorio.ReadSafetensors(filepath.Join(cfg.Output, "model.safetensors"))
		require.NoError(t, err)
		for _, name := range []string{"bn1.running_mean", "bn2.running_var"} {
			same := assert.ObjectsAreEqual(before[name].Data, after[name].Data)
			assert.Equal(t, freeze, same, "freeze-bn=%v: %s unchanged=%v", freeze, name, same)
		}
		if freeze {
			assert.Contains(t, msg.String(), "--freeze-bn: 2 BatchNormalization node(s) run in inference mode")
		}
	}
}

// An inference export (BatchNorm folded by constant folding) trains with a
// note saying what that means and how to re-export; a training export
// gets no such note.
func TestInferenceExportNote(t *testing.T) {
	for model, want := range map[string]bool{"cifar_resnet_eval.onnx": true, "cifar_resnet_train.onnx": false} {
		cfg := train.DefaultConfig()
		cfg.Model, cfg.Data, cfg.BatchSize, cfg.Steps = "../models/cifar_resnet/"+model, "../models/cifar_resnet/train_case.npz", 4, 1
		var msg bytes.Buffer
		_, err := train.Run(context.Background(), cfg, io.Discard, &msg)
		require.NoError(t, err, model)
		if want {
			assert.Contains(t, msg.String(), "looks like an inference export", model)
			assert.Contains(t, msg.String(), "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False", model)
		} else {
			assert.NotContains(t, msg.String(), "inference export", model)
		}
	}
}

// A fixed-batch export (no dynamic_axes) trains at another batch size when
// nothing depends on the exported one, saying so; when a node does (a
// Reshape to the constant [4, 64]), the error names it and suggests
// dynamic_axes, and the exported batch size itself still trains.
func TestFixedBatchExport(t *testing.T) {
	cfg := train.DefaultConfig()
	cfg.Model, cfg.Data, cfg.BatchSize, cfg.Steps = bnDropout+"fixed_batch_train.onnx", bnDropout+"train_case.npz", 6, 2
	var msg bytes.Buffer
	_, err := train.Run(context.Background(), cfg, io.Discard, &msg)
	require.NoError(t, err)
	assert.Contains(t, msg.String(), "exported with a fixed batch of 4 (no dynamic_axes): taking the first dimension of input as the batch")

	cfg.Model = bnDropout + "fixed_batch_eval.onnx"
	_, err = train.Run(context.Background(), cfg, io.Discard, io.Discard)
	require.Error(t, err)
	assert.True(t, errors.Is(err, train.ErrFixedBatch))
	assert.ErrorContains(t, err, "node /Reshape (Reshape)")
	assert.ErrorContains(t, err, "dynamic_axes={'input': {0: 'batch'}, 'output': {0: 'batch'}}")

	cfg.BatchSize, cfg.DropLast = 4, true
	msg.Reset()
	_, err = train.Run(context.Background(), cfg, io.Discard, &msg)
	require.NoError(t, err)
	assert.Contains(t, msg.String(), "runs at --batch-size 4 only")
}

// The fine-tuning settings are YAML keys too; --lr-group is a list.
func TestFineTuneYAML(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ft.yaml")
	require.NoError(t, os.WriteFile(p, []byte("num-classes: 5\nfreeze: '^conv'\nfreeze-bn: true\nlr-group:\n  - '^fc\\.=0.01'\n  - 'layer4=0.001'\nsave-training-graph: true\nrandom-resized-crop: true\nresize: 36\nworkers: 3\n"), 0o644))
	cfg := train.DefaultConfig()
	require.NoError(t, train.LoadYAML(p, &cfg))
	assert.Equal(t, 5, cfg.NumClasses)
	assert.Equal(t, "^conv", cfg.Freeze)
	assert.True(t, cfg.FreezeBN && cfg.SaveTrainingGraph && cfg.RandomResizedCrop)
	assert.Equal(t, []string{`^fc\.=0.01`, "layer4=0.001"}, cfg.LRGroups)
	assert.Equal(t, 36, cfg.ResizeSize)
	assert.Equal(t, 3, cfg.Workers)
}
