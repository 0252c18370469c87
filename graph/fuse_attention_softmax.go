package graph

import (
	"math"
	"slices"
	"strings"
)

// AttentionSoftmax is the fused op of FuseAttentionSoftmax's forward
// rewrite: attention's scores, their Softmax along the last axis and the
// product with the values, one head at a time,
//
//	AttentionSoftmax(Q, K, V) = (O, P),
//	P = Softmax(PermutedMatMul(Q, K; qk.*), axis=-1),
//	O = PermutedMatMul(P, V; pv.*),
//
// where qk.* and pv.* are the two products' PermutedMatMul attributes
// under those prefixes (views, alpha, permY; AttentionProduct rebuilds
// them). A kernel computes one head's T×T scores into a buffer that stays
// in the core's cache, writes its Softmax to P (which the backward pass
// reads; the output may be omitted when nothing does) and multiplies it
// with the head's values while it is still there: the scores are never
// written to memory and P is not read back.
const AttentionSoftmax = "AttentionSoftmax"

// AttentionSoftmaxGrad is the fused op of FuseAttentionSoftmax's backward
// rewrite: the gradients of AttentionSoftmax's three operands,
//
//	AttentionSoftmaxGrad(dO, P, V, Q, K) = (dQ, dK, dV),
//	dP = PermutedMatMul(dO, P, V; dp.*)        (grad 1: dO·Vᵀ)
//	dV = PermutedMatMul(dO, P, V; dv.*)        (grad 2: Pᵀ·dO)
//	dS = SoftmaxGrad(dP, P, axis=-1) · scale   (scale 1 when absent)
//	dQ = PermutedMatMul(dS, Q, K; dq.*)        (grad 1: dS·K)
//	dK = PermutedMatMul(dS, Q, K; dk.*)        (grad 2: dSᵀ·Q)
//
// A kernel computes one head's dP and dS in a buffer that stays in the
// core's cache and reads that head's P once: neither T×T gradient is
// written to memory. With AttnRecomputeP (RecomputeAttentionProbs) P is
// absent and each head's is computed again from Q and K.
const AttentionSoftmaxGrad = "AttentionSoftmaxGrad"

// Attribute-name prefixes of the products inside the attention ops, and
// the scale of dS.
const (
	AttnQK      = "qk."
	AttnPV      = "pv."
	AttnDP      = "dp."
	AttnDV      = "dv."
	AttnDQ      = "dq."
	AttnDK      = "dk."
	AttnDSScale = "scale"
	// AttnCausal (int 1), on AttentionSoftmax: a causal mask is added to
	// the scores before their Softmax (−inf strictly above the diagonal
	// of each head's T×T scores, +0 on and below it; the heads square):
	// P is exactly zero above the diagonal. FuseAttentionSoftmax then
	// also gives the products the hints MarkCausalAttention would have
	// given them unfused (qk.lowerY with qk.fillY −inf, pv.lower; on the
	// gradient dp.lowerY with dp.fillY 0, dv.lower, dq.lower, dk.lower),
	// which a kernel may follow or ignore.
	AttnCausal = "causal"
	// AttnPackedQKV (ints), on AttentionSoftmax and its gradients: q, k
	// and v are one tensor X (inputs 0, 1, 2 of AttentionSoftmax; 3, 4, 2
	// of the gradients) holding them side by side along its last axis,
	// each read as Reshape(Slice(X, [i·E, (i+1)·E) of the last axis), the
	// attribute's shape) with E a third of that axis
	// (FuseAttentionPackedQKV).
	AttnPackedQKV = "packed_qkv"
)

// AttnPackedShape is the shape of each of q, k and v that attention node n
// reads from its packed operand (AttnPackedQKV), or nil when n has no
// packed operand.
func AttnPackedShape(n *Node) []int {
	shape := n.AttrInts(AttnPackedQKV, nil)
	if shape == nil {
		return nil
	}
	dims := make([]int, len(shape))
	for i, d := range shape {
		dims[i] = int(d)
	}
	return dims
}

// AttentionQKV is which inputs of an attention node of type op are its q,
// k and v, in that order: 0, 1, 2 of AttentionSoftmax, 3, 4, 2 of its
// gradients.
func AttentionQKV(op string) [3]int {
	if op == AttentionSoftmax {
		return [3]int{0, 1, 2}
	}
	return [3]int{3, 4, 2}
}

