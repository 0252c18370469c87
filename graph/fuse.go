package graph

// Fusion passes: rewrites that replace a chain of primitives with one
// fused node that a backend runs in a single kernel. A backend applies the
// passes whose fused ops it implements; the unfused chain is the reference
// semantics (and the fallback of every other backend).

import "maps"

// FusedDomain is the operator domain of the fused nodes these passes make.
const FusedDomain = "com.onnxtrain.fused"

// TransposedMatMul is the fused op of FuseTransposedMatMul:
//
//	TransposedMatMul(A, B, transA, transB) = MatMul(opA(A), opB(B))
//
// where opX(X) is X with its last two axes swapped (X of rank r >= 2:
// Transpose(X, perm=[0, …, r-3, r-1, r-2])) when transX is 1, and X itself
// otherwise. A backend runs it as GEMMs that read the transposed operands
// in place, without materialising the transposes.
const TransposedMatMul = "TransposedMatMul"

// FuseTransposedMatMul rewrites MatMul nodes that read the output of a
// Transpose that swaps the last two axes into TransposedMatMul nodes that
// read the Transpose's input, and drops each Transpose whose every reader
// was rewritten. Linear layers (x·Wᵀ), their gradients (the weight
// gradient is MatMul(Transpose(dY), X)) and attention (Q·Kᵀ) produce such
// pairs. Transposes that a graph output, a subgraph or another op reads
// are left alone. It returns the number of MatMul nodes rewritten.
func FuseTransposedMatMul(g *Graph) int {
	producers := map[string]*Node{}
	for _, n := range g.Nodes {
		if isSwapLast2(n) {
			producers[n.Outputs[0]] = n
		}
	}
	if len(producers) == 0 {
		return 0
	}
	// A transpose qualifies when only MatMul inputs read its output.
	ok := map[string]bool{}
	for name := range producers {
		ok[name] = true
	}
	for _, o := range g.Outputs {
		delete(ok, o.Name)
	}
	for _, n := range g.Nodes {
		if !isMatMul(n) {
			for _, in := range n.Inputs {
				delete(ok, in)
			}
		}
		for _, sg := range n.Subgraphs() {
			forEachName(sg, func(name string) { delete(ok, name) })
		}
	}
	fused := 0
	for idx, n := range g.Nodes {
		if !isMatMul(n) {
			continue
		}
		var trans [2]int64
		inputs := []string{n.Inputs[0], n.Inputs[1]}
		for i, in := range inputs {
			if t := producers[in]; t != nil && ok[in] {
				inputs[i] = t.Inputs[0]
				trans[i] = 1
			}
		}
		if trans[0] == 0 && trans[1] == 0 {
			continue
		}
		// A new node: graphs copied for a backend share their nodes with
		// the model.
		g.Nodes[idx] = &Node{
			Name: n.Name, OpType: TransposedMatMul, Domain: FusedDomain,
			Inputs: inputs, Outputs: append([]string{}, n.Outputs...),
			Attrs: map[string]*Attr{
				"transA": {Name: "transA", Type: AttrInt, I: trans[0]},
				"transB": {Name: "transB", Type: AttrInt, I: trans[1]},
			},
		}
		fused++
	}
	if fused == 0 {
		return 0
	}
	keep := g.Nodes[:0]
	for _, n := range g.Nodes {
		if isSwapLast2(n) && ok[n.Outputs[0]] {
			continue // every reader now reads its input
		}
		keep = append(keep, n)
	}
	clear(g.Nodes[len(keep):])
	g.Nodes = keep
	return fused
}

// isMatMul reports whether n is an ai.onnx MatMul of two inputs.
func isMatMul(n *Node) bool {
	return n.OpType == "MatMul" && (n.Domain == "" || n.Domain == "ai.onnx") && len(n.Inputs) == 2 && len(n.Outputs) == 1
}

// isSwapLast2 reports whether n is a Transpose with one named output whose
// perm swaps the last two axes and keeps the others: [0, …, r-3, r-1, r-2].
func isSwapLast2(n *Node) bool {
	if n.OpType != "Transpose" || (n.Domain != "" && n.Domain != "ai.onnx") || len(n.Inputs) != 1 || len(n.Outputs) != 1 || n.Inputs[0] == "" {
		return false
	}
	perm := n.AttrInts("perm", nil)
	r := len(perm)
	if r < 2 || perm[r-2] != int64(r-1) || perm[r-1] != int64(r-2) {
		return false
	}
	for i, p := range perm[:r-2] {
		if p != int64(i) {
			return false
		}
	}
	return true
}

