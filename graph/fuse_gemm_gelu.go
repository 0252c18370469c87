package graph

// MatMulAddGeluErf is the fused op of FuseMatMulAddGeluErf, a Linear layer
// followed by the exact GELU (the MLP's first layer in ViT and GPT blocks):
//
//	MatMulAddGeluErf(A, B, Bias, C1, C2, C3, transA, transB) = (P, Y)
//	P = MatMulAdd(A, B, Bias, transA, transB)
//	Y = GeluErf(P, C1, C2, C3)'s first output
//
// A backend computes Y in the GEMM's epilogue, while each block of P is in
// cache, instead of a second pass that reads P back from memory. P stays
// an output: the GELU's gradient reads it.
const MatMulAddGeluErf = "MatMulAddGeluErf"

// MatMulGeluErfGrad is the fused op of FuseMatMulGeluErfGrad, the product
// that makes the gradient of a GELU's output followed by the GELU's
// gradient (the MLP's second layer in backward):
//
//	MatMulGeluErfGrad(A, B, X, C1, C2, C3, K, transA, transB) = (dX, Y)
//	dX = GeluErfGradX(TransposedMatMul(A, B, transA, transB), X, C1, C2, C3, K)
//	Y  = GeluErf(X, C1, C2, C3)'s first output
//
// Y is the copy of the GELU's output that RecomputeGeluErfOutput places
// before the weight gradient; the second output is unnamed when there is
// none to absorb. A backend applies both in the GEMM's epilogue, reading X
// once, instead of two passes over X and one over the product.
const MatMulGeluErfGrad = "MatMulGeluErfGrad"

func init() {
	fusedInferRules[MatMulAddGeluErf] = func(c *inferCall) error {
		if err := inferTransposedMatMul(c); err != nil {
			return err
		}
		copyOutputType(c, 0, 1)
		return nil
	}
	// Both outputs have X's type (X has the product's shape).
	fusedInferRules[MatMulGeluErfGrad] = func(c *inferCall) error {
		s, ok := c.shape(2)
		for i := range c.n.Outputs {
			c.setShapeOrUnranked(i, c.dtype(2), s, ok)
		}
		return nil
	}
}

// copyOutputType gives output to the type inferred for output from.
func copyOutputType(c *inferCall, from, to int) {
	if to >= len(c.n.Outputs) || from >= len(c.n.Outputs) || c.n.Outputs[to] == "" {
		return
	}
	if t := c.st.types[c.n.Outputs[from]]; t != nil {
		cp := *t
		cp.Shape = append([]Dim(nil), t.Shape...)
		c.st.types[c.n.Outputs[to]] = &cp
	}
}

// isGeluErfYOnly reports whether n is a GeluErf that writes Y alone (its D
// and A outputs unnamed: RecomputeGeluErfGrad).
func isGeluErfYOnly(n *Node) bool {
	return n.OpType == GeluErf && n.Domain == FusedDomain && len(n.Inputs) == 4 && len(n.Outputs) == 3 &&
		n.Outputs[0] != "" && n.Outputs[1] == "" && n.Outputs[2] == ""
}

// fuseIndex is what the product-epilogue fusions look up: each value's
// producer, each node's position, and where each value is read.
type fuseIndex struct {
	g        *Graph
	producer map[string]*Node
	at       map[*Node]int
	readAt   map[string][]int // positions of the nodes reading a value, in order
	outputs  map[string]bool  // graph outputs, and values subgraphs read
	inputs   map[string]bool
}

func newFuseIndex(g *Graph) *fuseIndex {
	ix := &fuseIndex{g: g, producer: map[string]*Node{}, at: map[*Node]int{}, readAt: map[string][]int{},
		outputs: map[string]bool{}, inputs: map[string]bool{}}
	for i, n := range g.Nodes {
		ix.at[n] = i
		for _, o := range n.Outputs {
			if o != "" {
				ix.producer[o] = n
			}
		}
		for _, in := range n.Inputs {
			if in != "" {
				ix.readAt[in] = append(ix.readAt[in], i)
			}
		}
		for _, sg := range n.Subgraphs() {
			forEachName(sg, func(name string) { ix.outputs[name] = true })
		}
	}
	for _, o := range g.Outputs {
		ix.outputs[o.Name] = true
	}
	for _, in := range g.Inputs {
		ix.inputs[in.Name] = true
	}
	return ix
}

// definedBefore reports whether name is available ahead of position at: an
// initializer, a graph input, or an earlier node's output.
func (ix *fuseIndex) definedBefore(name string, at int) bool {
	if ix.g.Initializers[name] != nil || ix.inputs[name] {
		return true
	}
	p := ix.producer[name]
	return p != nil && ix.at[p] < at
}

// onlyReader is the node that reads name, when name is read once (by one
// input of one node) and is no graph output (nor read by a subgraph).
func (ix *fuseIndex) onlyReader(name string) *Node {
	if at := ix.readAt[name]; len(at) == 1 && !ix.outputs[name] {
		return ix.g.Nodes[at[0]]
	}
	return nil
}

// readBetween reports whether a node strictly between positions lo and hi
// reads name.
func (ix *fuseIndex) readBetween(name string, lo, hi int) bool {
	for _, r := range ix.readAt[name] {
		if r > lo && r < hi {
			return true
		}
	}
	return false
}

