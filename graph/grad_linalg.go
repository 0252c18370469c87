package graph

import (
	"fmt"
	"slices"
	"strings"
)

// Gradient rules of the matrix products. MatMul's operands may be 1-D or
// batched with numpy broadcasting, which only the run-time shapes reveal,
// so its gradients are the internal ops MatMulGradA(dy, a, b) and
// MatMulGradB(dy, a, b): dY·Bᵀ and Aᵀ·dY per product, summed over the batch
// dims the operand was broadcast along, shaped like the operand. Gemm's
// operands are 2-D, so its gradients are plain MatMul and Transpose. An
// Einsum's gradient with respect to one operand is another Einsum.

func init() {
	RegisterGrad("MatMul", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		x, w := n.Inputs[0], n.Inputs[1]
		out := []string{"", ""}
		if b.NeedsGrad(x) {
			out[0] = b.Internal("MatMulGradA", []string{dy[0], x, w})
		}
		if b.NeedsGrad(w) {
			out[1] = b.Internal("MatMulGradB", []string{dy[0], x, w})
		}
		return out, nil
	})
	RegisterGrad("Gemm", gemmGrad)
	RegisterGrad("Einsum", einsumGrad)
}

// gemmGrad differentiates Y = alpha·op(A)·op(B) + beta·C.
func gemmGrad(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	if len(n.Inputs) < 2 {
		return nil, fmt.Errorf("Gemm needs inputs A and B, has %d inputs", len(n.Inputs))
	}
	a, w := n.Inputs[0], n.Inputs[1]
	transA, transB := n.AttrInt("transA", 0) != 0, n.AttrInt("transB", 0) != 0
	alpha, beta := float64(n.AttrFloat("alpha", 1)), float64(n.AttrFloat("beta", 1))
	g := dy[0]
	t := func(v string) string { return b.Op("Transpose", []string{v}, IntsAttr("perm", 1, 0)) }
	scale := func(v string, s float64) string {
		if s == 1 {
			return v
		}
		return b.Op("Mul", []string{v, b.ScalarLike(s, v)})
	}
	out := make([]string, len(n.Inputs))
	if b.NeedsGrad(a) {
		var d string
		switch {
		case !transA && !transB: // dA = dY·Bᵀ
			d = b.Op("MatMul", []string{g, t(w)})
		case !transA && transB: // dA = dY·B
			d = b.Op("MatMul", []string{g, w})
		case transA && !transB: // dA = B·dYᵀ
			d = b.Op("MatMul", []string{w, t(g)})
		default: // dA = Bᵀ·dYᵀ
			d = b.Op("MatMul", []string{t(w), t(g)})
		}
		out[0] = scale(d, alpha)
	}
	if b.NeedsGrad(w) {
		var d string
		switch {
		case !transA && !transB: // dB = Aᵀ·dY
			d = b.Op("MatMul", []string{t(a), g})
		case transA && !transB: // dB = A·dY
			d = b.Op("MatMul", []string{a, g})
		case !transA && transB: // dB = dYᵀ·A
			d = b.Op("MatMul", []string{t(g), a})
		default: // dB = dYᵀ·Aᵀ
			d = b.Op("MatMul", []string{t(g), t(a)})
		}
		out[1] = scale(d, alpha)
	}
	if len(n.Inputs) > 2 && b.NeedsGrad(n.Inputs[2]) {
		out[2] = b.SumToShapeOf(scale(g, beta), n.Inputs[2])
	}
	return out, nil
}

// einsumGrad differentiates an Einsum. The product is linear in each
// operand, so the gradient of operand i is the Einsum of dY with the other
// operands whose output term is operand i's term. Labels of operand i found
// in no other term (summed out by the forward) get their extents from a
// ones tensor shaped like operand i; dims operand i broadcast are summed
// back with SumToShapeOf. A term that repeats a label (a diagonal) has no
// such form and is an error.
func einsumGrad(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	eq := strings.ReplaceAll(n.AttrString("equation", ""), " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(n.Inputs) {
		return nil, fmt.Errorf("Einsum equation %q has %d input terms for %d inputs", eq, len(terms), len(n.Inputs))
	}
	toks := make([][]string, len(terms))
	for i, term := range terms {
		t, err := einsumLabels(term)
		if err != nil {
			return nil, err
		}
		toks[i] = t
	}
	if !explicit {
		rhs = einsumImplicitOutput(toks)
	}
	outToks, err := einsumLabels(rhs)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(n.Inputs))
	for i, x := range n.Inputs {
		if !b.NeedsGrad(x) {
			continue
		}
		for j, l := range toks[i] {
			if slices.Contains(toks[i][:j], l) {
				return nil, fmt.Errorf("Einsum %q: the gradient of operand %d, whose term %q repeats label %s (a diagonal), is not supported", eq, i, terms[i], l)
			}
		}
		gTerms := []string{rhs}
		gInputs := []string{dy[0]}
		have := map[string]bool{}
		for _, l := range outToks {
			have[l] = true
		}
		for j := range terms {
			if j == i {
				continue
			}
			gTerms = append(gTerms, terms[j])
			gInputs = append(gInputs, n.Inputs[j])
			for _, l := range toks[j] {
				have[l] = true
			}
		}
		for _, l := range toks[i] {
			if !have[l] {
				ones := b.Op("ConstantOfShape", []string{b.Op("Shape", []string{x})},
					TensorAttr("value", FromFloat32([]float32{1}, 1)))
				gTerms = append(gTerms, terms[i])
				gInputs = append(gInputs, b.Op("CastLike", []string{ones, x}))
				break
			}
		}
		g := b.Op("Einsum", gInputs, StringAttr("equation", strings.Join(gTerms, ",")+"->"+terms[i]))
		out[i] = b.SumToShapeOf(g, x)
	}
	return out, nil
}

// einsumLabels splits an Einsum term into its labels: letters and "...".
func einsumLabels(term string) ([]string, error) {
	var out []string
	for i := 0; i < len(term); i++ {
		c := term[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			out = append(out, string(c))
		case strings.HasPrefix(term[i:], "..."):
			out = append(out, "...")
			i += 2
		default:
			return nil, fmt.Errorf("Einsum term %q: unexpected character %q", term, c)
		}
	}
	return out, nil
}

// einsumImplicitOutput is the output term of an equation without "->": the
// ellipsis (if any operand has one), then the letters that occur exactly
// once, in alphabetical (byte) order.
func einsumImplicitOutput(toks [][]string) string {
	count := map[string]int{}
	ellipsis := false
	for _, t := range toks {
		for _, l := range t {
			if l == "..." {
				ellipsis = true
				continue
			}
			count[l]++
		}
	}
	var once []string
	for l, c := range count {
		if c == 1 {
			once = append(once, l)
		}
	}
	slices.Sort(once)
	if ellipsis {
		return "..." + strings.Join(once, "")
	}
	return strings.Join(once, "")
}
