package backendtest

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// trainingBF16Autocast: one bf16 step of the MLP fixture against PyTorch 1.13's
// torch.autocast("cpu", torch.bfloat16) (models/amp_golden.py). The forward
// pass rounds like autocast's (the loss is closer to autocast's than
// float32's is), and the last bias's gradient, which no matrix product
// touches, equals autocast's to the bit. The other gradients cannot: on this
// AVX2 CPU PyTorch's bf16 mm in the backward pass accumulates in bfloat16
// (checked against a sequential bfloat16 sum), while ours accumulates in
// float32 and rounds once; so they are required to be bfloat16 results (far
// from float32's) no further from autocast's than float32 training is.
func (kc checker) trainingBF16Autocast(t *testing.T) {
	mlp := filepath.Join(ModelsDir(t), "mlp")
	golden, err := tensorio.ReadNPZ(filepath.Join(mlp, "amp_golden.npz"))
	require.NoError(t, err)
	batch, err := tensorio.ReadNPZ(filepath.Join(mlp, "train_case.npz"))
	require.NoError(t, err)
	m, err := importer.Load(filepath.Join(mlp, "mlp_train.onnx"))
	require.NoError(t, err)

	step := func(mode string) (float64, map[string][]float32) {
		p, err := train.Build(m, train.ProgramConfig{Loss: train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, MixedPrecision: mode, Backend: kc.backend})
		require.NoError(t, err)
		res, err := p.ForwardBackward(context.Background(), map[string]*graph.Tensor{"input": batch["input"]}, batch["labels"], 1)
		require.NoError(t, err)
		grads := map[string][]float32{}
		for i, prm := range p.Params {
			require.Equal(t, graph.Float32, res.Grads[i].DType, "gradient of %s", prm.Name)
			g := res.Grads[i].Float32s()
			if prm.Name == "fc1.weight" {
				g = g[:4*784] // the golden file keeps its first 4 rows
			}
			grads[prm.Name] = append([]float32(nil), g...)
		}
		return res.Loss, grads
	}
	dist := func(a, b []float32) float64 {
		var s float64
		for i := range a {
			d := float64(a[i]) - float64(b[i])
			s += d * d
		}
		return math.Sqrt(s)
	}

	lossBF16, gradsBF16 := step("bf16")
	lossFP32, gradsFP32 := step("no")
	torchBF16 := float64(golden["loss_bf16"].Float32s()[0])
	torchFP32 := float64(golden["loss_fp32"].Float32s()[0])
	require.NotEqual(t, torchBF16, torchFP32)
	assert.InEpsilon(t, torchFP32, lossFP32, 1e-6, "float32 loss")
	assert.Less(t, math.Abs(lossBF16-torchBF16), math.Abs(torchFP32-torchBF16)/2,
		"bf16 loss %v: autocast's %v, float32's %v", lossBF16, torchBF16, torchFP32)
	for _, name := range []string{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"} {
		want := golden["grad_bf16__"+name].Float32s()
		ref := golden["grad_fp32__"+name].Float32s()
		require.Len(t, gradsBF16[name], len(want), name)
		gap := dist(ref, want) // how far float32 training is from autocast
		t.Logf("%s: |ours-autocast| %.3g, |ours-float32| %.3g, |float32-autocast| %.3g", name, dist(gradsBF16[name], want), dist(gradsBF16[name], ref), gap)
		assert.Less(t, dist(gradsBF16[name], want), gap, "%s: bf16 gradient further from autocast's than float32's is", name)
		assert.Greater(t, dist(gradsBF16[name], ref), gap/10, "%s: bf16 gradient is float32's", name)
		assert.Less(t, dist(gradsFP32[name], ref), gap/100, "%s: float32 gradient differs from PyTorch's", name)
	}
	assert.Equal(t, golden["grad_bf16__fc3.bias"].Float32s(), gradsBF16["fc3.bias"], "fc3.bias: no matrix product, so bit-equal")
}
