package graph

import (
	"errors"
	"fmt"
	"sort"
)

// ErrUnsupportedOp is wrapped by every error about an op onnxtrain cannot run.
var ErrUnsupportedOp = errors.New("unsupported op")

// UnbiasedVarAttr is an onnxtrain attribute of BatchNormalization: when 1,
// training mode updates the running variance with the unbiased batch
// variance, as PyTorch does (ONNX uses the population variance). The
// training builder sets it on its own copy of the graph; exported models
// never carry it.
const UnbiasedVarAttr = "onnxtrain_unbiased_var"

// Model is an imported ONNX model: metadata plus the main graph.
type Model struct {
	IRVersion       int64
	Opsets          map[string]int64 // domain ("" for ai.onnx) -> version
	ProducerName    string
	ProducerVersion string
	Domain          string
	ModelVersion    int64
	DocString       string
	Metadata        map[string]string
	Graph           *Graph
	// Functions are model-local functions (FunctionProto), by domain:name.
	Functions map[string]*Function
}

// Opset is the ai.onnx opset version the model imports.
func (m *Model) Opset() int64 {
	if v, ok := m.Opsets[""]; ok {
		return v
	}
	if v, ok := m.Opsets["ai.onnx"]; ok {
		return v
	}
	return 0
}

// Function is a model-local function: a graph body with formal inputs,
// outputs and attribute names, expanded inline where it is called.
type Function struct {
	Name, Domain string
	Inputs       []string
	Outputs      []string
	AttrNames    []string
	AttrDefaults map[string]*Attr
	Nodes        []*Node
	Opsets       map[string]int64
}

// Dim is one dimension of a (possibly symbolic) shape: a fixed Value, or a
// named Param such as "batch", or unknown when both are empty.
type Dim struct {
	Value int64
	Param string
	Known bool
}

func (d Dim) String() string {
	switch {
	case d.Known:
		return fmt.Sprint(d.Value)
	case d.Param != "":
		return d.Param
	}
	return "?"
}

// TypeKind says whether a value is a tensor, a sequence, an optional, ...
type TypeKind int

// The value kinds of ONNX's TypeProto.
const (
	KindTensor TypeKind = iota
	KindSequence
	KindMap
	KindOptional
	KindSparseTensor
	KindUnknown
)

// Type is a value's ONNX type. For tensors, Shape is nil when the rank is
// unknown. For sequences and optionals, Elem is the element type.
type Type struct {
	Kind     TypeKind
	DType    DType
	Shape    []Dim
	HasShape bool
	Elem     *Type
}

func (t *Type) String() string {
	if t == nil {
		return "?"
	}
	switch t.Kind {
	case KindSequence:
		return "seq(" + t.Elem.String() + ")"
	case KindOptional:
		return "optional(" + t.Elem.String() + ")"
	case KindMap:
		return "map"
	case KindSparseTensor:
		return "sparse " + t.DType.String()
	case KindUnknown:
		return "?"
	}
	s := t.DType.String()
	if !t.HasShape {
		return s + "[?]"
	}
	s += "["
	for i, d := range t.Shape {
		if i > 0 {
			s += ","
		}
		s += d.String()
	}
	return s + "]"
}

// ValueInfo names a graph value and gives its declared type.
type ValueInfo struct {
	Name string
	Type *Type
}

// AttrType tells which field of an Attr is set. Values follow ONNX's
// AttributeProto.AttributeType.
type AttrType int32

// Attribute kinds.
const (
	AttrUndefined AttrType = 0
	AttrFloat     AttrType = 1
	AttrInt       AttrType = 2
	AttrString    AttrType = 3
	AttrTensor    AttrType = 4
	AttrGraph     AttrType = 5
	AttrFloats    AttrType = 6
	AttrInts      AttrType = 7
	AttrStrings   AttrType = 8
	AttrTensors   AttrType = 9
	AttrGraphs    AttrType = 10
	AttrSparse    AttrType = 11
	AttrTypeProto AttrType = 13
)

// Attr is a node attribute.
type Attr struct {
	Name    string
	Type    AttrType
	F       float32
	I       int64
	S       string
	T       *Tensor
	G       *Graph
	Floats  []float32
	Ints    []int64
	Strings []string
	Tensors []*Tensor
	Graphs  []*Graph
	TP      *Type
	// RefAttrName is set inside function bodies: the attribute takes the
	// value of the caller's attribute of that name.
	RefAttrName string
}

// Node is one operator application. Inputs and Outputs are value names; an
// empty name is an omitted optional input or output.
type Node struct {
	Name    string
	OpType  string
	Domain  string
	Inputs  []string
	Outputs []string
	Attrs   map[string]*Attr
}

// Graph is a list of nodes over named values. Initializers are constant
// tensors (weights); an initializer that is also a graph input is a default
// value the caller may override.
type Graph struct {
	Name         string
	Nodes        []*Node
	Inputs       []*ValueInfo
	Outputs      []*ValueInfo
	ValueInfo    map[string]*ValueInfo
	Initializers map[string]*Tensor
	// InitOrder keeps the file's initializer order, for stable output.
	InitOrder []string
	// SparseInitializers names initializers that were sparse in the file
	// (they are densified on import).
	SparseInitializers []string
}