// forEachName calls fn with every name g and its nested subgraphs read.
func forEachName(g *Graph, fn func(string)) {
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			fn(in)
		}
		for _, sg := range n.Subgraphs() {
			forEachName(sg, fn)
		}
	}
	for _, o := range g.Outputs {
		fn(o.Name)
	}
}

// ReluGrad is the fused op of FuseReluGrad:
//
//	ReluGrad(dY, X) = Where(Greater(X, 0), dY, 0)
//
// the gradient of Relu (0 where X is 0, as PyTorch's threshold_backward),
// in one pass and without the boolean mask.
const ReluGrad = "ReluGrad"

// FuseReluGrad rewrites Where(Greater(X, 0), dY, 0), where both zeros are
// float scalars (initializers, Constant nodes, or CastLike of one: Relu's
// gradient rule makes them with CastLike) and only that Where reads the
// mask, into one ReluGrad(dY, X) node. Nodes are in topological order (a
// CastLike before its readers). It returns the number of rewrites.
func FuseReluGrad(g *Graph) int {
	readers := readCounts(g)
	zeroTensor := func(t *Tensor) bool {
		return t != nil && t.DType.IsFloat() && t.Size() == 1 && t.Float(0) == 0
	}
	// Scalar zeros: initializers, Constant nodes, and CastLike of either
	// (what the gradient rule's ScalarLike leaves when the CastLike is not
	// folded because its second input is not constant).
	zeros := constantsWhere(g, zeroTensor)
	isZero := func(name string) bool { return zeros[name] }
	producer := map[string]*Node{}
	for _, n := range g.Nodes {
		if n.OpType == "Greater" && (n.Domain == "" || n.Domain == "ai.onnx") && len(n.Inputs) == 2 && len(n.Outputs) == 1 && isZero(n.Inputs[1]) {
			producer[n.Outputs[0]] = n
		}
	}
	if len(producer) == 0 {
		return 0
	}
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != "Where" || (n.Domain != "" && n.Domain != "ai.onnx") || len(n.Inputs) != 3 || len(n.Outputs) != 1 {
			continue
		}
		gt := producer[n.Inputs[0]]
		if gt == nil || readers[n.Inputs[0]] != 1 || !isZero(n.Inputs[2]) {
			continue
		}
		g.Nodes[i] = &Node{Name: n.Name, OpType: ReluGrad, Domain: FusedDomain,
			Inputs: []string{n.Inputs[1], gt.Inputs[0]}, Outputs: []string{n.Outputs[0]}}
		drop[gt] = true
	}
	if len(drop) == 0 {
		return 0
	}
	removeNodes(g, drop)
	return len(drop)
}

// ErfGrad is the fused op of FuseErfGrad:
//
//	ErfGrad(dY, X, C) = Mul(dY, Mul(C, Exp(Neg(Mul(X, X)))))
//
// the gradient rule of Erf (C is the scalar 2/√π), which exact GELU's
// gradient runs over the MLP's hidden activations. A backend computes it in
// one pass, rounding as the unfused ops do.
const ErfGrad = "ErfGrad"

// FuseErfGrad rewrites the chain Erf's gradient rule emits,
// Mul(dY, Mul(C, Exp(Neg(Mul(X, X))))) with C a scalar (an initializer, a
// Constant, or a CastLike of one) and every intermediate read only by the
// next op, into one ErfGrad(dY, X, C) node. The operands of each Mul may
// come in either order. Nodes are in topological order. It returns the
// number of rewrites.
func FuseErfGrad(g *Graph) int {
	readers := readCounts(g)
	scalars := constantsWhere(g, func(t *Tensor) bool { return t != nil && t.DType.IsFloat() && t.Size() == 1 })
	producer := map[string]*Node{}
	for _, n := range g.Nodes {
		if isPlain(n) && len(n.Outputs) == 1 {
			producer[n.Outputs[0]] = n
		}
	}
	// only returns the producer of name when it is a plain op of type op
	// whose output only one node reads.
	only := func(name, op string) *Node {
		p := producer[name]
		if p == nil || p.OpType != op || readers[name] != 1 {
			return nil
		}
		return p
	}
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != "Mul" || !isPlain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
			continue
		}
		for side := 0; side < 2; side++ {
			dy, t := n.Inputs[side], n.Inputs[1-side]
			scale := only(t, "Mul") // C · e
			if scale == nil || len(scale.Inputs) != 2 {
				continue
			}
			var c, e string
			switch {
			case scalars[scale.Inputs[0]]:
				c, e = scale.Inputs[0], scale.Inputs[1]
			case scalars[scale.Inputs[1]]:
				c, e = scale.Inputs[1], scale.Inputs[0]
			default:
				continue
			}
			exp := only(e, "Exp")
			if exp == nil || len(exp.Inputs) != 1 {
				continue
			}
			neg := only(exp.Inputs[0], "Neg")
			if neg == nil || len(neg.Inputs) != 1 {
				continue
			}
			sq := only(neg.Inputs[0], "Mul")
			if sq == nil || len(sq.Inputs) != 2 || sq.Inputs[0] != sq.Inputs[1] || sq.Inputs[0] == "" {
				continue
			}
			g.Nodes[i] = &Node{Name: n.Name, OpType: ErfGrad, Domain: FusedDomain,
				Inputs: []string{dy, sq.Inputs[0], c}, Outputs: []string{n.Outputs[0]}}
			drop[scale], drop[exp], drop[neg], drop[sq] = true, true, true, true
			break
		}
	}
	if len(drop) == 0 {
		return 0
	}
	removeNodes(g, drop)
	return len(drop) / 4
}

