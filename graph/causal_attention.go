package graph

import (
	"math"
	"slices"
)

// A decoder's attention adds a constant causal mask to its scores before
// the Softmax: −inf strictly above the diagonal of the last two axes, 0
// (any finite value) on and below it. Row i of the softmax then holds
// exact zeros in columns j > i, and so do the gradients that SoftmaxGrad
// makes from it; the products that read those matrices multiply half of
// their terms by exact zeros, and the products that make the scores and
// their gradient compute a half that nothing reads in a way that matters.
// MarkCausalAttention finds that structure and tells the products, with
// attributes of PermutedMatMul that a kernel may follow or ignore (the
// result is the same either way):
//
//	lower  (ints):  inputs whose matrices (last two axes, read without a
//	                view) are zero strictly above the diagonal
//	lowerY (int 1): only R's elements on and below the diagonal of its last
//	                two axes are read; a kernel may write fillY (float)
//	                above it instead of the product
//
// and, on the Softmax of the masked scores, one of Softmax:
//
//	maskedX (int 1): X is −inf strictly above the diagonal of its last two
//	                 axes; a kernel may leave those elements unread and
//	                 write their exact result, +0, without computing it
//
// "Zero" here is an exact zero (of either sign): a product that leaves out
// terms a·0 sums the same terms in the same order, which is bit for bit
// the full sum while the other operand is finite (a NaN or infinity there
// would have made a NaN of its row in the full product).

// Attribute names of MarkCausalAttention's hints on PermutedMatMul.
const (
	CausalLowerAttr  = "lower"
	CausalLowerYAttr = "lowerY"
	CausalFillYAttr  = "fillY"
	CausalMaskedAttr = "maskedX"
)

// MarkCausalAttention sets the hints above on the PermutedMatMul nodes
// of causal attention and returns how many nodes it marked. The structure
// starts at Add(X, M) with M a constant causal mask (IsCausalMask) and
// follows:
//
//   - X made by a PermutedMatMul that nothing else reads (and that is no
//     graph output): lowerY with fillY −inf (X + M is −inf above the
//     diagonal whatever finite X holds there);
//   - Softmax(X + M) along the last axis: zero above the diagonal (its
//     rows' maxima lie on or below it, so exp(−inf − max) is exactly 0);
//     the Softmax gets maskedX (X + M is −inf there for any X but +inf
//     or NaN, whose rows the Softmax would make NaN);
//   - Identity of such a value, and Mul or Div by a finite scalar
//     constant (not 0 for Div): zero again;
//   - SoftmaxGrad(dY, Y) along the last axis with Y zero above the
//     diagonal: dX = Y·(dY − Σ dY·Y) is zero there too; and dY made by a
//     PermutedMatMul that nothing else reads: lowerY with fillY 0 (its
//     terms above the diagonal are multiplied by Y's zeros);
//   - a PermutedMatMul that reads such a value's values (not only its
//     shape) without a view: that input in lower.
//
// A causal AttentionSoftmax (AttnCausal) whose gradient was not fused
// starts the structure too: its P is zero above the diagonal, so the
// unfused gradient's products get the hints above.
//
// A mask with a finite large negative value instead of −inf is not
// causal here: its softmax is tiny above the diagonal, not zero. opset
// is the model's (a Softmax without an axis attribute is along the last
// axis from opset 13). Nodes are in topological order; a marked node is
// replaced by a copy.
func MarkCausalAttention(g *Graph, opset int64) int {
	consts := map[string]*Tensor{}
	for name, t := range g.Initializers {
		consts[name] = t
	}
	readers := readCounts(g)
	producer := map[string]*Node{}
	masked := map[string]bool{} // X + causal mask
	zero := map[string]bool{}   // zero strictly above the diagonal
	marked := map[*Node]*Node{} // node → its marked copy
	mark := func(n *Node) *Node {
		if c := marked[n]; c != nil {
			return c
		}
		c := copyNode(n)
		marked[n] = c
		return c
	}
	// markY marks the PermutedMatMul making x, when x is read once and by
	// the node at hand only.
	markY := func(x string, fill float32) {
		p := producer[x]
		if !isPermutedMatMul(p) || readers[x] != 1 {
			return
		}
		c := mark(p)
		c.SetAttr(IntAttr(CausalLowerYAttr, 1))
		c.SetAttr(FloatAttr(CausalFillYAttr, fill))
	}
	lastAxis := func(n *Node) bool {
		a := n.Attr("axis")
		return a != nil && a.Type == AttrInt && a.I == -1 || a == nil && opset >= 13
	}
	for _, n := range g.Nodes {
		plain := isPlain(n) && len(n.Outputs) >= 1 && n.Outputs[0] != ""
		switch {
		case n.OpType == "Constant" && plain && len(n.Outputs) == 1 && n.Attr("value") != nil && n.Attr("value").T != nil:
			consts[n.Outputs[0]] = n.Attr("value").T
		case n.OpType == "Add" && plain && len(n.Inputs) == 2:
			for i, in := range n.Inputs {
				if IsCausalMask(consts[in]) && n.Inputs[1-i] != in {
					markY(n.Inputs[1-i], float32(math.Inf(-1)))
					masked[n.Outputs[0]] = true
					break
				}
			}
		case n.OpType == "Softmax" && plain && len(n.Inputs) == 1 && masked[n.Inputs[0]] && lastAxis(n):
			zero[n.Outputs[0]] = true
			mark(n).SetAttr(IntAttr(CausalMaskedAttr, 1))
		case n.OpType == "Identity" && plain && len(n.Inputs) == 1 && zero[n.Inputs[0]]:
			zero[n.Outputs[0]] = true
		case (n.OpType == "Mul" || n.OpType == "Div") && plain && len(n.Inputs) == 2:
			x, c := n.Inputs[0], n.Inputs[1]
			if n.OpType == "Mul" && !zero[x] {
				x, c = c, x
			}
			if zero[x] && finiteScalar(consts[c], n.OpType == "Div") {
				zero[n.Outputs[0]] = true
			}
		case n.Domain == InternalDomain && n.OpType == "SoftmaxGrad" && len(n.Inputs) == 2 && len(n.Outputs) == 1 &&
			n.Outputs[0] != "" && zero[n.Inputs[1]] && n.AttrInt("axis", 0) == -1:
			zero[n.Outputs[0]] = true
			markY(n.Inputs[0], 0)
		case n.Domain == FusedDomain && n.OpType == AttentionSoftmax && n.AttrInt(AttnCausal, 0) == 1 &&
			len(n.Outputs) > 1 && n.Outputs[1] != "":
			// A causal attention fused without its gradient: its P is
			// zero above the diagonal, for the unfused gradient's nodes.
			zero[n.Outputs[1]] = true
		case isPermutedMatMul(n):
			var lower []int64
			for i, in := range n.Inputs {
				a, f := viewAttrNames(i)
				if zero[in] && n.Attr(a) == nil && n.Attr(f) == nil && permutedReadsValues(n, i) {
					lower = append(lower, int64(i))
				}
			}
			if len(lower) > 0 {
				mark(n).SetAttr(IntsAttr(CausalLowerAttr, lower...))
			}
		}
		for _, o := range n.Outputs {
			if o != "" {
				producer[o] = n
			}
		}
	}
	for i, n := range g.Nodes {
		if c := marked[n]; c != nil {
			g.Nodes[i] = c
		}
	}
	return len(marked)
}

