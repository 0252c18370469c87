package train

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// The defaults are torch.cuda.amp.GradScaler's: init_scale=2**16,
// growth_factor=2, backoff_factor=0.5, growth_interval=2000.
func TestGradScalerDefaultsArePyTorchs(t *testing.T) {
	assert.Equal(t, GradScalerConfig{InitScale: 65536, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2000}, DefaultGradScalerConfig())
}

// The schedule follows torch's _amp_update_scale_: an inf/NaN step halves
// the scale and restarts the count; growth_interval clean steps in a row
// double it. The expected sequence is written from those rules (interval 3
// to keep it short).
func TestGradScalerSchedule(t *testing.T) {
	s, err := NewGradScaler(GradScalerConfig{InitScale: 8, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 3})
	require.NoError(t, err)
	steps := []struct {
		overflow bool
		scale    float64
		tracker  int
	}{
		{false, 8, 1}, {false, 8, 2}, {true, 4, 0}, {false, 4, 1}, {false, 4, 2}, {false, 8, 0},
		{false, 8, 1}, {false, 8, 2}, {false, 16, 0}, {true, 8, 0}, {true, 4, 0}, {false, 4, 1},
	}
	for i, st := range steps {
		before := s.Scale()
		g := graph.FromFloat32([]float32{float32(3 * before), float32(-before / 4)})
		if st.overflow {
			g.Float32s()[1] = float32(math.Inf(1))
			if i == 10 {
				g.Float32s()[1] = float32(math.NaN())
			}
		}
		found, err := s.Unscale([]*graph.Tensor{g, nil})
		require.NoError(t, err)
		assert.Equal(t, st.overflow, found, "step %d", i+1)
		if !st.overflow {
			assert.Equal(t, []float32{3, -0.25}, g.Float32s(), "step %d: gradients divided by the scale", i+1)
		}
		// A second Unscale in the same step (clipping, then Step) does nothing.
		again, err := s.Unscale([]*graph.Tensor{g})
		require.NoError(t, err)
		assert.Equal(t, found, again)
		if !st.overflow {
			assert.Equal(t, []float32{3, -0.25}, g.Float32s(), "step %d: unscaled once", i+1)
		}
		assert.Equal(t, st.overflow, s.Update(), "step %d skipped", i+1)
		assert.Equal(t, st.scale, s.Scale(), "step %d scale", i+1)
		assert.Equal(t, st.tracker, s.GrowthTracker(), "step %d growth tracker", i+1)
	}
}

func TestGradScalerBadInput(t *testing.T) {
	for _, cfg := range []GradScalerConfig{
		{InitScale: 0, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 1},
		{InitScale: 1, GrowthFactor: 1, BackoffFactor: 0.5, GrowthInterval: 1},
		{InitScale: 1, GrowthFactor: 2, BackoffFactor: 1, GrowthInterval: 1},
		{InitScale: 1, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 0},
	} {
		_, err := NewGradScaler(cfg)
		assert.Error(t, err, "%+v", cfg)
	}
	s, err := NewGradScaler(DefaultGradScalerConfig())
	require.NoError(t, err)
	_, err = s.Unscale([]*graph.Tensor{graph.FromFloat64([]float64{1})})
	assert.ErrorContains(t, err, "gradient 0 is float64")
	assert.ErrorContains(t, s.LoadState(map[string]float64{"scale": 2}), "want scale and growth_tracker")
	assert.ErrorContains(t, s.LoadState(map[string]float64{"scale": -2, "growth_tracker": 0}), "not a positive finite number")
	assert.ErrorContains(t, s.LoadState(map[string]float64{"scale": 2, "growth_tracker": 2000}), "below the growth interval")
	require.NoError(t, s.LoadState(map[string]float64{"scale": 1024, "growth_tracker": 17}))
	assert.Equal(t, 1024.0, s.Scale())
	assert.Equal(t, 17, s.GrowthTracker())
	assert.Equal(t, map[string]float64{"scale": 1024, "growth_tracker": 17}, s.State())

	_, err = NewAccelerator(AcceleratorConfig{MixedPrecision: "fp8"})
	assert.ErrorContains(t, err, `--mixed-precision "fp8": want no, bf16 or fp16`)
}

