package graph

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Shape and type inference.
//
// InferShapes walks a graph once, in topological order, and gives every value
// it can a Type: a dtype and a shape whose dims are fixed sizes, named
// parameters ("batch") or unknown. Alongside types it tracks the *values* of
// small integer tensors (shapes, axes, indices) element by element, as Dims:
// Shape(x) of an x of shape [batch, 128] is the value [batch, 128]. That is
// what lets Reshape, Expand, ConstantOfShape, Slice and friends get output
// shapes in transformer exports, where the target shape is computed at run
// time by Shape → Gather → Unsqueeze → Concat chains, and it is what
// Specialize folds once every dim is a number.
//
// Inference is conservative: an op without a rule, or an input it cannot
// see through, leaves its outputs unknown. It fails only on contradictions it
// can prove (known dims that cannot broadcast, a MatMul whose inner dims
// differ, a Reshape to a different element count), and the error names the
// node.

// ErrShapeMismatch is wrapped by the errors inference returns for shapes
// that contradict an op's rules.
var ErrShapeMismatch = errors.New("shape mismatch")

// maxSymLen bounds the length of the integer vectors whose values inference
// tracks: shapes, axes and indices are short, and anything longer is data.
const maxSymLen = 64

// symValue is the value of a small integer (or bool) tensor of rank 0 or 1,
// element by element. A Known dim is a number, a Param dim is the run-time
// size of a named dimension, and an unknown dim is any number.
type symValue struct {
	dims   []Dim
	scalar bool
}

func (s *symValue) allKnown() bool {
	for _, d := range s.dims {
		if !d.Known {
			return false
		}
	}
	return true
}

// shape is the tensor shape of the value: [] for a scalar, [len] otherwise.
func (s *symValue) shape() []Dim {
	if s.scalar {
		return []Dim{}
	}
	return []Dim{knownDim(int64(len(s.dims)))}
}

// values returns the elements as numbers when all are known.
func (s *symValue) values() ([]int64, bool) {
	out := make([]int64, len(s.dims))
	for i, d := range s.dims {
		if !d.Known {
			return nil, false
		}
		out[i] = d.Value
	}
	return out, true
}

// inferState is what inference knows about the values of one graph.
type inferState struct {
	opset int64
	types map[string]*Type
	// consts are values known exactly: initializers that are not graph
	// inputs, and Constant nodes.
	consts map[string]*Tensor
	// syms are element-wise values of small integer tensors.
	syms map[string]*symValue
	// valueInfo, when set, supplies declared types for outputs no rule
	// infers.
	valueInfo map[string]*ValueInfo
}

// InferShapes infers the dtype and (possibly symbolic) shape of every value
// of g that it can, for a model of the given ai.onnx opset. known overrides
// or adds types (typically the graph inputs, with concrete or symbolic
// shapes); other graph inputs take their declared types, initializers their
// exact ones. Where no rule applies, the type declared in g.ValueInfo is
// used. The result maps value names to types; values it knows nothing about
// are absent. The graph is not modified.
//
// The error, when not nil, wraps ErrShapeMismatch and names the first node
// whose input shapes contradict its op's rules; the types inferred up to
// that node are still returned.
func InferShapes(g *Graph, opset int64, known map[string]*Type) (map[string]*Type, error) {
	st, err := inferGraph(g, opset, known, true)
	return st.types, err
}

// newInferState seeds the state from g's inputs, initializers and known.
func newInferState(g *Graph, opset int64, known map[string]*Type) *inferState {
	st := &inferState{
		opset:  opset,
		types:  map[string]*Type{},
		consts: map[string]*Tensor{},
		syms:   map[string]*symValue{},
	}
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
		if in.Type != nil {
			st.types[in.Name] = cloneType(in.Type)
		}
	}
	for name, t := range g.Initializers {
		if t == nil {
			continue
		}
		if _, declared := st.types[name]; !declared || !isInput[name] {
			st.types[name] = typeOfTensor(t)
		}
		if !isInput[name] {
			st.setConst(name, t)
		}
	}
	for name, t := range known {
		if t != nil {
			st.types[name] = cloneType(t)
		}
	}
	return st
}

// inferGraph runs every node's rule in topological order.
func inferGraph(g *Graph, opset int64, known map[string]*Type, useValueInfo bool) (*inferState, error) {
	st := newInferState(g, opset, known)
	if useValueInfo {
		st.valueInfo = g.ValueInfo
	}
	for _, n := range topoOrder(g) {
		if err := st.inferNode(n); err != nil {
			return st, err
		}
	}
	if useValueInfo {
		for _, o := range g.Outputs {
			if _, ok := st.types[o.Name]; !ok && o.Type != nil {
				st.types[o.Name] = cloneType(o.Type)
			}
		}
	}
	return st, nil
}

