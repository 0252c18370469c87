package train_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// TestOutputWithExternalData trains the small GPT export and writes it
// with --output the way a model past 2 GB is written (the threshold is
// lowered so that a small model takes that path): model.onnx refers to
// model.onnx.data, onnx.checker.check_model(full_check=True) accepts it,
// and it holds the trained weights (those of model.safetensors).
func TestOutputWithExternalData(t *testing.T) {
	old := importer.ExternalDataThreshold
	importer.ExternalDataThreshold = 1
	t.Cleanup(func() { importer.ExternalDataThreshold = old })

	out := t.TempDir()
	cfg := train.DefaultConfig()
	cfg.Model = "../models/gpt/gpt_small_train.onnx"
	cfg.Data = "../models/gpt/tokens.bin"
	cfg.Loss = "output:loss"
	cfg.BatchSize = 4
	cfg.Steps = 2
	cfg.Output = out
	_, err := train.Run(context.Background(), cfg, io.Discard, io.Discard)
	require.NoError(t, err)

	path := filepath.Join(out, "model.onnx")
	st, err := os.Stat(path + ".data")
	require.NoError(t, err)
	assert.Greater(t, st.Size(), int64(4*130000))

	m, err := importer.Load(path)
	require.NoError(t, err)
	weights, _, err := tensorio.ReadSafetensors(filepath.Join(out, "model.safetensors"))
	require.NoError(t, err)
	require.NotEmpty(t, weights)
	orig, err := importer.Load(cfg.Model)
	require.NoError(t, err)
	changed := 0
	for name, w := range weights {
		got, ok := m.Graph.Initializers[name]
		require.True(t, ok, name)
		assert.Equal(t, w.Data, got.Data, name)
		if fmt.Sprint(orig.Graph.Initializers[name].Data) != fmt.Sprint(got.Data) {
			changed++
		}
	}
	assert.Greater(t, changed, len(weights)/2, "training changed the weights that were written")

	py := testutil.Python(t, "onnx")
	script := fmt.Sprintf("import onnx\nonnx.checker.check_model(%q, full_check=True)\n"+
		"m = onnx.load(%q, load_external_data=False)\n"+
		"assert any(i.data_location == onnx.TensorProto.EXTERNAL for i in m.graph.initializer)\n", path, path)
	b, err := exec.Command(py, "-c", script).CombinedOutput()
	require.NoError(t, err, "%s", b)
}
