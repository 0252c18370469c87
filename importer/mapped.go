package importer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/graph"
)

// mapMinBytes is the size from which Load maps a model file or an external
// data file into memory instead of reading it (smaller files are read
// whole: mapping costs a system call and a mapping per file).
var mapMinBytes int64 = 32 << 20

// dataFile is a model or external-data file that tensor bytes are taken
// from in place. When data is not nil the file is mapped, private and
// copy-on-write: a tensor whose bytes in the file are aligned for its
// element type aliases the mapping (no copy, no read; pages fault in when
// first used and become private when first written), and any other is
// read from the file straight into its own slice. Either way the file's
// bytes are never held beside the tensors.
//
// A mapping that tensors alias stays for the life of the process (those
// tensors may outlive the model), and so does the anonymous memory that
// large unaligned tensors are read into (offHeapMinBytes); a file mapping
// that no tensor aliases is released when the load ends. The file must not be truncated while it is mapped (the
// usual rule for mapped files: the pages would be gone); replacing it by
// renaming a new file over it, as Save does, is safe.
type dataFile struct {
	name    string
	f       *os.File
	size    int64
	data    []byte // the mapping, or nil
	aliased bool   // a tensor aliases data
}

// openDataFile opens f for in-place reads and maps it when it is at least
// mapMinBytes long and the platform can map files.
func openDataFile(name string, f *os.File) (*dataFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	df := &dataFile{name: name, f: f, size: st.Size()}
	if st.Size() >= mapMinBytes && st.Size() == int64(int(st.Size())) {
		if b, err := mapFile(f, int(st.Size())); err == nil {
			df.data = b
		}
	}
	return df, nil
}

// close closes the file and releases the mapping unless a tensor aliases
// it.
func (df *dataFile) close() {
	if df.data != nil && !df.aliased {
		_ = unmapFile(df.data)
		df.data = nil
	}
	_ = df.f.Close()
}

// discard releases the mapping even if tensors alias it: for a load that
// failed, whose tensors are never returned.
func (df *dataFile) discard() {
	df.aliased = false
	df.close()
}

// offsetOf reports where raw, a sub-slice of the mapping, starts in the
// file.
func (df *dataFile) offsetOf(raw []byte) (int64, bool) {
	if df == nil || df.data == nil || len(raw) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(df.data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	if p < base || p-base+uintptr(len(raw)) > uintptr(len(df.data)) {
		return 0, false
	}
	return int64(p - base), true
}

// placeRaw returns the n elements of type dt whose little-endian bytes are
// raw, a sub-slice of df's mapping at offset off: the mapping itself where
// it is aligned for dt, else a new slice read from the file.
func (df *dataFile) placeRaw(dt graph.DType, raw []byte, off int64, n int) (any, error) {
	if !littleEndian || dt == graph.Bool || n == 0 {
		return fromRaw(dt, raw, n)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%uintptr(dt.Size()) == 0 {
		df.aliased = true
		return fromRaw(dt, raw, n)
	}
	return df.readInto(dt, off, n)
}

// offHeapMinBytes is the size from which a tensor read from a mapped
// file gets its own anonymous mapping rather than Go heap memory: large
// parameters stay off the collected heap (the collector neither scans them
// nor counts them towards its next goal), and are filled with huge pages
// where the system allows.
var offHeapMinBytes = 1 << 20

// readInto reads n elements of type dt at offset off of the file straight
// into a new slice.
func (df *dataFile) readInto(dt graph.DType, off int64, n int) (any, error) {
	if size := n * dt.Size(); df.data != nil && littleEndian && dt != graph.Bool && size >= offHeapMinBytes {
		if b, err := allocAnon(size); err == nil {
			if err := readFull(df.f, b, off); err != nil {
				_ = unmapFile(b)
				return nil, fmt.Errorf("%s: %w", df.name, err)
			}
			return fromRaw(dt, b, n)
		}
	}
	data, err := graph.MakeSlice(dt, n)
	if err != nil {
		return nil, err
	}
	b := graph.ElementBytes(data)
	if b == nil || !littleEndian {
		buf := make([]byte, n*dt.Size())
		if err := readFull(df.f, buf, off); err != nil {
			return nil, fmt.Errorf("%s: %w", df.name, err)
		}
		return fromRaw(dt, buf, n)
	}
	if err := readFull(df.f, b, off); err != nil {
		return nil, fmt.Errorf("%s: %w", df.name, err)
	}
	return data, nil
}

func readFull(f *os.File, b []byte, off int64) error {
	if len(b) == 0 {
		return nil
	}
	_, err := f.ReadAt(b, off)
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
