package graph

// BatchNormRelu is the fused op of FuseBatchNormRelu:
//
//	BatchNormRelu(X, scale, B, mean, var) = (Relu(Y), outputs 1.. of BatchNormalization)
//
// with (Y, ...) = BatchNormalization(X, scale, B, mean, var) and the
// BatchNormalization's attributes. A backend applies the Relu as it writes
// the normalised values, so Y is never stored.
const BatchNormRelu = "BatchNormRelu"

// BatchNormReluGrad is the fused op of FuseBatchNormRelu:
//
//	BatchNormReluGrad(dR, R, X, scale, mean, var) = BatchNormalizationGrad(ReluGrad(dR, R), X, scale, mean, var)
//
// with the BatchNormalizationGrad's attributes and outputs. A backend
// masks dR with R > 0 as it reads it, so the Relu's gradient is never
// stored.
const BatchNormReluGrad = "BatchNormReluGrad"

// FuseBatchNormRelu rewrites Relu(BatchNormalization(...)) into one
// BatchNormRelu node when the BatchNormalization's first output y is read
// only by that Relu, as the X operand of ReluGrad nodes (run FuseReluGrad
// first) and as the dtype operand of CastLike nodes (the gradient rules'
// typed zeros, hoisted next to y). Those then read the Relu's output
// instead: relu(y) > 0 exactly where y > 0, so the gradients are
// unchanged, and relu(y) has y's dtype. The fused node takes the
// BatchNormalization's place, so every such reader comes after it. Then it
// rewrites
// BatchNormalizationGrad(ReluGrad(dR, R), ...) (internal domain), where
// only that node reads the ReluGrad's output, into one BatchNormReluGrad
// node; this holds for any R, the output of a fused node or not. Nodes are
// in topological order. It returns the number of rewrites of both kinds.
func FuseBatchNormRelu(g *Graph) int {
	return fuseBatchNormReluForward(g) + fuseBatchNormReluGrad(g)
}

// fuseBatchNormReluForward makes the BatchNormRelu nodes.
func fuseBatchNormReluForward(g *Graph) int {
	bns := map[string]*Node{}
	for _, n := range g.Nodes {
		if n.OpType == "BatchNormalization" && isPlain(n) && len(n.Outputs) >= 1 && n.Outputs[0] != "" {
			bns[n.Outputs[0]] = n
		}
	}
	if len(bns) == 0 {
		return 0
	}
	relus, retyped, others := reluReaders(g, bns)
	pos := map[*Node]int{}
	for i, n := range g.Nodes {
		pos[n] = i
	}
	drop := map[*Node]bool{}
	for _, n := range g.Nodes {
		if n.OpType != "Relu" || !isPlain(n) || len(n.Inputs) != 1 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		y := n.Inputs[0]
		bn := bns[y]
		if bn == nil || relus[y] != 1 || others[y] != 0 {
			continue
		}
		// The fused node takes the BatchNormalization's place (its inputs
		// are ready there) and makes the Relu's output; every reader of
		// that output comes after the Relu, hence after the fused node.
		attrs := make(map[string]*Attr, len(bn.Attrs))
		for k, v := range bn.Attrs {
			attrs[k] = v
		}
		outs := append([]string{n.Outputs[0]}, bn.Outputs[1:]...)
		g.Nodes[pos[bn]] = &Node{Name: bn.Name, OpType: BatchNormRelu, Domain: FusedDomain,
			Inputs: append([]string{}, bn.Inputs...), Outputs: outs, Attrs: attrs}
		for _, j := range retyped[y] {
			rg := *g.Nodes[j]
			rg.Inputs = []string{rg.Inputs[0], n.Outputs[0]}
			g.Nodes[j] = &rg
		}
		drop[n] = true
	}
	if len(drop) == 0 {
		return 0
	}
	removeNodes(g, drop)
	return len(drop)
}

// fuseBatchNormReluGrad makes the BatchNormReluGrad nodes.
func fuseBatchNormReluGrad(g *Graph) int {
	readers := readCounts(g)
	relGrads := map[string]*Node{}
	for _, n := range g.Nodes {
		if n.OpType == ReluGrad && n.Domain == FusedDomain && len(n.Inputs) == 2 && len(n.Outputs) == 1 && n.Outputs[0] != "" {
			relGrads[n.Outputs[0]] = n
		}
	}
	if len(relGrads) == 0 {
		return 0
	}
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != "BatchNormalizationGrad" || n.Domain != InternalDomain || len(n.Inputs) != 5 {
			continue
		}
		rg := relGrads[n.Inputs[0]]
		if rg == nil || readers[n.Inputs[0]] != 1 {
			continue
		}
		attrs := make(map[string]*Attr, len(n.Attrs))
		for k, v := range n.Attrs {
			attrs[k] = v
		}
		g.Nodes[i] = &Node{Name: n.Name, OpType: BatchNormReluGrad, Domain: FusedDomain,
			Inputs:  append([]string{rg.Inputs[0], rg.Inputs[1]}, n.Inputs[1:]...),
			Outputs: append([]string{}, n.Outputs...), Attrs: attrs}
		drop[rg] = true
	}
	if len(drop) == 0 {
		return 0
	}
	removeNodes(g, drop)
	return len(drop)
}