func init() {
	fusedInferRules[AttentionSoftmax] = inferAttentionSoftmax
	fusedInferRules[AttentionSoftmaxGrad] = inferAttentionSoftmaxGrad
}

// AttentionProduct is the PermutedMatMul that the attributes of attention
// op n under prefix describe, reading inputs and writing output (a node
// outside any graph: kernels plan the product with it, shape inference
// infers it).
func AttentionProduct(n *Node, prefix string, inputs []string, output string) *Node {
	sub := &Node{Name: n.Name + "/" + strings.TrimSuffix(prefix, "."), OpType: PermutedMatMul, Domain: FusedDomain,
		Inputs: inputs, Outputs: []string{output}, Attrs: map[string]*Attr{}}
	for k, a := range n.Attrs {
		if name, ok := strings.CutPrefix(k, prefix); ok {
			c := *a
			c.Name = name
			sub.Attrs[name] = &c
		}
	}
	return sub
}

// prefixAttrs copies p's attributes into dst under prefix.
func prefixAttrs(dst map[string]*Attr, prefix string, p *Node) {
	for k, a := range p.Attrs {
		c := *a
		c.Name = prefix + k
		dst[c.Name] = &c
	}
}

// FuseAttentionSoftmax rewrites attention's core into AttentionSoftmax
// and its gradient into AttentionSoftmaxGrad (see both); the gradient only
// where the forward was fused. A constant causal mask added to the scores
// (Add(S, M) read by the Softmax alone, M causal with zeros on and below
// the diagonal, S's heads square and of M's size: a decoder's attention)
// is taken in as AttnCausal, with the products' causal hints; any other
// mask stops both. The forward:
// Softmax along the last axis of a PermutedMatMul's result (grad 0, no
// permY, nothing else reading it), read by a PermutedMatMul as its first
// operand without a view; every other reader of P comes after that
// product. The backward: SoftmaxGrad(dP, P) along the last axis whose dP
// is a PermutedMatMul gradient (grad 1) of P's product that nothing else
// reads, the product's other gradient (grad 2, dV) present, and whose
// result (through a Mul by a scalar constant and Identities, each read
// once) is read exactly by the two gradients (grad 1 and 2) of one
// product of Q and K. The fused node takes the place of the first node
// it replaces (its inputs are all made before it; its outputs' readers
// all come after). Products marked causal are left alone. Nodes are in
// topological order; the graph's nodes may be shared with the graph it
// was specialised from, so no node is changed. It returns the number of
// nodes made.
func FuseAttentionSoftmax(g *Graph, opset int64) int {
	readers := readCounts(g)
	producer := g.Producers()
	pos := make(map[*Node]int, len(g.Nodes))
	users := map[string][]*Node{}
	for i, n := range g.Nodes {
		pos[n] = i
		for j, in := range n.Inputs {
			if in != "" && !slices.Contains(n.Inputs[:j], in) {
				users[in] = append(users[in], n)
			}
		}
	}
	constants := graphConstants(g)
	replace := map[*Node]*Node{}
	drop := map[*Node]bool{}
	// free: none of ns is part of a fusion made already (each is then
	// replaced or dropped).
	free := func(ns ...*Node) bool {
		for _, n := range ns {
			if drop[n] || replace[n] != nil {
				return false
			}
		}
		return true
	}
	made := 0
	fusedP := map[string]bool{} // the P of every forward fused: whether causal
	for _, sm := range g.Nodes {
		if !isPlain(sm) || sm.OpType != "Softmax" || len(sm.Inputs) != 1 || len(sm.Outputs) != 1 || sm.Outputs[0] == "" || !softmaxOnLastAxis(sm, opset) {
			continue
		}
		s, p := sm.Inputs[0], sm.Outputs[0]
		// A causal mask added to the scores: Softmax(Add(S, M)).
		var maskAdd *Node
		if add := producer[s]; add != nil && readers[s] == 1 {
			if x, t, ok := causalMaskAdd(add, constants); ok {
				if !squareHeads(g, x, add, t) {
					continue
				}
				maskAdd, s = add, x
			}
		}
		qk := producer[s]
		if !plainAttentionProduct(qk, 0) || len(qk.Inputs) != 2 || qk.Attr("permY") != nil || readers[s] != 1 {
			continue
		}
		var pv *Node
		for _, u := range users[p] {
			if plainAttentionProduct(u, 0) && len(u.Inputs) == 2 && u.Inputs[0] == p && u.Inputs[1] != p &&
				u.Attr("axes0") == nil && u.Attr("fixed0") == nil && pos[u] > pos[sm] {
				if pv != nil {
					pv = nil
					break
				}
				pv = u
			}
		}
		if pv == nil || !free(qk, sm, pv) || maskAdd != nil && !free(maskAdd) {
			continue
		}
		later := true
		for _, u := range users[p] {
			later = later && (u == pv || pos[u] > pos[pv])
		}
		if !later {
			continue
		}
		outP := p
		if readers[p] == 1 {
			outP = "" // only the product reads P: it stays in the kernel's buffer
		}
		f := &Node{Name: pv.Name, OpType: AttentionSoftmax, Domain: FusedDomain,
			Inputs: []string{qk.Inputs[0], qk.Inputs[1], pv.Inputs[1]}, Outputs: []string{pv.Outputs[0], outP},
			Attrs: map[string]*Attr{}}
		prefixAttrs(f.Attrs, AttnQK, qk)
		prefixAttrs(f.Attrs, AttnPV, pv)
		if maskAdd != nil {
			f.SetAttr(IntAttr(AttnCausal, 1))
			setCausalHints(f, AttnQK, AttnPV)
			drop[maskAdd] = true
		}
		replace[pv] = f
		fusedP[p] = maskAdd != nil
		drop[qk], drop[sm] = true, true
		made++
	}
	for _, sg := range g.Nodes {
		if sg.Domain != InternalDomain || sg.OpType != "SoftmaxGrad" || len(sg.Inputs) != 2 || len(sg.Outputs) != 1 || sg.Outputs[0] == "" ||
			sg.AttrInt("axis", 0) != -1 || sg.AttrInt("coerce", 0) != 0 {
			continue
		}
		dP, p := sg.Inputs[0], sg.Inputs[1]
		causal, ok := fusedP[p]
		if !ok {
			continue // a forward not fused
		}
		dp := producer[dP]
		if !plainAttentionProduct(dp, 1) || len(dp.Inputs) != 3 || dp.Inputs[1] != p || dp.Attr("permY") != nil ||
			dp.Attr("axes1") != nil || dp.Attr("fixed1") != nil || readers[dP] != 1 {
			continue
		}
		dO, v := dp.Inputs[0], dp.Inputs[2]
		var dv *Node
		for _, u := range users[dO] {
			if plainAttentionProduct(u, 2) && len(u.Inputs) == 3 && u.Inputs[0] == dO && u.Inputs[1] == p && u.Inputs[2] == v && free(u) {
				dv = u
				break
			}
		}
		if dv == nil {
			continue
		}
		// dS, through a Mul by a scalar and Identities.
		chain := []*Node{}
		ds := sg.Outputs[0]
		scale := float32(1)
		hasScale := false
		for readers[ds] == 1 && len(users[ds]) == 1 {
			u := users[ds][0]
			if !isPlain(u) || len(u.Outputs) != 1 || u.Outputs[0] == "" {
				break
			}
			if u.OpType == "Identity" && len(u.Inputs) == 1 {
				chain, ds = append(chain, u), u.Outputs[0]
				continue
			}
			if u.OpType == "Mul" && len(u.Inputs) == 2 && !hasScale {
				c := u.Inputs[1]
				if c == ds {
					c = u.Inputs[0]
				}
				if c == ds {
					break
				}
				if t := constants[c]; t != nil && t.DType == Float32 && t.Size() == 1 && t.Validate() == nil {
					scale, hasScale = t.Float32s()[0], true
					chain, ds = append(chain, u), u.Outputs[0]
					continue
				}
			}
			break
		}
		if readers[ds] != 2 || len(users[ds]) != 2 {
			continue
		}
		dq, dk := users[ds][0], users[ds][1]
		if dq.AttrInt("grad", 0) == 2 {
			dq, dk = dk, dq
		}
		if !plainAttentionProduct(dq, 1) || !plainAttentionProduct(dk, 2) || len(dq.Inputs) != 3 || len(dk.Inputs) != 3 ||
			dq.Inputs[0] != ds || dk.Inputs[0] != ds || dq.Inputs[1] != dk.Inputs[1] || dq.Inputs[2] != dk.Inputs[2] ||
			dq.Inputs[1] == ds || dq.Inputs[2] == ds ||
			dq.Attr("axes0") != nil || dq.Attr("fixed0") != nil || dk.Attr("axes0") != nil || dk.Attr("fixed0") != nil {
			continue
		}
		group := append([]*Node{dp, dv, sg, dq, dk}, chain...)
		if !free(group...) {
			continue
		}
		first := dp
		for _, n := range group {
			if pos[n] < pos[first] {
				first = n
			}
		}
		inputs := []string{dO, p, v, dq.Inputs[1], dq.Inputs[2]}
		ready := true
		for _, in := range inputs {
			if pr := producer[in]; pr != nil && pos[pr] >= pos[first] {
				ready = false
			}
		}
		if !ready {
			continue
		}
		f := &Node{Name: sg.Name, OpType: AttentionSoftmaxGrad, Domain: FusedDomain,
			Inputs: inputs, Outputs: []string{dq.Outputs[0], dk.Outputs[0], dv.Outputs[0]}, Attrs: map[string]*Attr{}}
		prefixAttrs(f.Attrs, AttnDP, dp)
		prefixAttrs(f.Attrs, AttnDV, dv)
		prefixAttrs(f.Attrs, AttnDQ, dq)
		prefixAttrs(f.Attrs, AttnDK, dk)
		if hasScale {
			f.SetAttr(&Attr{Name: AttnDSScale, Type: AttrFloat, F: scale})
		}
		if causal {
			setCausalHints(f, AttnDP, AttnDV, AttnDQ, AttnDK)
		}
		for _, n := range group {
			if n != first {
				drop[n] = true
			}
		}
		replace[first] = f
		made++
	}
	if made == 0 {
		return 0
	}
	replaceAndRemove(g, replace, drop)
	return made
}

