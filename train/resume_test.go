package train_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

func runJSON(t *testing.T, cfg train.Config) []train.StepRecord {
	t.Helper()
	var out bytes.Buffer
	_, err := train.Run(context.Background(), cfg, &out, io.Discard)
	require.NoError(t, err)
	var recs []train.StepRecord
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r train.StepRecord
		require.NoError(t, dec.Decode(&r))
		recs = append(recs, r)
	}
	return recs
}

// TestResumeIsExact: training N steps straight, and training k steps,
// stopping, resuming from the checkpoint and training to N give
// bit-identical losses and weights — mid-epoch, with shuffling and
// accumulation on, for SGD and AdamW, on a model with BatchNorm buffers.
func TestResumeIsExact(t *testing.T) {
	for _, model := range []string{"mlp", "cifar_resnet"} {
		for _, opt := range []string{"sgd", "adamw"} {
			t.Run(model+"/"+opt, func(t *testing.T) {
				base := train.DefaultConfig()
				base.Model = "../models/" + model + "/" + model + "_train.onnx"
				base.Data = "../models/" + model + "/train_case.npz"
				base.Optimizer, base.LR, base.Momentum, base.WeightDecay = opt, 0.01, 0.9, 0.01
				base.BatchSize, base.GradAccum, base.Steps = 2, 2, 5 // 2 steps per epoch
				base.Shuffle, base.Seed, base.LogFormat = true, 7, "json"
				base.LRSchedule, base.WarmupSteps = "cosine", 2

				straight := base
				straight.Output = t.TempDir()
				want := runJSON(t, straight)
				require.Len(t, want, 5)

				first := base
				first.Output = t.TempDir()
				first.Steps, first.CheckpointEvery = 3, 3 // step 3 ends mid-epoch
				got := runJSON(t, first)
				require.Len(t, got, 3)

				second := base
				second.Output = first.Output
				second.Resume = "latest"
				got = append(got, runJSON(t, second)...)
				require.Len(t, got, 5)
				for i := range want {
					assert.Equal(t, want[i].Loss, got[i].Loss, "step %d loss", i+1)
					assert.Equal(t, want[i].LR, got[i].LR, "step %d lr", i+1)
					assert.Equal(t, want[i].Epoch, got[i].Epoch, "step %d epoch", i+1)
				}
				a, _, err := tensorio.ReadSafetensors(filepath.Join(straight.Output, "model.safetensors"))
				require.NoError(t, err)
				b, _, err := tensorio.ReadSafetensors(filepath.Join(second.Output, "model.safetensors"))
				require.NoError(t, err)
				require.Equal(t, len(a), len(b))
				for name, ta := range a {
					assert.Equal(t, ta.Data, b[name].Data, "%s differs after resume", name)
				}
			})
		}
	}
}

// A checkpoint whose tensors do not fit the model is refused with the
// list of mismatches.
func TestResumeRefusesAnotherModel(t *testing.T) {
	cfg := train.DefaultConfig()
	cfg.Model, cfg.Data = "../models/mlp/mlp_train.onnx", "../models/mlp/train_case.npz"
	cfg.BatchSize, cfg.Steps, cfg.CheckpointEvery, cfg.LogFormat = 8, 1, 1, "json"
	cfg.Output = t.TempDir()
	runJSON(t, cfg)
	other := train.DefaultConfig()
	other.Model, other.Data = "../models/fmnist_cnn/fmnist_cnn_train.onnx", "../models/fmnist_cnn/train_case.npz"
	other.BatchSize, other.Steps, other.Output, other.Resume = 8, 2, cfg.Output, "latest"
	_, err := train.Run(context.Background(), other, io.Discard, io.Discard)
	require.Error(t, err)
	assert.ErrorIs(t, err, train.ErrCheckpointIncompatible)
	assert.Contains(t, err.Error(), "fc1.weight")
	assert.Contains(t, err.Error(), "conv1.weight")
}

// --resume latest with no checkpoint yet starts from the model's weights
// (the first start of a job that restarts with that flag).
func TestResumeLatestWithoutCheckpointStartsFresh(t *testing.T) {
	cfg := train.DefaultConfig()
	cfg.Model, cfg.Data = "../models/mlp/mlp_train.onnx", "../models/mlp/train_case.npz"
	cfg.Optimizer, cfg.LR = "sgd", 0.05
	cfg.BatchSize, cfg.Steps, cfg.Shuffle, cfg.LogFormat = 8, 1, false, "json"
	cfg.Output, cfg.Resume = t.TempDir(), "latest"
	recs := runJSON(t, cfg)
	require.Len(t, recs, 1)
	assert.InDelta(t, 2.2695913, recs[0].Loss, 1e-6)
}
