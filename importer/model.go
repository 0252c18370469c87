package importer

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"weak"

	"github.com/onnxtrain/onnxtrain/graph"
)

// decoder carries what a model's parts need while they are decoded.
type decoder struct {
	root  *os.Root // the model's folder, for external data; may be nil
	depth int
	// src is the model file when Load mapped it (raw_data is then taken
	// in place, see dataFile); ext holds the external data files opened so
	// far, by location.
	src *dataFile
	ext map[string]*dataFile
}

// finish closes the files a load opened; failed says the load failed, so
// that no mapping is kept for tensors that are never returned. The
// mappings that stay (tensors alias them) are returned.
func (d *decoder) finish(failed bool) (kept [][]byte) {
	if !failed {
		for _, df := range append([]*dataFile{d.src}, mapsOf(d.ext)...) {
			if df != nil && df.data != nil && df.aliased {
				kept = append(kept, df.data)
			}
		}
	}
	for _, df := range d.ext {
		if failed {
			df.discard()
		} else {
			df.close()
		}
	}
	d.ext = nil
	if d.src != nil {
		if failed {
			d.src.discard()
		} else {
			d.src.close()
		}
		d.src = nil
	}
	return kept
}

func mapsOf(m map[string]*dataFile) []*dataFile {
	out := make([]*dataFile, 0, len(m))
	for _, df := range m {
		out = append(out, df)
	}
	return out
}

const maxGraphDepth = 64

// Load reads an ONNX model from path. External data is read only from files
// inside the model's folder.
//
// Large files (the model file or an external data file of 32 MiB or more)
// are mapped into memory rather than read: initializers whose bytes are
// aligned alias the mapping (copy-on-write), the others are read from the
// file straight into their own storage, so the file's bytes are never held
// beside the tensors (see dataFile).
func Load(path string) (*graph.Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	src, err := openDataFile(path, f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("importer: %w", err)
	}
	d := &decoder{}
	var b []byte
	if src.data != nil {
		b, d.src = src.data, src
	} else {
		b = make([]byte, src.size)
		err := readFull(f, b, 0)
		src.close()
		if err != nil {
			return nil, fmt.Errorf("importer: %s: %w", path, err)
		}
	}
	root, err := os.OpenRoot(filepath.Dir(path))
	if err != nil {
		d.finish(true)
		return nil, fmt.Errorf("importer: %s: %w", path, err)
	}
	defer root.Close()
	d.root = root
	m, err := decodeModel(b, d)
	kept := d.finish(err != nil)
	if err != nil {
		return nil, fmt.Errorf("importer: %s: %w", path, err)
	}
	if len(kept) > 0 {
		key := weak.Make(m)
		mappings.Store(key, kept)
		runtime.AddCleanup(m, func(k weak.Pointer[graph.Model]) { mappings.Delete(k) }, key)
	}
	return m, nil
}

// mappings holds, per model Load returned, the file mappings its tensors
// alias (for DropPages), keyed weakly: an entry goes when its model is
// collected, so holding it never keeps a model alive.
var mappings sync.Map // weak.Pointer[graph.Model] -> [][]byte

// DropPages gives back to the system the pages of m's mapped files that
// this process has touched (they stay in the page cache; a later read of a
// tensor that aliases them faults them in again from the file). For a
// process that has copied what it keeps of m — a pipeline stage keeps
// copies of its own parameters — so that the file's pages it read while
// loading and cutting no longer count in its resident memory. A tensor of
// m that aliases a mapping and was written in place since the load would
// read the file's bytes again: call it only when no such tensor is used.
func DropPages(m *graph.Model) {
	v, ok := mappings.Load(weak.Make(m))
	if !ok {
		return
	}
	for _, b := range v.([][]byte) {
		dropPages(b)
	}
}

// Decode parses a serialized ModelProto. Models with external data must be
// loaded with Load (or DecodeWithRoot) so that the data files can be found.
func Decode(b []byte) (*graph.Model, error) {
	m, err := decodeModel(b, &decoder{})
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	return m, nil
}

// DecodeWithRoot parses a serialized ModelProto whose external data lives in root.
func DecodeWithRoot(b []byte, root *os.Root) (*graph.Model, error) {
	d := &decoder{root: root}
	m, err := decodeModel(b, d)
	d.finish(err != nil)
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	return m, nil
}