// causalHints are the hints MarkCausalAttention gives each product of a
// causal attention, by the product's prefix in the fused node: the scores
// are −inf above the diagonal whatever the product writes there; P·V reads
// P, zero above it; dP there is multiplied by P's zeros; dV reads P (its
// input 1), dQ and dK read dS (input 0), zero above it too.
var causalHints = map[string][]*Attr{
	AttnQK: {IntAttr(CausalLowerYAttr, 1), FloatAttr(CausalFillYAttr, float32(math.Inf(-1)))},
	AttnPV: {IntsAttr(CausalLowerAttr, 0)},
	AttnDP: {IntAttr(CausalLowerYAttr, 1), FloatAttr(CausalFillYAttr, 0)},
	AttnDV: {IntsAttr(CausalLowerAttr, 1)},
	AttnDQ: {IntsAttr(CausalLowerAttr, 0)},
	AttnDK: {IntsAttr(CausalLowerAttr, 0)},
}

// setCausalHints gives attention node f's products under the prefixes
// their causalHints.
func setCausalHints(f *Node, prefixes ...string) {
	for _, prefix := range prefixes {
		for _, a := range causalHints[prefix] {
			c := *a
			c.Name = prefix + a.Name
			f.SetAttr(&c)
		}
	}
}

// causalMaskAdd reports whether add is Add(X, M) (either order) with M a
// constant causal mask (IsCausalMask) of T×T that holds zeros on and
// below the diagonal, so that the sum is X there (up to the sign of a
// zero, which no Softmax sees); it returns X and T.
func causalMaskAdd(add *Node, constants map[string]*Tensor) (string, int, bool) {
	if !isPlain(add) || add.OpType != "Add" || len(add.Inputs) != 2 || len(add.Outputs) != 1 || add.Inputs[0] == add.Inputs[1] {
		return "", 0, false
	}
	for i, in := range add.Inputs {
		m := constants[in]
		if !IsCausalMask(m) {
			continue
		}
		t := m.Shape[m.Rank()-1]
		zero := true
		for e := range t * t {
			zero = zero && (e%t > e/t || m.Float(e) == 0)
		}
		if zero {
			return add.Inputs[1-i], t, true
		}
	}
	return "", 0, false
}

