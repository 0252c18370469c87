package graph

import "fmt"

// GeluErfGradX is GeluErfGrad with D and A recomputed from X instead of
// read: GeluErfGradX(dY, X, C1, C2, C3, K) = GeluErfGrad(dY, X, D, A, C1,
// C3, K) with D = X/C1 and A = Erf(D)+C2, each rounded as GeluErf rounds
// them, so the gradient is the same bits. The forward GeluErf then keeps
// only Y: the backward pass holds the GELU's input X (and Y, the next
// product's input) where it held X, Y, D and A, as PyTorch's GELU saves
// its input alone.
const GeluErfGradX = "GeluErfGradX"

func init() {
	fusedInferRules[GeluErfGradX] = inferVariadic
}

// RecomputeGeluErfGrad rewrites every GeluErfGrad whose D and A are the
// intermediates of a GeluErf of the same X and constants into a
// GeluErfGradX, points the CastLikes that read D or A for their dtype at X
// instead, and then drops the D and A outputs of each GeluErf that nothing
// reads any more (the output stays, unnamed: its kernel writes Y
// alone). It returns the number of gradients rewritten.
func RecomputeGeluErfGrad(g *Graph) int {
	// Nodes are replaced, never changed in place: a specialised graph
	// shares its nodes with the graph it was made from.
	gelu := map[string]*Node{} // the D output of a GeluErf -> the node
	at := map[*Node]int{}
	for i, n := range g.Nodes {
		at[n] = i
		if n.OpType == GeluErf && n.Domain == FusedDomain && len(n.Inputs) == 4 && len(n.Outputs) == 3 && n.Outputs[1] != "" && n.Outputs[2] != "" {
			gelu[n.Outputs[1]] = n
		}
	}
	if len(gelu) == 0 {
		return 0
	}
	rewritten := 0
	for i, n := range g.Nodes {
		if n.OpType != GeluErfGrad || n.Domain != FusedDomain || len(n.Inputs) != 7 || len(n.Outputs) != 1 {
			continue
		}
		dy, x, d, a, c1, c3, k := n.Inputs[0], n.Inputs[1], n.Inputs[2], n.Inputs[3], n.Inputs[4], n.Inputs[5], n.Inputs[6]
		ge := gelu[d]
		if ge == nil || ge.Outputs[2] != a || ge.Inputs[0] != x || ge.Inputs[1] != c1 || ge.Inputs[3] != c3 {
			continue
		}
		g.Nodes[i] = &Node{Name: n.Name, OpType: GeluErfGradX, Domain: FusedDomain,
			Inputs: []string{dy, x, c1, ge.Inputs[2], c3, k}, Outputs: []string{n.Outputs[0]}}
		rewritten++
	}
	if rewritten == 0 {
		return 0
	}
	// CastLike reads its second operand for the dtype alone (the rules
	// make their constants so, like D): X has D's and A's dtype.
	xOf := map[string]string{}
	for _, ge := range gelu {
		xOf[ge.Outputs[1]], xOf[ge.Outputs[2]] = ge.Inputs[0], ge.Inputs[0]
	}
	for i, n := range g.Nodes {
		if n.OpType == "CastLike" && isPlain(n) && len(n.Inputs) == 2 && xOf[n.Inputs[1]] != "" {
			c := *n
			c.Inputs = []string{n.Inputs[0], xOf[n.Inputs[1]]}
			g.Nodes[i] = &c
		}
	}
	readers := readCounts(g)
	for _, ge := range gelu {
		if readers[ge.Outputs[1]] == 0 && readers[ge.Outputs[2]] == 0 {
			c := *ge
			c.Outputs = []string{ge.Outputs[0], "", ""}
			g.Nodes[at[ge]] = &c
		}
	}
	return rewritten
}