// replaceNodes puts each fused node of replace at its position, removes
// the nodes of drop it absorbed, and returns the number of fused nodes.
func replaceNodes(g *Graph, replace map[int]*Node, drop map[*Node]bool) int {
	if len(replace) == 0 {
		return 0
	}
	for at, n := range replace {
		g.Nodes[at] = n
	}
	removeNodes(g, drop)
	return len(replace)
}

// productAttrs are the transA/transB attributes of a product node
// (MatMul: both 0).
func productAttrs(n *Node) map[string]*Attr {
	var ta, tb int64
	if n.Domain == FusedDomain {
		ta, tb = n.AttrInt("transA", 0), n.AttrInt("transB", 0)
	}
	return map[string]*Attr{
		"transA": {Name: "transA", Type: AttrInt, I: ta},
		"transB": {Name: "transB", Type: AttrInt, I: tb},
	}
}

// FuseMatMulAddGeluErf rewrites a MatMulAdd whose output P is the input of
// a GeluErf that writes Y alone (after RecomputeGeluErfGrad) into one
// MatMulAddGeluErf with outputs (P, Y), placed where the GeluErf was, when
// no node between the two reads P. Only the first such GeluErf of each P
// (the forward one) is absorbed; later copies (RecomputeGeluErfOutput's)
// stay. Nodes are in topological order. It returns the number of rewrites.
func FuseMatMulAddGeluErf(g *Graph) int {
	ix := newFuseIndex(g)
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if !isGeluErfYOnly(n) || drop[n] {
			continue
		}
		p := n.Inputs[0]
		if _, d, ok := knownTensorType(g, p); !ok || d != Float32 {
			continue // (MatMulAdd is float32 only; a rule for a typeless graph)
		}
		mm := ix.producer[p]
		if mm == nil || mm.OpType != MatMulAdd || mm.Domain != FusedDomain || len(mm.Inputs) != 3 || len(mm.Outputs) != 1 ||
			drop[mm] || ix.readBetween(p, ix.at[mm], i) {
			continue
		}
		g.Nodes[i] = &Node{Name: mm.Name, OpType: MatMulAddGeluErf, Domain: FusedDomain,
			Inputs:  []string{mm.Inputs[0], mm.Inputs[1], mm.Inputs[2], n.Inputs[1], n.Inputs[2], n.Inputs[3]},
			Outputs: []string{p, n.Outputs[0]}, Attrs: productAttrs(mm)}
		drop[mm] = true
	}
	if len(drop) == 0 {
		return 0
	}
	removeNodes(g, drop)
	return len(drop)
}

// FuseMatMulGeluErfGrad rewrites a product (MatMul or TransposedMatMul)
// whose output only a GeluErfGradX reads, as its dY, into one
// MatMulGeluErfGrad placed where the product was, writing the
// GeluErfGradX's dX; X, the constants and K must be defined by then. A
// GeluErf of the same X and constants that writes Y alone and sits between
// the product and the GeluErfGradX (RecomputeGeluErfOutput's copy before
// the weight gradient) is absorbed too, its Y becoming the fused node's
// second output. dY and X must be known to be float32. Nodes are in
// topological order. It returns the number of
// rewrites.
func FuseMatMulGeluErfGrad(g *Graph) int {
	ix := newFuseIndex(g)
	drop := map[*Node]bool{}
	replace := map[int]*Node{}
	for i, gx := range g.Nodes {
		if gx.OpType != GeluErfGradX || gx.Domain != FusedDomain || len(gx.Inputs) != 6 || len(gx.Outputs) != 1 || gx.Outputs[0] == "" {
			continue
		}
		dy, x := gx.Inputs[0], gx.Inputs[1]
		mm := ix.producer[dy]
		if mm == nil || len(mm.Outputs) != 1 || len(mm.Inputs) != 2 || drop[mm] || ix.outputs[dy] || len(ix.readAt[dy]) != 1 ||
			!(isMatMul(mm) || mm.OpType == TransposedMatMul && mm.Domain == FusedDomain) {
			continue
		}
		at := ix.at[mm]
		if replace[at] != nil {
			continue
		}
		// float32 only: in a bfloat16 (autocast) graph the unfused
		// GeluErfGradX reads the product rounded to bfloat16.
		if _, d, ok := knownTensorType(g, dy); !ok || d != Float32 {
			continue
		}
		if _, d, ok := knownTensorType(g, x); !ok || d != Float32 {
			continue
		}
		ok := true
		for _, in := range gx.Inputs[1:] {
			ok = ok && in != "" && ix.definedBefore(in, at)
		}
		if !ok {
			continue
		}
		y := ""
		for j := at + 1; j < i; j++ {
			r := g.Nodes[j]
			if isGeluErfYOnly(r) && !drop[r] && r.Inputs[0] == x && r.Inputs[1] == gx.Inputs[2] &&
				r.Inputs[2] == gx.Inputs[3] && r.Inputs[3] == gx.Inputs[4] && !ix.outputs[r.Outputs[0]] {
				y = r.Outputs[0]
				drop[r] = true
				break
			}
		}
		replace[at] = &Node{Name: gx.Name, OpType: MatMulGeluErfGrad, Domain: FusedDomain,
			Inputs:  []string{mm.Inputs[0], mm.Inputs[1], x, gx.Inputs[2], gx.Inputs[3], gx.Inputs[4], gx.Inputs[5]},
			Outputs: []string{gx.Outputs[0], y}, Attrs: productAttrs(mm)}
		drop[gx] = true
	}
	return replaceNodes(g, replace, drop)
}
