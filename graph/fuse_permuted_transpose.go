package graph

// FusePermutedTranspose makes a Transpose of a PermutedMatMul's result the
// product's permY when the product has none and the Transpose is the only
// reader of the result, directly or through Identity nodes that only it
// reads: attention's query gradient, whose product, scale and the Div's
// same-shape SumToShape (an Identity once DropSameShapeSumToShape has run)
// come before the Transpose that moves the head axis back, which
// FuseAttentionViews could not see through at compile time. The product
// then writes its result where the Transpose put it, and the copy goes;
// the values are the same (permY is applied before alpha, and a scale
// commutes with a permutation). Nodes are in topological order. It
// returns the number of Transposes absorbed.
func FusePermutedTranspose(g *Graph) int {
	readers := readCounts(g)
	producer := g.Producers()
	drop := map[*Node]bool{}
	replace := map[*Node]*Node{}
	for _, t := range g.Nodes {
		if !isPlain(t) || t.OpType != "Transpose" || len(t.Inputs) != 1 || len(t.Outputs) != 1 || t.Outputs[0] == "" {
			continue
		}
		perm := t.AttrInts("perm", nil)
		if !isPerm(perm) {
			continue
		}
		// Up through Identities that only the chain reads.
		var chain []*Node
		v := t.Inputs[0]
		p := producer[v]
		for p != nil && isPlain(p) && p.OpType == "Identity" && len(p.Inputs) == 1 && len(p.Outputs) == 1 && readers[v] == 1 {
			chain = append(chain, p)
			v = p.Inputs[0]
			p = producer[v]
		}
		if !isPermutedMatMul(p) || replace[p] != nil || p.Attr("permY") != nil || readers[v] != 1 {
			continue
		}
		fused := copyNode(p)
		fused.Attrs["permY"] = IntsAttr("permY", perm...)
		fused.Outputs = []string{t.Outputs[0]}
		replace[p] = fused
		drop[t] = true
		for _, c := range chain {
			drop[c] = true
		}
	}
	if len(drop) == 0 {
		return 0
	}
	replaceAndRemove(g, replace, drop)
	return len(replace)
}
