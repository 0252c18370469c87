package graph

import "slices"

// FuseUpdateGathered rewrites each SGDUpdate (or AdamUpdate) of one tensor X whose
// gradient is a GatherGrad(dY, X, indices) along axis 0 that nothing else
// reads, directly or through Identities read by nothing else and the
// per-tensor ClipGradNorm that reports its norm (an embedding table's,
// updated right after its gradient is final)
// into SGDUpdateGathered(consts, hyper[, skip], indices, X, dY[, B]) (or
// AdamUpdateGathered(consts, hyper[, skip], indices, X, dY, M, V[, MX])): the
// update reads the gathered rows of dY where GatherGrad would have written
// the whole table, mostly zeros, for the update to read back; with the
// ClipGradNorm the fused node takes its max_norm and writes its norm
// (attribute norm=1). The values are the same bits (optimizer_ops.go).
// Nodes are in topological order; it returns the number of updates
// rewritten.
func FuseUpdateGathered(g *Graph) int {
	forms := map[string]string{SGDUpdateOp: SGDUpdateGatheredOp, AdamUpdateOp: AdamUpdateGatheredOp}
	return fuseUpdates(g, forms, func(_ *fuseIndex, _ int, x string, src gradUpdateSource) []string {
		gg := src.producer
		if gg.OpType != "GatherGrad" || gg.Domain != InternalDomain || len(gg.Inputs) != 3 ||
			len(gg.Outputs) != 1 || gg.Inputs[1] != x || gg.Inputs[0] == "" || gg.Inputs[2] == "" {
			return nil
		}
		xs, xd, ok := knownTensorType(g, x)
		if !ok || xd != Float32 || len(xs) == 0 {
			return nil
		}
		if ax := gg.AttrInt("axis", 0); ax != 0 && ax != -int64(len(xs)) {
			return nil
		}
		if _, dd, ok := knownTensorType(g, gg.Inputs[0]); !ok || dd != Float32 {
			return nil
		}
		return []string{gg.Inputs[2], x, gg.Inputs[0]}
	})
}

// fuseUpdates rewrites each update of one tensor X in g whose op has a
// fused form in forms and whose gradient's source (gradSource) match
// accepts, returning the fused node's operands for X and its gradient,
// into that form (replaceUpdate); it returns the number rewritten.
func fuseUpdates(g *Graph, forms map[string]string, match func(ix *fuseIndex, at int, x string, src gradUpdateSource) []string) int {
	ix := newFuseIndex(g)
	fused := 0
	drop := map[*Node]bool{}
	for at, n := range g.Nodes {
		fusedOp := forms[n.OpType]
		if fusedOp == "" || !IsParamUpdate(n) {
			continue
		}
		lay, err := optimizerLayout(n)
		if err != nil || lay.tensors != 1 {
			continue
		}
		lead := lay.updated[0] // X, after consts, hyper[, skip]; then G and the buffers
		src := ix.gradSource(n, at, n.Inputs[lead+1])
		if src.producer == nil {
			continue
		}
		operands := match(ix, at, n.Inputs[lead], src)
		if operands == nil {
			continue
		}
		ix.replaceUpdate(at, lead, fusedOp, src, operands, drop)
		fused++
	}
	removeNodes(g, drop)
	return fused
}

// replaceUpdate puts at position at, in place of the update n there
// (X at input lead, its gradient after it), the fused update fusedOp whose
// inputs are n's scalar inputs, the ClipGradNorm's max_norm if src has
// one, operands (what stands for X and G), then n's buffers; with the
// ClipGradNorm its norm is output 0 and attribute norm=1. The gradient's
// producer and the chain from it to n go into drop.
func (ix *fuseIndex) replaceUpdate(at, lead int, fusedOp string, src gradUpdateSource, operands []string, drop map[*Node]bool) {
	n, clip := ix.g.Nodes[at], src.clip
	ins := append([]string{}, n.Inputs[:lead]...)
	outs := n.Outputs
	attrs := n.Attrs
	if clip != nil {
		ins = append(ins, clip.Inputs[0])
		outs = append([]string{clip.Outputs[0]}, n.Outputs...)
		attrs = map[string]*Attr{"norm": {Name: "norm", Type: AttrInt, I: 1}}
		for k, v := range n.Attrs {
			attrs[k] = v
		}
	}
	ins = append(append(ins, operands...), n.Inputs[lead+2:]...)
	ix.g.Nodes[at] = &Node{Name: n.Name, OpType: fusedOp, Domain: InternalDomain, Inputs: ins,
		Outputs: outs, Attrs: attrs}
	if clip != nil {
		ix.producer[clip.Outputs[0]] = ix.g.Nodes[at]
	}
	drop[src.producer] = true // read by n only, through the chain
	for _, m := range src.chain {
		drop[m] = true
	}
}

// gradUpdateSource is where the gradient an update reads comes from: the
// node that makes it (nil when it does not qualify), the Identities and
// the per-tensor ClipGradNorm between the two, and that ClipGradNorm.
type gradUpdateSource struct {
	producer *Node
	chain    []*Node
	clip     *Node
}

// gradSource follows the gradient gname that update n (at position at)
// reads back to the node that makes it. The gradient's value (the
// program's onnxtrain/grad/NAME) may be an Identity of that node's output,
// and the update may read it through the per-tensor ClipGradNorm that
// reports its norm: each link read by the next only. The producer is nil
// unless its output is read by the chain alone, it comes before n, and the
// ClipGradNorm's norm, if any, is read after n (where a fused node would
// write it).
func (ix *fuseIndex) gradSource(n *Node, at int, gname string) gradUpdateSource {
	var src gradUpdateSource
	reader, gg := n, ix.producer[gname]
walk:
	for gg != nil {
		switch {
		case gg.OpType == "Identity" && isPlain(gg) && len(gg.Inputs) == 1 && len(gg.Outputs) == 1 &&
			ix.onlyReader(gg.Outputs[0]) == reader:
			gname = gg.Inputs[0]
		case src.clip == nil && gg.OpType == ClipGradNormOp && gg.Domain == InternalDomain && len(gg.Inputs) == 2 &&
			len(gg.Outputs) == 2 && gg.Outputs[1] == gname && gg.Outputs[0] != "" && gg.Inputs[0] != "" &&
			ix.onlyReader(gname) == reader:
			src.clip, gname = gg, gg.Inputs[1]
		default:
			break walk
		}
		src.chain = append(src.chain, gg)
		reader, gg = gg, ix.producer[gname]
	}
	if gg == nil || ix.onlyReader(gname) != reader || ix.at[gg] > at || len(gg.Outputs) != 1 || gg.Outputs[0] != gname {
		return gradUpdateSource{}
	}
	if src.clip != nil && slices.ContainsFunc(ix.readAt[src.clip.Outputs[0]], func(r int) bool { return r < at }) {
		return gradUpdateSource{}
	}
	src.producer = gg
	return src
}