func decodeModel(b []byte, d *decoder) (*graph.Model, error) {
	m := &graph.Model{Opsets: map[string]int64{}, Metadata: map[string]string{}, Functions: map[string]*graph.Function{}}
	var graphBytes []byte
	haveGraph := false
	var funcs [][]byte
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			m.IRVersion, err = f.varint()
		case 2:
			m.ProducerName, err = f.str()
		case 3:
			m.ProducerVersion, err = f.str()
		case 4:
			m.Domain, err = f.str()
		case 5:
			m.ModelVersion, err = f.varint()
		case 6:
			m.DocString, err = f.str()
		case 7:
			graphBytes, err = f.msg()
			haveGraph = true
		case 8:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				var dom string
				var ver int64
				dom, ver, err = parseOpsetImport(mb)
				m.Opsets[dom] = ver
			}
		case 14:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				var k, v string
				k, v, err = parseStringPair(mb)
				m.Metadata[k] = v
			}
		case 25:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				funcs = append(funcs, mb)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !haveGraph {
		return nil, fmt.Errorf("%w: the model has no graph (is this an ONNX model file?)", ErrMalformed)
	}
	if len(m.Opsets) == 0 {
		m.Opsets[""] = 1
	}
	for _, fb := range funcs {
		fn, err := d.function(fb)
		if err != nil {
			return nil, err
		}
		m.Functions[fn.Domain+":"+fn.Name] = fn
	}
	m.Graph, err = d.graph(graphBytes)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (d *decoder) graph(b []byte) (*graph.Graph, error) {
	if d.depth >= maxGraphDepth {
		return nil, fmt.Errorf("%w: subgraphs nested more than %d deep", ErrMalformed, maxGraphDepth)
	}
	d.depth++
	defer func() { d.depth-- }()
	g := graph.NewGraph("")
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				var n *graph.Node
				n, err = d.node(mb)
				if err != nil {
					return fmt.Errorf("node %d: %w", len(g.Nodes), err)
				}
				g.Nodes = append(g.Nodes, n)
			}
		case 2:
			g.Name, err = f.str()
		case 5:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				var t *graph.Tensor
				var name string
				t, name, err = decodeTensor(mb, d)
				if err != nil {
					return fmt.Errorf("initializer: %w", err)
				}
				if name == "" {
					return fmt.Errorf("%w: initializer %d has no name", ErrMalformed, len(g.InitOrder))
				}
				g.Initializers[name] = t
				g.InitOrder = append(g.InitOrder, name)
			}
		case 15:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				var t *graph.Tensor
				var name string
				t, name, err = d.sparseTensor(mb)
				if err != nil {
					return fmt.Errorf("sparse initializer %q: %w", name, err)
				}
				g.Initializers[name] = t
				g.InitOrder = append(g.InitOrder, name)
				g.SparseInitializers = append(g.SparseInitializers, name)
			}
		case 11, 12, 13:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				var vi *graph.ValueInfo
				vi, err = valueInfo(mb)
				if err != nil {
					return err
				}
				switch f.num {
				case 11:
					g.Inputs = append(g.Inputs, vi)
				case 12:
					g.Outputs = append(g.Outputs, vi)
				default:
					g.ValueInfo[vi.Name] = vi
				}
			}
		}
		return err
	})
	if err != nil {
		if g.Name != "" {
			return nil, fmt.Errorf("graph %q: %w", g.Name, err)
		}
		return nil, err
	}
	return g, nil
}

func (d *decoder) sparseTensor(b []byte) (*graph.Tensor, string, error) {
	var values, indices *graph.Tensor
	var name string
	var dims []int64
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1, 2:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				var t *graph.Tensor
				var nm string
				t, nm, err = decodeTensor(mb, d)
				if f.num == 1 {
					values, name = t, nm
				} else {
					indices = t
				}
			}
		case 3:
			dims, err = f.int64s(dims)
		}
		return err
	})
	if err != nil {
		return nil, name, err
	}
	if values == nil || indices == nil {
		return nil, name, fmt.Errorf("%w: sparse tensor lacks values or indices", ErrMalformed)
	}
	shape := graph.IntsToInt(dims)
	dense, err := graph.NewTensor(values.DType, shape)
	if err != nil {
		return nil, name, err
	}
	n := dense.Size()
	nnz := values.Size()
	strides := graph.Strides(shape)
	for k := 0; k < nnz; k++ {
		var idx int
		if indices.Rank() == 1 {
			idx = int(indices.Int(k))
		} else if indices.Rank() == 2 && indices.Shape[1] == len(shape) {
			for j := range shape {
				idx += int(indices.Int(k*len(shape)+j)) * strides[j]
			}
		} else {
			return nil, name, fmt.Errorf("%w: sparse indices of shape %v", ErrMalformed, indices.Shape)
		}
		if idx < 0 || idx >= n {
			return nil, name, fmt.Errorf("%w: sparse index %d outside %v", ErrMalformed, idx, shape)
		}
		dense.SetFloat(idx, values.Float(k))
	}
	return dense, name, nil
}

