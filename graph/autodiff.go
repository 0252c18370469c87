package graph

import (
	"errors"
	"fmt"
	"sort"
)

// ErrNoGradient is wrapped by errors about a node on the path from the
// parameters to the loss whose op has no gradient rule.
var ErrNoGradient = errors.New("no gradient rule")

// InternalDomain holds the ops onnxtrain adds itself (gradient helpers).
// Backends implement them like any other op.
const InternalDomain = "onnxtrain"

// GradRule emits the nodes that compute the gradients of n's inputs from the
// gradients of its outputs. dy[i] is the gradient of output i, or "" when
// no gradient flows into that output. The rule returns one name per input
// of n: the gradient of that input, or "" when the input gets none (integer
// inputs such as indices and shapes, or inputs NeedsGrad says are not
// needed). Rules emit with b and may read any forward value by name.
type GradRule func(b *GradBuilder, n *Node, dy []string) ([]string, error)

// GradBuilder is a Builder with what gradient rules need besides emitting.
type GradBuilder struct {
	*Builder
	needs    map[string]bool
	constant func(name string) *Tensor
}

// Constant returns the value of a forward name that is constant in the
// graph being differentiated (an initializer that is neither a graph input
// nor differentiated, or a Constant node's output), or nil. Rules may use it
// to leave out work a constant makes trivial, as long as the result stays
// the same bit for bit.
func (b *GradBuilder) Constant(name string) *Tensor {
	if b.constant == nil || name == "" {
		return nil
	}
	return b.constant(name)
}

// NeedsGrad reports whether the gradient of the named forward value is
// wanted (it lies on a path from a parameter to the loss). Rules may skip
// computing gradients that are not needed.
func (b *GradBuilder) NeedsGrad(name string) bool { return name != "" && b.needs[name] }

// SumToShapeOf reduces grad (shaped like the broadcast result) to the shape
// of the forward value like, summing over broadcast dimensions. It is the
// gradient of numpy broadcasting.
func (b *GradBuilder) SumToShapeOf(grad, like string) string {
	return b.Internal("SumToShape", []string{grad, like})
}

// Internal emits one onnxtrain-domain op and returns its output.
func (b *GradBuilder) Internal(op string, inputs []string, attrs ...*Attr) string {
	out := b.Op(op, inputs, attrs...)
	b.Nodes[len(b.Nodes)-1].Domain = InternalDomain
	return out
}

// ScalarLike makes a constant scalar of the same dtype as the forward value
// name, via CastLike, so rules work for float32 and float64 alike.
func (b *GradBuilder) ScalarLike(v float64, like string) string {
	c := b.Const(Scalar(Float64, v))
	return b.Op("CastLike", []string{c, like})
}

var gradRules = map[string]GradRule{}

// RegisterGrad adds the gradient rule of an op. The key is the op type for
// ai.onnx ops and "onnxtrain.Op" for internal ones. Registering an op twice
// is a programming error and panics (at init time).
func RegisterGrad(op string, rule GradRule) {
	if _, dup := gradRules[op]; dup {
		panic("graph: RegisterGrad called twice for " + op)
	}
	gradRules[op] = rule
}

// HasGrad reports whether an op (of node n's domain) has a gradient rule.
func HasGrad(domain, op string) bool {
	_, ok := gradRules[gradKey(domain, op)]
	return ok
}

func gradKey(domain, op string) string {
	if domain == "" || domain == "ai.onnx" {
		return op
	}
	return domain + "." + op
}

