package importer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/graph"
)

// ErrExternalData is wrapped by errors about external tensor data: a path
// outside the model's folder, a missing file, a short read.
var ErrExternalData = errors.New("external data")

// tensorProto is a TensorProto before its payload is turned into a typed slice.
type tensorProto struct {
	name     string
	dims     []int64
	dtype    graph.DType
	raw      []byte
	hasRaw   bool
	floats   []float32
	int32s   []int64
	int64s   []int64
	doubles  []float64
	uint64s  []uint64
	strings  []string
	external map[string]string
	location int64 // 1 = EXTERNAL
}

func parseTensorProto(b []byte) (*tensorProto, error) {
	tp := &tensorProto{}
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			tp.dims, err = f.int64s(tp.dims)
		case 2:
			var v int64
			v, err = f.varint()
			tp.dtype = graph.DType(v)
		case 4:
			tp.floats, err = f.float32s(tp.floats)
		case 5:
			tp.int32s, err = f.int64s(tp.int32s)
		case 6:
			var s string
			s, err = f.str()
			tp.strings = append(tp.strings, s)
		case 7:
			tp.int64s, err = f.int64s(tp.int64s)
		case 8:
			tp.name, err = f.str()
		case 9:
			tp.raw, err = f.msg()
			tp.hasRaw = true
		case 10:
			tp.doubles, err = f.float64s(tp.doubles)
		case 11:
			tp.uint64s, err = f.uint64s(tp.uint64s)
		case 13:
			var m []byte
			if m, err = f.msg(); err == nil {
				var k, v string
				k, v, err = parseStringPair(m)
				if tp.external == nil {
					tp.external = map[string]string{}
				}
				tp.external[k] = v
			}
		case 14:
			tp.location, err = f.varint()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return tp, nil
}

func parseStringPair(b []byte) (k, v string, err error) {
	err = walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			k, err = f.str()
		case 2:
			v, err = f.str()
		}
		return err
	})
	return
}

// decodeTensor parses a serialized TensorProto. d, when not nil, is the
// model's decoder: its folder, from which external data is read, and its
// mapped file, from which raw data is taken in place.
func decodeTensor(b []byte, d *decoder) (*graph.Tensor, string, error) {
	tp, err := parseTensorProto(b)
	if err != nil {
		return nil, "", err
	}
	t, err := tp.toTensor(d)
	if err != nil {
		if tp.name != "" {
			return nil, tp.name, fmt.Errorf("tensor %q: %w", tp.name, err)
		}
		return nil, tp.name, err
	}
	return t, tp.name, nil
}

func (tp *tensorProto) toTensor(dec *decoder) (*graph.Tensor, error) {
	shape := make([]int, len(tp.dims))
	for i, d := range tp.dims {
		if d < 0 || d > graph.MaxElements {
			return nil, fmt.Errorf("dimension %d is %d", i, d)
		}
		shape[i] = int(d)
	}
	n, err := graph.NumElements(shape)
	if err != nil {
		return nil, err
	}
	d := tp.dtype
	if d == graph.String {
		if tp.location == 1 || tp.hasRaw {
			return nil, fmt.Errorf("string tensors must use string_data")
		}
		if len(tp.strings) != n {
			return nil, fmt.Errorf("shape %v needs %d strings, file has %d", shape, n, len(tp.strings))
		}
		return &graph.Tensor{DType: d, Shape: shape, Data: tp.strings}, nil
	}
	if d.Size() == 0 || d == graph.Complex64 || d == graph.Complex128 {
		return nil, fmt.Errorf("dtype %v is not supported", d)
	}
	if tp.location == 1 {
		data, err := dec.readExternal(tp.external, d, n)
		if err != nil {
			return nil, err
		}
		return &graph.Tensor{DType: d, Shape: shape, Data: data}, nil
	}
	if tp.hasRaw {
		raw := tp.raw
		if len(raw) != n*d.Size() {
			return nil, fmt.Errorf("shape %v of %v needs %d bytes of raw_data, file has %d", shape, d, n*d.Size(), len(raw))
		}
		var data any
		if off, ok := dec.srcFile().offsetOf(raw); ok {
			data, err = dec.src.placeRaw(d, raw, off, n)
		} else {
			data, err = fromRaw(d, raw, n)
		}
		if err != nil {
			return nil, err
		}
		return &graph.Tensor{DType: d, Shape: shape, Data: data}, nil
	}
	data, got, err := tp.fromTyped(n)
	if err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("shape %v of %v needs %d values, file has %d", shape, d, n, got)
	}
	return &graph.Tensor{DType: d, Shape: shape, Data: data}, nil
}

