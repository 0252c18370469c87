package tensorio_test

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// A tensor goes to NumPy's .npy format and back (numpy.load reads the same
// bytes).
func ExampleWriteNPY() {
	x := graph.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	var buf bytes.Buffer
	if err := tensorio.WriteNPY(&buf, x); err != nil {
		log.Fatal(err)
	}
	y, err := tensorio.ReadNPY(&buf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(y.DType, y.Shape, y.Float32s())
	// Output: float32 [2 3] [1 2 3 4 5 6]
}

// Named arrays go to an .npz file (the format `onnxtrain train --data`
// reads: the model's inputs and the labels) and back.
func ExampleWriteNPZ() {
	dir, err := os.MkdirTemp("", "npz")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "batch.npz")
	err = tensorio.WriteNPZ(path, map[string]*graph.Tensor{
		"input":  graph.FromFloat32([]float32{0.5, -1, 2, 0}, 2, 2),
		"labels": graph.FromInt64([]int64{1, 0}, 2),
	})
	if err != nil {
		log.Fatal(err)
	}
	arrays, err := tensorio.ReadNPZ(path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(arrays["input"].Shape, arrays["input"].Float32s())
	fmt.Println(arrays["labels"].DType, arrays["labels"].Data)
	// Output:
	// [2 2] [0.5 -1 2 0]
	// int64 [1 0]
}

// Weights go to safetensors (what SaveModel and checkpoints write), with
// string metadata beside them.
func ExampleWriteSafetensors() {
	dir, err := os.MkdirTemp("", "st")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")
	err = tensorio.WriteSafetensors(path, map[string]*graph.Tensor{"fc.weight": graph.FromFloat32([]float32{1, 2}, 1, 2)}, map[string]string{"format": "pt"})
	if err != nil {
		log.Fatal(err)
	}
	weights, meta, err := tensorio.ReadSafetensors(path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(weights["fc.weight"].Shape, weights["fc.weight"].Float32s(), meta["format"])
	// Output: [1 2] [1 2] pt
}
