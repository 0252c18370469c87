package graph

// Gradient rules of the elementwise primitives. Binary ops broadcast, so the
// gradient of each operand is reduced back to its shape with SumToShapeOf.

func init() {
	RegisterGrad("Identity", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		return []string{dy[0]}, nil
	})
	RegisterGrad("Add", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		return binaryGrads(b, n, dy[0], dy[0]), nil
	})
	RegisterGrad("Sub", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		var db string
		if b.NeedsGrad(n.Inputs[1]) {
			db = b.Op("Neg", []string{dy[0]})
		}
		return binaryGrads(b, n, dy[0], db), nil
	})
	RegisterGrad("Mul", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		x, y := n.Inputs[0], n.Inputs[1]
		var da, db string
		if b.NeedsGrad(x) {
			da = b.Op("Mul", []string{dy[0], y})
		}
		if b.NeedsGrad(y) {
			db = b.Op("Mul", []string{dy[0], x})
		}
		return binaryGrads(b, n, da, db), nil
	})
	RegisterGrad("Div", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		x, y := n.Inputs[0], n.Inputs[1]
		var da, db string
		if b.NeedsGrad(x) {
			da = b.Op("Div", []string{dy[0], y})
		}
		if b.NeedsGrad(y) {
			// d(x/y)/dy = -out/y
			t := b.Op("Div", []string{n.Outputs[0], y})
			db = b.Op("Neg", []string{b.Op("Mul", []string{dy[0], t})})
		}
		return binaryGrads(b, n, da, db), nil
	})
	RegisterGrad("Pow", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		x, e := n.Inputs[0], n.Inputs[1]
		var da, db string
		if b.NeedsGrad(x) {
			// e * x^(e-1), with the exponent cast to x's type.
			ex := b.Op("CastLike", []string{e, x})
			em1 := b.Op("Sub", []string{ex, b.ScalarLike(1, x)})
			t := b.Op("Mul", []string{ex, b.Op("Pow", []string{x, em1})})
			da = b.Op("Mul", []string{dy[0], t})
		}
		if b.NeedsGrad(e) {
			// out * ln(x)
			t := b.Op("Mul", []string{n.Outputs[0], b.Op("Log", []string{x})})
			db = b.Op("Mul", []string{dy[0], t})
		}
		return binaryGrads(b, n, da, db), nil
	})
	RegisterGrad("Max", minMaxGrad("GreaterOrEqual"))
	RegisterGrad("Min", minMaxGrad("LessOrEqual"))

	unary := func(op string, f func(b *GradBuilder, n *Node, dy string) string) {
		RegisterGrad(op, func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
			return []string{f(b, n, dy[0])}, nil
		})
	}
	x := func(n *Node) string { return n.Inputs[0] }
	y := func(n *Node) string { return n.Outputs[0] }
	unary("Neg", func(b *GradBuilder, n *Node, dy string) string { return b.Op("Neg", []string{dy}) })
	unary("Exp", func(b *GradBuilder, n *Node, dy string) string { return b.Op("Mul", []string{dy, y(n)}) })
	unary("Log", func(b *GradBuilder, n *Node, dy string) string { return b.Op("Div", []string{dy, x(n)}) })
	unary("Sqrt", func(b *GradBuilder, n *Node, dy string) string {
		// dy / (2 sqrt(x))
		return b.Op("Div", []string{dy, b.Op("Mul", []string{y(n), b.ScalarLike(2, y(n))})})
	})
	unary("Reciprocal", func(b *GradBuilder, n *Node, dy string) string {
		// -dy * y^2
		return b.Op("Neg", []string{b.Op("Mul", []string{dy, b.Op("Mul", []string{y(n), y(n)})})})
	})
	unary("Tanh", func(b *GradBuilder, n *Node, dy string) string {
		// dy * (1 - y^2)
		one := b.ScalarLike(1, y(n))
		return b.Op("Mul", []string{dy, b.Op("Sub", []string{one, b.Op("Mul", []string{y(n), y(n)})})})
	})
	unary("Sigmoid", func(b *GradBuilder, n *Node, dy string) string {
		// dy * y * (1 - y)
		one := b.ScalarLike(1, y(n))
		return b.Op("Mul", []string{dy, b.Op("Mul", []string{y(n), b.Op("Sub", []string{one, y(n)})})})
	})
	unary("Erf", func(b *GradBuilder, n *Node, dy string) string {
		// dy * 2/sqrt(pi) * exp(-x^2)
		c := b.ScalarLike(1.1283791670955126, x(n))
		e := b.Op("Exp", []string{b.Op("Neg", []string{b.Op("Mul", []string{x(n), x(n)})})})
		return b.Op("Mul", []string{dy, b.Op("Mul", []string{c, e})})
	})
	unary("Relu", func(b *GradBuilder, n *Node, dy string) string {
		// dy where x > 0, else 0 (PyTorch's convention at 0).
		mask := b.Op("Greater", []string{x(n), b.ScalarLike(0, x(n))})
		return b.Op("Where", []string{mask, dy, b.ScalarLike(0, x(n))})
	})
	unary("Abs", func(b *GradBuilder, n *Node, dy string) string {
		return b.Op("Mul", []string{dy, b.Op("Sign", []string{x(n)})})
	})
	unary("Sin", func(b *GradBuilder, n *Node, dy string) string {
		return b.Op("Mul", []string{dy, b.Op("Cos", []string{x(n)})})
	})
	unary("Cos", func(b *GradBuilder, n *Node, dy string) string {
		return b.Op("Neg", []string{b.Op("Mul", []string{dy, b.Op("Sin", []string{x(n)})})})
	})
	unary("Cast", func(b *GradBuilder, n *Node, dy string) string {
		return b.Op("CastLike", []string{dy, x(n)})
	})
	// Rounding and sign functions are flat almost everywhere.
	for _, op := range []string{"Floor", "Ceil", "Round", "Sign"} {
		unary(op, func(b *GradBuilder, n *Node, dy string) string {
			return b.Op("Mul", []string{dy, b.ScalarLike(0, x(n))})
		})
	}
	RegisterGrad("Where", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		cond, a, c := n.Inputs[0], n.Inputs[1], n.Inputs[2]
		out := []string{"", "", ""}
		zero := b.ScalarLike(0, n.Outputs[0])
		if b.NeedsGrad(a) {
			out[1] = b.SumToShapeOf(b.Op("Where", []string{cond, dy[0], zero}), a)
		}
		if b.NeedsGrad(c) {
			out[2] = b.SumToShapeOf(b.Op("Where", []string{cond, zero, dy[0]}), c)
		}
		return out, nil
	})
	// Comparisons and logic produce booleans: no gradient.
	for _, op := range []string{"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf",
		"Shape", "Size", "ArgMax", "ArgMin", "NonZero", "ConstantOfShape", "RandomUniformLike", "RandomNormalLike"} {
		RegisterGrad(op, func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
			return make([]string, len(n.Inputs)), nil
		})
	}
}

