package importer

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/repodata"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// typedTensorProto encodes a TensorProto using the typed fields (float_data,
// int32_data, ...) the way older exporters do, independent of EncodeTensor.
func typedTensorProto(t *testing.T, name string, d graph.DType, dims []int64, vals []float64) []byte {
	var b []byte
	var p []byte
	for _, v := range dims {
		p = protowire.AppendVarint(p, uint64(v))
	}
	b = appendBytes(b, 1, p)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(d))
	b = appendString(b, 8, name)
	p = nil
	var field protowire.Number
	switch d {
	case graph.Float32:
		field = 4
		for _, v := range vals {
			p = protowire.AppendFixed32(p, math.Float32bits(float32(v)))
		}
	case graph.Float64:
		field = 10
		for _, v := range vals {
			p = protowire.AppendFixed64(p, math.Float64bits(v))
		}
	case graph.Int64:
		field = 7
		for _, v := range vals {
			p = protowire.AppendVarint(p, uint64(int64(v)))
		}
	case graph.Uint32, graph.Uint64:
		field = 11
		for _, v := range vals {
			p = protowire.AppendVarint(p, uint64(v))
		}
	case graph.Float16:
		field = 5
		for _, v := range vals {
			p = protowire.AppendVarint(p, uint64(graph.Float32ToFloat16(float32(v))))
		}
	case graph.BFloat16:
		field = 5
		for _, v := range vals {
			p = protowire.AppendVarint(p, uint64(graph.Float32ToBFloat16(float32(v))))
		}
	default: // int8..int32, uint8, uint16, bool travel in int32_data
		field = 5
		for _, v := range vals {
			p = protowire.AppendVarint(p, uint64(int64(v)))
		}
	}
	b = appendBytes(b, field, p)
	return b
}

func TestDecodeEveryDTypeTypedAndRaw(t *testing.T) {
	vals := map[graph.DType][]float64{
		graph.Float32:  {1.5, -2, 0, 3.25, 1.0 / 1024, -7},
		graph.Float64:  {1.5, -2, 0, 3.25, 1e-300, -7},
		graph.Float16:  {1.5, -2, 0, 3.25, 65504, -7},
		graph.BFloat16: {1.5, -2, 0, 3.25, 256, -7},
		graph.Int8:     {1, -2, 0, 3, 127, -128},
		graph.Int16:    {1, -2, 0, 3, 32767, -32768},
		graph.Int32:    {1, -2, 0, 3, 2147483647, -2147483648},
		graph.Int64:    {1, -2, 0, 3, 1 << 40, -(1 << 40)},
		graph.Uint8:    {1, 2, 0, 3, 255, 7},
		graph.Uint16:   {1, 2, 0, 3, 65535, 7},
		graph.Uint32:   {1, 2, 0, 3, 4294967295, 7},
		graph.Uint64:   {1, 2, 0, 3, 1 << 50, 7},
		graph.Bool:     {1, 0, 0, 1, 1, 0},
	}
	for d, v := range vals {
		t.Run(d.String(), func(t *testing.T) {
			typed, name, err := DecodeTensor(typedTensorProto(t, "w", d, []int64{2, 3}, v))
			require.NoError(t, err)
			assert.Equal(t, "w", name)
			assert.Equal(t, d, typed.DType)
			assert.Equal(t, []int{2, 3}, typed.Shape)
			require.NoError(t, typed.Validate())
			for i, want := range v {
				assert.Equal(t, want, typed.Float(i), "typed element %d", i)
			}
			// The same values through raw_data.
			rawBytes, err := EncodeTensor("w", typed)
			require.NoError(t, err)
			raw, _, err := DecodeTensor(rawBytes)
			require.NoError(t, err)
			assert.Equal(t, typed.Data, raw.Data)
		})
	}
}

func TestDecodeStringTensor(t *testing.T) {
	var b []byte
	b = appendBytes(b, 1, protowire.AppendVarint(nil, 2))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(graph.String))
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	b = protowire.AppendString(b, "a")
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	b = protowire.AppendString(b, "bc")
	tt, _, err := DecodeTensor(b)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "bc"}, tt.Data)
}

func TestRawDataIsNotCopiedWhenAligned(t *testing.T) {
	w := graph.FromFloat32(make([]float32, 1024), 32, 32)
	b, err := EncodeTensor("w", w)
	require.NoError(t, err)
	// For one of four buffer offsets the payload is 4-byte aligned; then
	// the tensor must alias the buffer instead of copying it.
	inPlace := 0
	for shift := 0; shift < 4; shift++ {
		buf := make([]byte, len(b)+shift)[shift:]
		copy(buf, b)
		tt, _, err := DecodeTensor(buf)
		require.NoError(t, err)
		p := uintptr(unsafe.Pointer(&tt.Float32s()[0]))
		start := uintptr(unsafe.Pointer(&buf[0]))
		if p >= start && p < start+uintptr(len(buf)) {
			inPlace++
		}
		assert.Equal(t, w.Float32s(), tt.Float32s())
	}
	assert.Equal(t, 1, inPlace, "exactly the aligned case should decode in place")
}

