package graph

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// maxSpecializeRounds bounds the inference/folding rounds of Specialize; each
// round folds at least one node, and real graphs settle in two or three.
const maxSpecializeRounds = 64

// Specialize returns a copy of g for inputs of the given concrete shapes, in
// which everything that depends only on shapes is a constant: Shape and Size
// nodes, the Gather/Unsqueeze/Concat/Slice/arithmetic chains that transformer
// exports compute reshape targets with, Constant nodes, and, through eval,
// every node whose inputs have all become constants (FoldConstants). Dead
// nodes are then removed, and inference and folding repeat until nothing
// changes. The copy computes exactly what g computes for inputs of those
// shapes.
//
// inputShapes maps graph input names to shapes. Inputs it omits keep their
// declared types (an input that has an initializer is assumed to take it).
// eval may be nil: then only what inference itself can compute (shape
// values) is folded.
//
// g is not modified: the copy has its own node list, initializer map, input
// list (with the concrete shapes) and ValueInfo (with every type inference
// found); nodes and tensors are shared. Errors name the input or node whose
// shapes do not fit: a rank or fixed dim that contradicts the declared
// input, a symbolic dim bound to two sizes, an op whose inputs contradict
// its rules (wrapping ErrShapeMismatch).
func Specialize(g *Graph, opset int64, inputShapes map[string][]int, eval Evaluator) (*Graph, error) {
	out := shallowCopy(g)
	known, err := concreteInputTypes(out, inputShapes)
	if err != nil {
		return nil, err
	}
	// Folding walks the node list once per round: sort it (without touching
	// subgraphs, which are shared with g).
	out.Nodes = topoOrder(out)
	var st *inferState
	for round := 0; ; round++ {
		if st, err = inferGraph(out, opset, known, false); err != nil {
			return nil, fmt.Errorf("graph: specialize: %w", err)
		}
		if round == maxSpecializeRounds {
			break
		}
		changed := replaceKnownValues(out, st)
		if eval != nil {
			changed += FoldConstants(out, eval)
		}
		changed += RemoveDeadNodes(out)
		if changed == 0 {
			break
		}
	}
	for name, t := range st.types {
		if _, isInit := out.Initializers[name]; !isInit {
			out.ValueInfo[name] = &ValueInfo{Name: name, Type: t}
		}
	}
	return out, nil
}

// shallowCopy copies what Specialize changes: the node list, initializer
// map, input list and ValueInfo map.
func shallowCopy(g *Graph) *Graph {
	c := *g
	c.Nodes = append([]*Node{}, g.Nodes...)
	c.Initializers = make(map[string]*Tensor, len(g.Initializers))
	for k, v := range g.Initializers {
		c.Initializers[k] = v
	}
	c.Inputs = append([]*ValueInfo{}, g.Inputs...)
	c.ValueInfo = make(map[string]*ValueInfo, len(g.ValueInfo))
	for k, v := range g.ValueInfo {
		c.ValueInfo[k] = v
	}
	c.InitOrder = append([]string{}, g.InitOrder...)
	return &c
}

// concreteInputTypes checks inputShapes against the declared inputs of g,
// replaces their ValueInfos in g.Inputs with concrete ones and returns the
// types for inference.
func concreteInputTypes(g *Graph, inputShapes map[string][]int) (map[string]*Type, error) {
	index := map[string]int{}
	for i, in := range g.Inputs {
		index[in.Name] = i
	}
	names := make([]string, 0, len(inputShapes))
	for name := range inputShapes {
		names = append(names, name)
	}
	sort.Strings(names)
	bound := map[string]int{}
	boundBy := map[string]string{}
	known := map[string]*Type{}
	for _, name := range names {
		shape := inputShapes[name]
		i, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("graph: specialize: %q is not an input of graph %q (inputs: %s)", name, g.Name, someNames(g.InputNames(), 8))
		}
		for _, d := range shape {
			if d < 0 {
				return nil, fmt.Errorf("graph: specialize: input %q has a negative dim in shape %v", name, shape)
			}
		}
		decl := g.Inputs[i].Type
		t := &Type{Kind: KindTensor, HasShape: true, Shape: make([]Dim, len(shape))}
		for j, d := range shape {
			t.Shape[j] = knownDim(int64(d))
		}
		if decl != nil {
			if decl.Kind != KindTensor && decl.Kind != KindUnknown {
				return nil, fmt.Errorf("graph: specialize: input %q is a %v, not a tensor", name, decl)
			}
			t.DType = decl.DType
			if decl.HasShape {
				if len(decl.Shape) != len(shape) {
					return nil, fmt.Errorf("graph: specialize: input %q has shape %v, the graph declares %v", name, shape, decl)
				}
				for j, d := range decl.Shape {
					switch {
					case d.Known && int(d.Value) != shape[j]:
						return nil, fmt.Errorf("graph: specialize: input %q has shape %v, the graph declares %v (dim %d)", name, shape, decl, j)
					case d.Param != "":
						if v, ok := bound[d.Param]; ok && v != shape[j] {
							return nil, fmt.Errorf("graph: specialize: input %q dim %d (%s) is %d, but %s is %d in input %q", name, j, d.Param, shape[j], d.Param, v, boundBy[d.Param])
						}
						bound[d.Param], boundBy[d.Param] = shape[j], name
					}
				}
			}
		}
		known[name] = t
		g.Inputs[i] = &ValueInfo{Name: name, Type: t}
	}
	for _, in := range g.Inputs {
		if init, ok := g.Initializers[in.Name]; ok && known[in.Name] == nil && init != nil {
			known[in.Name] = typeOfTensor(init)
		}
	}
	return known, nil
}

