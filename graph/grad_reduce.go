package graph

// Gradient rules of the reductions. The reduced axes come from the node's
// attribute or from its axes input (opset-dependent); the internal op
// UnreduceTo(dy, x[, axes]) with the node's keepdims, noop_with_empty_axes
// and axes attributes puts the reduced dims back and broadcasts dy to x's
// shape, so rules need no static shapes.

func init() {
	RegisterGrad("ReduceSum", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		return reduceGrads(n, unreduce(b, n, dy[0])), nil
	})
	RegisterGrad("ReduceMean", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		x, y := n.Inputs[0], n.Outputs[0]
		full := unreduce(b, n, dy[0])
		count := b.Op("Div", []string{b.Op("CastLike", []string{b.Op("Size", []string{x}), x}),
			b.Op("CastLike", []string{b.Op("Size", []string{y}), x})})
		return reduceGrads(n, b.Op("Div", []string{full, count})), nil
	})
	extremum := func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		x := n.Inputs[0]
		full := unreduce(b, n, dy[0])
		yFull := unreduceValue(b, n, n.Outputs[0])
		mask := b.Op("Equal", []string{x, yFull})
		return reduceGrads(n, b.Op("Where", []string{mask, full, b.ScalarLike(0, x)})), nil
	}
	RegisterGrad("ReduceMax", extremum)
	RegisterGrad("ReduceMin", extremum)
	RegisterGrad("ReduceProd", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		// d prod / d x_i = prod / x_i (inputs without zeros).
		x := n.Inputs[0]
		full := unreduce(b, n, dy[0])
		yFull := unreduceValue(b, n, n.Outputs[0])
		return reduceGrads(n, b.Op("Mul", []string{full, b.Op("Div", []string{yFull, x})})), nil
	})
}

// unreduce emits UnreduceTo(v, x[, axes]) for reduction node n.
func unreduce(b *GradBuilder, n *Node, v string) string {
	inputs := []string{v, n.Inputs[0]}
	if len(n.Inputs) > 1 && n.Inputs[1] != "" {
		inputs = append(inputs, n.Inputs[1])
	}
	var attrs []*Attr
	for _, name := range []string{"keepdims", "noop_with_empty_axes", "axes"} {
		if a := n.Attr(name); a != nil {
			attrs = append(attrs, a)
		}
	}
	return b.Internal("UnreduceTo", inputs, attrs...)
}

// unreduceValue broadcasts a forward reduction result back to x's shape.
func unreduceValue(b *GradBuilder, n *Node, y string) string { return unreduce(b, n, y) }

func reduceGrads(n *Node, dx string) []string {
	out := make([]string, len(n.Inputs))
	out[0] = dx
	return out
}