func TestDecodeRejectsBadTensors(t *testing.T) {
	cases := map[string][]byte{
		"too few values":  typedTensorProto(t, "w", graph.Float32, []int64{2, 3}, []float64{1, 2}),
		"negative dim":    typedTensorProto(t, "w", graph.Float32, []int64{-1}, nil),
		"dims overflow":   typedTensorProto(t, "w", graph.Float32, []int64{1 << 30, 1 << 30, 1 << 30}, nil),
		"unknown dtype":   typedTensorProto(t, "w", graph.DType(99), []int64{1}, []float64{1}),
		"complex":         typedTensorProto(t, "w", graph.Complex64, []int64{1}, []float64{1, 2}),
		"truncated bytes": typedTensorProto(t, "w", graph.Float32, []int64{3}, []float64{1, 2, 3})[:10],
	}
	for name, b := range cases {
		_, _, err := DecodeTensor(b)
		assert.Error(t, err, name)
	}
}

// tinyModel builds Y = Relu(X + W) with W an initializer.
func tinyModel(w *graph.Tensor) *graph.Model {
	g := graph.NewGraph("tiny")
	g.Inputs = []*graph.ValueInfo{{Name: "X", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Param: "batch"}, {Value: int64(w.Size()), Known: true}}}}}
	g.Outputs = []*graph.ValueInfo{{Name: "Y", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32}}}
	g.Initializers["W"] = w
	g.InitOrder = []string{"W"}
	g.Nodes = []*graph.Node{
		{Name: "add", OpType: "Add", Inputs: []string{"X", "W"}, Outputs: []string{"S"}},
		{Name: "relu", OpType: "Relu", Inputs: []string{"S"}, Outputs: []string{"Y"}},
	}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, ProducerName: "test", Graph: g}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	m := tinyModel(graph.FromFloat32([]float32{1, -2, 3}, 3))
	m.Graph.Nodes[0].SetAttr(graph.IntsAttr("some_ints", 1, -2, 3))
	m.Graph.Nodes[0].SetAttr(graph.FloatAttr("f", 0.5))
	m.Graph.Nodes[0].SetAttr(graph.StringAttr("s", "hello"))
	b, err := Encode(m)
	require.NoError(t, err)
	got, err := Decode(b)
	require.NoError(t, err)
	assert.Equal(t, int64(17), got.Opset())
	assert.Equal(t, "test", got.ProducerName)
	require.Len(t, got.Graph.Nodes, 2)
	n := got.Graph.Nodes[0]
	assert.Equal(t, []int64{1, -2, 3}, n.AttrInts("some_ints", nil))
	assert.Equal(t, float32(0.5), n.AttrFloat("f", 0))
	assert.Equal(t, "hello", n.AttrString("s", ""))
	assert.Equal(t, []float32{1, -2, 3}, got.Graph.Initializers["W"].Float32s())
	assert.Equal(t, "batch", got.Graph.Inputs[0].Type.Shape[0].Param)
	assert.Equal(t, "float32[batch,3]", got.Graph.Inputs[0].Type.String())
}

func TestLoadRoundTripsConformanceModels(t *testing.T) {
	root := testutil.ONNXTestdata(t)
	paths, _ := filepath.Glob(filepath.Join(root, "node", "test_[a-c]*", "model.onnx"))
	more, _ := filepath.Glob(filepath.Join(root, "light", "*", "model.onnx"))
	paths = append(paths, more...)
	require.NotEmpty(t, paths, "no conformance models under %s", root)
	for _, p := range paths {
		m, err := Load(p)
		require.NoError(t, err, p)
		b, err := Encode(m)
		require.NoError(t, err, p)
		m2, err := Decode(b)
		require.NoError(t, err, p)
		require.Equal(t, len(m.Graph.Nodes), len(m2.Graph.Nodes), p)
		for i, n := range m.Graph.Nodes {
			n2 := m2.Graph.Nodes[i]
			assert.Equal(t, n.OpType, n2.OpType, p)
			assert.Equal(t, n.Inputs, n2.Inputs, p)
			assert.Equal(t, len(n.Attrs), len(n2.Attrs), p)
		}
		for k, v := range m.Graph.Initializers {
			assert.Equal(t, v.Data, m2.Graph.Initializers[k].Data, "%s: %s", p, k)
		}
	}
}

