package importer

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

func readNPY(t *testing.T, path string) *graph.Tensor {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	x, err := tensorio.ReadNPY(f)
	require.NoError(t, err)
	return x
}

// Sparse initializers (models/sparse_initializer.py: W with flat indices,
// B with coordinate indices) load as the dense tensors ONNX's numpy helper
// makes of them, and are listed as sparse.
func TestSparseInitializers(t *testing.T) {
	m, err := Load("../models/sparse/sparse_initializer.onnx")
	require.NoError(t, err)
	for _, name := range []string{"W", "B"} {
		want := readNPY(t, "../models/sparse/"+name+"_dense.npy")
		got := m.Graph.Initializers[name]
		require.NotNil(t, got, "initializer %s", name)
		assert.Equal(t, want.Shape, got.Shape, name)
		assert.Equal(t, want.DType, got.DType, name)
		assert.Equal(t, want.Data, got.Data, name)
	}
	assert.ElementsMatch(t, []string{"W", "B"}, m.Graph.SparseInitializers)
}
