package train_test

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// mlpCase writes an MLP batch (x: [n,784]) with the given labels.
func mlpCase(t *testing.T, n int, mutate func(x []float32, y []int64)) string {
	x := make([]float32, n*784)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	y := make([]int64, n)
	for i := range y {
		y[i] = int64(i % 10)
	}
	if mutate != nil {
		mutate(x, y)
	}
	p := filepath.Join(t.TempDir(), "case.npz")
	require.NoError(t, tensorio.WriteNPZ(p, map[string]*graph.Tensor{
		"input": graph.FromFloat32(x, n, 784), "labels": graph.FromInt64(y, n)}))
	return p
}

func mlpConfig(data string) train.Config {
	cfg := train.DefaultConfig()
	cfg.Model = "../models/mlp/mlp_train.onnx"
	cfg.Data = data
	cfg.BatchSize = 4
	cfg.Steps = 2
	return cfg
}

func TestBadTrainingInputs(t *testing.T) {
	cases := map[string]struct {
		cfg  func(t *testing.T) train.Config
		want string
	}{
		"labels out of range": {func(t *testing.T) train.Config {
			return mlpConfig(mlpCase(t, 8, func(x []float32, y []int64) { y[2] = 12 }))
		}, "target 12"},
		"nan loss": {func(t *testing.T) train.Config {
			return mlpConfig(mlpCase(t, 8, func(x []float32, y []int64) { x[5] = float32(math.NaN()) }))
		}, "step 1 (epoch 0): loss is not finite"},
		"data shape": {func(t *testing.T) train.Config {
			p := filepath.Join(t.TempDir(), "bad.npz")
			require.NoError(t, tensorio.WriteNPZ(p, map[string]*graph.Tensor{
				"input": graph.Zeros(graph.Float32, 8, 700), "labels": graph.Zeros(graph.Int64, 8)}))
			return mlpConfig(p)
		}, `input "input" has shape [4 700]`},
		"missing labels": {func(t *testing.T) train.Config {
			p := filepath.Join(t.TempDir(), "nolabels.npz")
			require.NoError(t, tensorio.WriteNPZ(p, map[string]*graph.Tensor{"input": graph.Zeros(graph.Float32, 8, 784)}))
			return mlpConfig(p)
		}, `labels array "labels" missing`},
		"loss output not scalar": {func(t *testing.T) train.Config {
			cfg := mlpConfig(mlpCase(t, 8, nil))
			cfg.Loss = "output:output"
			return cfg
		}, "not a scalar"},
		"loss output unknown": {func(t *testing.T) train.Config {
			cfg := mlpConfig(mlpCase(t, 8, nil))
			cfg.Loss = "output:nope"
			return cfg
		}, `"nope" is not an output of the model`},
		"unknown optimizer": {func(t *testing.T) train.Config {
			cfg := mlpConfig(mlpCase(t, 8, nil))
			cfg.Optimizer = "lion"
			return cfg
		}, `unknown optimizer "lion"`},
		"zero batch": {func(t *testing.T) train.Config {
			cfg := mlpConfig(mlpCase(t, 8, nil))
			cfg.BatchSize = 0
			return cfg
		}, "--batch-size must be positive"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := train.Run(context.Background(), c.cfg(t), io.Discard, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// A frozen model (--train-only matching the last layer) leaves every other
// parameter unchanged, and the trained model written to --output loads back
// and reproduces the program's evaluation output.
func TestTrainOnlyAndOutput(t *testing.T) {
	cfg := mlpConfig(mlpCase(t, 8, nil))
	cfg.TrainOnly = `^fc3\.`
	cfg.Output = t.TempDir()
	cfg.Optimizer, cfg.LR = "sgd", 0.1
	before, err := loadInit(cfg.Model)
	require.NoError(t, err)
	sum, err := train.Run(context.Background(), cfg, io.Discard, io.Discard)
	require.NoError(t, err)
	require.Len(t, sum.Outputs, 2)
	after, err := loadInit(filepath.Join(cfg.Output, "model.onnx"))
	require.NoError(t, err)
	weights, _, err := tensorio.ReadSafetensors(filepath.Join(cfg.Output, "model.safetensors"))
	require.NoError(t, err)
	for name, b := range before {
		a := after[name]
		require.NotNil(t, a, name)
		changed := !assert.ObjectsAreEqual(b.Data, a.Data)
		assert.Equal(t, name == "fc3.weight" || name == "fc3.bias", changed, "%s changed=%v", name, changed)
		if w, ok := weights[name]; ok {
			assert.Equal(t, a.Data, w.Data, "safetensors %s", name)
		}
	}
}