// writeExternalModel writes a model whose initializer W lives in a separate
// file at location (relative to dir), with the given offset.
func writeExternalModel(t *testing.T, dir, location string, offset int64, w []float32) string {
	var tp []byte
	tp = appendBytes(tp, 1, protowire.AppendVarint(nil, uint64(len(w))))
	tp = protowire.AppendTag(tp, 2, protowire.VarintType)
	tp = protowire.AppendVarint(tp, uint64(graph.Float32))
	tp = appendString(tp, 8, "W")
	tp = appendBytes(tp, 13, stringPair("location", location))
	tp = appendBytes(tp, 13, stringPair("offset", strconv.FormatInt(offset, 10)))
	tp = appendBytes(tp, 13, stringPair("length", strconv.Itoa(4*len(w))))
	tp = protowire.AppendTag(tp, 14, protowire.VarintType)
	tp = protowire.AppendVarint(tp, 1)

	m := tinyModel(graph.FromFloat32(w, len(w)))
	delete(m.Graph.Initializers, "W")
	m.Graph.InitOrder = nil
	b, err := Encode(m)
	require.NoError(t, err)
	// Splice the external initializer into the graph message (field 7).
	var out []byte
	require.NoError(t, walk(b, func(f field) error {
		if f.num == 7 {
			g := append(append([]byte{}, f.b...), appendBytes(nil, 5, tp)...)
			out = appendBytes(out, 7, g)
			return nil
		}
		switch f.typ {
		case protowire.BytesType:
			out = appendBytes(out, f.num, f.b)
		case protowire.VarintType:
			out = protowire.AppendTag(out, f.num, f.typ)
			out = protowire.AppendVarint(out, f.u)
		}
		return nil
	}))
	path := filepath.Join(dir, "model.onnx")
	require.NoError(t, os.WriteFile(path, out, 0o644))
	return path
}

func TestExternalData(t *testing.T) {
	dir := t.TempDir()
	w := []float32{0.5, -1, 2}
	data := make([]byte, 16)
	copy(data[4:], rawBytes(graph.FromFloat32(w, 3)))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "weights"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "weights", "w.bin"), data, 0o644))
	path := writeExternalModel(t, dir, "weights/w.bin", 4, w)
	m, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, w, m.Graph.Initializers["W"].Float32s())
}

func TestExternalDataMustStayInsideModelFolder(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.bin")
	require.NoError(t, os.WriteFile(secret, make([]byte, 12), 0o644))
	for _, loc := range []string{"../secret.bin", secret, "link.bin", "missing.bin"} {
		t.Run(loc, func(t *testing.T) {
			dir := filepath.Join(outside, "model")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			os.Remove(filepath.Join(dir, "link.bin"))
			require.NoError(t, os.Symlink(secret, filepath.Join(dir, "link.bin")))
			path := writeExternalModel(t, dir, loc, 0, []float32{1, 2, 3})
			_, err := Load(path)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrExternalData)
			assert.Contains(t, err.Error(), "model.onnx")
			assert.Contains(t, err.Error(), `"W"`)
		})
	}
}

// A model over 2 GB keeps its weights external; offsets past 2^31 must work.
// The data file is sparse, so the test costs no disk space.
func TestExternalDataPast2GiB(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big.bin"))
	require.NoError(t, err)
	const offset = int64(2<<30) + 12345
	require.NoError(t, f.Truncate(offset+64))
	w := []float32{3, 4, 5}
	_, err = f.WriteAt(rawBytes(graph.FromFloat32(w, 3)), offset)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	m, err := Load(writeExternalModel(t, dir, "big.bin", offset, w))
	require.NoError(t, err)
	assert.Equal(t, w, m.Graph.Initializers["W"].Float32s())
}

func TestLoadRejectsCorruptFiles(t *testing.T) {
	m := tinyModel(graph.FromFloat32([]float32{1, 2, 3}, 3))
	b, err := Encode(m)
	require.NoError(t, err)
	dir := t.TempDir()
	for _, cut := range []int{1, 5, len(b) / 2, len(b) - 1} {
		p := filepath.Join(dir, "cut.onnx")
		require.NoError(t, os.WriteFile(p, b[:cut], 0o644))
		_, err := Load(p)
		require.Error(t, err, "cut at %d", cut)
		assert.Contains(t, err.Error(), "cut.onnx")
	}
	p := filepath.Join(dir, "text.onnx")
	require.NoError(t, os.WriteFile(p, []byte("this is not a model"), 0o644))
	_, err = Load(p)
	assert.Error(t, err)
	_, err = Load(filepath.Join(dir, "nope.onnx"))
	assert.Error(t, err)
}

func FuzzDecode(f *testing.F) {
	m := tinyModel(graph.FromFloat32([]float32{1, 2, 3}, 3))
	b, _ := Encode(m)
	f.Add(b)
	paths, _ := filepath.Glob(filepath.Join(repodata.ONNXTestdata(), "node", "test_[a-e]*", "model.onnx"))
	for i, p := range paths {
		if i%8 != 0 {
			continue
		}
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			return
		}
		for name, tt := range m.Graph.Initializers {
			if err := tt.Validate(); err != nil {
				t.Fatalf("initializer %q decoded invalid: %v", name, err)
			}
		}
	})
}

func FuzzDecodeTensor(f *testing.F) {
	for _, d := range []graph.DType{graph.Float32, graph.Int64, graph.Bool, graph.Float16} {
		f.Add(typedTensorProto(nil, "t", d, []int64{2}, []float64{1, 0}))
	}
	b, _ := EncodeTensor("r", graph.FromFloat32([]float32{1, 2, 3, 4}, 2, 2))
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		tt, _, err := DecodeTensor(data)
		if err == nil {
			if err := tt.Validate(); err != nil {
				t.Fatalf("decoded invalid tensor: %v", err)
			}
		}
	})
}
