package graph

// FuseWeightTranspose removes the transpose of a matrix (Transpose with perm
// [1, 0], as PyTorch exports a Linear layer on inputs of rank 3 or more:
// MatMul(X, Transpose(W))) when every reader of the transposed value can
// read the matrix itself:
//
//   - MatMul(X, Wᵀ), and TransposedMatMul with Wᵀ as its B operand, become
//     TransposedMatMul(X, W) with transB flipped;
//   - MatMulGradA(dY, X, Wᵀ) = dY·W becomes TransposedMatMul(dY, W) (a 2-D B
//     broadcasts over no batch, so nothing is summed);
//   - Transpose(MatMulGradB(dY, X, Wᵀ)), the weight gradient transposed
//     back, becomes MatMulGradB(X, dY, W) = Σ dYᵀ·X (the same products,
//     summed over the same batch), when only that Transpose reads the
//     MatMulGradB.
//
// FuseTransposedMatMul leaves these transposes alone because the gradients
// read them too. It returns the number of transposes removed.
func FuseWeightTranspose(g *Graph) int {
	readers := map[string][]int{} // value -> indices of the nodes that read it
	for i, n := range g.Nodes {
		for _, in := range n.Inputs {
			readers[in] = append(readers[in], i)
		}
	}
	blocked := map[string]bool{}
	for _, o := range g.Outputs {
		blocked[o.Name] = true
	}
	for _, n := range g.Nodes {
		for _, sg := range n.Subgraphs() {
			forEachName(sg, func(name string) { blocked[name] = true })
		}
	}
	isMatrixTranspose := func(n *Node) bool {
		return isSwapLast2(n) && len(n.AttrInts("perm", nil)) == 2
	}
	internal := func(n *Node, op string) bool { return n.OpType == op && n.Domain == InternalDomain }
	replace := map[int]*Node{}
	drop := map[int]bool{}
	removed := 0
	for ti, t := range g.Nodes {
		if !isMatrixTranspose(t) || blocked[t.Outputs[0]] || drop[ti] {
			continue
		}
		wt, w := t.Outputs[0], t.Inputs[0]
		plan := map[int]*Node{}
		planDrop := map[int]bool{}
		ok := len(readers[wt]) > 0
		for _, ri := range readers[wt] {
			if !ok {
				break
			}
			r := g.Nodes[ri]
			if replace[ri] != nil || drop[ri] || plan[ri] != nil {
				ok = false // read twice, or already rewritten for another transpose
				break
			}
			switch {
			case isMatMul(r) && r.Inputs[1] == wt && r.Inputs[0] != wt:
				plan[ri] = transposedMatMul(r.Name, r.Inputs[0], w, 0, 1, r.Outputs)
			case r.OpType == TransposedMatMul && r.Domain == FusedDomain && len(r.Inputs) == 2 && r.Inputs[1] == wt && r.Inputs[0] != wt:
				plan[ri] = transposedMatMul(r.Name, r.Inputs[0], w, r.AttrInt("transA", 0), 1-r.AttrInt("transB", 0), r.Outputs)
			case internal(r, "MatMulGradA") && len(r.Inputs) == 3 && r.Inputs[2] == wt && r.Inputs[0] != wt && r.Inputs[1] != wt:
				plan[ri] = transposedMatMul(r.Name, r.Inputs[0], w, 0, 0, r.Outputs)
			case internal(r, "MatMulGradB") && len(r.Inputs) == 3 && r.Inputs[2] == wt && r.Inputs[0] != wt && r.Inputs[1] != wt &&
				len(r.Outputs) == 1 && !blocked[r.Outputs[0]] && len(readers[r.Outputs[0]]) == 1:
				bi := readers[r.Outputs[0]][0]
				back := g.Nodes[bi]
				if !isMatrixTranspose(back) || drop[bi] || replace[bi] != nil || planDrop[bi] {
					ok = false
					break
				}
				plan[ri] = &Node{Name: r.Name, OpType: "MatMulGradB", Domain: InternalDomain,
					Inputs: []string{r.Inputs[1], r.Inputs[0], w}, Outputs: append([]string{}, back.Outputs...)}
				planDrop[bi] = true
			default:
				ok = false
			}
		}
		if !ok {
			continue
		}
		for i, n := range plan {
			replace[i] = n
		}
		for i := range planDrop {
			drop[i] = true
		}
		drop[ti] = true
		removed++
	}
	if removed == 0 {
		return 0
	}
	// The new weight-gradient MatMulGradB stays where the old one was and
	// writes the dropped Transpose's output, which its readers, all later,
	// find in place.
	keep := make([]*Node, 0, len(g.Nodes))
	for i, n := range g.Nodes {
		if drop[i] {
			continue
		}
		if r := replace[i]; r != nil {
			n = r
		}
		keep = append(keep, n)
	}
	clear(g.Nodes)
	g.Nodes = keep
	return removed
}

// transposedMatMul is a new TransposedMatMul node (graphs copied for a
// backend share their nodes with the model, so nodes are replaced, not
// edited).
func transposedMatMul(name, a, b string, transA, transB int64, outputs []string) *Node {
	return &Node{Name: name, OpType: TransposedMatMul, Domain: FusedDomain,
		Inputs: []string{a, b}, Outputs: append([]string{}, outputs...),
		Attrs: map[string]*Attr{
			"transA": {Name: "transA", Type: AttrInt, I: transA},
			"transB": {Name: "transB", Type: AttrInt, I: transB},
		}}
}