// squareHeads reports whether scores s are known to be t×t matrices whose
// sum with add's mask has s's own shape.
func squareHeads(g *Graph, s string, add *Node, t int) bool {
	shape := knownShape(g, s)
	r := len(shape)
	return r >= 2 && shape[r-1] == t && shape[r-2] == t && slices.Equal(knownShape(g, add.Outputs[0]), shape)
}

// plainAttentionProduct reports whether n is a PermutedMatMul with the
// given grad and no causal hints.
func plainAttentionProduct(n *Node, grad int64) bool {
	return isPermutedMatMul(n) && n.AttrInt("grad", 0) == grad &&
		n.Attr(CausalLowerAttr) == nil && n.Attr(CausalLowerYAttr) == nil
}

// softmaxOnLastAxis reports whether Softmax node n normalises along the
// last axis alone: axis -1 (the default from opset 13; before it, the
// default axis 1 flattens the trailing axes).
func softmaxOnLastAxis(n *Node, opset int64) bool {
	if a := n.Attr("axis"); a != nil {
		return a.I == -1
	}
	return opset >= 13
}

// inferAttentionSoftmax: P is the scores' product's shape, O the values'
// product's.
func inferAttentionSoftmax(c *inferCall) error {
	n := c.n
	if len(n.Outputs) == 0 {
		return nil
	}
	p := ""
	if len(n.Outputs) > 1 {
		p = n.Outputs[1]
	}
	if p == "" {
		// Omitted: inferred under a name of its own, then forgotten.
		p = n.Name + "/attention-scores"
		defer delete(c.st.types, p)
	}
	in, done := attentionOperands(c)
	defer done()
	if err := inferPermutedMatMul(&inferCall{st: c.st, n: AttentionProduct(n, AttnQK, []string{in[0], in[1]}, p)}); err != nil {
		return err
	}
	return inferPermutedMatMul(&inferCall{st: c.st, n: AttentionProduct(n, AttnPV, []string{p, in[2]}, n.Outputs[0])})
}