// replaceKnownValues turns into initializers the outputs of Constant nodes
// and of every node whose outputs inference computed element by element, and
// drops those nodes. It returns the number of nodes dropped.
func replaceKnownValues(g *Graph, st *inferState) int {
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	replaced := 0
	kept := g.Nodes[:0]
	for _, n := range g.Nodes {
		vals := knownOutputs(n, st, isInput)
		if vals == nil {
			kept = append(kept, n)
			continue
		}
		for i, name := range n.Outputs {
			if name != "" {
				g.Initializers[name] = vals[i]
			}
		}
		replaced++
	}
	g.Nodes = kept
	return replaced
}

// knownOutputs returns the values of all of n's outputs when inference knows
// every one of them, else nil.
func knownOutputs(n *Node, st *inferState, isInput map[string]bool) []*Tensor {
	if (n.Domain != "" && n.Domain != "ai.onnx") || nondeterministic[n.OpType] || len(n.Subgraphs()) > 0 || countNamed(n.Outputs) == 0 {
		return nil
	}
	out := make([]*Tensor, len(n.Outputs))
	for i, name := range n.Outputs {
		if name == "" {
			continue
		}
		if isInput[name] {
			return nil
		}
		if t := st.consts[name]; t != nil {
			// Constant nodes, and small constants inference computed.
			out[i] = t
			continue
		}
		s, typ := st.syms[name], st.types[name]
		if s == nil || typ == nil || !s.allKnown() {
			return nil
		}
		t, err := tensorOfSym(s, typ.DType)
		if err != nil {
			return nil
		}
		out[i] = t
	}
	return out
}

// tensorOfSym builds the tensor of a fully known element-value vector.
func tensorOfSym(s *symValue, dt DType) (*Tensor, error) {
	var shape []int
	if !s.scalar {
		shape = []int{len(s.dims)}
	}
	if !(dt.IsInt() || dt.IsFloat() || dt == Bool) {
		return nil, fmt.Errorf("dtype %v", dt)
	}
	t, err := NewTensor(dt, shape)
	if err != nil {
		return nil, err
	}
	for i, d := range s.dims {
		if dt.IsInt() {
			setIntElem(t, i, d.Value)
		} else {
			t.SetFloat(i, float64(d.Value))
		}
	}
	return t, nil
}

// setIntElem stores an integer element without a trip through float64.
func setIntElem(t *Tensor, i int, v int64) {
	switch s := t.Data.(type) {
	case []int64:
		s[i] = v
	case []int32:
		s[i] = int32(v)
	case []int16:
		s[i] = int16(v)
	case []int8:
		s[i] = int8(v)
	case []uint8:
		s[i] = uint8(v)
	case []uint16:
		s[i] = uint16(v)
	case []uint32:
		s[i] = uint32(v)
	case []uint64:
		s[i] = uint64(v)
	default:
		t.SetFloat(i, float64(v))
	}
}

// InputShapes returns the shape of every tensor in inputs, the form
// Specialize takes.
func InputShapes(inputs map[string]*Tensor) map[string][]int {
	out := make(map[string][]int, len(inputs))
	for name, t := range inputs {
		if t != nil {
			out[name] = append([]int{}, t.Shape...)
		}
	}
	return out
}

// ShapeKey is a canonical string for a set of input shapes ("a:2x3;b:"),
// for caching one specialised graph per shape set.
func ShapeKey(shapes map[string][]int) string {
	names := make([]string, 0, len(shapes))
	for name := range shapes {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, name := range names {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(strconv.Quote(name))
		b.WriteByte(':')
		for j, d := range shapes[name] {
			if j > 0 {
				b.WriteByte('x')
			}
			b.WriteString(strconv.Itoa(d))
		}
	}
	return b.String()
}

// someNames lists names in brackets, the first max of them and how many
// more there are (a training program's inputs run to hundreds: every
// parameter and its optimizer slots).
func someNames(names []string, max int) string {
	if len(names) <= max {
		return "[" + strings.Join(names, " ") + "]"
	}
	return fmt.Sprintf("[%s and %d more]", strings.Join(names[:max], " "), len(names)-max)
}
