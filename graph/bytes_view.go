package graph

import "unsafe"

// ElementBytes is the memory of a numeric element slice (a Tensor's Data:
// []float32, []int64, []uint16 for float16 and bfloat16, ...) as bytes in
// the host's byte order, without a copy; nil for other types (bool, whose
// bytes must be 0 or 1, strings, containers). The ONNX writer and importer
// (raw_data, mapped files) and tensorio's safetensors writer share it.
func ElementBytes(data any) []byte {
	view := func(p unsafe.Pointer, n, size int) []byte {
		if n == 0 {
			return []byte{}
		}
		return unsafe.Slice((*byte)(p), n*size)
	}
	switch s := data.(type) {
	case []float32:
		return view(unsafe.Pointer(unsafe.SliceData(s)), len(s), 4)
	case []float64:
		return view(unsafe.Pointer(unsafe.SliceData(s)), len(s), 8)
	case []int64:
		return view(unsafe.Pointer(unsafe.SliceData(s)), len(s), 8)
	case []uint64:
		return view(unsafe.Pointer(unsafe.SliceData(s)), len(s), 8)
	case []int32:
		return view(unsafe.Pointer(unsafe.SliceData(s)), len(s), 4)
	case []uint32:
		return view(unsafe.Pointer(unsafe.SliceData(s)), len(s), 4)
	case []int16:
		return view(unsafe.Pointer(unsafe.SliceData(s)), len(s), 2)
	case []uint16:
		return view(unsafe.Pointer(unsafe.SliceData(s)), len(s), 2)
	case []int8:
		return view(unsafe.Pointer(unsafe.SliceData(s)), len(s), 1)
	case []uint8:
		return s
	}
	return nil
}
