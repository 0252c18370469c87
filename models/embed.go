package models

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Default holds what `onnxtrain` trains when run without arguments: the
// Fashion-MNIST CNN exported in training mode, and a subset of Fashion-MNIST
// (the first 6000 training and 1000 test images of the dataset, MIT licence)
// in its IDX format.
//
//go:embed fmnist_cnn/fmnist_cnn_train.onnx fmnist_subset/*.gz
var Default embed.FS

// WriteDefault copies the embedded model and data into dir and returns the
// model's path and the data folder.
func WriteDefault(dir string) (model, data string, err error) {
	err = fs.WalkDir(Default, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := Default.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return "", "", fmt.Errorf("models: writing the embedded default: %w", err)
	}
	return filepath.Join(dir, "fmnist_cnn", "fmnist_cnn_train.onnx"), filepath.Join(dir, "fmnist_subset"), nil
}