// isPlain reports whether n is an ai.onnx op.
func isPlain(n *Node) bool { return n.Domain == "" || n.Domain == "ai.onnx" }

// readCounts counts the readers of every name: node inputs, and (counted
// twice, so that they never look like a single reader) graph outputs and
// names that subgraphs read.
func readCounts(g *Graph) map[string]int {
	readers := map[string]int{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			readers[in]++
		}
		for _, sg := range n.Subgraphs() {
			forEachName(sg, func(name string) { readers[name] += 2 })
		}
	}
	for _, o := range g.Outputs {
		readers[o.Name] += 2
	}
	return readers
}

// MatMulAdd is the fused op of FuseMatMulBias:
//
//	MatMulAdd(A, B, Bias, transA, transB) = Add(TransposedMatMul(A, B, transA, transB), Bias)
//
// where Bias broadcasts along the rows of the product without changing its
// shape (a bias vector). A backend adds the bias in the GEMM's epilogue.
const MatMulAdd = "MatMulAdd"

// FuseMatMulBias rewrites Add(P, Bias) where P is the output of a MatMul
// (or TransposedMatMul) into one MatMulAdd node, when the shapes of a
// specialised graph (its ValueInfo) show that Bias is a float32 row vector
// of P's last dimension and the sum has P's shape. Besides the Add, P may
// only be read as the shape operand of SumToShape (the gradient of the
// Add), which then reads the sum instead (same shape). It returns the
// number of rewrites.
func FuseMatMulBias(g *Graph) int {
	producer := map[string]*Node{}
	for _, n := range g.Nodes {
		if len(n.Outputs) == 1 && (isMatMul(n) || n.Domain == FusedDomain && n.OpType == TransposedMatMul) {
			producer[n.Outputs[0]] = n
		}
	}
	if len(producer) == 0 {
		return 0
	}
	// Readers of each product: the Adds, and SumToShape shape operands.
	adds, likes, others := map[string]int{}, map[string][]int{}, map[string]int{}
	for i, n := range g.Nodes {
		for k, in := range n.Inputs {
			if producer[in] == nil {
				continue
			}
			switch {
			case n.OpType == "Add" && isPlain(n):
				adds[in]++
			case n.OpType == "SumToShape" && n.Domain == InternalDomain && k == 1:
				likes[in] = append(likes[in], i)
			default:
				others[in]++
			}
		}
		for _, sg := range n.Subgraphs() {
			forEachName(sg, func(name string) { others[name]++ })
		}
	}
	for _, o := range g.Outputs {
		others[o.Name]++
	}
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != "Add" || !isPlain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		for side := 0; side < 2; side++ {
			pn, bias := n.Inputs[side], n.Inputs[1-side]
			mm := producer[pn]
			if mm == nil || adds[pn] != 1 || others[pn] != 0 || drop[mm] || pn == bias {
				continue
			}
			ps, pd, ok1 := knownTensorType(g, pn)
			os, od, ok2 := knownTensorType(g, n.Outputs[0])
			bs, bd, ok3 := knownTensorType(g, bias)
			if !ok1 || !ok2 {
				// Shapes lost downstream of a dynamic Reshape: a 1-D
				// bias as long as the product's columns, read off the
				// weight operand, broadcasts without changing the
				// product's shape, whatever its leading dimensions.
				if ok3 && len(bs) == 1 && bd == Float32 && productColumns(g, mm) == bs[0] {
					ps, pd, os, od, ok1, ok2 = bs, Float32, bs, Float32, true, true
				}
			}
			if !ok1 || !ok2 || !ok3 || pd != Float32 || od != Float32 || bd != Float32 || !SameShape(ps, os) || !isBiasRow(bs, ps) {
				continue
			}
			g.Nodes[i] = &Node{Name: n.Name, OpType: MatMulAdd, Domain: FusedDomain,
				Inputs: []string{mm.Inputs[0], mm.Inputs[1], bias}, Outputs: []string{n.Outputs[0]}, Attrs: productAttrs(mm)}
			for _, j := range likes[pn] {
				st := *g.Nodes[j]
				st.Inputs = []string{st.Inputs[0], n.Outputs[0]}
				g.Nodes[j] = &st
			}
			drop[mm] = true
			break
		}
	}
	if len(drop) == 0 {
		return 0
	}
	removeNodes(g, drop)
	return len(drop)
}

