package importer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

const gptSmall = "../models/gpt/gpt_small_train.onnx"

// withMapping makes Load map every file (and read every unaligned tensor
// into anonymous memory) for the rest of the test, as it does for large
// files.
func withMapping(t *testing.T) {
	t.Helper()
	oldMap, oldHeap := mapMinBytes, offHeapMinBytes
	mapMinBytes, offHeapMinBytes = 0, 0
	t.Cleanup(func() { mapMinBytes, offHeapMinBytes = oldMap, oldHeap })
}

func requireSameInitializers(t *testing.T, want, got *graph.Model) {
	t.Helper()
	require.Equal(t, want.Graph.InitOrder, got.Graph.InitOrder)
	for _, name := range want.Graph.InitOrder {
		w, g := want.Graph.Initializers[name], got.Graph.Initializers[name]
		require.Equal(t, w.DType, g.DType, name)
		require.Equal(t, w.Shape, g.Shape, name)
		require.Equal(t, w.Data, g.Data, name)
	}
}

// TestLoadMappedMatchesRead loads the GPT export (raw_data inline, at
// whatever offsets protobuf put it) mapped and read: same tensors. Writing
// a mapped tensor does not change the file (the mapping is copy-on-write).
func TestLoadMappedMatchesRead(t *testing.T) {
	read, err := Load(gptSmall)
	require.NoError(t, err)
	before, err := os.ReadFile(gptSmall)
	require.NoError(t, err)

	withMapping(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "gpt.onnx")
	require.NoError(t, os.WriteFile(path, before, 0o644))
	mapped, err := Load(path)
	require.NoError(t, err)
	requireSameInitializers(t, read, mapped)

	for _, name := range mapped.Graph.InitOrder {
		if s := mapped.Graph.Initializers[name].Float32s(); len(s) > 0 {
			for i := range s {
				s[i] = 42
			}
		}
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "writing loaded tensors changed the model file")
	again, err := Load(path)
	require.NoError(t, err)
	requireSameInitializers(t, read, again)
}

// TestSaveExternalData writes the GPT export with its initializers in an
// external data file and reads it back, mapped and read, with the same
// values; tensors sit at 64-byte aligned offsets; small ones stay inline.
func TestSaveExternalData(t *testing.T) {
	m, err := Load(gptSmall)
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "model.onnx")
	require.NoError(t, SaveWith(path, m, SaveOptions{ExternalData: "always"}))
	st, err := os.Stat(path + ".data")
	require.NoError(t, err)
	assert.Greater(t, st.Size(), int64(4*120000), "the data file holds the weights")
	inline, err := os.Stat(path)
	require.NoError(t, err)
	assert.Less(t, inline.Size(), int64(100000), "the model file holds no large weights")

	offsets := externalOffsets(t, path)
	require.NotEmpty(t, offsets)
	assert.Contains(t, offsets, "pos")
	assert.Contains(t, offsets, "head.weight")
	for name, off := range offsets {
		assert.Zero(t, off%externalAlign, "%s at offset %d", name, off)
	}
	_, hasBias := offsets["norm.bias"] // 64 floats: 256 bytes, stays inline
	assert.False(t, hasBias)

	back, err := Load(path)
	require.NoError(t, err)
	requireSameInitializers(t, m, back)
	withMapping(t)
	mapped, err := Load(path)
	require.NoError(t, err)
	requireSameInitializers(t, m, mapped)
}

// externalOffsets reads the top-level initializers of a model file and
// returns the external data offset of each tensor that has one.
func externalOffsets(t *testing.T, path string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]int64{}
	require.NoError(t, walk(b, func(f field) error {
		if f.num != 7 {
			return nil
		}
		return walk(f.b, func(f field) error {
			if f.num != 5 {
				return nil
			}
			tp, err := parseTensorProto(f.b)
			if err != nil {
				return err
			}
			if tp.location == 1 {
				off, err := strconv.ParseInt(tp.external["offset"], 10, 64)
				if err != nil {
					return err
				}
				out[tp.name] = off
			}
			return nil
		})
	}))
	return out
}

func TestSaveExternalDataOptions(t *testing.T) {
	m := tinyModel(graph.FromFloat32(make([]float32, 1000), 1000))
	dir := t.TempDir()
	err := SaveWith(filepath.Join(dir, "a.onnx"), m, SaveOptions{ExternalData: "sometimes"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `external data "sometimes"`)

	old := ExternalDataThreshold
	t.Cleanup(func() { ExternalDataThreshold = old })
	ExternalDataThreshold = 1000
	err = SaveWith(filepath.Join(dir, "b.onnx"), m, SaveOptions{ExternalData: "never"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hold 4000 bytes")
	// auto goes external from the threshold on.
	require.NoError(t, Save(filepath.Join(dir, "c.onnx"), m))
	_, err = os.Stat(filepath.Join(dir, "c.onnx.data"))
	assert.NoError(t, err)
	ExternalDataThreshold = 1 << 40
	require.NoError(t, Save(filepath.Join(dir, "d.onnx"), m))
	_, err = os.Stat(filepath.Join(dir, "d.onnx.data"))
	assert.True(t, os.IsNotExist(err))
}

// TestSaveExternalDataPassesONNXChecker: the onnx package's full checker
// accepts the external-data file, and onnx's own loader reads the same
// values.
func TestSaveExternalDataPassesONNXChecker(t *testing.T) {
	py := testutil.Python(t, "onnx", "numpy")
	m, err := Load(gptSmall)
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "model.onnx")
	require.NoError(t, SaveWith(path, m, SaveOptions{ExternalData: "always"}))
	dump := filepath.Join(dir, "dump.npz")
	script := fmt.Sprintf(`
import numpy as np, onnx
from onnx import numpy_helper
onnx.checker.check_model(%q, full_check=True)
m = onnx.load(%q, load_external_data=False)
ext = [i.name for i in m.graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
assert ext, "no external tensors"
m = onnx.load(%q)
np.savez(%q, **{i.name: numpy_helper.to_array(i) for i in m.graph.initializer})
print(len(ext))
`, path, path, path, dump)
	out, err := exec.Command(py, "-c", script).CombinedOutput()
	require.NoError(t, err, "%s", out)
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err, "%s", out)
	assert.Greater(t, n, 10)
	arrays, err := tensorio.ReadNPZ(dump)
	require.NoError(t, err)
	require.Len(t, arrays, len(m.Graph.InitOrder))
	for _, name := range m.Graph.InitOrder {
		require.Contains(t, arrays, name)
		assert.Equal(t, m.Graph.Initializers[name].Data, arrays[name].Data, name)
	}
}

// TestSaveStreamsEncode: Save writes, a piece at a time, exactly the bytes
// Encode assembles, which decode to the same initializers; and the onnx
// package's checker accepts the inline file too (when it is installed).
func TestSaveStreamsEncode(t *testing.T) {
	m, err := Load(gptSmall)
	require.NoError(t, err)
	want, err := Encode(m)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "model.onnx")
	require.NoError(t, Save(path, m))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, got)
	back, err := Decode(got)
	require.NoError(t, err)
	requireSameInitializers(t, m, back)
	_, err = os.Stat(path + ".data")
	assert.True(t, os.IsNotExist(err), "a small model stays inline")

	py := testutil.Python(t, "onnx", "numpy")
	out, err := exec.Command(py, "-c", fmt.Sprintf("import onnx; onnx.checker.check_model(onnx.load(%q), full_check=True)", path)).CombinedOutput()
	require.NoError(t, err, "%s", out)
}