// attentionOperands is the names an attention node's products read: its
// inputs, or, with AttnPackedQKV, in place of the packed tensor as q, k
// and v a name of the attribute's shape known for the call's length (done
// forgets it).
func attentionOperands(c *inferCall) (in []string, done func()) {
	pos := AttentionQKV(c.n.OpType)
	n := c.n
	in = make([]string, max(len(n.Inputs), 5))
	for i := range in {
		in[i] = n.Input(i)
	}
	shape := n.AttrInts(AttnPackedQKV, nil)
	if shape == nil {
		return in, func() {}
	}
	name := n.Name + "/packed-part"
	dims := make([]Dim, len(shape))
	for i, d := range shape {
		dims[i] = Dim{Value: d, Known: true}
	}
	c.st.types[name] = &Type{Kind: KindTensor, DType: c.dtype(pos[0]), Shape: dims, HasShape: true}
	for _, p := range pos {
		in[p] = name
	}
	return in, func() { delete(c.st.types, name) }
}

// inferAttentionSoftmaxGrad: each gradient has its operand's shape.
func inferAttentionSoftmaxGrad(c *inferCall) error {
	n := c.n
	in, done := attentionOperands(c)
	defer done()
	dO, p, v, q, k := in[0], in[1], in[2], in[3], in[4]
	if p == "" && n.AttrInt(AttnRecomputeP, 0) == 1 {
		// P recomputed: its shape is the scores' product's, inferred
		// under a name of its own, then forgotten.
		p = n.Name + "/attention-scores"
		defer delete(c.st.types, p)
		if err := inferPermutedMatMul(&inferCall{st: c.st, n: AttentionProduct(n, AttnQK, []string{q, k}, p)}); err != nil {
			return err
		}
	}
	for i, sub := range []*Node{
		AttentionProduct(n, AttnDQ, []string{dO, q, k}, ""),
		AttentionProduct(n, AttnDK, []string{dO, q, k}, ""),
		AttentionProduct(n, AttnDV, []string{dO, p, v}, ""),
	} {
		if i >= len(n.Outputs) || n.Outputs[i] == "" {
			continue
		}
		sub.Outputs[0] = n.Outputs[i]
		if err := inferPermutedMatMul(&inferCall{st: c.st, n: sub}); err != nil {
			return err
		}
	}
	return nil
}