// binaryGrads reduces the raw gradients of a broadcasting binary op to the
// shapes of its operands.
func binaryGrads(b *GradBuilder, n *Node, da, db string) []string {
	out := []string{"", ""}
	if da != "" && b.NeedsGrad(n.Inputs[0]) {
		out[0] = b.SumToShapeOf(da, n.Inputs[0])
	}
	if db != "" && b.NeedsGrad(n.Inputs[1]) {
		out[1] = b.SumToShapeOf(db, n.Inputs[1])
	}
	return out
}

// minMaxGrad routes the gradient of a variadic Max or Min to the inputs that
// attain the result. Ties send the whole gradient to the first such input
// in the two-input case via cmp (>= for Max).
func minMaxGrad(cmp string) GradRule {
	return func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		out := make([]string, len(n.Inputs))
		zero := b.ScalarLike(0, n.Outputs[0])
		if len(n.Inputs) == 1 {
			return []string{dy[0]}, nil
		}
		if len(n.Inputs) != 2 {
			// Each input gets the gradient where it equals the result.
			for i, in := range n.Inputs {
				if !b.NeedsGrad(in) {
					continue
				}
				mask := b.Op("Equal", []string{in, n.Outputs[0]})
				out[i] = b.SumToShapeOf(b.Op("Where", []string{mask, dy[0], zero}), in)
			}
			return out, nil
		}
		a, c := n.Inputs[0], n.Inputs[1]
		mask := b.Op(cmp, []string{a, c})
		if b.NeedsGrad(a) {
			out[0] = b.SumToShapeOf(b.Op("Where", []string{mask, dy[0], zero}), a)
		}
		if b.NeedsGrad(c) {
			out[1] = b.SumToShapeOf(b.Op("Where", []string{mask, zero, dy[0]}), c)
		}
		return out, nil
	}
}