// fp16 through the Accelerator: a window whose scaled gradients overflow
// float16 is skipped (parameters and optimizer untouched, the scale halves,
// the skip is counted); the next window at a sane scale updates the
// parameters with unscaled gradients.
func TestFP16SkipsOverflowingStep(t *testing.T) {
	acc, err := NewAccelerator(AcceleratorConfig{MixedPrecision: "fp16"})
	require.NoError(t, err)
	m, err := importer.Load("../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	model, err := acc.PrepareModel(m, LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, ModelOptions{})
	require.NoError(t, err)
	sgd, err := optim.NewSGD(optim.SGDConfig{LR: 0.1})
	require.NoError(t, err)
	opt := acc.PrepareOptimizer(sgd, model)
	cfg := DefaultConfig()
	ds, err := OpenData(cfg, "../models/mlp/train_case.npz", true, model.Prog)
	require.NoError(t, err)
	loader, err := acc.PrepareDataLoader(ds, data.LoaderConfig{BatchSize: 4})
	require.NoError(t, err)
	var batch *data.Batch
	for b, err := range loader.Epoch(context.Background(), 0) {
		require.NoError(t, err)
		batch = b
		break
	}
	snapshot := func() [][]float32 {
		var out [][]float32
		for _, p := range model.Params() {
			out = append(out, append([]float32(nil), p.Value.Float32s()...))
		}
		return out
	}
	step := func() float64 {
		var norm float64
		require.NoError(t, acc.Accumulate(func() error {
			out, err := model.Forward(context.Background(), batch)
			require.NoError(t, err)
			require.NoError(t, acc.Backward(out))
			require.True(t, acc.SyncGradients())
			norm, err = acc.ClipGradNorm(model, 0)
			require.NoError(t, err)
			require.NoError(t, opt.Step())
			opt.ZeroGrad()
			return nil
		}))
		return norm
	}

	acc.GradScaler().scale = 1e30 // the float16 backward overflows
	before := snapshot()
	norm := step()
	assert.True(t, math.IsInf(norm, 0) || math.IsNaN(norm), "norm %v", norm)
	assert.True(t, acc.StepWasSkipped())
	assert.Equal(t, 1, acc.SkippedSteps())
	assert.Equal(t, 1, acc.Step(), "a skipped step still counts")
	assert.Equal(t, 5e29, acc.LossScale())
	assert.Equal(t, before, snapshot(), "a skipped step leaves the parameters alone")

	// The same batch in float32 (and no scaling) gives the reference norm.
	ref, err := NewAccelerator(AcceleratorConfig{})
	require.NoError(t, err)
	refModel, err := ref.PrepareModel(m, LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, ModelOptions{})
	require.NoError(t, err)
	res, err := refModel.Prog.ForwardBackward(context.Background(), batch.Inputs, batch.Labels, 1)
	require.NoError(t, err)
	var refNorm float64
	for _, g := range res.Grads {
		for _, v := range g.Float32s() {
			refNorm += float64(v) * float64(v)
		}
	}
	refNorm = math.Sqrt(refNorm)

	acc.GradScaler().scale = 1024
	norm = step()
	assert.False(t, acc.StepWasSkipped())
	assert.Equal(t, 1, acc.SkippedSteps())
	assert.Equal(t, 2, acc.Step())
	assert.Equal(t, 1024.0, acc.LossScale())
	assert.Equal(t, 1, acc.GradScaler().GrowthTracker())
	assert.InEpsilon(t, refNorm, norm, 1e-2, "the clipped norm is of the unscaled gradients")
	assert.NotEqual(t, before, snapshot(), "a clean step updates the parameters")
}

// A mixed-precision step of the CNN keeps every tensor in the executor's
// memory plan (none from the heap), and the plan's peak is well below
// float32's: the activations are stored in half precision.
func TestMixedPrecisionStepMemory(t *testing.T) {
	m, err := importer.Load("../models/fmnist_cnn/fmnist_cnn_train.onnx")
	require.NoError(t, err)
	peak := map[string]int64{}
	for _, mode := range []string{"no", "bf16", "fp16"} {
		p, err := Build(m, ProgramConfig{Loss: LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, MixedPrecision: mode})
		require.NoError(t, err)
		ds, err := OpenData(DefaultConfig(), "../models/fmnist_cnn/train_case.npz", true, p)
		require.NoError(t, err)
		l, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 8})
		require.NoError(t, err)
		for b, err := range l.Epoch(context.Background(), 0, 0) {
			require.NoError(t, err)
			for i := 0; i < 2; i++ { // the first run records the plan
				_, err := p.ForwardBackward(context.Background(), b.Inputs, b.Labels, 1)
				require.NoError(t, err)
			}
			break
		}
		st := p.trainExe.(*cpu.Executable).MemoryStats()
		require.True(t, st.Planned, "%s: %s", mode, st.Unplanned)
		assert.Zero(t, st.HeapPeakBytes, "%s: tensors from the heap: %v", mode, st.HeapOps)
		peak[mode] = st.PeakBytes
	}
	assert.Less(t, float64(peak["bf16"]), 0.75*float64(peak["no"]), "bf16 %d vs float32 %d", peak["bf16"], peak["no"])
	assert.Equal(t, peak["bf16"], peak["fp16"])
}
