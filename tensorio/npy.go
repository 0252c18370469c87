package tensorio

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/umaskfile"
)

// ErrFormat is wrapped by errors about bytes that are not a valid .npy array.
var ErrFormat = errors.New("not a valid .npy array")

var npyMagic = []byte("\x93NUMPY")

// descr maps numpy type strings (without byte order) to dtypes.
var descrs = map[string]graph.DType{
	"f4": graph.Float32, "f8": graph.Float64, "f2": graph.Float16,
	"i1": graph.Int8, "i2": graph.Int16, "i4": graph.Int32, "i8": graph.Int64,
	"u1": graph.Uint8, "u2": graph.Uint16, "u4": graph.Uint32, "u8": graph.Uint64,
	"b1": graph.Bool,
}

func descrOf(d graph.DType) (string, error) {
	if d == graph.BFloat16 {
		// numpy has no bfloat16; store the bits as uint16 would lose the
		// type, so widen to float32 instead.
		return "<f4", nil
	}
	for k, v := range descrs {
		if v == d {
			if d.Size() == 1 {
				return "|" + k, nil
			}
			return "<" + k, nil
		}
	}
	return "", fmt.Errorf("dtype %v has no .npy equivalent", d)
}

var (
	reDescr   = regexp.MustCompile(`'descr'\s*:\s*'([<>|=]?)([a-zA-Z]\d*)'`)
	reFortran = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	reShape   = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// ReadNPY decodes one .npy array.
func ReadNPY(r io.Reader) (*graph.Tensor, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if !bytes.Equal(pre[:6], npyMagic) {
		return nil, fmt.Errorf("%w: bad magic", ErrFormat)
	}
	var hlen int
	switch pre[6] {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		hlen = int(binary.LittleEndian.Uint32(b[:]))
	default:
		return nil, fmt.Errorf("%w: version %d", ErrFormat, pre[6])
	}
	if hlen > 1<<20 {
		return nil, fmt.Errorf("%w: header of %d bytes", ErrFormat, hlen)
	}
	hdr := make([]byte, hlen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	h := string(hdr)
	m := reDescr.FindStringSubmatch(h)
	if m == nil {
		return nil, fmt.Errorf("%w: no descr in header %q", ErrFormat, h)
	}
	order, code := m[1], m[2]
	dt, ok := descrs[code]
	if !ok {
		return nil, fmt.Errorf("%w: numpy type %q is not supported", ErrFormat, code)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if order == ">" {
		bo = binary.BigEndian
	}
	fortran := false
	if fm := reFortran.FindStringSubmatch(h); fm != nil && fm[1] == "True" {
		fortran = true
	}
	sm := reShape.FindStringSubmatch(h)
	if sm == nil {
		return nil, fmt.Errorf("%w: no shape in header %q", ErrFormat, h)
	}
	var shape []int
	for _, part := range strings.Split(sm[1], ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		v, err := strconv.Atoi(strings.TrimSuffix(part, "L"))
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%w: bad shape %q", ErrFormat, sm[1])
		}
		shape = append(shape, v)
	}
	if shape == nil {
		shape = []int{}
	}
	n, err := graph.NumElements(shape)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	size := dt.Size()
	// Read in bounded chunks so a lying header cannot make us allocate
	// more than the data actually present.
	raw, err := readUpTo(r, n*size)
	if err != nil {
		return nil, fmt.Errorf("%w: data: shape %v of %v needs %d bytes: %v", ErrFormat, shape, dt, n*size, err)
	}
	t, err := graph.NewTensor(dt, shape)
	if err != nil {
		return nil, err
	}
	if err := graph.DecodeElements(t.Data, raw, bo); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if fortran && len(shape) > 1 {
		t = fromFortran(t)
	}
	return t, nil
}

func readUpTo(r io.Reader, n int) ([]byte, error) {
	var buf bytes.Buffer
	got, err := io.CopyN(&buf, r, int64(n))
	if err != nil {
		return nil, fmt.Errorf("got %d bytes: %v", got, err)
	}
	return buf.Bytes(), nil
}

// fromFortran reorders a column-major tensor into row-major.
func fromFortran(t *graph.Tensor) *graph.Tensor {
	rank := len(t.Shape)
	fst := make([]int, rank) // Fortran strides: the first dim varies fastest
	acc := 1
	for i := 0; i < rank; i++ {
		fst[i] = acc
		acc *= t.Shape[i]
	}
	n := t.Size()
	src := make([]int, n)
	idx := make([]int, rank)
	for i := 0; i < n; i++ {
		for d := 0; d < rank; d++ {
			src[i] += idx[d] * fst[d]
		}
		for d := rank - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < t.Shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	out := &graph.Tensor{DType: t.DType, Shape: t.Shape}
	switch s := t.Data.(type) {
	case []float32:
		out.Data = gatherAt(s, src)
	case []float64:
		out.Data = gatherAt(s, src)
	case []int8:
		out.Data = gatherAt(s, src)
	case []int16:
		out.Data = gatherAt(s, src)
	case []int32:
		out.Data = gatherAt(s, src)
	case []int64:
		out.Data = gatherAt(s, src)
	case []uint8:
		out.Data = gatherAt(s, src)
	case []uint16:
		out.Data = gatherAt(s, src)
	case []uint32:
		out.Data = gatherAt(s, src)
	case []uint64:
		out.Data = gatherAt(s, src)
	case []bool:
		out.Data = gatherAt(s, src)
	}
	return out
}

func gatherAt[T any](s []T, idx []int) []T {
	out := make([]T, len(idx))
	for i, j := range idx {
		out[i] = s[j]
	}
	return out
}

// WriteNPY encodes t as a version 1.0 .npy array (little-endian, C order).
func WriteNPY(w io.Writer, t *graph.Tensor) error {
	if t.DType == graph.BFloat16 {
		f := graph.Zeros(graph.Float32, t.Shape...)
		for i := range f.Float32s() {
			f.Float32s()[i] = float32(t.Float(i))
		}
		t = f
	}
	descr, err := descrOf(t.DType)
	if err != nil {
		return err
	}
	var shape strings.Builder
	shape.WriteString("(")
	for i, d := range t.Shape {
		if i > 0 {
			shape.WriteString(", ")
		}
		shape.WriteString(strconv.Itoa(d))
	}
	if len(t.Shape) == 1 {
		shape.WriteString(",")
	}
	shape.WriteString(")")
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape.String())
	// Pad so that magic+version+len+header+newline is a multiple of 64.
	total := len(npyMagic) + 2 + 2 + len(h) + 1
	h += strings.Repeat(" ", (64-total%64)%64) + "\n"
	var buf bytes.Buffer
	buf.Write(npyMagic)
	buf.Write([]byte{1, 0})
	binary.Write(&buf, binary.LittleEndian, uint16(len(h)))
	buf.WriteString(h)
	if _, err := w.Write(buf.Bytes()); err != nil {
		return err
	}
	switch s := t.Data.(type) {
	case []bool:
		b := make([]byte, len(s))
		for i, v := range s {
			if v {
				b[i] = 1
			}
		}
		_, err = w.Write(b)
	default:
		err = binary.Write(w, binary.LittleEndian, s)
	}
	return err
}

// ReadNPZ reads every array of an .npz archive (names without ".npy").
// It also accepts a single .npy file, whose array is named after the file.
func ReadNPZ(path string) (map[string]*graph.Tensor, error) {
	if strings.HasSuffix(path, ".npy") {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		t, err := ReadNPY(f)
		if err != nil {
			return nil, fmt.Errorf("tensorio: %s: %w", path, err)
		}
		return map[string]*graph.Tensor{strings.TrimSuffix(filepath.Base(path), ".npy"): t}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return decodeNPZ(path, f, st.Size())
}

// decodeNPZ reads the arrays of an .npz archive of size bytes from r;
// path names it in errors. Two members of one name are an error, not the
// later one silently kept.
func decodeNPZ(path string, r io.ReaderAt, size int64) (map[string]*graph.Tensor, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("tensorio: %s: not an .npz archive: %w", path, err)
	}
	out := map[string]*graph.Tensor{}
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, ".npy") {
			continue
		}
		name := strings.TrimSuffix(f.Name, ".npy")
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("tensorio: %s: the archive holds array %q twice", path, name)
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("tensorio: %s: %s: %w", path, f.Name, err)
		}
		t, err := ReadNPY(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("tensorio: %s: array %q: %w", path, f.Name, err)
		}
		out[name] = t
	}
	return out, nil
}

// WriteNPZ writes the arrays (sorted by name) to an uncompressed .npz
// archive, atomically: to a temporary file renamed into place.
func WriteNPZ(path string, arrays map[string]*graph.Tensor) error {
	tmp, err := umaskfile.CreateTemp(filepath.Dir(path), ".tmp-*.npz")
	if err != nil {
		return fmt.Errorf("tensorio: %w", err)
	}
	defer os.Remove(tmp.Name())
	zw := zip.NewWriter(tmp)
	names := make([]string, 0, len(arrays))
	for k := range arrays {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: k + ".npy", Method: zip.Store})
		if err != nil {
			tmp.Close()
			return fmt.Errorf("tensorio: %w", err)
		}
		if err := WriteNPY(w, arrays[k]); err != nil {
			tmp.Close()
			return fmt.Errorf("tensorio: array %q: %w", k, err)
		}
	}
	if err := zw.Close(); err != nil {
		tmp.Close()
		return fmt.Errorf("tensorio: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("tensorio: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tensorio: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}
