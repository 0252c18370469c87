package tensorio

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TestWriteSafetensorsStreamsEncodedBytes: the streamed file is byte for
// byte what EncodeSafetensors makes, for every dtype family (views of
// numeric memory, bool and half types converted), a scalar and an empty
// tensor.
func TestWriteSafetensorsStreamsEncodedBytes(t *testing.T) {
	in := map[string]*graph.Tensor{
		"w":     graph.FromFloat32([]float32{1, -2, 3.5, 4, 5, 6}, 2, 3),
		"step":  graph.FromInt64([]int64{7}),
		"m":     graph.FromBool([]bool{true, false, true}, 3),
		"h":     {DType: graph.Float16, Shape: []int{2}, Data: []uint16{0x3c00, 0xc000}},
		"b":     {DType: graph.Uint8, Shape: []int{3}, Data: []uint8{1, 2, 255}},
		"i":     {DType: graph.Int32, Shape: []int{2, 1}, Data: []int32{-5, 9}},
		"d":     graph.FromFloat64([]float64{0.25}),
		"empty": graph.FromFloat32([]float32{}, 0, 4),
		"s":     {DType: graph.Float32, Shape: []int{}, Data: []float32{2.5}},
	}
	meta := map[string]string{"format": "pt", "producer": "test"}
	want, err := EncodeSafetensors(in, meta)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "a.safetensors")
	require.NoError(t, WriteSafetensors(path, in, meta))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	bad := map[string]*graph.Tensor{"x": {DType: graph.Float32, Shape: []int{3}, Data: []float32{1}}}
	err = WriteSafetensors(filepath.Join(t.TempDir(), "bad.safetensors"), bad, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `tensor "x"`)
}