// topoOrder returns g's top-level nodes in an order where every node comes
// after the producers of the values it reads (captured values of its
// subgraphs included), keeping file order among ready nodes. Unlike
// TopoSort it changes nothing, subgraphs included. Nodes that can never be
// ready (cycles, missing inputs) come last, in file order.
func topoOrder(g *Graph) []*Node {
	avail := map[string]bool{"": true}
	for _, in := range g.Inputs {
		avail[in.Name] = true
	}
	for name := range g.Initializers {
		avail[name] = true
	}
	produced := map[string]bool{}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			produced[o] = true
		}
	}
	needs := func(n *Node) []string {
		out := append([]string{}, n.Inputs...)
		for _, sg := range n.Subgraphs() {
			out = append(out, sg.OuterScopeNames()...)
		}
		return out
	}
	order := make([]*Node, 0, len(g.Nodes))
	pending := g.Nodes
	for len(pending) > 0 {
		var rest []*Node
		for _, n := range pending {
			ready := true
			for _, in := range needs(n) {
				// Names no node produces come from an enclosing scope.
				if !avail[in] && produced[in] {
					ready = false
					break
				}
			}
			if !ready {
				rest = append(rest, n)
				continue
			}
			order = append(order, n)
			for _, o := range n.Outputs {
				avail[o] = true
			}
		}
		if len(rest) == len(pending) {
			return append(order, rest...)
		}
		pending = rest
	}
	return order
}

// inferNode applies n's rule and records what it found.
func (st *inferState) inferNode(n *Node) error {
	rules := inferRules
	switch n.Domain {
	case InternalDomain:
		rules = internalInferRules
	case FusedDomain:
		rules = fusedInferRules
	}
	if n.Domain == "" || n.Domain == "ai.onnx" || n.Domain == InternalDomain || n.Domain == FusedDomain {
		if rule, ok := rules[n.OpType]; ok {
			c := &inferCall{st: st, n: n}
			if err := rule(c); err != nil {
				if errors.Is(err, ErrShapeMismatch) {
					return err
				}
				return n.Errorf("%w: %v", ErrShapeMismatch, err)
			}
		}
	}
	for _, o := range n.Outputs {
		if o == "" {
			continue
		}
		if _, ok := st.types[o]; ok {
			continue
		}
		if vi := st.valueInfo[o]; vi != nil && vi.Type != nil {
			st.types[o] = cloneType(vi.Type)
		}
	}
	return nil
}

// setConst records an exactly known value, and its elements when it is a
// small integer or bool vector.
func (st *inferState) setConst(name string, t *Tensor) {
	st.consts[name] = t
	if s := symOfTensor(t); s != nil {
		st.syms[name] = s
	}
}

// symOfTensor returns the element values of a small integer or bool tensor.
func symOfTensor(t *Tensor) *symValue {
	if t == nil || t.Rank() > 1 || !(t.DType.IsInt() || t.DType == Bool) || t.Validate() != nil {
		return nil
	}
	n := t.Size()
	if n > maxSymLen {
		return nil
	}
	s := &symValue{dims: make([]Dim, n), scalar: t.Rank() == 0}
	for i := range s.dims {
		s.dims[i] = knownDim(t.Int(i))
	}
	return s
}

// typeOfTensor is the exact type of a tensor.
func typeOfTensor(t *Tensor) *Type {
	shape := make([]Dim, len(t.Shape))
	for i, d := range t.Shape {
		shape[i] = knownDim(int64(d))
	}
	return &Type{Kind: KindTensor, DType: t.DType, Shape: shape, HasShape: true}
}

func cloneType(t *Type) *Type {
	c := *t
	if t.Shape != nil {
		c.Shape = append([]Dim{}, t.Shape...)
	}
	if t.Elem != nil {
		c.Elem = cloneType(t.Elem)
	}
	return &c
}

func knownDim(v int64) Dim { return Dim{Value: v, Known: true} }

// sameDim reports whether a and b certainly denote the same size.
func sameDim(a, b Dim) bool {
	if a.Known && b.Known {
		return a.Value == b.Value
	}
	return !a.Known && !b.Known && a.Param != "" && a.Param == b.Param
}

// unifyDims merges two dims that an op requires to be equal. Known dims
// that differ are an error; otherwise the more specific one wins.
func unifyDims(a, b Dim) (Dim, error) {
	switch {
	case a.Known && b.Known:
		if a.Value != b.Value {
			return Dim{}, fmt.Errorf("%w: dims %d and %d must be equal", ErrShapeMismatch, a.Value, b.Value)
		}
		return a, nil
	case a.Known:
		return a, nil
	case b.Known:
		return b, nil
	case a.Param != "":
		return a, nil
	}
	return b, nil
}