func valueInfo(b []byte) (*graph.ValueInfo, error) {
	vi := &graph.ValueInfo{}
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			vi.Name, err = f.str()
		case 2:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				vi.Type, err = typeProto(mb, 0)
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("value info %q: %w", vi.Name, err)
	}
	if vi.Type == nil {
		vi.Type = &graph.Type{Kind: graph.KindUnknown}
	}
	return vi, nil
}

func typeProto(b []byte, depth int) (*graph.Type, error) {
	if depth > maxGraphDepth {
		return nil, fmt.Errorf("%w: type nested too deep", ErrMalformed)
	}
	t := &graph.Type{Kind: graph.KindUnknown}
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1, 8: // tensor_type, sparse_tensor_type
			var mb []byte
			if mb, err = f.msg(); err == nil {
				t.Kind = graph.KindTensor
				if f.num == 8 {
					t.Kind = graph.KindSparseTensor
				}
				err = tensorType(mb, t)
			}
		case 4, 9: // sequence_type, optional_type
			var mb []byte
			if mb, err = f.msg(); err == nil {
				t.Kind = graph.KindSequence
				if f.num == 9 {
					t.Kind = graph.KindOptional
				}
				err = walk(mb, func(f field) error {
					if f.num != 1 {
						return nil
					}
					eb, err := f.msg()
					if err != nil {
						return err
					}
					t.Elem, err = typeProto(eb, depth+1)
					return err
				})
				if t.Elem == nil {
					t.Elem = &graph.Type{Kind: graph.KindUnknown}
				}
			}
		case 5:
			t.Kind = graph.KindMap
		}
		return err
	})
	return t, err
}

func tensorType(b []byte, t *graph.Type) error {
	return walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			var v int64
			v, err = f.varint()
			t.DType = graph.DType(v)
		case 2:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				t.HasShape = true
				t.Shape = []graph.Dim{}
				err = walk(mb, func(f field) error {
					if f.num != 1 {
						return nil
					}
					db, err := f.msg()
					if err != nil {
						return err
					}
					var dim graph.Dim
					err = walk(db, func(f field) error {
						var err error
						switch f.num {
						case 1:
							dim.Value, err = f.varint()
							dim.Known = true
						case 2:
							dim.Param, err = f.str()
						}
						return err
					})
					t.Shape = append(t.Shape, dim)
					return err
				})
			}
		}
		return err
	})
}

func (d *decoder) node(b []byte) (*graph.Node, error) {
	n := &graph.Node{}
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			var s string
			s, err = f.str()
			n.Inputs = append(n.Inputs, s)
		case 2:
			var s string
			s, err = f.str()
			n.Outputs = append(n.Outputs, s)
		case 3:
			n.Name, err = f.str()
		case 4:
			n.OpType, err = f.str()
		case 7:
			n.Domain, err = f.str()
		case 5:
			var mb []byte
			if mb, err = f.msg(); err == nil {
				var a *graph.Attr
				a, err = d.attr(mb)
				if err != nil {
					return err
				}
				n.SetAttr(a)
			}
		}
		return err
	})
	if err != nil {
		if n.OpType != "" {
			return nil, fmt.Errorf("%q (%s): %w", n.Name, n.OpType, err)
		}
		return nil, err
	}
	if n.OpType == "" {
		return nil, fmt.Errorf("%w: node %q has no op_type", ErrMalformed, n.Name)
	}
	if n.Domain == "ai.onnx" {
		n.Domain = ""
	}
	return n, nil
}

