package graph

// BatchNormAddRelu is the fused op of FuseBatchNormAddRelu, the end of a
// residual block (ResNet's bn3 → Add(identity or downsample) → Relu):
//
//	BatchNormAddRelu(X, scale, B, mean, var, R) = (Relu(Add(Y, R)), outputs 1.. of BatchNormalization)
//
// with (Y, ...) = BatchNormalization(X, scale, B, mean, var) and the
// BatchNormalization's attributes; R has Y's shape. A backend adds R and
// applies the Relu as it writes the normalised values, so neither Y nor
// the sum is stored.
const BatchNormAddRelu = "BatchNormAddRelu"

// AddReluGrad is the fused op of FuseAddReluGrad:
//
//	AddReluGrad(A, B, X) = ReluGrad(Add(A, B), X) = Where(Greater(X, 0), A + B, 0)
//
// with A, B and X of one shape: the gradient into a Relu whose output two
// paths read (a residual block's output: the identity path and the next
// block's first convolution), summed and masked in one pass.
const AddReluGrad = "AddReluGrad"

func init() {
	// (Looked up when used: the rule is registered by another file's init.)
	fusedInferRules[BatchNormAddRelu] = func(c *inferCall) error { return inferRules["BatchNormalization"](c) }
	fusedInferRules[AddReluGrad] = inferVariadic
}

// FuseBatchNormAddRelu rewrites Relu(Add(Y, R)), where Y is the first
// output of a plain BatchNormalization read only by that Add, into one
// BatchNormAddRelu node at the Relu's place (R may be made after the
// BatchNormalization: the downsample branch's BatchNormalization of a
// ResNet block is). The specialised shapes must show Y, R and the sum
// float32 and of one shape (a broadcast R is left alone). Besides the
// Relu, the sum may be read only as the X operand of ReluGrad nodes and as
// the type operand of CastLike nodes placed after the Relu; those then
// read the Relu's output (relu(s) > 0 exactly where s > 0, and it has s's
// type), which the gradient keeps anyway. Nothing may read the
// BatchNormalization's other outputs (the running statistics) before the
// Relu's place, where they are now made. Nodes are in topological order.
// It returns the number of rewrites.
func FuseBatchNormAddRelu(g *Graph) int {
	ix := newFuseIndex(g)
	replace := map[int]*Node{}
	drop := map[*Node]bool{}
	retype := map[int]string{} // reader position -> the Relu output it reads instead
	for i, n := range g.Nodes {
		if n.OpType != "Relu" || !isPlain(n) || len(n.Inputs) != 1 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		s, o := n.Inputs[0], n.Outputs[0]
		add := ix.producer[s]
		if add == nil || add.OpType != "Add" || !isPlain(add) || len(add.Inputs) != 2 || len(add.Outputs) != 1 || ix.outputs[s] {
			continue
		}
		// The sum's readers: this Relu, and readers that may read o instead.
		var moved []int
		ok := true
		for _, j := range ix.readAt[s] {
			r := g.Nodes[j]
			switch {
			case j == i:
			case j > i && len(r.Inputs) == 2 && r.Inputs[1] == s && r.Inputs[0] != s &&
				(r.OpType == ReluGrad && r.Domain == FusedDomain || r.OpType == "CastLike" && isPlain(r)):
				moved = append(moved, j)
			default:
				ok = false
			}
		}
		if !ok || len(ix.readAt[s]) != len(moved)+1 {
			continue
		}
		for side := 0; side < 2; side++ {
			y, r := add.Inputs[side], add.Inputs[1-side]
			bn := ix.producer[y]
			if bn == nil || bn.OpType != "BatchNormalization" || !isPlain(bn) || len(bn.Inputs) != 5 || len(bn.Outputs) == 0 ||
				bn.Outputs[0] != y || y == r || r == "" || ix.outputs[y] || len(ix.readAt[y]) != 1 || drop[bn] {
				continue
			}
			// The running statistics are made at the Relu's place now.
			early := false
			for _, st := range bn.Outputs[1:] {
				if st != "" && ix.readBetween(st, ix.at[bn]-1, i+1) {
					early = true
				}
			}
			if early {
				continue
			}
			ys, yd, ok1 := knownTensorType(g, y)
			rs, rd, ok2 := knownTensorType(g, r)
			ss, sd, ok3 := knownTensorType(g, s)
			if !ok1 || !ok2 || !ok3 || yd != Float32 || rd != Float32 || sd != Float32 || !SameShape(ys, rs) || !SameShape(ys, ss) {
				continue
			}
			attrs := make(map[string]*Attr, len(bn.Attrs))
			for k, v := range bn.Attrs {
				attrs[k] = v
			}
			replace[i] = &Node{Name: bn.Name, OpType: BatchNormAddRelu, Domain: FusedDomain,
				Inputs: append(append([]string{}, bn.Inputs...), r), Outputs: append([]string{o}, bn.Outputs[1:]...), Attrs: attrs}
			drop[bn], drop[add] = true, true
			for _, j := range moved {
				retype[j] = o
			}
			break
		}
	}
	for j, o := range retype {
		c := *g.Nodes[j]
		c.Inputs = []string{c.Inputs[0], o}
		g.Nodes[j] = &c
	}
	return replaceNodes(g, replace, drop)
}