func (tp *tensorProto) fromTyped(n int) (any, int, error) {
	d := tp.dtype
	switch d {
	case graph.Float32:
		return tp.floats, len(tp.floats), nil
	case graph.Float64:
		return tp.doubles, len(tp.doubles), nil
	case graph.Int64:
		return tp.int64s, len(tp.int64s), nil
	case graph.Uint32:
		out := make([]uint32, len(tp.uint64s))
		for i, v := range tp.uint64s {
			out[i] = uint32(v)
		}
		return out, len(out), nil
	case graph.Uint64:
		return tp.uint64s, len(tp.uint64s), nil
	}
	// The rest travel in int32_data.
	src := tp.int32s
	data, err := graph.MakeSlice(d, len(src))
	if err != nil {
		return nil, 0, err
	}
	switch s := data.(type) {
	case []int32:
		for i, v := range src {
			s[i] = int32(v)
		}
	case []int16:
		for i, v := range src {
			s[i] = int16(v)
		}
	case []int8:
		for i, v := range src {
			s[i] = int8(v)
		}
	case []uint8:
		for i, v := range src {
			s[i] = uint8(v)
		}
	case []uint16:
		for i, v := range src {
			s[i] = uint16(v)
		}
	case []bool:
		for i, v := range src {
			s[i] = v != 0
		}
	default:
		return nil, 0, fmt.Errorf("dtype %v cannot be read from int32_data", d)
	}
	return data, len(src), nil
}

// littleEndian is true on the machines where raw_data can be reinterpreted in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// fromRaw turns little-endian raw bytes into a typed slice. Where the bytes
// are suitably aligned on a little-endian machine, the slice aliases raw (no
// copy); raw must then not be modified afterwards.
func fromRaw(d graph.DType, raw []byte, n int) (any, error) {
	size := d.Size()
	aligned := n == 0 || uintptr(unsafe.Pointer(&raw[0]))%uintptr(size) == 0
	if littleEndian && aligned && n > 0 {
		p := unsafe.Pointer(&raw[0])
		switch d {
		case graph.Float32:
			return unsafe.Slice((*float32)(p), n), nil
		case graph.Float64:
			return unsafe.Slice((*float64)(p), n), nil
		case graph.Int64:
			return unsafe.Slice((*int64)(p), n), nil
		case graph.Int32:
			return unsafe.Slice((*int32)(p), n), nil
		case graph.Uint64:
			return unsafe.Slice((*uint64)(p), n), nil
		case graph.Uint32:
			return unsafe.Slice((*uint32)(p), n), nil
		case graph.Int16:
			return unsafe.Slice((*int16)(p), n), nil
		case graph.Uint16, graph.Float16, graph.BFloat16:
			return unsafe.Slice((*uint16)(p), n), nil
		case graph.Int8:
			return unsafe.Slice((*int8)(p), n), nil
		case graph.Uint8:
			return raw[:n:n], nil
		}
	}
	data, err := graph.MakeSlice(d, n)
	if err != nil {
		return nil, err
	}
	if err := graph.DecodeElements(data, raw, binary.LittleEndian); err != nil {
		return nil, err
	}
	return data, nil
}

func (d *decoder) srcFile() *dataFile {
	if d == nil {
		return nil
	}
	return d.src
}