// GradOps lists the ops with gradient rules.
func GradOps() []string {
	var out []string
	for k := range gradRules {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Gradients appends to g the nodes computing the gradient of y with respect
// to each of xs, seeded with seed (a value shaped like y; "" means ones, so
// y should be a scalar). It returns, per x, the name of its gradient; a
// parameter y does not depend on gets a zero tensor shaped like it.
//
// Only nodes on a path from some x to y are differentiated. A node on such a
// path whose op has no rule is an error naming the node (ErrNoGradient).
func Gradients(g *Graph, y string, xs []string, seed string, opset int64) ([]string, error) {
	return gradients(g, []string{y}, []string{seed}, xs, "grad", opset)
}

// GradientsOf is Gradients for several targets at once: ys[i] is seeded
// with seeds[i] (a value shaped like it; "" leaves that target out), as if
// differentiating the sum over i of <ys[i], seeds[i]>. The nodes it appends
// take fresh names under prefix, which must not be the prefix of any other
// name in g.
func GradientsOf(g *Graph, ys, seeds, xs []string, prefix string, opset int64) ([]string, error) {
	if len(ys) != len(seeds) {
		return nil, fmt.Errorf("graph: %d gradient targets with %d seeds", len(ys), len(seeds))
	}
	var ty, ts []string
	for i, y := range ys {
		if seeds[i] != "" {
			ty, ts = append(ty, y), append(ts, seeds[i])
		}
	}
	return gradients(g, ty, ts, xs, prefix, opset)
}

func gradients(g *Graph, ys, seeds, xs []string, prefix string, opset int64) ([]string, error) {
	producer := map[string]*Node{}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o != "" {
				producer[o] = n
			}
		}
	}
	// Values that depend on some x.
	fromX := map[string]bool{}
	for _, x := range xs {
		fromX[x] = true
	}
	for _, n := range g.Nodes {
		if valueIndependent(n) {
			continue // its outputs do not vary with its inputs' values
		}
		dep := false
		for _, in := range n.Inputs {
			if fromX[in] {
				dep = true
				break
			}
		}
		if dep {
			for _, o := range n.Outputs {
				fromX[o] = true
			}
		}
	}
	// Nodes y depends on.
	toY := map[*Node]bool{}
	stack := append([]string{}, ys...)
	seen := map[string]bool{}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[v] {
			continue
		}
		seen[v] = true
		if n := producer[v]; n != nil && !toY[n] {
			toY[n] = true
			stack = append(stack, n.Inputs...)
		}
	}
	for _, y := range ys {
		if _, ok := producer[y]; !ok && !fromX[y] {
			if _, isInit := g.Initializers[y]; !isInit {
				found := false
				for _, in := range g.Inputs {
					found = found || in.Name == y
				}
				if !found {
					return nil, fmt.Errorf("graph: gradient target %q is not a value of the graph", y)
				}
			}
		}
	}
	// needs: values on a path x -> y.
	needs := map[string]bool{}
	for _, x := range xs {
		needs[x] = true
	}
	var path []*Node
	for _, n := range g.Nodes {
		if !toY[n] {
			continue
		}
		on := false
		for _, in := range n.Inputs {
			if fromX[in] {
				on = true
				needs[in] = true
			}
		}
		if on {
			path = append(path, n)
			for _, o := range n.Outputs {
				needs[o] = true
			}
		}
	}
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	constant := func(name string) *Tensor {
		for hops := 0; hops < 8; hops++ { // through Identity nodes (how Constant nodes are imported)
			if fromX[name] || isInput[name] {
				return nil
			}
			if t, ok := g.Initializers[name]; ok {
				return t
			}
			n := producer[name]
			switch {
			case n == nil || !isPlain(n) || len(n.Outputs) != 1:
				return nil
			case n.OpType == "Constant":
				if a := n.Attr("value"); a != nil {
					return a.T
				}
				return nil
			case n.OpType == "Identity" && len(n.Inputs) == 1:
				name = n.Inputs[0]
			default:
				return nil
			}
		}
		return nil
	}
	b := &GradBuilder{Builder: NewBuilder(prefix, opset), needs: needs, constant: constant}
	contrib := map[string][]string{}
	for i, y := range ys {
		seed := seeds[i]
		if seed == "" {
			seed = b.Op("ConstantOfShape", []string{b.Op("Shape", []string{y})},
				TensorAttr("value", FromFloat32([]float32{1}, 1)))
			seed = b.Op("CastLike", []string{seed, y})
		}
		contrib[y] = append(contrib[y], seed)
	}
	total := func(v string) string {
		c := contrib[v]
		switch len(c) {
		case 0:
			return ""
		case 1:
			return c[0]
		}
		// Sum in a fixed order so results do not depend on map order.
		s := c[0]
		for _, t := range c[1:] {
			s = b.Op("Add", []string{s, t})
		}
		contrib[v] = []string{s}
		return s
	}
	for i := len(path) - 1; i >= 0; i-- {
		n := path[i]
		dy := make([]string, len(n.Outputs))
		any := false
		for j, o := range n.Outputs {
			if o != "" {
				dy[j] = total(o)
				any = any || dy[j] != ""
			}
		}
		if !any {
			continue
		}
		rule, ok := gradRules[gradKey(n.Domain, n.OpType)]
		if !ok {
			return nil, n.Errorf("%w: %s cannot be differentiated yet", ErrNoGradient, n.OpType)
		}
		dx, err := rule(b, n, dy)
		if err != nil {
			return nil, n.Errorf("gradient: %w", err)
		}
		if len(dx) > len(n.Inputs) {
			return nil, n.Errorf("gradient rule returned %d gradients for %d inputs", len(dx), len(n.Inputs))
		}
		for j, d := range dx {
			in := n.Inputs[j]
			if d == "" || !needs[in] {
				continue
			}
			contrib[in] = append(contrib[in], d)
		}
	}
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = total(x)
		if out[i] == "" {
			// y does not depend on x: its gradient is zero.
			out[i] = b.Op("Mul", []string{x, b.ScalarLike(0, x)})
		}
	}
	g.Nodes = append(g.Nodes, b.Nodes...)
	for k, v := range b.Consts {
		g.Initializers[k] = v
	}
	return out, nil
}