// broadcastDim is numpy broadcasting of one dim pair.
func broadcastDim(a, b Dim) (Dim, error) {
	switch {
	case a.Known && a.Value == 1:
		return b, nil
	case b.Known && b.Value == 1:
		return a, nil
	case a.Known && b.Known:
		if a.Value != b.Value {
			return Dim{}, fmt.Errorf("%w: dims %d and %d cannot be broadcast", ErrShapeMismatch, a.Value, b.Value)
		}
		return a, nil
	case a.Known:
		// b is 1 or equal to a at run time.
		return a, nil
	case b.Known:
		return b, nil
	case sameDim(a, b):
		return a, nil
	}
	return Dim{}, nil
}

// broadcastShapes is numpy broadcasting of several shapes.
func broadcastShapes(shapes ...[]Dim) ([]Dim, error) {
	rank := 0
	for _, s := range shapes {
		rank = max(rank, len(s))
	}
	out := make([]Dim, rank)
	for i := range out {
		out[i] = knownDim(1)
	}
	for _, s := range shapes {
		off := rank - len(s)
		for i, d := range s {
			b, err := broadcastDim(out[off+i], d)
			if err != nil {
				return nil, fmt.Errorf("%w: shapes %v cannot be broadcast together", ErrShapeMismatch, dimsString(shapes...))
			}
			out[off+i] = b
		}
	}
	return out, nil
}

func dimsString(shapes ...[]Dim) string {
	var b strings.Builder
	for i, sh := range shapes {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString("[")
		for j, d := range sh {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString(d.String())
		}
		b.WriteString("]")
	}
	return b.String()
}

