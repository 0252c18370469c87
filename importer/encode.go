package importer

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Encode serializes a model as an ONNX ModelProto. Tensors are written as
// raw_data (strings as string_data). Node order, initializer order and
// attribute names are kept, so a model read and written back holds the same
// graph.
func Encode(m *graph.Model) ([]byte, error) {
	p, err := encodeModel(m, nil)
	if err != nil {
		return nil, err
	}
	return p.bytes(), nil
}

// pieces is a serialized message as a list of byte slices, some of them a
// tensor's own memory (its raw_data, not copied), so that a model of
// hundreds of MB can be written to a file without being assembled in
// memory first.
type pieces struct {
	parts [][]byte
	n     int64
	cur   []byte // small fields not yet in parts
}

// add appends small encoded fields.
func (p *pieces) add(b []byte) { p.cur = append(p.cur, b...) }

// addRaw appends a large slice as its own part.
func (p *pieces) addRaw(b []byte) {
	p.flush()
	if len(b) > 0 {
		p.parts = append(p.parts, b)
		p.n += int64(len(b))
	}
}

func (p *pieces) flush() {
	if len(p.cur) > 0 {
		p.parts = append(p.parts, p.cur)
		p.n += int64(len(p.cur))
		p.cur = nil
	}
}

// addMessage appends field num holding the message q.
func (p *pieces) addMessage(num protowire.Number, q *pieces) {
	q.flush()
	p.cur = protowire.AppendTag(p.cur, num, protowire.BytesType)
	p.cur = protowire.AppendVarint(p.cur, uint64(q.n))
	p.flush()
	p.parts = append(p.parts, q.parts...)
	p.n += q.n
}

// bytes assembles the message.
func (p *pieces) bytes() []byte {
	p.flush()
	out := make([]byte, 0, p.n)
	for _, b := range p.parts {
		out = append(out, b...)
	}
	return out
}

// writeTo writes the message to f.
func (p *pieces) writeTo(f *os.File) error {
	p.flush()
	for _, b := range p.parts {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// encodeModel serializes m; with ext, the top-level initializers ext takes
// are written to its data file and referenced as external data.
func encodeModel(m *graph.Model, ext *externalWriter) (*pieces, error) {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.IRVersion))
	b = appendString(b, 2, m.ProducerName)
	b = appendString(b, 3, m.ProducerVersion)
	b = appendString(b, 4, m.Domain)
	if m.ModelVersion != 0 {
		b = protowire.AppendTag(b, 5, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.ModelVersion))
	}
	b = appendString(b, 6, m.DocString)
	g, err := encodeGraphPieces(m.Graph, ext)
	if err != nil {
		return nil, err
	}
	p := &pieces{}
	p.add(b)
	p.addMessage(7, g)
	b = nil
	domains := make([]string, 0, len(m.Opsets))
	for d := range m.Opsets {
		domains = append(domains, d)
	}
	sort.Strings(domains)
	for _, d := range domains {
		var o []byte
		o = appendString(o, 1, d)
		o = protowire.AppendTag(o, 2, protowire.VarintType)
		o = protowire.AppendVarint(o, uint64(m.Opsets[d]))
		b = appendBytes(b, 8, o)
	}
	keys := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b = appendBytes(b, 14, stringPair(k, m.Metadata[k]))
	}
	p.add(b)
	return p, nil
}

