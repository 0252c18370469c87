package graph

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
