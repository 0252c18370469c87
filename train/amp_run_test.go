package train_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
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
// first loss is not float32's to the bit). Where the fp16 loss scaler skips
// a step (an overflow at the initial scale), the comparison goes on past it
// against a float32 run that makes no update on the same steps.
func TestMixedPrecisionTracksFloat32(t *testing.T) {
	for _, model := range []string{"fmnist_cnn", "vit_tiny"} {
		want := runJSON(t, ampConfig(model, "no"))
		require.Len(t, want, 4)
		// The reference loop below is Run's loop: without skips it gives
		// Run's float32 losses to the bit.
		plain := float32SkippingSteps(t, ampConfig(model, "no"), nil)
		for i := range want {
			require.Equal(t, want[i].Loss, plain[i], "%s step %d: the reference loop is not Run's", model, i+1)
		}
		for _, mode := range []string{"bf16", "fp16"} {
			t.Run(model+"/"+mode, func(t *testing.T) {
				got := runJSON(t, ampConfig(model, mode))
				require.Len(t, got, 4)
				assert.NotEqual(t, want[0].Loss, got[0].Loss, "the forward pass ran in float32")
				skipped := map[int]bool{}
				for _, r := range got {
					if r.Skipped {
						skipped[r.Step] = true
					}
				}
				ref := plain
				if len(skipped) > 0 {
					require.Equal(t, "fp16", mode, "only fp16 skips steps")
					require.Less(t, len(skipped), len(got), "every step was skipped: nothing to compare")
					t.Logf("%s: fp16 skipped steps %v; comparing with float32 that skips the same updates", model, skipped)
					ref = float32SkippingSteps(t, ampConfig(model, "no"), skipped)
				}
				for i := range got {
					if mode == "fp16" {
						assert.NotZero(t, got[i].LossScale, "fp16 steps report the loss scale")
					} else {
						assert.Zero(t, got[i].LossScale)
					}
					assert.InEpsilon(t, ref[i], got[i].Loss, 5e-3, "step %d", i+1)
				}
			})
		}
	}
}

// float32SkippingSteps trains cfg in float32 through the Accelerator the
// way Run does (forward, backward, clip, optimizer step, constant LR) and
// returns each step's loss, except that on the steps (1-based) in skip the
// optimizer makes no update and keeps its state, as an fp16 step the loss
// scaler skips does.
func float32SkippingSteps(t *testing.T, cfg train.Config, skip map[int]bool) []float64 {
	t.Helper()
	require.Equal(t, "constant", cfg.LRSchedule)
	require.Equal(t, 1, cfg.GradAccum)
	ctx := context.Background()
	acc, err := train.NewAccelerator(train.AcceleratorConfig{Seed: cfg.Seed})
	require.NoError(t, err)
	m, err := importer.Load(cfg.Model)
	require.NoError(t, err)
	model, err := acc.PrepareModel(m, train.LossConfig{Kind: cfg.Loss, IgnoreIndex: cfg.IgnoreIndex}, train.ModelOptions{})
	require.NoError(t, err)
	inner, err := train.NewOptimizer(cfg, model.Params())
	require.NoError(t, err)
	opt := acc.PrepareOptimizer(inner, model)
	ds, err := train.OpenData(cfg, cfg.Data, true, model.Prog)
	require.NoError(t, err)
	loader, err := acc.PrepareDataLoader(ds, data.LoaderConfig{BatchSize: cfg.BatchSize, Shuffle: cfg.Shuffle, Seed: uint64(cfg.Seed), Prefetch: -1})
	require.NoError(t, err)
	var losses []float64
	for epoch := 0; len(losses) < cfg.Steps; epoch++ {
		for b, err := range loader.Epoch(ctx, epoch) {
			require.NoError(t, err)
			if len(losses) == cfg.Steps {
				break
			}
			require.NoError(t, acc.Accumulate(func() error {
				out, err := model.Forward(ctx, b)
				if err != nil {
					return err
				}
				if err := acc.Backward(out); err != nil {
					return err
				}
				if _, err := acc.ClipGradNorm(model, cfg.ClipGradNorm); err != nil {
					return err
				}
				if !skip[len(losses)+1] {
					if err := opt.Step(); err != nil {
						return err
					}
				}
				opt.ZeroGrad()
				losses = append(losses, out.Loss)
				return nil
			}))
		}
	}
	return losses
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
