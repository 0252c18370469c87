package importer

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/umaskfile"
)

// ExternalDataThreshold is the size of a model's initializers from which
// Save (SaveOptions.ExternalData "auto") writes them to an external data
// file: protobuf messages cannot pass 2 GB, and the rest of the model needs
// room too. Tests lower it to exercise external data on small models.
var ExternalDataThreshold int64 = 2<<30 - 64<<20

// SaveOptions configures SaveWith.
type SaveOptions struct {
	// ExternalData says where initializers go: "auto" (or ""), into an
	// external data file when their bytes reach ExternalDataThreshold,
	// inline otherwise; "always"; or "never" (a model past 2 GB then fails
	// with an error).
	ExternalData string
	// InlineBelow keeps initializers smaller than this many bytes inline
	// even when the others go external (0: 1024, as onnx.save does).
	InlineBelow int
}

// externalAlign is the alignment of every tensor in an external data file:
// a reader that maps the file gets aligned tensors it can use in place.
const externalAlign = 64

// SaveWith writes a model to path atomically, with its initializers inline
// or in an external data file as opts says. The data file is path's base
// name plus ".data", beside it (model.onnx -> model.onnx.data), one tensor
// after another at 64-byte aligned offsets, each referenced from its
// TensorProto by location, offset and length, as ONNX's external data
// format has it; it too is written to a temporary file and renamed into
// place, before the model file.
func SaveWith(path string, m *graph.Model, opts SaveOptions) error {
	external := false
	switch opts.ExternalData {
	case "", "auto":
		external = initializerBytes(m.Graph) >= ExternalDataThreshold
	case "always":
		external = true
	case "never":
		if n := initializerBytes(m.Graph); n >= ExternalDataThreshold {
			return fmt.Errorf("importer: %s: the initializers hold %d bytes, past what one protobuf file can hold; write them as external data", path, n)
		}
	default:
		return fmt.Errorf("importer: %s: external data %q: want auto, always or never", path, opts.ExternalData)
	}
	if !external {
		p, err := encodeModel(m, nil)
		if err != nil {
			return fmt.Errorf("importer: %s: %w", path, err)
		}
		return writePiecesAtomic(path, p)
	}
	dir := filepath.Dir(path)
	ext := &externalWriter{location: filepath.Base(path) + ".data", inlineBelow: opts.InlineBelow}
	if ext.inlineBelow <= 0 {
		ext.inlineBelow = 1024
	}
	tmp, err := umaskfile.CreateTemp(dir, ".tmp-*.data") // honours the umask, unlike os.CreateTemp
	if err != nil {
		return fmt.Errorf("importer: %w", err)
	}
	defer os.Remove(tmp.Name())
	ext.f = tmp
	p, err := encodeModel(m, ext)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("importer: %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, ext.location)); err != nil {
		return fmt.Errorf("importer: %w", err)
	}
	return writePiecesAtomic(path, p)
}

// writePiecesAtomic writes a serialized model to path through a temporary
// file that is synced and renamed into place, a piece at a time (the
// tensors' raw data straight from their memory).
func writePiecesAtomic(path string, p *pieces) error {
	tmp, err := umaskfile.CreateTemp(filepath.Dir(path), ".tmp-*.onnx")
	if err != nil {
		return fmt.Errorf("importer: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = p.writeTo(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("importer: %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("importer: %w", err)
	}
	return nil
}

// initializerBytes is the size of g's initializers' elements.
func initializerBytes(g *graph.Graph) int64 {
	var n int64
	for _, t := range g.Initializers {
		if t != nil && !t.IsContainer() && t.DType != graph.String {
			n += int64(t.Size()) * int64(t.DType.Size())
		}
	}
	return n
}

// externalWriter appends tensors to an external data file.
type externalWriter struct {
	f           *os.File
	location    string // the file's name, relative to the model's folder
	inlineBelow int
	offset      int64
}

// takes says whether t goes to the data file: numeric tensors of at least
// inlineBelow bytes.
func (w *externalWriter) takes(t *graph.Tensor) bool {
	if t == nil || t.IsContainer() || t.DType == graph.String {
		return false
	}
	return t.Size()*t.DType.Size() >= w.inlineBelow
}

// encode writes t's bytes to the data file and returns its TensorProto,
// which refers to them.
func (w *externalWriter) encode(name string, t *graph.Tensor) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if pad := (externalAlign - w.offset%externalAlign) % externalAlign; pad > 0 {
		if _, err := w.f.Write(make([]byte, pad)); err != nil {
			return nil, err
		}
		w.offset += pad
	}
	raw := rawBytes(t)
	if _, err := w.f.Write(raw); err != nil {
		return nil, err
	}
	offset := w.offset
	w.offset += int64(len(raw))

	var b []byte
	if len(t.Shape) > 0 {
		var p []byte
		for _, d := range t.Shape {
			p = protowire.AppendVarint(p, uint64(d))
		}
		b = appendBytes(b, 1, p)
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.DType))
	b = appendString(b, 8, name)
	b = appendBytes(b, 13, stringPair("location", w.location))
	b = appendBytes(b, 13, stringPair("offset", strconv.FormatInt(offset, 10)))
	b = appendBytes(b, 13, stringPair("length", strconv.Itoa(len(raw))))
	b = protowire.AppendTag(b, 14, protowire.VarintType)
	b = protowire.AppendVarint(b, 1) // data_location = EXTERNAL
	return b, nil
}
