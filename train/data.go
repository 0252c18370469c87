package train

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/onnxtrain/onnxtrain/train/data"
)

// OpenData opens the dataset at path for prog. The format follows the
// path:
//   - *.npz / *.npy: arrays named like the graph inputs, plus the labels
//     array (--labels);
//   - an IDX images file (*idx3-ubyte[.gz]) with its labels file beside it,
//     or a folder holding MNIST-style files (train-* for training data,
//     t10k-* for validation data);
//   - a folder with one sub-folder of images per class;
//   - *.bin: a flat file of uint16/uint32 token ids (--token-dtype), cut
//     into windows of the graph's sequence length (--seq-len when the
//     graph leaves it open): the windows feed the token input, the
//     next-token targets the labels or, for a graph that computes its own
//     loss, its second data input (tokens.go).
//
// Training data is augmented as cfg asks; validation data is not.
func OpenData(cfg Config, path string, training bool, prog *Program) (data.Dataset, error) {
	ds, err := openDataset(cfg, path, training, prog)
	if err != nil {
		return nil, err
	}
	if ds.Len() == 0 {
		return nil, fmt.Errorf("data: %s holds no examples", path)
	}
	return ds, nil
}

func openDataset(cfg Config, path string, training bool, prog *Program) (data.Dataset, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	input := cfg.InputName
	if input == "" && len(prog.DataInputs) == 1 {
		input = prog.DataInputs[0]
	}
	lower := strings.ToLower(path)
	switch {
	case strings.HasSuffix(lower, ".npz") || strings.HasSuffix(lower, ".npy"):
		opts := data.NPZOptions{Labels: cfg.Labels, NoLabels: !prog.NeedsLabels, Inputs: prog.DataInputs}
		return data.OpenNPZ(path, opts)
	case !st.IsDir() && strings.Contains(lower, "idx3-ubyte"):
		labels := strings.Replace(path, "images", "labels", 1)
		labels = strings.Replace(labels, "idx3", "idx1", 1)
		return data.OpenIDX(path, labels, idxOptions(cfg, input, training))
	case !st.IsDir() && strings.HasSuffix(lower, ".bin"):
		return openTokens(cfg, path, prog)
	case st.IsDir() && hasMNIST(path):
		split := "train"
		if !training {
			split = "t10k"
		}
		return data.OpenMNIST(path, split, idxOptions(cfg, input, training))
	case st.IsDir():
		if input == "" {
			return nil, fmt.Errorf("data: the model has inputs %v; say which one the images feed with --input-name", prog.DataInputs)
		}
		opts := data.ImageFolderOptions{Input: input, Height: cfg.ImageSize, Width: cfg.ImageSize, Grayscale: cfg.Grayscale,
			Mean: cfg.Mean, Std: cfg.Std, Seed: uint64(cfg.Seed)}
		opts.Workers = cfg.Workers
		if training {
			opts.RandomCrop = cfg.RandomCrop > 0
			opts.CropPadding = cfg.RandomCrop
			opts.HFlip = cfg.RandomFlip
			opts.RandomResizedCrop = cfg.RandomResizedCrop
		}
		if !opts.RandomResizedCrop {
			opts.ResizeShorter = cfg.ResizeSize
		}
		return data.OpenImageFolder(path, opts)
	}
	return nil, fmt.Errorf("data: %s: unknown format (want .npz, .npy, a .bin token file, an IDX images file, an MNIST-style folder or a folder of class folders)", path)
}

func idxOptions(cfg Config, input string, training bool) data.IDXOptions {
	o := data.IDXOptions{Input: input}
	if len(cfg.Mean) > 0 && len(cfg.Std) > 0 {
		o.Mean, o.Std = cfg.Mean[0], cfg.Std[0]
	}
	if training {
		o.CropPadding, o.HFlip, o.Seed = cfg.RandomCrop, cfg.RandomFlip, uint64(cfg.Seed)
	}
	return o
}

func hasMNIST(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*-images*idx3-ubyte*"))
	return len(m) > 0
}