func (d *decoder) attr(b []byte) (*graph.Attr, error) {
	a := &graph.Attr{}
	err := walk(b, func(f field) error {
		var err error
		var mb []byte
		switch f.num {
		case 1:
			a.Name, err = f.str()
		case 20:
			var v int64
			v, err = f.varint()
			a.Type = graph.AttrType(v)
		case 21:
			a.RefAttrName, err = f.str()
		case 2:
			if f.typ != 5 { // fixed32
				return fmt.Errorf("%w: attribute float has wire type %d", ErrMalformed, f.typ)
			}
			var fl []float32
			fl, err = f.float32s(nil)
			if err == nil {
				a.F = fl[0]
			}
		case 3:
			a.I, err = f.varint()
		case 4:
			a.S, err = f.str()
		case 5:
			if mb, err = f.msg(); err == nil {
				a.T, _, err = decodeTensor(mb, d)
			}
		case 6:
			if mb, err = f.msg(); err == nil {
				a.G, err = d.graph(mb)
			}
		case 22:
			if mb, err = f.msg(); err == nil {
				a.T, _, err = d.sparseTensor(mb)
			}
		case 14:
			if mb, err = f.msg(); err == nil {
				a.TP, err = typeProto(mb, 0)
			}
		case 7:
			a.Floats, err = f.float32s(a.Floats)
		case 8:
			a.Ints, err = f.int64s(a.Ints)
		case 9:
			var s string
			s, err = f.str()
			a.Strings = append(a.Strings, s)
		case 10:
			if mb, err = f.msg(); err == nil {
				var t *graph.Tensor
				t, _, err = decodeTensor(mb, d)
				a.Tensors = append(a.Tensors, t)
			}
		case 11:
			if mb, err = f.msg(); err == nil {
				var g *graph.Graph
				g, err = d.graph(mb)
				a.Graphs = append(a.Graphs, g)
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attribute %q: %w", a.Name, err)
	}
	if a.Type == graph.AttrUndefined {
		// Old files omit the discriminator: infer it from the field set.
		switch {
		case a.G != nil:
			a.Type = graph.AttrGraph
		case a.T != nil:
			a.Type = graph.AttrTensor
		case a.Floats != nil:
			a.Type = graph.AttrFloats
		case a.Ints != nil:
			a.Type = graph.AttrInts
		case a.Strings != nil:
			a.Type = graph.AttrStrings
		case a.S != "":
			a.Type = graph.AttrString
		case a.F != 0:
			a.Type = graph.AttrFloat
		default:
			a.Type = graph.AttrInt
		}
	}
	return a, nil
}

func (d *decoder) function(b []byte) (*graph.Function, error) {
	fn := &graph.Function{Opsets: map[string]int64{}, AttrDefaults: map[string]*graph.Attr{}}
	err := walk(b, func(f field) error {
		var err error
		var s string
		var mb []byte
		switch f.num {
		case 1:
			fn.Name, err = f.str()
		case 10:
			fn.Domain, err = f.str()
		case 4:
			s, err = f.str()
			fn.Inputs = append(fn.Inputs, s)
		case 5:
			s, err = f.str()
			fn.Outputs = append(fn.Outputs, s)
		case 6:
			s, err = f.str()
			fn.AttrNames = append(fn.AttrNames, s)
		case 11:
			if mb, err = f.msg(); err == nil {
				var a *graph.Attr
				a, err = d.attr(mb)
				if err == nil {
					fn.AttrNames = append(fn.AttrNames, a.Name)
					fn.AttrDefaults[a.Name] = a
				}
			}
		case 7:
			if mb, err = f.msg(); err == nil {
				var n *graph.Node
				n, err = d.node(mb)
				fn.Nodes = append(fn.Nodes, n)
			}
		case 9:
			if mb, err = f.msg(); err == nil {
				var dom string
				var ver int64
				dom, ver, err = parseOpsetImport(mb)
				fn.Opsets[dom] = ver
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("function %q: %w", fn.Name, err)
	}
	return fn, nil
}

// parseOpsetImport reads an OperatorSetIdProto (a model's or a function's
// opset_import): the domain, with "ai.onnx" written as "" as node domains
// are, and the version.
func parseOpsetImport(b []byte) (domain string, version int64, err error) {
	err = walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			domain, err = f.str()
		case 2:
			version, err = f.varint()
		}
		return err
	})
	if domain == "ai.onnx" {
		domain = ""
	}
	return domain, version, err
}
