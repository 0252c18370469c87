package tensorio

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/umaskfile"
)

// The safetensors format: an 8-byte little-endian header length, a JSON
// header mapping each tensor name to its dtype, shape and byte range (plus
// optional "__metadata__" strings), then the raw little-endian data. Our own
// codec: github.com/nlpodyssey/safetensors refuses rank-0 tensors, which
// optimizer state (step counts) needs.

var stNames = map[graph.DType]string{
	graph.Bool: "BOOL", graph.Uint8: "U8", graph.Int8: "I8", graph.Int16: "I16", graph.Uint16: "U16",
	graph.Float16: "F16", graph.BFloat16: "BF16", graph.Int32: "I32", graph.Uint32: "U32",
	graph.Float32: "F32", graph.Float64: "F64", graph.Int64: "I64", graph.Uint64: "U64",
}

type stEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// maxSafetensorsHeader bounds the JSON header we accept (100 MB, as the
// reference implementation does).
const maxSafetensorsHeader = 100 << 20

// LittleEndianBytes returns t's elements as little-endian bytes.
func LittleEndianBytes(t *graph.Tensor) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(t.Size() * t.DType.Size())
	switch s := t.Data.(type) {
	case []bool:
		for _, v := range s {
			if v {
				buf.WriteByte(1)
			} else {
				buf.WriteByte(0)
			}
		}
	case []string, []*graph.Tensor:
		return nil, fmt.Errorf("%v tensors have no byte form", t.DType)
	default:
		if err := binary.Write(&buf, binary.LittleEndian, s); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// EncodeSafetensors serializes tensors (sorted by name) with metadata.
func EncodeSafetensors(tensors map[string]*graph.Tensor, meta map[string]string) ([]byte, error) {
	names := make([]string, 0, len(tensors))
	for k := range tensors {
		names = append(names, k)
	}
	sort.Strings(names)
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	var data bytes.Buffer
	for _, name := range names {
		t := tensors[name]
		dt, ok := stNames[t.DType]
		if !ok {
			return nil, fmt.Errorf("tensor %q: dtype %v has no safetensors equivalent", name, t.DType)
		}
		raw, err := LittleEndianBytes(t)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		start := int64(data.Len())
		data.Write(raw)
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[name] = stEntry{DType: dt, Shape: shape, Offsets: [2]int64{start, int64(data.Len())}}
	}
	h, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := make([]byte, 8, 8+len(h)+data.Len())
	binary.LittleEndian.PutUint64(out, uint64(len(h)))
	out = append(out, h...)
	return append(out, data.Bytes()...), nil
}

// DecodeSafetensors parses a .safetensors buffer.
func DecodeSafetensors(b []byte) (map[string]*graph.Tensor, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("%w: safetensors file of %d bytes", ErrFormat, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxSafetensorsHeader || n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("%w: safetensors header of %d bytes in a file of %d", ErrFormat, n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, nil, fmt.Errorf("%w: safetensors header: %v", ErrFormat, err)
	}
	data := b[8+n:]
	meta := map[string]string{}
	out := map[string]*graph.Tensor{}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, fmt.Errorf("%w: safetensors metadata: %v", ErrFormat, err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		dt := graph.Undefined
		for k, v := range stNames {
			if v == e.DType {
				dt = k
			}
		}
		if dt == graph.Undefined {
			return nil, nil, fmt.Errorf("%w: tensor %q: dtype %q is not supported", ErrFormat, name, e.DType)
		}
		t, err := graph.NewTensor(dt, e.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi < lo || hi > int64(len(data)) || hi-lo != int64(t.Size()*dt.Size()) {
			return nil, nil, fmt.Errorf("%w: tensor %q: byte range %v does not fit shape %v of %v (data is %d bytes)", ErrFormat, name, e.Offsets, e.Shape, dt, len(data))
		}
		if err := graph.DecodeElements(t.Data, data[lo:hi], binary.LittleEndian); err != nil {
			return nil, nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		out[name] = t
	}
	return out, meta, nil
}

// WriteSafetensors writes tensors to a .safetensors file atomically, the
// same bytes EncodeSafetensors makes, streamed: each tensor's memory goes
// to the file as it is (on a little-endian machine), so writing a model of
// several GB takes no buffer of its size (safetensors_stream.go).
func WriteSafetensors(path string, tensors map[string]*graph.Tensor, meta map[string]string) error {
	if err := writeSafetensorsStream(path, tensors, meta); err != nil {
		return fmt.Errorf("tensorio: %s: %w", path, err)
	}
	return nil
}

// ReadSafetensors reads every tensor of a .safetensors file, and its metadata.
func ReadSafetensors(path string) (map[string]*graph.Tensor, map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("tensorio: %w", err)
	}
	t, m, err := DecodeSafetensors(b)
	if err != nil {
		return nil, nil, fmt.Errorf("tensorio: %s: %w", path, err)
	}
	return t, m, nil
}

// WriteFileAtomic writes b to path through a temporary file in the same
// folder that is synced and renamed into place, so a crash leaves either
// the old file or the new one.
func WriteFileAtomic(path string, b []byte) error {
	tmp, err := umaskfile.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("tensorio: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("tensorio: %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("tensorio: %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tensorio: %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("tensorio: %w", err)
	}
	return nil
}
