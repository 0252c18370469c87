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
		var grad *Node
		var reshapes [3]*Node
		for i, in := range c.Inputs {
			rs := producer[in]
			if rs == nil || rs.OpType != "Reshape" || !isPlain(rs) || readers[in] != 1 || len(rs.Inputs) < 1 {
				grad = nil
				break
			}
			if s, _, ok := knownTensorType(g, in); !ok || !slices.Equal(s, part) {
				grad = nil
				break
			}
			src := rs.Inputs[0]
			p := producer[src]
			if p == nil || p.Domain != FusedDomain || p.OpType != AttentionSoftmaxGrad || len(p.Outputs) != 3 ||
				p.Outputs[i] != src || readers[src] != 1 || (grad != nil && p != grad) {
				grad = nil
				break
			}
			grad, reshapes[i] = p, rs
		}
		if grad == nil || replace[grad] != nil {
			continue
		}
		shape := make([]int64, r)
		for i, d := range yShape {
			shape[i] = int64(d)
		}
		f := copyNode(grad)
		f.OpType = AttentionSoftmaxGradConcat
		f.Inputs = slices.Clone(grad.Inputs)
		f.Outputs = []string{c.Outputs[0]}
		f.Attrs["shape"] = IntsAttr("shape", shape...)
		replace[grad] = f
		drop[c] = true
		for _, rs := range reshapes {
			drop[rs] = true
		}
		fused++
	}
	if fused == 0 {
		return 0
	}
	replaceAndRemove(g, replace, drop)
	return fused
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
