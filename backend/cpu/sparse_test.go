package cpu_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// A model whose weights are sparse initializers runs: Y = X·W + B equals
// numpy's result on the dense tensors (models/sparse_initializer.py).
func TestSparseInitializerModelRuns(t *testing.T) {
	npy := func(name string) *graph.Tensor {
		f, err := os.Open("../../models/sparse/" + name + ".npy")
		require.NoError(t, err)
		defer f.Close()
		x, err := tensorio.ReadNPY(f)
		require.NoError(t, err)
		return x
	}
	m, err := importer.Load("../../models/sparse/sparse_initializer.onnx")
	require.NoError(t, err)
	b, err := backend.Open("cpu")
	require.NoError(t, err)
	exe, err := b.Compile(m, backend.CompileOptions{})
	require.NoError(t, err)
	x := npy("X")
	out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"X": x})
	require.NoError(t, err)
	want := npy("Y")
	require.Equal(t, want.Shape, out["Y"].Shape)
	assert.InDeltaSlice(t, want.Float32s(), out["Y"].Float32s(), 1e-6)
}
