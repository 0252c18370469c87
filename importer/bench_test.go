package importer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// BenchmarkLoad100MB imports a model holding 100 MB of float32 weights in
// four initializers: `go test ./importer -bench Load100MB -benchtime 5x`.
func BenchmarkLoad100MB(b *testing.B) {
	const perTensor = 25 << 20 / 4
	m := tinyModel(graph.FromFloat32(make([]float32, 3), 3))
	for _, name := range []string{"a", "b", "c", "d"} {
		m.Graph.Initializers[name] = graph.FromFloat32(make([]float32, perTensor), perTensor)
	}
	data, err := Encode(m)
	require.NoError(b, err)
	path := filepath.Join(b.TempDir(), "big.onnx")
	require.NoError(b, os.WriteFile(path, data, 0o644))
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Load(path); err != nil {
			b.Fatal(err)
		}
	}
}