// NewGraph returns an empty graph ready to be filled.
func NewGraph(name string) *Graph {
	return &Graph{Name: name, ValueInfo: map[string]*ValueInfo{}, Initializers: map[string]*Tensor{}}
}

// Label is how errors name a node: its name when it has one, else its first output.
func (n *Node) Label() string {
	if n.Name != "" {
		return n.Name
	}
	if len(n.Outputs) > 0 {
		return n.Outputs[0]
	}
	return "?"
}

// Errorf builds an error that names the node and op type.
func (n *Node) Errorf(format string, args ...any) error {
	return fmt.Errorf("node %q (%s): %w", n.Label(), n.OpType, fmt.Errorf(format, args...))
}

// Attr returns the attribute or nil.
func (n *Node) Attr(name string) *Attr {
	if n.Attrs == nil {
		return nil
	}
	return n.Attrs[name]
}

// AttrInt returns an int attribute or def when absent.
func (n *Node) AttrInt(name string, def int64) int64 {
	if a := n.Attr(name); a != nil {
		return a.I
	}
	return def
}

// AttrFloat returns a float attribute or def when absent.
func (n *Node) AttrFloat(name string, def float32) float32 {
	if a := n.Attr(name); a != nil {
		return a.F
	}
	return def
}

// AttrString returns a string attribute or def when absent.
func (n *Node) AttrString(name string, def string) string {
	if a := n.Attr(name); a != nil {
		return a.S
	}
	return def
}

// AttrInts returns an ints attribute, or def when absent.
func (n *Node) AttrInts(name string, def []int64) []int64 {
	if a := n.Attr(name); a != nil {
		return a.Ints
	}
	return def
}

// AttrFloats returns a floats attribute, or def when absent.
func (n *Node) AttrFloats(name string, def []float32) []float32 {
	if a := n.Attr(name); a != nil {
		return a.Floats
	}
	return def
}

// HasAttr reports whether the attribute is present.
func (n *Node) HasAttr(name string) bool { return n.Attr(name) != nil }

// SetAttr sets (or replaces) an attribute.
func (n *Node) SetAttr(a *Attr) {
	if n.Attrs == nil {
		n.Attrs = map[string]*Attr{}
	}
	n.Attrs[a.Name] = a
}

// Input returns the i-th input name, or "" if absent.
func (n *Node) Input(i int) string {
	if i < len(n.Inputs) {
		return n.Inputs[i]
	}
	return ""
}

// IntsToInt converts attribute ints to []int.
func IntsToInt(v []int64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// InputNames lists the graph's declared inputs that are not initializers:
// what a caller must feed.
func (g *Graph) InputNames() []string {
	var out []string
	for _, in := range g.Inputs {
		if _, ok := g.Initializers[in.Name]; !ok {
			out = append(out, in.Name)
		}
	}
	return out
}

// OutputNames lists the graph outputs.
func (g *Graph) OutputNames() []string {
	out := make([]string, len(g.Outputs))
	for i, o := range g.Outputs {
		out[i] = o.Name
	}
	return out
}

// Producers maps each value name to the node that produces it.
func (g *Graph) Producers() map[string]*Node {
	m := map[string]*Node{}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o != "" {
				m[o] = n
			}
		}
	}
	return m
}

// SortedInitializerNames returns initializer names in file order, then any
// added later in lexical order.
func (g *Graph) SortedInitializerNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range g.InitOrder {
		if _, ok := g.Initializers[n]; ok && !seen[n] {
			out = append(out, n)
			seen[n] = true
		}
	}
	var rest []string
	for n := range g.Initializers {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// OuterScopeNames lists the values a subgraph uses that it neither defines
// nor takes as input: the names it captures from enclosing graphs.
func (g *Graph) OuterScopeNames() []string {
	defined := map[string]bool{"": true}
	for _, in := range g.Inputs {
		defined[in.Name] = true
	}
	for n := range g.Initializers {
		defined[n] = true
	}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			defined[o] = true
		}
	}
	seen := map[string]bool{}
	var out []string
	add := func(name string) {
		if !defined[name] && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			add(in)
		}
		for _, a := range n.Attrs {
			for _, sg := range a.subgraphs() {
				for _, name := range sg.OuterScopeNames() {
					add(name)
				}
			}
		}
	}
	for _, o := range g.Outputs {
		add(o.Name)
	}
	return out
}

func (a *Attr) subgraphs() []*Graph {
	if a.G != nil {
		return []*Graph{a.G}
	}
	return a.Graphs
}

// Subgraphs returns the graphs held by a node's attributes (If, Loop, Scan).
func (n *Node) Subgraphs() []*Graph {
	var out []*Graph
	for _, a := range n.Attrs {
		out = append(out, a.subgraphs()...)
	}
	return out
}