// Save writes a model to path atomically (temporary file, fsync, rename).
// A model whose tensors would pass protobuf's 2 GB limit is written with
// its initializers in an external data file beside it (see SaveWith).
func Save(path string, m *graph.Model) error {
	return SaveWith(path, m, SaveOptions{})
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func stringPair(k, v string) []byte {
	var e []byte
	e = appendString(e, 1, k)
	e = appendString(e, 2, v)
	return e
}

func encodeGraph(g *graph.Graph, ext *externalWriter) ([]byte, error) {
	p, err := encodeGraphPieces(g, ext)
	if err != nil {
		return nil, err
	}
	return p.bytes(), nil
}

// encodeGraphPieces serializes g with each inline initializer's raw data
// as its own piece (the tensor's memory).
func encodeGraphPieces(g *graph.Graph, ext *externalWriter) (*pieces, error) {
	p := &pieces{}
	for _, n := range g.Nodes {
		nb, err := encodeNode(n)
		if err != nil {
			return nil, err
		}
		p.add(appendBytes(nil, 1, nb))
	}
	p.add(appendString(nil, 2, g.Name))
	for _, name := range g.SortedInitializerNames() {
		t := g.Initializers[name]
		if ext != nil && ext.takes(t) {
			tb, err := ext.encode(name, t)
			if err != nil {
				return nil, fmt.Errorf("initializer %q: %w", name, err)
			}
			p.add(appendBytes(nil, 5, tb))
			continue
		}
		head, raw, err := encodeTensorParts(name, t)
		if err != nil {
			return nil, fmt.Errorf("initializer %q: %w", name, err)
		}
		var b []byte
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(head)+len(raw)))
		p.add(append(b, head...))
		p.addRaw(raw)
	}
	for _, vi := range g.Inputs {
		p.add(appendBytes(nil, 11, encodeValueInfo(vi)))
	}
	for _, vi := range g.Outputs {
		p.add(appendBytes(nil, 12, encodeValueInfo(vi)))
	}
	names := make([]string, 0, len(g.ValueInfo))
	for k := range g.ValueInfo {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		p.add(appendBytes(nil, 13, encodeValueInfo(g.ValueInfo[k])))
	}
	return p, nil
}

func encodeValueInfo(vi *graph.ValueInfo) []byte {
	var b []byte
	b = appendString(b, 1, vi.Name)
	if vi.Type != nil && vi.Type.Kind != graph.KindUnknown {
		b = appendBytes(b, 2, encodeType(vi.Type))
	}
	return b
}

func encodeType(t *graph.Type) []byte {
	var b []byte
	switch t.Kind {
	case graph.KindTensor, graph.KindSparseTensor:
		var tt []byte
		tt = protowire.AppendTag(tt, 1, protowire.VarintType)
		tt = protowire.AppendVarint(tt, uint64(t.DType))
		if t.HasShape {
			var sb []byte
			for _, d := range t.Shape {
				var db []byte
				if d.Known {
					db = protowire.AppendTag(db, 1, protowire.VarintType)
					db = protowire.AppendVarint(db, uint64(d.Value))
				} else if d.Param != "" {
					db = appendString(db, 2, d.Param)
				}
				sb = appendBytes(sb, 1, db)
			}
			tt = appendBytes(tt, 2, sb)
		}
		num := protowire.Number(1)
		if t.Kind == graph.KindSparseTensor {
			num = 8
		}
		b = appendBytes(b, num, tt)
	case graph.KindSequence, graph.KindOptional:
		var e []byte
		if t.Elem != nil {
			e = appendBytes(e, 1, encodeType(t.Elem))
		}
		num := protowire.Number(4)
		if t.Kind == graph.KindOptional {
			num = 9
		}
		b = appendBytes(b, num, e)
	}
	return b
}

func encodeNode(n *graph.Node) ([]byte, error) {
	var b []byte
	for _, in := range n.Inputs {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, in)
	}
	for _, o := range n.Outputs {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, o)
	}
	b = appendString(b, 3, n.Name)
	b = appendString(b, 4, n.OpType)
	names := make([]string, 0, len(n.Attrs))
	for k := range n.Attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ab, err := encodeAttr(n.Attrs[k])
		if err != nil {
			return nil, fmt.Errorf("node %q attribute %q: %w", n.Label(), k, err)
		}
		b = appendBytes(b, 5, ab)
	}
	b = appendString(b, 7, n.Domain)
	return b, nil
}

