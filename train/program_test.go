package train

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/models"
)

func TestBuildSmoke(t *testing.T) {
	for _, name := range []string{"mlp", "fmnist_cnn", "cifar_resnet", "vit_tiny", "transformer_loss", "convtranspose_resize", "resnet18_small"} {
		m, err := importer.Load("../models/" + name + "/" + name + "_train.onnx")
		require.NoError(t, err)
		loss := LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}
		if name == "transformer_loss" {
			loss = LossConfig{Kind: "output", Output: "loss"}
		}
		if name == "convtranspose_resize" {
			loss = LossConfig{Kind: "mse"}
		}
		p, err := Build(m, ProgramConfig{Loss: loss})
		if err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		g, err := models.LoadGolden("../models/" + name + "/golden.npz")
		require.NoError(t, err)
		_ = p
		_ = g
		_ = context.Background()
		t.Logf("%s: built, %d params", name, len(p.Params))
	}
}