// isBiasRow reports whether a bias of shape bs is a row vector for a
// product of shape ps: every dim but the last 1, the last ps's last (what
// a GEMM epilogue adds, row by row).
func isBiasRow(bs, ps []int) bool {
	if len(ps) == 0 || len(bs) == 0 || len(bs) > len(ps) || bs[len(bs)-1] != ps[len(ps)-1] {
		return false
	}
	for _, d := range bs[:len(bs)-1] {
		if d != 1 {
			return false
		}
	}
	return true
}

// knownTensorType returns the fully known shape and the dtype g.ValueInfo
// (or an initializer) gives name, and false when either is not known.
func knownTensorType(g *Graph, name string) ([]int, DType, bool) {
	vi := g.ValueInfo[name]
	if vi == nil || vi.Type == nil || vi.Type.Kind != KindTensor || !vi.Type.HasShape {
		if t := g.Initializers[name]; t != nil {
			return t.Shape, t.DType, true
		}
		return nil, Undefined, false
	}
	s := make([]int, len(vi.Type.Shape))
	for i, d := range vi.Type.Shape {
		if !d.Known {
			return nil, Undefined, false
		}
		s[i] = int(d.Value)
	}
	return s, vi.Type.DType, true
}

// productColumns returns the number of columns of the product mm computes
// (the last dimension of its output), read off its second operand's known
// shape and float32 type (both operands of a MatMul have one type), or -1.
func productColumns(g *Graph, mm *Node) int {
	bs, bd, okB := knownTensorType(g, mm.Inputs[1])
	if !okB || bd != Float32 || len(bs) < 2 {
		return -1
	}
	if mm.OpType == TransposedMatMul && mm.AttrInt("transB", 0) != 0 {
		return bs[len(bs)-2]
	}
	return bs[len(bs)-1]
}

// GemmRelu is the fused op of FuseGemmRelu: Relu(Gemm(A, B, C)) with
// Gemm's inputs and attributes; a backend applies the Relu in the GEMM's
// epilogue.
const GemmRelu = "GemmRelu"

// FuseGemmRelu rewrites Relu(Gemm(...)) into one GemmRelu node when the
// Gemm's output is read only by that Relu, as the X operand of ReluGrad
// nodes (run FuseReluGrad first) and as the type operand of CastLike (what
// a gradient rule's ScalarLike leaves), which then read the Relu's output
// instead: relu(x) > 0 exactly where x > 0 (NaN and -0 included), so the
// gradient is unchanged, and the type is the same. It returns the number
// of rewrites.
func FuseGemmRelu(g *Graph) int {
	gemms := map[string]*Node{}
	for _, n := range g.Nodes {
		if n.OpType == "Gemm" && isPlain(n) && len(n.Outputs) == 1 && n.Outputs[0] != "" {
			gemms[n.Outputs[0]] = n
		}
	}
	if len(gemms) == 0 {
		return 0
	}
	relus, grads, others := reluReaders(g, gemms)
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != "Relu" || !isPlain(n) || len(n.Inputs) != 1 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		x := n.Inputs[0]
		gm := gemms[x]
		if gm == nil || relus[x] != 1 || others[x] != 0 {
			continue
		}
		attrs := make(map[string]*Attr, len(gm.Attrs))
		for k, v := range gm.Attrs {
			attrs[k] = v
		}
		g.Nodes[i] = &Node{Name: n.Name, OpType: GemmRelu, Domain: FusedDomain,
			Inputs: append([]string{}, gm.Inputs...), Outputs: []string{n.Outputs[0]}, Attrs: attrs}
		for _, j := range grads[x] {
			rg := *g.Nodes[j]
			rg.Inputs = []string{rg.Inputs[0], n.Outputs[0]}
			g.Nodes[j] = &rg
		}
		drop[gm] = true
	}
	if len(drop) == 0 {
		return 0
	}
	removeNodes(g, drop)
	return len(drop)
}