// FuseAddReluGrad rewrites ReluGrad(Add(A, B), X) (ReluGrad of the fused
// domain), where only that ReluGrad reads the sum and the specialised
// shapes show A, B, X and the sum float32 and of one shape, into one
// AddReluGrad(A, B, X) at the ReluGrad's place. Autodiff makes this chain
// wherever a Relu's output has two readers whose gradients are summed (a
// residual block's output). Nodes are in topological order. It returns
// the number of rewrites.
func FuseAddReluGrad(g *Graph) int {
	ix := newFuseIndex(g)
	replace := map[int]*Node{}
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != ReluGrad || n.Domain != FusedDomain || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		d, x := n.Inputs[0], n.Inputs[1]
		add := ix.producer[d]
		if add == nil || add.OpType != "Add" || !isPlain(add) || len(add.Inputs) != 2 || len(add.Outputs) != 1 ||
			d == x || ix.outputs[d] || len(ix.readAt[d]) != 1 || add.Inputs[0] == "" || add.Inputs[1] == "" {
			continue
		}
		ds, dd, ok := knownTensorType(g, d)
		if !ok || dd != Float32 {
			continue
		}
		same := true
		for _, v := range []string{add.Inputs[0], add.Inputs[1], x, n.Outputs[0]} {
			vs, vd, ok := knownTensorType(g, v)
			if !ok || vd != Float32 || !SameShape(vs, ds) {
				same = false
			}
		}
		if !same {
			continue
		}
		replace[i] = &Node{Name: n.Name, OpType: AddReluGrad, Domain: FusedDomain,
			Inputs: []string{add.Inputs[0], add.Inputs[1], x}, Outputs: []string{n.Outputs[0]}}
		drop[add] = true
	}
	return replaceNodes(g, replace, drop)
}

// BatchNormAddReluGrad is the fused op of FuseBatchNormAddReluGrad: the
// gradient of a residual block's end, an AddReluGrad whose result also
// feeds the gradient of the BatchNormalization before the Add:
//
//	BatchNormAddReluGrad(A, B, R, X, scale, mean, var) = (dS, outputs of BatchNormalizationGrad(dS, X, scale, mean, var))
//	dS = AddReluGrad(A, B, R)
//
// with the BatchNormalizationGrad's attributes. dS stays an output (the
// residual path reads it too); a backend computes each channel's dS as the
// gradient's sums read it, so dS is not read back from memory.
const BatchNormAddReluGrad = "BatchNormAddReluGrad"

func init() {
	// dS like R; then BatchNormalizationGrad's outputs from (dS, X, scale,
	// mean, var).
	fusedInferRules[BatchNormAddReluGrad] = func(c *inferCall) error {
		s, ok := c.shape(2)
		c.setShapeOrUnranked(0, c.dtype(2), s, ok)
		for i, j := range []int{3, 4, 4, 4, 4} { // BatchNormalizationGrad's rule: like X, then scale
			if i+1 >= len(c.n.Outputs) || !c.has(j) {
				continue
			}
			s, ok := c.shape(j)
			c.setShapeOrUnranked(i+1, c.dtype(j), s, ok)
		}
		return nil
	}
}

// FuseBatchNormAddReluGrad rewrites an AddReluGrad whose output dS is the
// gradient a BatchNormalizationGrad (internal domain) reads, directly or
// through an Identity that only it reads (a same-shape SumToShape after
// DropSameShapeSumToShape), into one BatchNormAddReluGrad at the
// AddReluGrad's place, writing dS (for its other readers) and the
// BatchNormalizationGrad's outputs; the BatchNormalizationGrad's other
// inputs must be defined there, and its X float32 of dS's known shape.
// Nodes are in topological order. It returns the number of rewrites.
func FuseBatchNormAddReluGrad(g *Graph) int {
	ix := newFuseIndex(g)
	replace := map[int]*Node{}
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != AddReluGrad || n.Domain != FusedDomain || len(n.Inputs) != 3 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		ds := n.Outputs[0]
		ss, sd, ok := knownTensorType(g, ds)
		if !ok || sd != Float32 {
			continue
		}
		// The BatchNormalizationGrad reading dS, or an Identity of it.
		var bng, id *Node
		for _, j := range ix.readAt[ds] {
			r := g.Nodes[j]
			switch {
			case isBatchNormGrad(r) && r.Inputs[0] == ds:
				bng = r
			case r.OpType == "Identity" && isPlain(r) && len(r.Outputs) == 1 && r.Outputs[0] != "" &&
				!ix.outputs[r.Outputs[0]] && len(ix.readAt[r.Outputs[0]]) == 1:
				if c := g.Nodes[ix.readAt[r.Outputs[0]][0]]; isBatchNormGrad(c) && c.Inputs[0] == r.Outputs[0] {
					bng, id = c, r
				}
			}
			if bng != nil {
				break
			}
		}
		if bng == nil || drop[bng] {
			continue
		}
		xs, xd, ok := knownTensorType(g, bng.Inputs[1])
		if !ok || xd != Float32 || !SameShape(xs, ss) {
			continue
		}
		defined := true
		for _, in := range bng.Inputs[1:] {
			if in != "" && !ix.definedBefore(in, i) {
				defined = false
			}
		}
		if !defined {
			continue
		}
		replace[i] = &Node{Name: bng.Name, OpType: BatchNormAddReluGrad, Domain: FusedDomain,
			Inputs:  append(append([]string{}, n.Inputs...), bng.Inputs[1:]...),
			Outputs: append([]string{ds}, bng.Outputs...), Attrs: bng.Attrs}
		drop[bng] = true
		if id != nil {
			drop[id] = true
		}
	}
	return replaceNodes(g, replace, drop)
}

// isBatchNormGrad reports whether n is a BatchNormalizationGrad of the
// internal domain with its five inputs.
func isBatchNormGrad(n *Node) bool {
	return n.OpType == "BatchNormalizationGrad" && n.Domain == InternalDomain && len(n.Inputs) == 5 && n.Inputs[0] != ""
}
