package backendtest

import (
	"bytes"
	"context"
	"encoding/json"
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

// trainingLosses trains the MLP 3 SGD steps with every loss besides
// plain cross entropy (label smoothing with an ignored label, mse, l1,
// bce_with_logits) and compares each step's loss with PyTorch's
// (models/extra_golden.py).
func (kc checker) trainingLosses(t *testing.T) {
	mlp := filepath.Join(ModelsDir(t), "mlp")
	b, err := os.ReadFile(filepath.Join(mlp, "loss_golden.json"))
	require.NoError(t, err)
	var golden map[string]struct {
		Loss           string    `json:"loss"`
		Data           string    `json:"data"`
		Losses         []float64 `json:"losses"`
		LabelSmoothing float64   `json:"label_smoothing"`
	}
	require.NoError(t, json.Unmarshal(b, &golden))
	require.Len(t, golden, 4)
	for name, g := range golden {
		t.Run(name, func(t *testing.T) {
			cfg := train.DefaultConfig()
			cfg.Backend = kc.backend
			cfg.Model = filepath.Join(mlp, "mlp_train.onnx")
			cfg.Data = filepath.Join(mlp, g.Data)
			cfg.Loss = g.Loss
			cfg.LabelSmoothing = g.LabelSmoothing
			cfg.Optimizer, cfg.LR, cfg.Momentum = "sgd", 0.05, 0.9
			cfg.BatchSize, cfg.Steps, cfg.Shuffle, cfg.LogFormat = 8, len(g.Losses), false, "json"
			var out bytes.Buffer
			_, err := train.Run(context.Background(), cfg, &out, io.Discard)
			require.NoError(t, err)
			dec := json.NewDecoder(&out)
			for i, want := range g.Losses {
				var r train.StepRecord
				require.NoError(t, dec.Decode(&r))
				tol := 1e-3
				if i == 0 {
					tol = 1e-5
				}
				assert.LessOrEqual(t, math.Abs(r.Loss-want), tol*math.Abs(want), "step %d: %.7f vs PyTorch %.7f", i+1, r.Loss, want)
			}
		})
	}
}

// trainingBatchNormRunningStats: after two training-mode forward
// passes the running statistics equal PyTorch's (which uses the unbiased
// batch variance, unlike ONNX's reference).
func (kc checker) trainingBatchNormRunningStats(t *testing.T) {
	dir := filepath.Join(ModelsDir(t), "cifar_resnet")
	m, err := importer.Load(filepath.Join(dir, "cifar_resnet_train.onnx"))
	require.NoError(t, err)
	batch, err := tensorio.ReadNPZ(filepath.Join(dir, "train_case.npz"))
	require.NoError(t, err)
	want, err := tensorio.ReadNPZ(filepath.Join(dir, "bn_running_golden.npz"))
	require.NoError(t, err)
	prog, err := train.Build(m, train.ProgramConfig{Loss: train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, Backend: kc.backend})
	require.NoError(t, err)
	require.NotEmpty(t, prog.Buffers)
	for i := 0; i < 2; i++ {
		_, err := prog.ForwardBackward(context.Background(), map[string]*graph.Tensor{"input": batch["input"]}, batch["labels"], 1)
		require.NoError(t, err)
	}
	require.NoError(t, prog.SyncToHost()) // the buffers live in the backend's memory
	for name, w := range want {
		got := prog.Buffers[name]
		require.NotNil(t, got, name)
		for i := range w.Float32s() {
			assert.InDelta(t, w.Float32s()[i], got.Float32s()[i], 1e-5*math.Max(1, math.Abs(float64(w.Float32s()[i]))), "%s[%d]", name, i)
		}
	}
	assert.Equal(t, len(want), len(prog.Buffers))
}