// reluReaders classifies the reads of the values in outs (a producer's
// output name -> the producer): relus counts the Relu nodes reading each;
// retyped lists the nodes that may read the Relu's output instead (the X
// operand of ReluGrad: relu(x) > 0 exactly where x > 0; the type operand of
// CastLike); others counts every other read, graph outputs and subgraph
// reads included.
func reluReaders(g *Graph, outs map[string]*Node) (relus map[string]int, retyped map[string][]int, others map[string]int) {
	relus, retyped, others = map[string]int{}, map[string][]int{}, map[string]int{}
	for i, n := range g.Nodes {
		for k, in := range n.Inputs {
			if outs[in] == nil {
				continue
			}
			switch {
			case n.OpType == "Relu" && isPlain(n) && len(n.Inputs) == 1 && len(n.Outputs) == 1 && n.Outputs[0] != "":
				relus[in]++
			case n.OpType == ReluGrad && n.Domain == FusedDomain && k == 1,
				n.OpType == "CastLike" && isPlain(n) && k == 1:
				retyped[in] = append(retyped[in], i)
			default:
				others[in]++
			}
		}
		for _, sg := range n.Subgraphs() {
			forEachName(sg, func(name string) { others[name]++ })
		}
	}
	for _, o := range g.Outputs {
		others[o.Name]++
	}
	return relus, retyped, others
}

// GeluErf is the fused op of FuseGeluErf, the exact GELU as PyTorch exports
// nn.GELU() (C1 = √2, C2 = 1, C3 = 0.5, all scalars):
//
//	D = Div(X, C1); A = Add(Erf(D), C2); Y = Mul(Mul(X, A), C3)
//
// with outputs (Y, D, A): D and A are what the gradient rules of Erf and
// Mul read. A backend computes the three in one pass, rounding after each
// op as the unfused kernels do.
const GeluErf = "GeluErf"

