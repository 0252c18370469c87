package train_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/train"
)

func ampConfig(model, mode string) train.Config {
	cfg := train.DefaultConfig()
	cfg.Model = "../models/" + model + "/" + model + "_train.onnx"
	cfg.Data = "../models/" + model + "/train_case.npz"
	cfg.BatchSize, cfg.Steps, cfg.Shuffle, cfg.LogFormat = 4, 4, false, "json"
	cfg.MixedPrecision = mode
	return cfg
}

// bf16 and fp16 training follows float32 training closely on a CNN and a
// ViT (per-step losses within 0.5%), and is really in low precision (the
// first loss is not float32's to the bit).
func TestMixedPrecisionTracksFloat32(t *testing.T) {
	for _, model := range []string{"fmnist_cnn", "vit_tiny"} {
		want := runJSON(t, ampConfig(model, "no"))
		require.Len(t, want, 4)
		for _, mode := range []string{"bf16", "fp16"} {
			t.Run(model+"/"+mode, func(t *testing.T) {
				got := runJSON(t, ampConfig(model, mode))
				require.Len(t, got, 4)
				assert.NotEqual(t, want[0].Loss, got[0].Loss, "the forward pass ran in float32")
				for i := range want {
					if mode == "fp16" {
						assert.NotZero(t, got[i].LossScale, "fp16 steps report the loss scale")
					} else {
						assert.Zero(t, got[i].LossScale)
					}
					if i > 0 && got[0].Skipped {
						break // a skipped first step leaves float32's path
					}
					assert.InEpsilon(t, want[i].Loss, got[i].Loss, 5e-3, "step %d", i+1)
				}
			})
		}
	}
}

// An fp16 run stopped and resumed from a checkpoint continues exactly: the
// loss scale and its growth count are saved and restored (the ViT's first
// step overflows at 65536, so a resume that forgot the scale would skip
// again and diverge).
func TestFP16ResumeIsExact(t *testing.T) {
	base := ampConfig("vit_tiny", "fp16")
	base.Steps, base.BatchSize = 4, 2

	straight := base
	straight.Output = t.TempDir()
	want := runJSON(t, straight)
	require.Len(t, want, 4)
	require.True(t, want[0].Skipped, "the ViT's first fp16 step overflows at the initial scale")
	assert.Equal(t, 0.0, want[0].GradNorm, "a skipped step reports grad_norm 0")
	assert.Equal(t, 32768.0, want[0].LossScale)

	first := base
	first.Output = t.TempDir()
	first.Steps, first.CheckpointEvery = 2, 2
	got := runJSON(t, first)
	require.Len(t, got, 2)
	raw, err := os.ReadFile(filepath.Join(first.Output, train.CheckpointName(2), "state.json"))
	require.NoError(t, err)
	var st struct {
		LossScaler map[string]float64 `json:"loss_scaler"`
	}
	require.NoError(t, json.Unmarshal(raw, &st))
	skipped, tracker := 0.0, 0.0
	for _, r := range want[:2] {
		if r.Skipped {
			skipped, tracker = skipped+1, 0
		} else {
			tracker++
		}
	}
	assert.Equal(t, map[string]float64{"scale": want[1].LossScale, "growth_tracker": tracker, "skipped_steps": skipped}, st.LossScaler)

	second := base
	second.Output = first.Output
	second.Resume = "latest"
	got = append(got, runJSON(t, second)...)
	require.Len(t, got, 4)
	for i := range want {
		assert.Equal(t, want[i].Loss, got[i].Loss, "step %d loss", i+1)
		assert.Equal(t, want[i].LossScale, got[i].LossScale, "step %d loss scale", i+1)
		assert.Equal(t, want[i].Skipped, got[i].Skipped, "step %d skipped", i+1)
	}
}