// valueIndependentOps are ops whose outputs depend on their inputs' shapes,
// dtypes or truth values only (integer or bool results, or values drawn
// from attributes): nothing computed from them carries a gradient back. A
// mask built from Shape(x) (ConstantOfShape, ScatterND, Where, as
// torchvision's Swin exports its shifted-window mask) is then a constant
// to autodiff, however its ops would be differentiated.
var valueIndependentOps = map[string]bool{
	"Shape": true, "Size": true, "ConstantOfShape": true, "EyeLike": true,
	"RandomNormalLike": true, "RandomUniformLike": true, "Bernoulli": true, "Multinomial": true,
	"ArgMax": true, "ArgMin": true, "NonZero": true, "IsNaN": true, "IsInf": true,
	"Equal": true, "Less": true, "LessOrEqual": true, "Greater": true, "GreaterOrEqual": true,
	"Not": true, "And": true, "Or": true, "Xor": true,
}

// valueIndependent reports whether n is an ai.onnx op of valueIndependentOps.
func valueIndependent(n *Node) bool {
	return (n.Domain == "" || n.Domain == "ai.onnx") && valueIndependentOps[n.OpType]
}

// ExpandGradientOps replaces every ai.onnx.preview.training Gradient node
// by the backward nodes that compute it, so models that ask for gradients
// in the graph run on any backend.
func ExpandGradientOps(g *Graph, opset int64) error {
	var kept []*Node
	var grads []*Node
	for _, n := range g.Nodes {
		if n.OpType == "Gradient" && n.Domain == "ai.onnx.preview.training" {
			grads = append(grads, n)
			continue
		}
		kept = append(kept, n)
	}
	if len(grads) == 0 {
		return nil
	}
	g.Nodes = kept
	for _, n := range grads {
		xsAttr := n.Attr("xs")
		y := n.AttrString("y", "")
		if xsAttr == nil || y == "" {
			return n.Errorf("needs the xs and y attributes")
		}
		if len(xsAttr.Strings) != len(n.Outputs) {
			return n.Errorf("has %d outputs for %d xs", len(n.Outputs), len(xsAttr.Strings))
		}
		names, err := Gradients(g, y, xsAttr.Strings, "", opset)
		if err != nil {
			return err
		}
		for i, o := range n.Outputs {
			if o != "" {
				g.Nodes = append(g.Nodes, &Node{Name: n.Label() + "/out" + fmt.Sprint(i), OpType: "Identity", Inputs: []string{names[i]}, Outputs: []string{o}})
			}
		}
	}
	return TopoSort(g)
}