// productDim multiplies dims: known when all are known; the single
// non-numeric dim when the others multiply to 1; unknown otherwise.
func productDim(ds []Dim) Dim {
	p := int64(1)
	var other []Dim
	for _, d := range ds {
		if d.Known {
			if d.Value != 0 && p > math.MaxInt64/max(d.Value, 1) {
				return Dim{}
			}
			p *= d.Value
		} else {
			other = append(other, d)
		}
	}
	switch {
	case len(other) == 0:
		return knownDim(p)
	case p == 0:
		return knownDim(0)
	case len(other) == 1 && p == 1:
		return other[0]
	}
	return Dim{}
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(axis int64, rank int) (int, error) {
	if axis < -int64(rank) || axis >= int64(rank) {
		return 0, fmt.Errorf("%w: axis %d is out of range for rank %d", ErrShapeMismatch, axis, rank)
	}
	if axis < 0 {
		axis += int64(rank)
	}
	return int(axis), nil
}

// normAxes normalises a list of axes and rejects duplicates.
func normAxes(axes []int64, rank int) ([]int, error) {
	out := make([]int, len(axes))
	seen := map[int]bool{}
	for i, a := range axes {
		ax, err := normAxis(a, rank)
		if err != nil {
			return nil, err
		}
		if seen[ax] {
			return nil, fmt.Errorf("%w: axis %d appears twice in %v", ErrShapeMismatch, a, axes)
		}
		seen[ax] = true
		out[i] = ax
	}
	return out, nil
}

// inferFunc is the inference rule of one op.
type inferFunc func(c *inferCall) error

// inferRules maps ai.onnx op types to their rules; infer_ops.go fills it.
var inferRules = map[string]inferFunc{}

// internalInferRules maps InternalDomain (onnxtrain) op types to their
// rules; ops without one leave their outputs untyped.
var internalInferRules = map[string]inferFunc{}

// fusedInferRules maps FusedDomain op types (the fusion passes' ops) to
// their rules; ops without one keep the types their outputs had before the
// fusion (ValueInfo).
var fusedInferRules = map[string]inferFunc{}

// HasShapeInference reports whether InferShapes has a rule for the ai.onnx op.
func HasShapeInference(op string) bool { _, ok := inferRules[op]; return ok }

// inferCall is one node under inference: accessors for what is known about
// its inputs and setters for its outputs.
type inferCall struct {
	st *inferState
	n  *Node
}

func (c *inferCall) opset() int64 { return c.st.opset }

// has reports whether input i is present (named).
func (c *inferCall) has(i int) bool { return c.n.Input(i) != "" }

// typ is input i's tensor type, or nil when absent or unknown.
func (c *inferCall) typ(i int) *Type {
	name := c.n.Input(i)
	if name == "" {
		return nil
	}
	t := c.st.types[name]
	if t == nil || (t.Kind != KindTensor && t.Kind != KindSparseTensor) {
		return nil
	}
	return t
}

// dtype is input i's dtype (Undefined when unknown).
func (c *inferCall) dtype(i int) DType {
	if t := c.typ(i); t != nil {
		return t.DType
	}
	return Undefined
}

// shape is input i's shape; ok is false when its rank is unknown. The slice
// is a copy the caller may change.
func (c *inferCall) shape(i int) ([]Dim, bool) {
	t := c.typ(i)
	if t == nil || !t.HasShape {
		return nil, false
	}
	return append([]Dim{}, t.Shape...), true
}

// rank is input i's rank, or -1 when unknown.
func (c *inferCall) rank(i int) int {
	if s, ok := c.shape(i); ok {
		return len(s)
	}
	return -1
}

// tensor is input i's value when it is a known constant.
func (c *inferCall) tensor(i int) *Tensor {
	name := c.n.Input(i)
	if name == "" {
		return nil
	}
	return c.st.consts[name]
}

// sym is the element-wise value of input i, when tracked.
func (c *inferCall) sym(i int) *symValue {
	name := c.n.Input(i)
	if name == "" {
		return nil
	}
	return c.st.syms[name]
}

// ints is input i's value as integers when every element is known.
func (c *inferCall) ints(i int) ([]int64, bool) {
	if s := c.sym(i); s != nil {
		return s.values()
	}
	if t := c.tensor(i); t != nil && (t.DType.IsInt() || t.DType == Bool) && t.Validate() == nil {
		out := make([]int64, t.Size())
		for j := range out {
			out[j] = t.Int(j)
		}
		return out, true
	}
	return nil, false
}

// floats is input i's value as float64s when it is a known constant.
func (c *inferCall) floats(i int) ([]float64, bool) {
	t := c.tensor(i)
	if t == nil || t.Validate() != nil || t.DType == String {
		return nil, false
	}
	out := make([]float64, t.Size())
	for j := range out {
		out[j] = t.Float(j)
	}
	return out, true
}

// setOut gives output i a ranked type.
func (c *inferCall) setOut(i int, dt DType, shape []Dim) {
	if i >= len(c.n.Outputs) || c.n.Outputs[i] == "" {
		return
	}
	if shape == nil {
		shape = []Dim{}
	}
	c.st.types[c.n.Outputs[i]] = &Type{Kind: KindTensor, DType: dt, Shape: shape, HasShape: true}
}

// setUnranked gives output i a dtype and an unknown rank.
func (c *inferCall) setUnranked(i int, dt DType) {
	if i >= len(c.n.Outputs) || c.n.Outputs[i] == "" {
		return
	}
	c.st.types[c.n.Outputs[i]] = &Type{Kind: KindTensor, DType: dt}
}

// setShapeOrUnranked calls setOut when ok and setUnranked otherwise.
func (c *inferCall) setShapeOrUnranked(i int, dt DType, shape []Dim, ok bool) {
	if ok {
		c.setOut(i, dt, shape)
	} else {
		c.setUnranked(i, dt)
	}
}

// setSym records the element values of output i. Its type is set from the
// value's shape when not set already.
func (c *inferCall) setSym(i int, dt DType, s *symValue) {
	if s == nil || i >= len(c.n.Outputs) || c.n.Outputs[i] == "" || len(s.dims) > maxSymLen {
		return
	}
	name := c.n.Outputs[i]
	c.st.syms[name] = s
	if _, ok := c.st.types[name]; !ok {
		c.setOut(i, dt, s.shape())
	}
}

// setConst records output i as an exactly known tensor.
func (c *inferCall) setConst(i int, t *Tensor) {
	if t == nil || i >= len(c.n.Outputs) || c.n.Outputs[i] == "" {
		return
	}
	c.st.types[c.n.Outputs[i]] = typeOfTensor(t)
	c.st.setConst(c.n.Outputs[i], t)
}

// errorf builds an inference error naming the node.
func (c *inferCall) errorf(format string, args ...any) error {
	return c.n.Errorf("%w: %s", ErrShapeMismatch, fmt.Sprintf(format, args...))
}

// wrap names the node in an error from a helper.
func (c *inferCall) wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrShapeMismatch) {
		return c.n.Errorf("%w", err)
	}
	return c.n.Errorf("%w: %v", ErrShapeMismatch, err)
}

// axesFrom returns the axes of ops whose axes moved from an attribute to
// input idx at opset inputFrom. ok is false when the axes are an input that
// is not a known constant; present is false when no axes are given.
func (c *inferCall) axesFrom(idx int, inputFrom int64) (axes []int64, present, ok bool) {
	if c.opset() >= inputFrom || (c.has(idx) && !c.n.HasAttr("axes")) {
		if !c.has(idx) {
			return nil, false, true
		}
		v, ok := c.ints(idx)
		return v, true, ok
	}
	if a := c.n.Attr("axes"); a != nil {
		return a.Ints, true, true
	}
	return nil, false, true
}
