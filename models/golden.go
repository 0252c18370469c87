package models

import (
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// Export kinds: the two ways export.py exports a model.
const (
	// Eval is torch.onnx.TrainingMode.EVAL with constant folding (BatchNorm
	// folded into the convolutions).
	Eval = "eval"
	// Train is torch.onnx.TrainingMode.TRAINING with do_constant_folding=False
	// (BatchNormalization with training_mode=1, all parameters kept apart).
	Train = "train"
)

// TrainSuffix is appended to an output name in golden.npz for the output of
// PyTorch's training-mode forward pass (model.train(), same inputs).
const TrainSuffix = "__train"

// Model describes one committed model.
type Model struct {
	Name    string
	Exports []string // Eval and/or Train
	Inputs  []string // graph input names, also the input names in golden.npz
	Outputs []string // graph output names, also the output names in golden.npz
}

// All lists the committed models, in export.py's order.
var All = []Model{
	{Name: "mlp", Exports: []string{Eval, Train}, Inputs: []string{"input"}, Outputs: []string{"output"}},
	{Name: "cifar_resnet", Exports: []string{Eval, Train}, Inputs: []string{"input"}, Outputs: []string{"output"}},
	{Name: "resnet18_small", Exports: []string{Eval, Train}, Inputs: []string{"input"}, Outputs: []string{"output"}},
	{Name: "vit_tiny", Exports: []string{Eval, Train}, Inputs: []string{"input"}, Outputs: []string{"output"}},
	{Name: "fmnist_cnn", Exports: []string{Eval, Train}, Inputs: []string{"input"}, Outputs: []string{"output"}},
	{Name: "convtranspose_resize", Exports: []string{Eval, Train}, Inputs: []string{"input"}, Outputs: []string{"output"}},
	{Name: "transformer_loss", Exports: []string{Train}, Inputs: []string{"x", "labels"}, Outputs: []string{"loss"}},
}

// Lookup returns the committed model called name.
func Lookup(name string) (Model, bool) {
	for _, m := range All {
		if m.Name == name {
			return m, true
		}
	}
	return Model{}, false
}

// Dir is the models folder of the source tree (found from this file's
// compile-time path, so it works from any package's tests).
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "models"
	}
	return filepath.Dir(file)
}

// Path is the ONNX file of one export (Eval or Train) of the model.
func (m Model) Path(kind string) string {
	return filepath.Join(Dir(), m.Name, m.Name+"_"+kind+".onnx")
}

// GoldenPath is the model's golden.npz.
func (m Model) GoldenPath() string {
	return filepath.Join(Dir(), m.Name, "golden.npz")
}

// GoldenOutputName is the name in golden.npz of output for an export kind.
func GoldenOutputName(output, kind string) string {
	if kind == Train {
		return output + TrainSuffix
	}
	return output
}

// LoadGolden reads a golden.npz into tensors keyed by array name: the
// model's inputs, its eval-mode outputs and the training-mode outputs (named
// with TrainSuffix). It is tensorio.ReadNPZ, kept here so that tests find the
// goldens and their reader in one place.
func LoadGolden(path string) (map[string]*graph.Tensor, error) {
	g, err := tensorio.ReadNPZ(path)
	if err != nil {
		return nil, fmt.Errorf("models: golden values: %w", err)
	}
	return g, nil
}
