package graph

import (
	"fmt"
	"sort"
)

// Builder collects the nodes a lowering emits.
type Builder struct {
	Nodes  []*Node
	Consts map[string]*Tensor
	Opset  int64
	prefix string
	count  int
}

// NewBuilder returns a builder whose fresh names start with prefix.
func NewBuilder(prefix string, opset int64) *Builder {
	return &Builder{prefix: prefix, Opset: opset, Consts: map[string]*Tensor{}}
}

// Fresh returns a new value name.
func (b *Builder) Fresh(hint string) string {
	b.count++
	return fmt.Sprintf("%s/%s_%d", b.prefix, hint, b.count)
}

// Const adds a constant and returns its name.
func (b *Builder) Const(t *Tensor) string {
	name := b.Fresh("const")
	b.Consts[name] = t
	return name
}

// Op emits a single-output node and returns the output name.
func (b *Builder) Op(op string, inputs []string, attrs ...*Attr) string {
	out := b.Fresh(op)
	b.OpTo(op, inputs, []string{out}, attrs...)
	return out
}

// OpTo emits a node writing to the given outputs.
func (b *Builder) OpTo(op string, inputs, outputs []string, attrs ...*Attr) {
	n := &Node{Name: b.Fresh(op), OpType: op, Inputs: inputs, Outputs: outputs}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	b.Nodes = append(b.Nodes, n)
}

// IntAttr, FloatAttr, IntsAttr and StringAttr make attributes for Builder.Op.
func IntAttr(name string, v int64) *Attr { return &Attr{Name: name, Type: AttrInt, I: v} }

// FloatAttr makes a float attribute.
func FloatAttr(name string, v float32) *Attr { return &Attr{Name: name, Type: AttrFloat, F: v} }

// IntsAttr makes an ints attribute.
func IntsAttr(name string, v ...int64) *Attr { return &Attr{Name: name, Type: AttrInts, Ints: v} }

// StringAttr makes a string attribute.
func StringAttr(name, v string) *Attr { return &Attr{Name: name, Type: AttrString, S: v} }

// StringsAttr makes a strings attribute.
func StringsAttr(name string, v ...string) *Attr {
	return &Attr{Name: name, Type: AttrStrings, Strings: v}
}

// FloatsAttr makes a floats attribute.
func FloatsAttr(name string, v ...float32) *Attr {
	return &Attr{Name: name, Type: AttrFloats, Floats: v}
}

// TensorAttr makes a tensor attribute.
func TensorAttr(name string, t *Tensor) *Attr { return &Attr{Name: name, Type: AttrTensor, T: t} }

// LowerFunc rewrites n into primitives by emitting nodes into b that write
// n's outputs. It returns ErrUnsupportedOp (wrapped) when the node's
// attributes or inputs take it outside what the lowering covers.
type LowerFunc func(n *Node, b *Builder) error

var lowerings = map[string]LowerFunc{}

// RegisterLowering adds the decomposition of an ai.onnx op.
func RegisterLowering(op string, f LowerFunc) { lowerings[op] = f }

// HasLowering reports whether op has a decomposition.
func HasLowering(op string) bool { _, ok := lowerings[op]; return ok }

// Lowerings lists the ops that have a decomposition.
func Lowerings() []string {
	var out []string
	for k := range lowerings {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Lower decomposes n. ok is false when op has no lowering.
func Lower(n *Node, opset int64) (nodes []*Node, consts map[string]*Tensor, ok bool, err error) {
	f, ok := lowerings[n.OpType]
	if !ok || n.Domain != "" {
		return nil, nil, false, nil
	}
	b := NewBuilder(n.Label(), opset)
	if err := f(n, b); err != nil {
		return nil, nil, true, err
	}
	return b.Nodes, b.Consts, true, nil
}