// readExternal returns a tensor's n elements of type dt from a file inside
// the model's folder (os.Root refuses absolute paths, "..", and symlinks
// that leave it), in place: from the file's mapping, or read straight into
// the tensor's storage (see dataFile).
func (d *decoder) readExternal(info map[string]string, dt graph.DType, n int) (any, error) {
	want := n * dt.Size()
	loc := info["location"]
	if loc == "" {
		return nil, fmt.Errorf("%w: no location given", ErrExternalData)
	}
	if d == nil || d.root == nil {
		return nil, fmt.Errorf("%w: %q: the model was not loaded from a folder, so external data cannot be resolved", ErrExternalData, loc)
	}
	var offset, length int64 = 0, -1
	if s, ok := info["offset"]; ok {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%w: %q: bad offset %q", ErrExternalData, loc, s)
		}
		offset = v
	}
	if s, ok := info["length"]; ok {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%w: %q: bad length %q", ErrExternalData, loc, s)
		}
		length = v
	}
	if length >= 0 && length != int64(want) {
		return nil, fmt.Errorf("%w: %q: length %d, but the tensor needs %d bytes", ErrExternalData, loc, length, want)
	}
	df, ok := d.ext[loc]
	if !ok {
		f, err := d.root.Open(loc)
		if err != nil {
			return nil, fmt.Errorf("%w: %q must be a file inside the model's folder: %v", ErrExternalData, loc, err)
		}
		if df, err = openDataFile(loc, f); err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %q: %v", ErrExternalData, loc, err)
		}
		if d.ext == nil {
			d.ext = map[string]*dataFile{}
		}
		d.ext[loc] = df
	}
	if offset > df.size || int64(want) > df.size-offset {
		return nil, fmt.Errorf("%w: %q holds %d bytes, the tensor needs %d from offset %d", ErrExternalData, loc, df.size, want, offset)
	}
	var data any
	var err error
	if df.data != nil && want > 0 {
		data, err = df.placeRaw(dt, df.data[offset:offset+int64(want):offset+int64(want)], offset, n)
	} else {
		data, err = df.readInto(dt, offset, n)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrExternalData, err)
	}
	return data, nil
}

// DecodeTensor parses one serialized TensorProto (as in the conformance
// suite's input_K.pb files). External data is not allowed here.
func DecodeTensor(b []byte) (*graph.Tensor, string, error) {
	return decodeTensor(b, nil)
}

// ReadTensorFile reads a serialized TensorProto from a file.
func ReadTensorFile(path string) (*graph.Tensor, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	t, name, err := DecodeTensor(b)
	if err != nil {
		return nil, "", fmt.Errorf("importer: %s: %w", path, err)
	}
	return t, name, nil
}

// DecodeValue parses a serialized value of the given ONNX type: a
// TensorProto, or for sequences and optionals a SequenceProto or
// OptionalProto (as in the conformance suite's input_K.pb files).
func DecodeValue(b []byte, ty *graph.Type) (*graph.Tensor, string, error) {
	if ty == nil || (ty.Kind != graph.KindSequence && ty.Kind != graph.KindOptional) {
		return decodeTensor(b, nil)
	}
	return decodeContainer(b, ty.Kind == graph.KindOptional, 0)
}

// decodeContainer parses SequenceProto (name=1, elem_type=2,
// tensor_values=3, sequence_values=5, optional_values=7) or OptionalProto
// (the same fields, singular).
func decodeContainer(b []byte, optional bool, depth int) (*graph.Tensor, string, error) {
	if depth > 16 {
		return nil, "", fmt.Errorf("%w: values nested too deep", ErrMalformed)
	}
	var name string
	var items []*graph.Tensor
	err := walk(b, func(f field) error {
		var err error
		var mb []byte
		switch f.num {
		case 1:
			name, err = f.str()
		case 3, 5, 7:
			if mb, err = f.msg(); err != nil {
				return err
			}
			var t *graph.Tensor
			switch f.num {
			case 3:
				t, _, err = decodeTensor(mb, nil)
			case 5:
				t, _, err = decodeContainer(mb, false, depth+1)
			case 7:
				t, _, err = decodeContainer(mb, true, depth+1)
			}
			items = append(items, t)
		case 4, 6:
			err = fmt.Errorf("sparse tensors and maps inside sequences are not supported")
		}
		return err
	})
	if err != nil {
		return nil, name, err
	}
	if optional {
		if len(items) > 1 {
			return nil, name, fmt.Errorf("%w: optional holds %d values", ErrMalformed, len(items))
		}
		if len(items) == 0 {
			return graph.NewOptional(nil), name, nil
		}
		return graph.NewOptional(items[0]), name, nil
	}
	return graph.NewSequence(items), name, nil
}
