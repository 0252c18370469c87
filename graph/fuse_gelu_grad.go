package graph

// GeluErfGrad is the fused op of FuseGeluErfGrad: the gradient of the exact
// GELU (GeluErf(X, C1, C2, C3) with outputs Y, D, A) as the gradient rules
// of its Div, Erf, Add, Mul and Mul emit it:
//
//	M  = Mul(dY, C3)
//	dX = Add(Mul(M, A), Div(ErfGrad(Mul(M, X), D, K), C1))
//
// GeluErfGrad(dY, X, D, A, C1, C3, K) = dX. A backend computes it in one pass
// over the five arrays, rounding after each op as the unfused kernels do.
const GeluErfGrad = "GeluErfGrad"

// FuseGeluErfGrad rewrites the chain above into one GeluErfGrad node placed
// where its final Add was, when every intermediate value is read only by the
// chain. Identity nodes between the chain's ops, and SumToShape nodes whose
// operands have one known shape (g.ValueInfo), are looked through and
// removed with it.
// The operands of each Mul and of the Add may come in either order. Nodes
// are in topological order. It returns the number of rewrites.
func FuseGeluErfGrad(g *Graph) int {
	readers := readCounts(g)
	producer := map[string]*Node{}
	gelu := map[string]*Node{} // the D output of a GeluErf -> the node
	for _, n := range g.Nodes {
		if len(n.Outputs) == 1 && n.Outputs[0] != "" {
			producer[n.Outputs[0]] = n
		}
		if n.OpType == GeluErf && n.Domain == FusedDomain && len(n.Inputs) == 4 && len(n.Outputs) == 3 && n.Outputs[1] != "" {
			gelu[n.Outputs[1]] = n
		}
	}
	if len(gelu) == 0 {
		return 0
	}
	// alias reports whether p passes its first input on unchanged: an
	// Identity, or a SumToShape between two values of one known shape.
	alias := func(p *Node) bool {
		switch {
		case p == nil || len(p.Inputs) == 0:
			return false
		case p.OpType == "Identity" && isPlain(p):
			return len(p.Inputs) == 1
		case p.OpType == "SumToShape" && p.Domain == InternalDomain && len(p.Inputs) == 2:
			a, b := knownShape(g, p.Inputs[0]), knownShape(g, p.Inputs[1])
			return a != nil && b != nil && SameShape(a, b)
		}
		return false
	}
	// through follows name back through aliases whose outputs only one
	// node reads, collecting them in chain; it returns the name that the
	// first other producer wrote.
	through := func(name string, chain map[*Node]bool) string {
		for {
			p := producer[name]
			if !alias(p) || readers[name] != 1 {
				return name
			}
			chain[p] = true
			name = p.Inputs[0]
		}
	}
	// op returns the producer of name (after Identities) when it is op with
	// two inputs and its output is read once; chain collects it.
	op := func(name, typ string, domain bool, chain map[*Node]bool) *Node {
		name = through(name, chain)
		p := producer[name]
		if p == nil || p.OpType != typ || len(p.Inputs) < 2 || readers[name] != 1 {
			return nil
		}
		if domain != (p.Domain == FusedDomain) || !domain && !isPlain(p) {
			return nil
		}
		chain[p] = true
		return p
	}
	// other returns the operand of the two-input node n that is not want,
	// or "".
	other := func(n *Node, want string) string {
		switch want {
		case n.Inputs[0]:
			return n.Inputs[1]
		case n.Inputs[1]:
			return n.Inputs[0]
		}
		return ""
	}
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != "Add" || !isPlain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		for side := 0; side < 2; side++ {
			chain := map[*Node]bool{}
			div := op(n.Inputs[1-side], "Div", false, chain)
			if div == nil || len(div.Inputs) != 2 {
				continue
			}
			eg := op(div.Inputs[0], ErfGrad, true, chain)
			if eg == nil || len(eg.Inputs) != 3 {
				continue
			}
			ge := gelu[eg.Inputs[1]]
			if ge == nil || div.Inputs[1] != ge.Inputs[1] {
				continue
			}
			x, c1, c3, a := ge.Inputs[0], ge.Inputs[1], ge.Inputs[3], ge.Outputs[2]
			mx := op(eg.Inputs[0], "Mul", false, chain) // Mul(M, X)
			ma := op(n.Inputs[side], "Mul", false, chain)
			if mx == nil || ma == nil || len(mx.Inputs) != 2 || len(ma.Inputs) != 2 {
				continue
			}
			mName, mName2 := other(mx, x), other(ma, a)
			if mName == "" || mName2 == "" {
				continue
			}
			// Both products read M (possibly through different
			// Identities of it, each read once, or M itself twice).
			mName, mName2 = through(mName, chain), through(mName2, chain)
			if mName != mName2 || readers[mName] != 2 {
				continue
			}
			// M itself, or Identities of it read only by the next one.
			for p := producer[mName]; alias(p); p = producer[mName] {
				chain[p] = true
				mName = p.Inputs[0]
				if readers[mName] != 1 {
					mName = ""
					break
				}
			}
			mc := producer[mName]
			if mc == nil || mc.OpType != "Mul" || !isPlain(mc) || len(mc.Inputs) != 2 {
				continue
			}
			dy := other(mc, c3)
			if dy == "" || dy == mName {
				continue
			}
			chain[mc] = true
			clash := false
			for c := range chain {
				clash = clash || drop[c]
			}
			if clash {
				continue
			}
			g.Nodes[i] = &Node{Name: n.Name, OpType: GeluErfGrad, Domain: FusedDomain,
				Inputs: []string{dy, x, eg.Inputs[1], a, c1, c3, eg.Inputs[2]}, Outputs: []string{n.Outputs[0]}}
			for c := range chain {
				drop[c] = true
			}
			break
		}
	}
	if len(drop) == 0 {
		return 0
	}
	count := 0
	for c := range drop {
		if c.OpType == ErfGrad {
			count++
		}
	}
	removeNodes(g, drop)
	return count
}

// knownShape returns the fully known shape g gives name, or nil.
func knownShape(g *Graph, name string) []int {
	s, _, ok := knownTensorType(g, name)
	if !ok {
		return nil
	}
	return s
}
