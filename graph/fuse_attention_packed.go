package graph

import "slices"

// AttentionSoftmaxGradConcat is AttentionSoftmaxGrad whose three gradients
// are written side by side into one output, the layout of the packed
// in-projection they flow back into (nn.MultiheadAttention's q, k and v
// are three slices of one product, so FuseSliceGradConcat joins their
// gradients with a Concat):
//
//	AttentionSoftmaxGradConcat(dO, P, V, Q, K) = Y,
//	Y = Concat(Reshape(dQ, S), Reshape(dK, S), Reshape(dV, S), axis=-1)
//
// where dQ, dK and dV are AttentionSoftmaxGrad's outputs (same inputs and
// attributes) and S is the int attribute "shape" (Y's shape) with its last
// dimension divided by 3. A kernel writes each head's gradient rows where
// Y keeps them instead of writing three tensors that a Concat copies.
const AttentionSoftmaxGradConcat = "AttentionSoftmaxGradConcat"

func init() {
	fusedInferRules[AttentionSoftmaxGradConcat] = inferAttentionSoftmaxGradConcat
}

// FuseAttentionGradConcat rewrites Concat(Reshape(dQ), Reshape(dK),
// Reshape(dV)) along the last axis, where dQ, dK and dV are, in this order,
// the three outputs of one AttentionSoftmaxGrad, each read by its Reshape
// alone, every Reshape read by the Concat alone and all three reshaped to
// one shape, into one AttentionSoftmaxGradConcat in the place of the
// AttentionSoftmaxGrad. It needs a specialised graph (the Concat's shape
// known). The nodes are not changed (they may be shared with the graph
// this one was specialised from). It returns the number of rewrites.
func FuseAttentionGradConcat(g *Graph) int {
	readers := readCounts(g)
	producer := g.Producers()
	replace := map[*Node]*Node{}
	drop := map[*Node]bool{}
	fused := 0
	for _, c := range g.Nodes {
		if c.OpType != "Concat" || !isPlain(c) || len(c.Inputs) != 3 || len(c.Outputs) != 1 || c.Outputs[0] == "" {
			continue
		}
		yShape, dt, ok := knownTensorType(g, c.Outputs[0])
		r := len(yShape)
		if !ok || dt != Float32 || r == 0 || yShape[r-1]%3 != 0 {
			continue
		}
		if axis := c.AttrInt("axis", 0); axis != int64(r-1) && axis != -1 {
			continue
		}
		part := slices.Clone(yShape)
		part[r-1] /= 3
		grad, reshapes := joinedGradients(g, c.Inputs, part, readers, producer)
		if grad == nil || replace[grad] != nil {
			continue
		}
		f := copyNode(grad)
		f.OpType = AttentionSoftmaxGradConcat
		f.Outputs = []string{c.Outputs[0]}
		f.Attrs["shape"] = IntsAttr("shape", dims64(yShape)...)
		replace[grad] = f
		drop[c] = true
		for _, rs := range reshapes {
			drop[rs] = true
		}
		fused++
	}
	replaceAndRemove(g, replace, drop) // nothing to do when nothing fused
	return fused
}

// joinedGradients checks that the values joined are Reshapes, to shape
// part, of dQ, dK and dV of one AttentionSoftmaxGrad in that order, each
// read once, and returns that node and the Reshapes, or nil.
func joinedGradients(g *Graph, joined []string, part []int, readers map[string]int, producer map[string]*Node) (grad *Node, reshapes []*Node) {
	for i, in := range joined {
		rs := producer[in]
		if rs == nil || rs.OpType != "Reshape" || !isPlain(rs) || readers[in] != 1 || len(rs.Inputs) < 1 {
			return nil, nil
		}
		if s, _, ok := knownTensorType(g, in); !ok || !slices.Equal(s, part) {
			return nil, nil
		}
		src := rs.Inputs[0]
		p := producer[src]
		if p == nil || p.Domain != FusedDomain || p.OpType != AttentionSoftmaxGrad || len(p.Outputs) != 3 ||
			p.Outputs[i] != src || readers[src] != 1 || (grad != nil && p != grad) {
			return nil, nil
		}
		grad, reshapes = p, append(reshapes, rs)
	}
	return grad, reshapes
}

// dims64 is a static shape as an ints attribute holds it.
func dims64(shape []int) []int64 {
	out := make([]int64, len(shape))
	for i, d := range shape {
		out[i] = int64(d)
	}
	return out
}

// inferAttentionSoftmaxGradConcat: Y has the "shape" attribute's shape
// and dO's type; the attribute must hold three gradients of the inputs'
// sizes.
func inferAttentionSoftmaxGradConcat(c *inferCall) error {
	n := c.n
	shape := n.AttrInts("shape", nil)
	if len(shape) == 0 || shape[len(shape)-1]%3 != 0 {
		return c.errorf("attribute shape %v must have a last dimension divisible by 3", shape)
	}
	out := make([]Dim, len(shape))
	for i, d := range shape {
		if d < 0 {
			return c.errorf("attribute shape %v has a negative dimension", shape)
		}
		out[i] = Dim{Value: d, Known: true}
	}
	c.setOut(0, c.dtype(0), out)
	return nil
}

