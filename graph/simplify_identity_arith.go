package graph

import "math"

// DropIdentityArithmetic removes the arithmetic whose result is exactly one
// of its operands, value for value and bit for bit:
//
//   - Mul(X, C) and Mul(C, X) with every element of C exactly 1;
//   - Div(X, C) with every element of C exactly 1;
//   - Add(X, C) and Add(C, X) with every element of C a negative zero, −0
//     (X + −0 is X for every X, while X + +0 turns a −0 of X into +0, so an
//     Add of +0 stays);
//   - Sub(X, C) with every element of C a positive zero, +0 (X − +0 is
//     X + −0); Sub(X, −0) stays, for the same reason.
//
// C must be a constant (an initializer that is no graph input, or a
// Constant node's value) of a float type, and the node's output must have
// X's known shape and dtype: a C that broadcasts X to a larger shape
// (Mul of a [1, n] X by ones of [m, n]) leaves the node alone, as its
// output is not X. An integer C of 1 (Mul, Div) or 0 (Add, Sub) is exact
// too and removed alike. NaN payloads aside (x·1 may quiet a signalling
// NaN; no op here makes one), the values downstream do not change.
//
// PyTorch's export of torch.baddbmm (nn.MultiheadAttention's attention
// scores) leaves such a Mul(scores, alpha = 1), and autodiff a
// Mul(dScores, 1) beside it. The readers of the removed node's output read
// X instead; where that output is a graph output, or the graph has
// subgraphs (whose reads are not rewired here), the node becomes
// Identity(X). Needs a specialised graph (g.ValueInfo's shapes); nodes are
// in topological order, and the graph's nodes may be shared with another
// graph, so rewired nodes are replaced by copies. It returns the number of
// nodes removed or made Identity.
func DropIdentityArithmetic(g *Graph) int {
	constants := constantInitializers(g)
	isOutput := map[string]bool{}
	for _, o := range g.Outputs {
		isOutput[o.Name] = true
	}
	hasSubgraphs := false
	for _, n := range g.Nodes {
		if len(n.Subgraphs()) > 0 {
			hasSubgraphs = true
			break
		}
	}
	repl := map[string]string{} // a removed output → the operand it equals
	count := 0
	keep := g.Nodes[:0]
	for _, n := range g.Nodes {
		n = rewireInputs(n, repl)
		if n.OpType == "Constant" && isPlain(n) && len(n.Outputs) == 1 {
			if a := n.Attr("value"); a != nil && a.T != nil {
				constants[n.Outputs[0]] = a.T
			}
		}
		x, ok := identityOperand(g, n, constants)
		if !ok {
			keep = append(keep, n)
			continue
		}
		count++
		out := n.Outputs[0]
		if isOutput[out] || hasSubgraphs {
			keep = append(keep, &Node{Name: n.Name, OpType: "Identity", Inputs: []string{x}, Outputs: []string{out}})
			continue
		}
		repl[out] = x
	}
	clear(g.Nodes[len(keep):])
	g.Nodes = keep
	return count
}

// rewireInputs returns n, or a copy of n whose inputs named in repl read
// their replacements.
func rewireInputs(n *Node, repl map[string]string) *Node {
	if len(repl) == 0 {
		return n
	}
	var c *Node
	for i, in := range n.Inputs {
		r, ok := repl[in]
		if !ok {
			continue
		}
		if c == nil {
			cp := *n
			cp.Inputs = append([]string(nil), n.Inputs...)
			c = &cp
		}
		c.Inputs[i] = r
	}
	if c == nil {
		return n
	}
	return c
}

// identityOperand reports whether n (an ai.onnx Mul, Div, Add or Sub with
// one output) computes exactly one of its operands (see
// DropIdentityArithmetic), and which.
func identityOperand(g *Graph, n *Node, constants map[string]*Tensor) (string, bool) {
	if !isPlain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
		return "", false
	}
	var want func(float64) bool
	commutes := false
	switch n.OpType {
	case "Mul":
		want, commutes = func(v float64) bool { return v == 1 }, true
	case "Div":
		want = func(v float64) bool { return v == 1 }
	case "Add":
		want, commutes = func(v float64) bool { return v == 0 && math.Signbit(v) }, true
	case "Sub":
		want = func(v float64) bool { return v == 0 && !math.Signbit(v) }
	default:
		return "", false
	}
	sides := [][2]int{{0, 1}}
	if commutes {
		sides = append(sides, [2]int{1, 0})
	}
	for _, s := range sides {
		x, c := n.Inputs[s[0]], n.Inputs[s[1]]
		if x == "" || x == c {
			continue
		}
		t := constants[c]
		if t == nil || !allElements(t, n.OpType, want) {
			continue
		}
		xs, xd, ok := knownTensorType(g, x)
		if !ok || xd != t.DType {
			continue
		}
		ys, yd, ok := knownTensorType(g, n.Outputs[0])
		if !ok || yd != xd || !SameShape(xs, ys) {
			continue
		}
		return x, true
	}
	return "", false
}

// allElements reports whether t is a non-empty, well-formed float tensor
// whose every element satisfies want, or an integer one whose every element
// is the identity of op (1 for Mul and Div, 0 for Add and Sub: integers
// have no signed zero).
func allElements(t *Tensor, op string, want func(float64) bool) bool {
	if t.Size() == 0 || t.Validate() != nil {
		return false
	}
	switch {
	case t.DType.IsFloat():
		for i := range t.Size() {
			if !want(t.Float(i)) {
				return false
			}
		}
		return true
	case t.DType.IsInt():
		id := int64(0)
		if op == "Mul" || op == "Div" {
			id = 1
		}
		for i := range t.Size() {
			if t.Int(i) != id {
				return false
			}
		}
		return true
	}
	return false
}

// constantInitializers are g's initializers that are not also graph
// inputs (a fed input may replace those), by name.
func constantInitializers(g *Graph) map[string]*Tensor {
	constants := map[string]*Tensor{}
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	for name, t := range g.Initializers {
		if !isInput[name] {
			constants[name] = t
		}
	}
	return constants
}

// graphConstants are constantInitializers and the values of g's Constant
// nodes, by name.
func graphConstants(g *Graph) map[string]*Tensor {
	constants := constantInitializers(g)
	for _, n := range g.Nodes {
		if n.OpType == "Constant" && isPlain(n) && len(n.Outputs) == 1 {
			if a := n.Attr("value"); a != nil && a.T != nil {
				constants[n.Outputs[0]] = a.T
			}
		}
	}
	return constants
}
