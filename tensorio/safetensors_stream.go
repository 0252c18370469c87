package tensorio

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/umaskfile"
)

// writeSafetensorsStream writes the safetensors file of tensors to path
// through a temporary file that is synced and renamed into place.
func writeSafetensorsStream(path string, tensors map[string]*graph.Tensor, meta map[string]string) error {
	names := make([]string, 0, len(tensors))
	for k := range tensors {
		names = append(names, k)
	}
	sort.Strings(names)
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	var offset int64
	for _, name := range names {
		t := tensors[name]
		dt, ok := stNames[t.DType]
		if !ok {
			return fmt.Errorf("tensor %q: dtype %v has no safetensors equivalent", name, t.DType)
		}
		if err := t.Validate(); err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		n := int64(t.Size()) * int64(t.DType.Size())
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[name] = stEntry{DType: dt, Shape: shape, Offsets: [2]int64{offset, offset + n}}
		offset += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	tmp, err := umaskfile.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*") // honours the umask
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = func() error {
		var size [8]byte
		binary.LittleEndian.PutUint64(size[:], uint64(len(h)))
		if _, err := tmp.Write(size[:]); err != nil {
			return err
		}
		if _, err := tmp.Write(h); err != nil {
			return err
		}
		for _, name := range names {
			t := tensors[name]
			b := numericBytes(t)
			if b == nil {
				var err error
				if b, err = LittleEndianBytes(t); err != nil {
					return fmt.Errorf("tensor %q: %w", name, err)
				}
			}
			if _, err := tmp.Write(b); err != nil {
				return err
			}
		}
		return tmp.Sync()
	}()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// hostLittleEndian is true where a numeric slice's memory is its
// little-endian bytes.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// numericBytes is the memory of t's numeric elements as little-endian
// bytes, without a copy, or nil where that is not their form (a big-endian
// host, bool, string and container tensors).
func numericBytes(t *graph.Tensor) []byte {
	if !hostLittleEndian {
		return nil
	}
	return graph.ElementBytes(t.Data)
}