func encodeAttr(a *graph.Attr) ([]byte, error) {
	var b []byte
	b = appendString(b, 1, a.Name)
	switch a.Type {
	case graph.AttrFloat:
		b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.F))
	case graph.AttrInt:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.I))
	case graph.AttrString:
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, a.S)
	case graph.AttrTensor, graph.AttrSparse:
		tb, err := EncodeTensor("", a.T)
		if err != nil {
			return nil, err
		}
		b = appendBytes(b, 5, tb)
	case graph.AttrGraph:
		gb, err := encodeGraph(a.G, nil)
		if err != nil {
			return nil, err
		}
		b = appendBytes(b, 6, gb)
	case graph.AttrFloats:
		var p []byte
		for _, f := range a.Floats {
			p = protowire.AppendFixed32(p, math.Float32bits(f))
		}
		b = appendBytes(b, 7, p)
	case graph.AttrInts:
		var p []byte
		for _, v := range a.Ints {
			p = protowire.AppendVarint(p, uint64(v))
		}
		b = appendBytes(b, 8, p)
	case graph.AttrStrings:
		for _, s := range a.Strings {
			b = protowire.AppendTag(b, 9, protowire.BytesType)
			b = protowire.AppendString(b, s)
		}
	case graph.AttrTensors:
		for _, t := range a.Tensors {
			tb, err := EncodeTensor("", t)
			if err != nil {
				return nil, err
			}
			b = appendBytes(b, 10, tb)
		}
	case graph.AttrGraphs:
		for _, g := range a.Graphs {
			gb, err := encodeGraph(g, nil)
			if err != nil {
				return nil, err
			}
			b = appendBytes(b, 11, gb)
		}
	case graph.AttrTypeProto:
		if a.TP != nil {
			b = appendBytes(b, 14, encodeType(a.TP))
		}
	default:
		return nil, fmt.Errorf("attribute type %d cannot be written", a.Type)
	}
	if a.RefAttrName != "" {
		b = appendString(b, 21, a.RefAttrName)
	}
	ty := a.Type
	if ty == graph.AttrSparse {
		ty = graph.AttrTensor // written densified
	}
	b = protowire.AppendTag(b, 20, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(ty))
	return b, nil
}

// EncodeTensor serializes t as a TensorProto named name, with raw_data.
func EncodeTensor(name string, t *graph.Tensor) ([]byte, error) {
	head, raw, err := encodeTensorParts(name, t)
	if err != nil {
		return nil, err
	}
	return append(head, raw...), nil
}

// encodeTensorParts serializes t as a TensorProto named name in two parts:
// every field up to and including raw_data's tag and length, and the raw
// data itself (on a little-endian machine a numeric tensor's own memory;
// nil for strings, which head holds whole).
func encodeTensorParts(name string, t *graph.Tensor) (head, raw []byte, err error) {
	if err := t.Validate(); err != nil {
		return nil, nil, err
	}
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
	if s, ok := t.Data.([]string); ok {
		for _, v := range s {
			b = protowire.AppendTag(b, 6, protowire.BytesType)
			b = protowire.AppendString(b, v)
		}
		return b, nil, nil
	}
	raw = rawBytes(t)
	b = protowire.AppendTag(b, 9, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(raw)))
	return b, raw, nil
}

// rawBytes returns the little-endian bytes of t's elements; on a
// little-endian machine, a numeric tensor's own memory (no copy).
func rawBytes(t *graph.Tensor) []byte {
	if littleEndian {
		if b := graph.ElementBytes(t.Data); b != nil {
			return b
		}
	}
	n := t.Size()
	out := make([]byte, 0, n*t.DType.Size())
	le := binary.LittleEndian
	switch s := t.Data.(type) {
	case []float32:
		for _, v := range s {
			out = le.AppendUint32(out, math.Float32bits(v))
		}
	case []float64:
		for _, v := range s {
			out = le.AppendUint64(out, math.Float64bits(v))
		}
	case []int8:
		for _, v := range s {
			out = append(out, byte(v))
		}
	case []uint8:
		out = append(out, s...)
	case []bool:
		for _, v := range s {
			if v {
				out = append(out, 1)
			} else {
				out = append(out, 0)
			}
		}
	case []int16:
		for _, v := range s {
			out = le.AppendUint16(out, uint16(v))
		}
	case []uint16:
		for _, v := range s {
			out = le.AppendUint16(out, v)
		}
	case []int32:
		for _, v := range s {
			out = le.AppendUint32(out, uint32(v))
		}
	case []uint32:
		for _, v := range s {
			out = le.AppendUint32(out, v)
		}
	case []int64:
		for _, v := range s {
			out = le.AppendUint64(out, uint64(v))
		}
	case []uint64:
		for _, v := range s {
			out = le.AppendUint64(out, v)
		}
	}
	return out
}
