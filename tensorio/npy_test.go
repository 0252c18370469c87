package tensorio

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// testdata/mixed.npz was written by numpy (see the arrays' definitions in
// the assertions below): it checks our reader against the reference writer.
func TestReadNumpyWrittenNPZ(t *testing.T) {
	arrays, err := ReadNPZ("testdata/mixed.npz")
	require.NoError(t, err)

	f32 := arrays["f32"]
	require.NotNil(t, f32)
	assert.Equal(t, graph.Float32, f32.DType)
	assert.Equal(t, []int{2, 3, 4}, f32.Shape)
	assert.InDelta(t, 23.0/7, f32.Float32s()[23], 1e-6)

	assert.Equal(t, graph.Float64, arrays["f64"].DType)
	assert.Equal(t, []int64{-3, -2, -1, 0, 1, 2}, arrays["i64"].Int64s())
	assert.Equal(t, []int{3, 2}, arrays["i64"].Shape)
	assert.Equal(t, []bool{true, false, true}, arrays["b"].Bools())
	assert.Equal(t, []uint8{0, 1, 2, 3, 4}, arrays["u8"].Data)

	f16 := arrays["f16"]
	assert.Equal(t, graph.Float16, f16.DType)
	assert.Equal(t, []float64{0.5, -2.25, 65504}, []float64{f16.Float(0), f16.Float(1), f16.Float(2)})

	// Column-major on disk, row-major in memory.
	assert.Equal(t, []int32{0, 1, 2, 3, 4, 5}, arrays["fortran"].Data)
	assert.Equal(t, []int32{0, 1, 2}, arrays["big"].Data)
	assert.Equal(t, []int{}, arrays["scalar"].Shape)
	assert.Equal(t, 3.5, arrays["scalar"].Float(0))
}

func TestRoundTrip(t *testing.T) {
	in := map[string]*graph.Tensor{
		"x":    graph.FromFloat32([]float32{1, -2, 3.5, 4, 5, 6}, 2, 3),
		"ids":  graph.FromInt64([]int64{7, 8}, 2),
		"mask": graph.FromBool([]bool{true, false}, 1, 2),
		"s":    graph.FromFloat64([]float64{2.5}),
	}
	path := filepath.Join(t.TempDir(), "a.npz")
	require.NoError(t, WriteNPZ(path, in))
	out, err := ReadNPZ(path)
	require.NoError(t, err)
	require.Len(t, out, 4)
	for k, v := range in {
		assert.Equal(t, v.DType, out[k].DType, k)
		assert.True(t, graph.SameShape(v.Shape, out[k].Shape), "%s: %v vs %v", k, v.Shape, out[k].Shape)
		assert.Equal(t, v.Data, out[k].Data, k)
	}
}

func TestReadNPYRejectsBadInput(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":     {},
		"magic":     []byte("NOTNUMPY1234"),
		"truncated": append(append([]byte("\x93NUMPY\x01\x00"), 0x40, 0), []byte("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000,), }")...),
		"dtype":     append(append([]byte("\x93NUMPY\x01\x00"), 0x40, 0), []byte("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }           ")...),
	} {
		_, err := ReadNPY(bytes.NewReader(b))
		assert.ErrorIs(t, err, ErrFormat, name)
	}
}

func FuzzReadNPY(f *testing.F) {
	var buf bytes.Buffer
	require.NoError(f, WriteNPY(&buf, graph.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)))
	f.Add(buf.Bytes())
	f.Add([]byte("\x93NUMPY\x01\x00\x10\x00{'descr': '<i8'}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tt, err := ReadNPY(bytes.NewReader(b))
		if err == nil {
			require.NoError(t, tt.Validate())
		}
	})
}

func TestSafetensorsRoundTrip(t *testing.T) {
	in := map[string]*graph.Tensor{
		"w":    graph.FromFloat32([]float32{1, -2, 3.5, 4, 5, 6}, 2, 3),
		"step": graph.FromInt64([]int64{7}),
		"m":    graph.FromBool([]bool{true, false}, 2),
	}
	path := filepath.Join(t.TempDir(), "a.safetensors")
	require.NoError(t, WriteSafetensors(path, in, map[string]string{"format": "pt"}))
	out, meta, err := ReadSafetensors(path)
	require.NoError(t, err)
	assert.Equal(t, "pt", meta["format"])
	require.Len(t, out, 3)
	for k, v := range in {
		assert.Equal(t, v.DType, out[k].DType, k)
		assert.True(t, graph.SameShape(v.Shape, out[k].Shape), k)
		assert.Equal(t, v.Data, out[k].Data, k)
	}
}

func FuzzDecodeSafetensors(f *testing.F) {
	b, err := EncodeSafetensors(map[string]*graph.Tensor{"w": graph.FromFloat32([]float32{1, 2}, 2)}, nil)
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte("\x10\x00\x00\x00\x00\x00\x00\x00{}              "))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, _, err := DecodeSafetensors(b)
		if err == nil {
			for _, tt := range ts {
				require.NoError(t, tt.Validate())
			}
		}
	})
}

// FuzzDecodeNPZ: whatever an .npz archive holds, reading it returns an
// error or arrays that are all valid tensors; it never panics.
func FuzzDecodeNPZ(f *testing.F) {
	path := filepath.Join(f.TempDir(), "a.npz")
	require.NoError(f, WriteNPZ(path, map[string]*graph.Tensor{
		"x":      graph.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3),
		"labels": graph.FromInt64([]int64{0, 1}, 2),
	}))
	b, err := os.ReadFile(path)
	require.NoError(f, err)
	f.Add(b)
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	f.Fuzz(func(t *testing.T, b []byte) {
		arrays, err := decodeNPZ("a.npz", bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for name, a := range arrays {
			require.NoError(t, a.Validate(), name)
		}
	})
}

// TestNPZDuplicateArray: an archive with two members of one name is an
// error naming the array, not the later member kept in silence.
func TestNPZDuplicateArray(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, v := range []float32{1, 2} {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: "x.npy", Method: zip.Store})
		require.NoError(t, err)
		require.NoError(t, WriteNPY(w, graph.FromFloat32([]float32{v}, 1)))
	}
	require.NoError(t, zw.Close())
	path := filepath.Join(t.TempDir(), "dup.npz")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	_, err := ReadNPZ(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `array "x" twice`)
}