// FuseGeluErf rewrites the exact-GELU chain above (the operands of Add and
// of both Muls in either order) into one GeluErf(X, C1, C2, C3) node with
// outputs (Y, D, A), when Erf(D) and Mul(X, A) are read only by the next op
// of the chain and every other reader of D and A comes after the final Mul
// (where the fused node goes). Nodes are in topological order. It returns
// the number of rewrites.
func FuseGeluErf(g *Graph) int {
	readers := readCounts(g)
	scalars := constantsWhere(g, func(t *Tensor) bool { return t != nil && t.DType.IsFloat() && t.Size() == 1 })
	producer := map[string]*Node{}
	position := map[*Node]int{}
	for i, n := range g.Nodes {
		position[n] = i
		if isPlain(n) && len(n.Outputs) == 1 && n.Outputs[0] != "" {
			producer[n.Outputs[0]] = n
		}
	}
	// binary returns the producer of name when it is a plain op of type op
	// with two inputs, and which of them is the scalar (-1: neither).
	binary := func(name, op string) (*Node, int) {
		p := producer[name]
		if p == nil || p.OpType != op || len(p.Inputs) != 2 {
			return nil, -1
		}
		for k := 1; k >= 0; k-- {
			if scalars[p.Inputs[k]] {
				return p, k
			}
		}
		return p, -1
	}
	// laterReaders reports whether every reader of name other than the
	// chain's nodes sits after position at.
	laterReaders := func(name string, at int, chain map[*Node]bool) bool {
		for i, n := range g.Nodes {
			if i > at || chain[n] {
				continue
			}
			for _, in := range n.Inputs {
				if in == name {
					return false
				}
			}
			for _, sg := range n.Subgraphs() {
				found := false
				forEachName(sg, func(s string) { found = found || s == name })
				if found {
					return false
				}
			}
		}
		return true
	}
	// before reports whether name is defined ahead of position at (an
	// initializer, a graph input, or an earlier node's output).
	inputs := map[string]bool{}
	for _, in := range g.Inputs {
		inputs[in.Name] = true
	}
	before := func(name string, at int) bool {
		if g.Initializers[name] != nil || inputs[name] {
			return true
		}
		p := producer[name]
		return p != nil && position[p] < at
	}
	drop := map[*Node]bool{}
	for i, n := range g.Nodes {
		if n.OpType != "Mul" || !isPlain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" || drop[n] {
			continue
		}
		_, k3 := binary(n.Outputs[0], "Mul")
		if k3 < 0 {
			continue
		}
		c3, mName := n.Inputs[k3], n.Inputs[1-k3]
		m := producer[mName]
		if m == nil || m.OpType != "Mul" || len(m.Inputs) != 2 || readers[mName] != 1 {
			continue
		}
		for side := 0; side < 2; side++ {
			x, aName := m.Inputs[side], m.Inputs[1-side]
			add, k2 := binary(aName, "Add")
			if add == nil || k2 < 0 {
				continue
			}
			c2, eName := add.Inputs[k2], add.Inputs[1-k2]
			erf := producer[eName]
			if erf == nil || erf.OpType != "Erf" || len(erf.Inputs) != 1 || readers[eName] != 1 {
				continue
			}
			dName := erf.Inputs[0]
			div := producer[dName]
			if div == nil || div.OpType != "Div" || len(div.Inputs) != 2 || div.Inputs[0] != x || x == "" || !scalars[div.Inputs[1]] {
				continue
			}
			chain := map[*Node]bool{div: true, erf: true, add: true, m: true, n: true}
			if drop[div] || drop[erf] || drop[add] || drop[m] {
				continue
			}
			// The fused node goes where the Div was when C2 and C3 are
			// defined by then, else where the final Mul was (and then
			// nothing before it may read D or A).
			at := i
			if before(c2, position[div]) && before(c3, position[div]) {
				at = position[div]
			} else if !laterReaders(dName, i, chain) || !laterReaders(aName, i, chain) {
				continue
			}
			fusedNode := &Node{Name: n.Name, OpType: GeluErf, Domain: FusedDomain,
				Inputs: []string{x, div.Inputs[1], c2, c3}, Outputs: []string{n.Outputs[0], dName, aName}}
			for _, c := range []*Node{div, erf, add, m, n} {
				drop[c] = true
			}
			delete(drop, g.Nodes[at])
			g.Nodes[at] = fusedNode
			break
		}
	}
	if len(drop) == 0 {
		return 0
	}
	removeNodes(g, drop)
	return len(drop) / 4
}

// constantsWhere returns the names of the constant values whose tensor
// satisfies pred: initializers, Constant node outputs, and CastLike of
// either (what a gradient rule's ScalarLike leaves when the CastLike is not
// folded because its second input is not constant). Nodes are in
// topological order.
func constantsWhere(g *Graph, pred func(*Tensor) bool) map[string]bool {
	out := map[string]bool{}
	for name, t := range g.Initializers {
		if pred(t) {
			out[name] = true
		}
	}
	for _, n := range g.Nodes {
		switch {
		case n.OpType == "Constant" && len(n.Outputs) == 1 && n.Attr("value") != nil:
			if pred(n.Attr("value").T) {
				out[n.Outputs[0]] = true
			}
		case n.OpType == "CastLike" && len(n.Inputs) == 2 && len(n.Outputs) == 1 && out[n.Inputs[0]]:
			out[n.Outputs[0]] = true
		}
	}
	return out
}

// copyNode is a copy of n with an attribute map of its own, to change
// where n (and its map) may be shared with the graph this one was
// specialised from.
func copyNode(n *Node) *Node {
	c := *n
	c.Attrs = maps.Clone(n.Attrs)
	if c.Attrs == nil {
		c.Attrs = map[string]*Attr{}
	}
	return &c
}

// replaceAndRemove puts replace[n] in the place of every node n it
// names, then deletes the nodes in drop (a fusion's last step).
func replaceAndRemove(g *Graph, replace map[*Node]*Node, drop map[*Node]bool) {
	for i, n := range g.Nodes {
		if r := replace[n]; r != nil {
			g.Nodes[i] = r
		}
	}
	removeNodes(g, drop)
}

// removeNodes deletes the nodes in drop from g, keeping the order of the
// rest.
func removeNodes(g *Graph, drop map[*Node]bool) {
	keep := g.Nodes[:0]
	for _, n := range g.Nodes {
		if !drop[n] {
			keep = append(keep, n)
		}
	}
	clear(g.Nodes[len(keep):])
	g.Nodes = keep
}