// FuseAttentionPackedQKV makes the attention nodes read q, k and v where
// the in-projection wrote them: an AttentionSoftmax whose three inputs
// are, in order, Reshapes (to one shape) of Slices of one float32 tensor
// X along its last axis, the thirds [0, E), [E, 2E) and [2E, 3E) with step
// 1, each Slice read by its Reshape alone and each Reshape by the node and
// by the gradient node that reads its P (AttentionSoftmaxGrad or
// AttentionSoftmaxGradConcat, as its q, k and v) alone, reads X instead
// (graph.AttnPackedQKV, the Reshapes' shape), and so does that gradient
// node: nn.MultiheadAttention's q, k and v are no longer copied out of
// the packed projection. It needs a specialised graph (shapes known, the
// Slices' bounds constant). The nodes are not changed (they may be shared
// with the graph this one was specialised from). It returns the number of
// attention nodes rewritten.
func FuseAttentionPackedQKV(g *Graph) int {
	readers := readCounts(g)
	producer := g.Producers()
	constants := graphConstants(g)
	gradOf := map[string]*Node{} // by the P it reads
	for _, n := range g.Nodes {
		if n.Domain == FusedDomain && (n.OpType == AttentionSoftmaxGrad || n.OpType == AttentionSoftmaxGradConcat) && len(n.Inputs) == 5 {
			gradOf[n.Inputs[1]] = n
		}
	}
	replace := map[*Node]*Node{}
	drop := map[*Node]bool{}
	fused := 0
	for _, f := range g.Nodes {
		if f.Domain != FusedDomain || f.OpType != AttentionSoftmax || len(f.Inputs) != 3 || f.Attr(AttnPackedQKV) != nil {
			continue
		}
		var grad *Node
		if len(f.Outputs) > 1 && f.Outputs[1] != "" {
			grad = gradOf[f.Outputs[1]]
		}
		want := 1
		if grad != nil {
			if gq := AttentionQKV(grad.OpType); grad.Inputs[gq[0]] != f.Inputs[0] || grad.Inputs[gq[1]] != f.Inputs[1] ||
				grad.Inputs[gq[2]] != f.Inputs[2] || grad.Attr(AttnPackedQKV) != nil {
				continue
			}
			want = 2
		}
		x, part, cut := packedSlices(g, f.Inputs, want, readers, producer, constants)
		if x == "" {
			continue
		}
		shape := dims64(part)
		for _, n := range []*Node{f, grad} {
			if n == nil {
				continue
			}
			c := copyNode(n)
			c.Inputs = slices.Clone(n.Inputs)
			for i, in := range c.Inputs {
				if slices.Contains(f.Inputs, in) {
					c.Inputs[i] = x
				}
			}
			c.Attrs[AttnPackedQKV] = IntsAttr(AttnPackedQKV, shape...)
			replace[n] = c
		}
		for _, n := range cut {
			drop[n] = true
		}
		fused++
	}
	replaceAndRemove(g, replace, drop) // nothing to do when nothing fused
	return fused
}

// packedSlices checks that the values qkv are Reshape(Slice(X)) of one
// float32 X as FuseAttentionPackedQKV needs (each read want times) and
// returns X, the Reshapes' shape and the Slice and Reshape nodes, or "".
func packedSlices(g *Graph, qkv []string, want int, readers map[string]int, producer map[string]*Node, constants map[string]*Tensor) (x string, part []int, cut []*Node) {
	for i, name := range qkv {
		rs := producer[name]
		if readers[name] != want || rs == nil || rs.OpType != "Reshape" || !isPlain(rs) || len(rs.Inputs) < 2 || readers[rs.Inputs[0]] != 1 {
			return "", nil, nil
		}
		shape, dt, ok := knownTensorType(g, name)
		if !ok || dt != Float32 || (part != nil && !slices.Equal(part, shape)) {
			return "", nil, nil
		}
		part = shape
		sl := producer[rs.Inputs[0]]
		if sl == nil || sl.OpType != "Slice" || !isPlain(sl) || len(sl.Inputs) < 3 || (x != "" && sl.Inputs[0] != x) {
			return "", nil, nil
		}
		x = sl.Inputs[0]
		xs, xdt, ok := knownTensorType(g, x)
		r := len(xs)
		pn, errP := NumElements(part)
		xn, errX := NumElements(xs)
		if !ok || xdt != Float32 || r == 0 || xs[r-1]%3 != 0 || errP != nil || errX != nil || 3*pn != xn {
			return "", nil, nil
		}
		e := int64(xs[r-1] / 3)
		starts, ok1 := constInts(constants, sl.Inputs[1])
		ends, ok2 := constInts(constants, sl.Inputs[2])
		axis := int64(0)
		if len(sl.Inputs) > 3 && sl.Inputs[3] != "" {
			axes, ok := constInts(constants, sl.Inputs[3])
			if !ok || len(axes) != 1 {
				return "", nil, nil
			}
			axis = axes[0]
		}
		if axis < 0 {
			axis += int64(r)
		}
		if len(sl.Inputs) > 4 && sl.Inputs[4] != "" {
			if steps, ok := constInts(constants, sl.Inputs[4]); !ok || len(steps) != 1 || steps[0] != 1 {
				return "", nil, nil
			}
		}
		// Every row of a part's last axis inside one of X's runs of e:
		// the kernels read a head's rows in place.
		if !ok1 || !ok2 || len(starts) != 1 || len(ends) != 1 || axis != int64(r-1) ||
			starts[0] != int64(i)*e || ends[0] != int64(i+1)*e || len(part) == 0 || part[len(part)-1] == 0 || e%int64(part[len(part)-1]) != 0 {
			return "", nil, nil
		}
		cut = append(cut, sl, rs)
	}
	return x, part, cut
}
