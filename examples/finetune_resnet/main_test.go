package main

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

const (
	fixtureModel = "../../models/cifar_resnet/cifar_resnet_train.onnx"
	fixtureData  = "../../models/cifar_resnet/train_case.npz"
)

// The example runs end to end on the committed fixture and produces what it
// says: a loss per optimizer step, an ONNX model and a safetensors file
// holding the same fine-tuned weights, and those weights fit the data
// better than the original ones (loss of the whole fixture batch, training
// mode).
func TestExampleFineTunes(t *testing.T) {
	const steps = 6
	res, err := run(fixtureModel, fixtureData, steps, t.TempDir())
	require.NoError(t, err)
	require.Len(t, res.Losses, steps, "one logged loss per optimizer step")
	for i, l := range res.Losses {
		assert.False(t, math.IsNaN(l) || math.IsInf(l, 0), "step %d loss %v", i+1, l)
	}

	var onnxPath, stPath string
	for _, p := range res.Paths {
		switch filepath.Ext(p) {
		case ".onnx":
			onnxPath = p
		case ".safetensors":
			stPath = p
		}
	}
	require.NotEmpty(t, onnxPath, "SaveModel wrote no .onnx file: %v", res.Paths)
	require.NotEmpty(t, stPath, "SaveModel wrote no .safetensors file: %v", res.Paths)

	orig, err := importer.Load(fixtureModel)
	require.NoError(t, err)
	tuned, err := importer.Load(onnxPath)
	require.NoError(t, err)
	weights, _, err := tensorio.ReadSafetensors(stPath)
	require.NoError(t, err)
	changed, compared := 0, 0
	for name, w := range orig.Graph.Initializers {
		got := tuned.Graph.Initializers[name]
		require.NotNil(t, got, "the saved model lacks initializer %q", name)
		require.Equal(t, w.Shape, got.Shape, name)
		if st, ok := weights[name]; ok {
			compared++
			assert.Equal(t, got.Data, st.Data, "%q: safetensors and ONNX hold the same weights", name)
		}
		if w.DType == graph.Float32 && !assert.ObjectsAreEqual(w.Data, got.Data) {
			changed++
		}
	}
	assert.Greater(t, changed, len(orig.Graph.Initializers)/2, "most weights were trained")
	assert.Positive(t, compared, "the safetensors file names the model's initializers")

	before, after := batchLoss(t, orig), batchLoss(t, tuned)
	t.Logf("loss on the fixture batch: %.4f before, %.4f after %d steps", before, after, steps)
	assert.Less(t, after, before, "fine-tuning lowers the loss on the data it trained on")
}

// batchLoss is the training-mode cross-entropy of m on the whole fixture.
func batchLoss(t *testing.T, m *graph.Model) float64 {
	t.Helper()
	p, err := train.Build(m, train.ProgramConfig{Loss: train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}})
	require.NoError(t, err)
	d, err := tensorio.ReadNPZ(fixtureData)
	require.NoError(t, err)
	res, err := p.ForwardBackward(context.Background(), map[string]*graph.Tensor{"input": d["input"]}, d["labels"], 1)
	require.NoError(t, err)
	return res.Loss
}