// RecomputeGeluErfOutput makes each later reader of a GeluErf's Y (the
// next product's weight gradient, in backward), directly or through one
// view of it (Reshape, Flatten, Squeeze, Unsqueeze, Identity: the products
// of a 3-D activation read it flattened; a Dropout of ratio 0), read a copy of the GeluErf (and
// of the view) computed right before it, so that Y dies with its forward
// readers instead of living through backward. Only GeluErfs that write Y
// alone (after RecomputeGeluErfGrad) qualify, and only readers at or
// before X's last reader: X lives that long anyway (GeluErfGradX reads
// it), so nothing is kept longer. The copy runs the same kernel on the same
// X and constants, so it is Y bit for bit. It returns the number of
// readers rewritten.
func RecomputeGeluErfOutput(g *Graph) int {
	lastRead := map[string]int{}
	readersOf := map[string][]int{}
	producer := map[string]*Node{}
	for i, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o != "" {
				producer[o] = n
			}
		}
		for _, in := range n.Inputs {
			if in != "" {
				lastRead[in] = i
				if k := len(readersOf[in]); k == 0 || readersOf[in][k-1] != i {
					readersOf[in] = append(readersOf[in], i)
				}
			}
		}
		for _, sg := range n.Subgraphs() {
			forEachName(sg, func(name string) { lastRead[name] = len(g.Nodes) + 1 })
		}
	}
	outputs := map[string]bool{}
	for _, o := range g.Outputs {
		outputs[o.Name] = true
		lastRead[o.Name] = len(g.Nodes) + 1
	}
	views := map[string]bool{"Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true, "Identity": true}
	before := map[int][]*Node{} // node index -> copies to place before it
	rewritten := 0
	// redirect makes node r read name where it read old.
	redirect := func(r int, old, name string) {
		reader := *g.Nodes[r]
		reader.Inputs = append([]string(nil), reader.Inputs...)
		for i, in := range reader.Inputs {
			if in == old {
				reader.Inputs[i] = name
			}
		}
		g.Nodes[r] = &reader
	}
	// copyOf places a copy of n before node r writing its first output as
	// name (its other outputs unnamed), reading in0 in place of its first
	// input, and gives name the type of n's first output.
	copyOf := func(n *Node, r int, in0, name string) {
		c := &Node{Name: fmt.Sprintf("%s/recompute_%d", n.Name, r), OpType: n.OpType, Domain: n.Domain, Attrs: n.Attrs,
			Inputs: append([]string{in0}, n.Inputs[1:]...), Outputs: make([]string, len(n.Outputs))}
		c.Outputs[0] = name
		before[r] = append(before[r], c)
		if vi := g.ValueInfo[n.Outputs[0]]; vi != nil {
			t := *vi
			t.Name = name
			g.ValueInfo[name] = &t
		}
	}
	for _, n := range g.Nodes {
		if n.OpType != GeluErf || n.Domain != FusedDomain || len(n.Inputs) != 4 || len(n.Outputs) != 3 ||
			n.Outputs[0] == "" || n.Outputs[1] != "" || n.Outputs[2] != "" || outputs[n.Outputs[0]] {
			continue
		}
		y, x := n.Outputs[0], n.Inputs[0]
		readers := readersOf[y]
		if len(readers) == 0 {
			continue
		}
		for _, r := range readers[1:] {
			if lastRead[x] < r {
				continue
			}
			name := fmt.Sprintf("%s/recomputed_%d", y, r)
			copyOf(n, r, x, name)
			redirect(r, y, name)
			rewritten++
		}
		// Later readers of a view that Y's first reader makes.
		v := g.Nodes[readers[0]]
		if !isPlain(v) || len(v.Outputs) != 1 || v.Outputs[0] == "" || outputs[v.Outputs[0]] || len(readersOf[y]) != 1 {
			continue
		}
		identity := zeroRatioDropout(g, v, producer) // passes Y on: read the copy itself
		if !views[v.OpType] && !identity {
			continue
		}
		vr := readersOf[v.Outputs[0]]
		if len(vr) < 2 {
			continue
		}
		for _, r := range vr[1:] {
			if lastRead[x] < r {
				continue
			}
			name := fmt.Sprintf("%s/recomputed_%d", y, r)
			copyOf(n, r, x, name)
			if identity {
				redirect(r, v.Outputs[0], name)
			} else {
				vname := fmt.Sprintf("%s/recomputed_%d", v.Outputs[0], r)
				copyOf(v, r, name, vname)
				redirect(r, v.Outputs[0], vname)
			}
			rewritten++
		}
	}
	if rewritten == 0 {
		return 0
	}
	nodes := make([]*Node, 0, len(g.Nodes)+2*rewritten)
	for i, n := range g.Nodes {
		nodes = append(nodes, before[i]...)
		nodes = append(nodes, n)
	}
	g.Nodes = nodes
	return rewritten
}

// zeroRatioDropout reports whether n is a Dropout whose ratio is a
// constant 0 (an initializer that is not a graph input, or a Constant node,
// through Identities) and whose mask nothing reads (PruneUnreadDropoutMasks):
// it passes its input on unchanged.
func zeroRatioDropout(g *Graph, n *Node, producer map[string]*Node) bool {
	if n.OpType != "Dropout" || !isPlain(n) || len(n.Outputs) != 1 || len(n.Inputs) < 2 {
		return false
	}
	var t *Tensor
	name := n.Inputs[1]
	for hops := 0; hops < 8 && t == nil; hops++ {
		if isConstant(g, name) {
			t = g.Initializers[name]
			break
		}
		p := producer[name]
		switch {
		case p == nil || !isPlain(p) || len(p.Outputs) != 1:
			return false
		case p.OpType == "Constant":
			if a := p.Attr("value"); a != nil {
				t = a.T
			}
			if t == nil {
				return false
			}
		case p.OpType == "Identity" && len(p.Inputs) == 1:
			name = p.Inputs[0]
		default:
			return false
		}
	}
	if t == nil || t.Size() != 1 {
		return false
	}
	switch d := t.Data.(type) {
	case []float32:
		return d[0] == 0
	case []float64:
		return d[0] == 0
	}
	return false
}