// isPermutedMatMul reports whether n is a PermutedMatMul with one output.
func isPermutedMatMul(n *Node) bool {
	return n != nil && n.Domain == FusedDomain && n.OpType == PermutedMatMul && len(n.Outputs) == 1 && n.Outputs[0] != ""
}

// permutedReadsValues reports whether PermutedMatMul n reads the values of
// input i (the gradients read one operand for its shape only).
func permutedReadsValues(n *Node, i int) bool {
	switch n.AttrInt("grad", 0) {
	case 0:
		return i <= 1
	case 1: // dY·Bᵀ, shaped like A
		return i == 0 || i == 2
	case 2: // Aᵀ·dY, shaped like B
		return i <= 1
	}
	return false
}

// finiteScalar reports whether t is a single finite float (and, with
// nonZero, not zero): multiplying (or dividing) an exact zero by it
// gives an exact zero.
func finiteScalar(t *Tensor, nonZero bool) bool {
	if t == nil || !t.DType.IsFloat() || t.Size() != 1 || t.Validate() != nil {
		return false
	}
	v := t.Float(0)
	return !math.IsInf(v, 0) && !math.IsNaN(v) && (!nonZero || v != 0)
}

// IsCausalMask reports whether t is a float causal mask: of shape
// [1, …, 1, T, T] (T ≥ 1), every element strictly above the diagonal of
// the last two axes −inf, every other element finite. Each element is
// checked.
func IsCausalMask(t *Tensor) bool {
	if t == nil || !t.DType.IsFloat() || t.Rank() < 2 || t.Validate() != nil {
		return false
	}
	r := t.Rank()
	T := t.Shape[r-1]
	if T < 1 || t.Shape[r-2] != T || slices.ContainsFunc(t.Shape[:r-2], func(d int) bool { return d != 1 }) {
		return false
	}
	for i := 0; i < T; i++ {
		for j := 0; j < T; j++ {
			v := t.Float(i*T + j)
			if j > i && !math.IsInf(v, -1) || j <= i && (math.IsInf(v, 0) || math.IsNaN(v)) {
				return false
			}
		}
	}
	return true
}
