package graph

import (
	"math"
	"slices"
)

// Attention reads its queries, keys and values as strided views of one
// projection: qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4)[i] (a
// Transpose, then a Gather of a scalar index), multiplies them with the
// keys' last two axes swapped, and lays the result out as
// (attn @ v).transpose(1, 2). Run as written, every Transpose copies its
// tensor, and the gradient of each Gather is a zeroed tensor three times
// the size of q, k or v, summed by Adds and transposed back. The fused ops
// below let a backend read and write such views in place.

// PermutedMatMul is the fused op of FuseAttentionViews: a matrix product
// whose operands and result are axis permutations (and scalar selections)
// of the tensors it reads and writes.
//
//	PermutedMatMul(X0, X1[, X2]) = Transpose(R, permY)
//
// Input Xi is read through its view Vi: view axis j is axis axesI[j] of Xi
// (attribute axes0, axes1 or axes2), and the axes of Xi that no view axis
// names are fixed at the indices of fixedI, a list of (axis, index) pairs
// (a negative index counts from the end). An absent axesI means the view
// is Xi itself. That is Gather(…Gather(Transpose(Xi, perm), index)…) with
// scalar indices, written as one map. R depends on the attribute grad:
//
//	grad 0 (default): R = MatMul(V0, V1)
//	grad 1:           R = MatMulGradA(V0, V1, V2) (dY·Bᵀ, shaped like V1)
//	grad 2:           R = MatMulGradB(V0, V1, V2) (Aᵀ·dY, shaped like V2)
//
// permY absent means R itself. With the float attribute alpha (default 1)
// the output is Mul(Transpose(R, permY), alpha): the scale of attention's
// scores, which a GEMM applies as it stores each sum (the same rounding as
// the Mul when the shared dimension fits one block of the GEMM). A backend
// computes R as GEMMs that read each matrix of a view where it lies (rows
// and columns strided, batch dims anywhere) and store it where
// Transpose(R, permY) keeps it.
const PermutedMatMul = "PermutedMatMul"

// GatherGradSum is the fused op of FuseAttentionViews for the gradient of
// several scalar Gathers of one tensor, summed:
//
//	GatherGradSum(G0, …, Gk-1, X) = Transpose(Σj GatherGrad(Gj, V, indices[j]), permY)
//
// with GatherGrad's axis attribute, V the view of X given by axes and
// fixed (as PermutedMatMul's inputs; V only gives the shape) and each index
// a scalar. When the indices name every index of the axis once, a backend
// writes each Gj once, without zeroing a tensor per index or adding them.
const GatherGradSum = "GatherGradSum"

// viewChain is a strided view of a base value: view axis j is base axis
// axes[j]; the base axes not in axes are fixed at the indices in fixed
// (pairs of axis, index).
type viewChain struct {
	base  string
	axes  []int64
	fixed []int64
	// views reports whether the chain went through any Transpose or
	// Gather (else the view is the base).
	views bool
	// swapOnly is true when every Transpose in the chain swapped the
	// last two axes and no Gather was seen: FuseTransposedMatMul's
	// business.
	swapOnly bool
}

// FuseAttentionViews rewrites the attention pattern above into fused
// nodes that read the tensors the views come from:
//
//   - MatMul, and the internal MatMulGradA and MatMulGradB, whose operands
//     are scalar Gathers (any axis, constant index) and Transposes of other
//     values, into PermutedMatMul nodes that read those values. A Transpose
//     that is the product's only reader becomes the node's permY; then a
//     Mul by a float32 scalar constant that is the only reader of the
//     result (but for SumToShapes that read it for its shape, which then
//     read the Mul's output) becomes its alpha. Products whose operands are
//     at most swaps of their last two axes are left to
//     FuseTransposedMatMul, so that linear layers keep their MatMulAdd
//     epilogue.
//   - Sums (trees of Add) of GatherGrad nodes on one data value, each with
//     a constant scalar index, each read only by the sum, into one
//     GatherGradSum; a Transpose that is the sum's only reader becomes its
//     permY.
//
// Gathers and Transposes that nothing reads any more are left for
// RemoveDeadNodes. Nodes are in topological order. A chain of views is
// followed up to its last Transpose, whose perm gives the rank that the
// Gathers below it need. It returns the number of fused nodes made.
func FuseAttentionViews(g *Graph) int {
	ix := indexAttentionViews(g)
	drop := map[*Node]bool{}
	replaced := map[*Node]*Node{}
	fused := 0
	for _, n := range g.Nodes {
		if ix.fusePermutedMatMul(n, drop, replaced) {
			fused++
		}
	}
	fused += fuseGatherGradSums(g, ix.producer, ix.readers, ix.scalarIndex, ix.outPerm, drop, replaced)
	if fused == 0 {
		return 0
	}
	replaceAndRemove(g, replaced, drop)
	return fused
}

// attentionViews indexes what FuseAttentionViews asks of a graph: who
// produces and reads each value, the constants, and the Transpose, Mul and
// SumToShape readers of values.
type attentionViews struct {
	producer map[string]*Node
	consts   map[string]*Tensor
	readers  map[string]int
	// transposeReader and mulReader: a Transpose (with a perm) and a plain
	// two-input Mul, or a Div of the value by something, reading each
	// value; likes: the SumToShape nodes that read a value only for its
	// shape (input 1).
	transposeReader, mulReader map[string]*Node
	likes                      map[string][]*Node
}

func indexAttentionViews(g *Graph) *attentionViews {
	ix := &attentionViews{producer: map[string]*Node{}, consts: map[string]*Tensor{}, readers: readCounts(g),
		transposeReader: map[string]*Node{}, mulReader: map[string]*Node{}, likes: map[string][]*Node{}}
	for name, t := range g.Initializers {
		ix.consts[name] = t
	}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o != "" {
				ix.producer[o] = n
			}
		}
		if n.OpType == "Constant" && isPlain(n) && len(n.Outputs) == 1 && n.Attr("value") != nil {
			ix.consts[n.Outputs[0]] = n.Attr("value").T
		}
		if n.OpType == "Transpose" && isPlain(n) && len(n.Inputs) == 1 && len(n.Outputs) == 1 && n.Outputs[0] != "" && n.Attr("perm") != nil {
			ix.transposeReader[n.Inputs[0]] = n
		}
		if n.OpType == "Mul" && isPlain(n) && len(n.Inputs) == 2 && len(n.Outputs) == 1 && n.Outputs[0] != "" {
			for _, in := range n.Inputs {
				ix.mulReader[in] = n
			}
		}
		if n.OpType == "Div" && isPlain(n) && len(n.Inputs) == 2 && len(n.Outputs) == 1 && n.Outputs[0] != "" {
			ix.mulReader[n.Inputs[0]] = n
		}
		if n.Domain == InternalDomain && n.OpType == "SumToShape" && len(n.Inputs) == 2 && n.Inputs[0] != n.Inputs[1] {
			ix.likes[n.Inputs[1]] = append(ix.likes[n.Inputs[1]], n)
		}
	}
	return ix
}

// scalarIndex returns the value of name when it is a constant integer
// scalar.
func (ix *attentionViews) scalarIndex(name string) (int64, bool) {
	t := ix.consts[name]
	if t == nil || t.Rank() != 0 || !t.DType.IsInt() || t.Validate() != nil || t.Size() != 1 {
		return 0, false
	}
	return t.Int(0), true
}

// outPerm returns the Transpose that is the only reader of name, and its
// perm.
func (ix *attentionViews) outPerm(name string) (*Node, []int64) {
	t := ix.transposeReader[name]
	if t == nil || ix.readers[name] != 1 {
		return nil, nil
	}
	perm := t.AttrInts("perm", nil)
	if !isPerm(perm) {
		return nil, nil
	}
	return t, perm
}

// scaleReader returns the Mul that is the only reader of name (but for
// SumToShapes that read it for its shape) when it multiplies it by a
// float32 scalar constant (attention's 1/√d), and the scalar; or such a
// Div of name by a power of two (the gradient of a query scaled before
// its product), and the reciprocal, which the product's alpha applies
// with the same rounding.
func (ix *attentionViews) scaleReader(name string) (*Node, float32) {
	m := ix.mulReader[name]
	if m == nil || ix.readers[name] != 1+len(ix.likes[name]) {
		return nil, 0
	}
	f, _, ok := ix.scaleOf(m, name)
	if !ok {
		return nil, 0
	}
	return m, f
}

// scaleOf returns the factor a plain Div or Mul node n applies to its
// operand x, a value that is not a constant, when the other operand is a
// float32 scalar constant c: c for Mul (either order), 1/c for Div(x, c)
// only where c is a power of two (otherwise 1/c would round), and whether
// the factor is a power of two.
func (ix *attentionViews) scaleOf(n *Node, x string) (factor float32, pow2, ok bool) {
	if n == nil || !isPlain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || ix.consts[x] != nil {
		return 0, false, false
	}
	switch {
	case n.OpType == "Div" && n.Inputs[0] == x && n.Inputs[1] != x:
		c, okc := ix.scalarF32(n.Inputs[1])
		if !okc || !powerOfTwo(c) || !powerOfTwo(1/c) {
			return 0, false, false
		}
		return 1 / c, true, true
	case n.OpType == "Mul" && (n.Inputs[0] == x) != (n.Inputs[1] == x):
		other := n.Inputs[0]
		if other == x {
			other = n.Inputs[1]
		}
		c, okc := ix.scalarF32(other)
		return c, okc && powerOfTwo(c), okc
	}
	return 0, false, false
}

// scalarF32 returns the value of name when it is a float32 scalar
// constant (rank 0 or one element).
func (ix *attentionViews) scalarF32(name string) (float32, bool) {
	t := ix.consts[name]
	if t == nil || t.DType != Float32 || t.Size() != 1 || t.Rank() > 1 || t.Validate() != nil {
		return 0, false
	}
	return float32(t.Float(0)), true
}

// powerOfTwo reports whether c is ±2^e for a normal float32: scaling by it
// is exact wherever the result stays normal, so it can move across a
// product (Σ (c·a)·b = c·Σ a·b, rounding for rounding).
func powerOfTwo(c float32) bool {
	b := math.Float32bits(c)
	e := b >> 23 & 0xff
	return b&0x7fffff == 0 && e != 0 && e != 0xff
}

// pow2Scaled returns x when name is Div(x, c) or Mul(x, c) (either order)
// for a float32 scalar constant whose factor on x (1/c or c) is a power of
// two, and that factor: torch's scaled dot-product attention divides the
// queries by √d before their product (8 for heads of 64), and that scale
// can ride on the product's alpha instead, bit for bit, leaving the
// queries' view to be read in place.
func (ix *attentionViews) pow2Scaled(name string) (x string, factor float32, ok bool) {
	p := ix.producer[name]
	if p == nil {
		return "", 0, false
	}
	for _, in := range p.Inputs {
		if f, pow2, okf := ix.scaleOf(p, in); okf && pow2 {
			return in, f, true
		}
	}
	return "", 0, false
}

// scaledOperand reports whether a product's result scales with its
// operand i: every operand of a product (grad 0), and the gradient and
// the operand it is multiplied by for MatMulGradA (dY·Bᵀ: inputs 0 and 2)
// and MatMulGradB (Aᵀ·dY: inputs 0 and 1); the other operand of a
// gradient gives only its shape.
func scaledOperand(grad int64, i int) bool {
	switch grad {
	case 1:
		return i != 1
	case 2:
		return i != 2
	}
	return true
}

// fusePermutedMatMul records in replaced the PermutedMatMul that replaces
// product n (MatMul, MatMulGradA or MatMulGradB) when an operand is a view
// worth fusing, absorbing an only-reader Transpose (permY) and then a
// scalar Mul (alpha) into it; the absorbed nodes go into drop. It reports
// whether it fused n.
func (ix *attentionViews) fusePermutedMatMul(n *Node, drop map[*Node]bool, replaced map[*Node]*Node) bool {
	var grad int64
	switch {
	case isMatMul(n):
	case n.Domain == InternalDomain && n.OpType == "MatMulGradA" && len(n.Inputs) == 3 && len(n.Outputs) == 1:
		grad = 1
	case n.Domain == InternalDomain && n.OpType == "MatMulGradB" && len(n.Inputs) == 3 && len(n.Outputs) == 1:
		grad = 2
	default:
		return false
	}
	if n.Outputs[0] == "" || slices.Contains(n.Inputs, "") {
		return false
	}
	chains := make([]viewChain, len(n.Inputs))
	worth := false
	scale := float32(1)
	for i, in := range n.Inputs {
		// An operand scaled by a power of two (the queries divided by
		// √d) is read unscaled, its view in place, and the factor goes
		// to alpha. The scale is a one-element constant and the view has
		// a rank, so the scaled operand had the view's shape.
		scaled := false
		if x, f, ok := ix.pow2Scaled(in); ok {
			if c := resolveView(x, ix.producer, ix.scalarIndex); c.views && !c.swapOnly {
				chains[i], scaled = c, true
				if scaledOperand(grad, i) {
					scale *= f
				}
			}
		}
		if !scaled {
			chains[i] = resolveView(in, ix.producer, ix.scalarIndex)
		}
		worth = worth || (chains[i].views && !chains[i].swapOnly)
	}
	if !worth {
		return false
	}
	out := n.Outputs[0]
	attrs := map[string]*Attr{}
	if grad != 0 {
		attrs["grad"] = &Attr{Name: "grad", Type: AttrInt, I: grad}
	}
	inputs := make([]string, len(n.Inputs))
	for i, c := range chains {
		inputs[i] = c.base
		if c.views {
			a, f := viewAttrNames(i)
			attrs[a] = IntsAttr(a, c.axes...)
			if len(c.fixed) > 0 {
				attrs[f] = IntsAttr(f, c.fixed...)
			}
		}
	}
	if t, perm := ix.outPerm(out); t != nil && !drop[t] {
		attrs["permY"] = IntsAttr("permY", perm...)
		out = t.Outputs[0]
		drop[t] = true
	}
	alpha := scale
	if m, a := ix.scaleReader(out); m != nil && !drop[m] {
		alpha *= a // exact: scale is a power of two
		// The scaled product has the product's shape: SumToShapes (the
		// Mul's gradient) read that instead.
		for _, l := range ix.likes[out] {
			c := *l
			c.Inputs = []string{l.Inputs[0], m.Outputs[0]}
			replaced[l] = &c
		}
		out = m.Outputs[0]
		drop[m] = true
	}
	if alpha != 1 {
		attrs["alpha"] = &Attr{Name: "alpha", Type: AttrFloat, F: alpha}
	}
	replaced[n] = &Node{Name: n.Name, OpType: PermutedMatMul, Domain: FusedDomain,
		Inputs: inputs, Outputs: []string{out}, Attrs: attrs}
	return true
}

// viewAttrNames are the attribute names of input i's view.
func viewAttrNames(i int) (axes, fixed string) {
	d := string(rune('0' + i))
	return "axes" + d, "fixed" + d
}

// resolveView follows name back through Transposes (with a perm) and
// Gathers of a constant scalar index, up to the last Transpose on the way
// (whose perm gives the base's rank, which the Gathers' axes need).
func resolveView(name string, producer map[string]*Node, scalarIndex func(string) (int64, bool)) viewChain {
	// Walk up, recording the steps from the view towards the base.
	type step struct {
		perm  []int64 // a Transpose (else a Gather)
		axis  int64
		index int64
		input string
	}
	var steps []step
	top := -1 // the last Transpose in steps
	for cur := name; ; {
		p := producer[cur]
		if p == nil || !isPlain(p) || len(p.Outputs) != 1 || len(p.Inputs) == 0 || p.Inputs[0] == "" {
			break
		}
		if p.OpType == "Transpose" && len(p.Inputs) == 1 {
			perm := p.AttrInts("perm", nil)
			if !isPerm(perm) {
				break
			}
			steps = append(steps, step{perm: perm, input: p.Inputs[0]})
			top = len(steps) - 1
		} else if p.OpType == "Gather" && len(p.Inputs) == 2 {
			idx, ok := scalarIndex(p.Inputs[1])
			if !ok {
				break
			}
			steps = append(steps, step{axis: p.AttrInt("axis", 0), index: idx, input: p.Inputs[0]})
		} else {
			break
		}
		cur = p.Inputs[0]
	}
	if top < 0 {
		return viewChain{base: name}
	}
	steps = steps[:top+1]
	base := steps[top].input
	rank := len(steps[top].perm)
	// Replay from the base down: view axis j of the current value is base
	// axis axes[j].
	axes := make([]int64, rank)
	for i := range axes {
		axes[i] = int64(i)
	}
	var fixed []int64
	swapOnly := true
	for i := top; i >= 0; i-- {
		s := steps[i]
		if s.perm != nil {
			if len(s.perm) != len(axes) {
				return viewChain{base: name}
			}
			if !isSwapLast2Perm(s.perm) {
				swapOnly = false
			}
			next := make([]int64, len(s.perm))
			for j, p := range s.perm {
				next[j] = axes[p]
			}
			axes = next
			continue
		}
		swapOnly = false
		ax := s.axis
		if ax < 0 {
			ax += int64(len(axes))
		}
		if ax < 0 || ax >= int64(len(axes)) {
			return viewChain{base: name}
		}
		fixed = append(fixed, axes[ax], s.index)
		axes = append(axes[:ax:ax], axes[ax+1:]...)
	}
	return viewChain{base: base, axes: axes, fixed: fixed, views: true, swapOnly: swapOnly}
}

// isPerm reports whether p is a permutation of 0..len(p)-1.
func isPerm(p []int64) bool {
	if len(p) == 0 {
		return false
	}
	seen := make([]bool, len(p))
	for _, v := range p {
		if v < 0 || v >= int64(len(p)) || seen[v] {
			return false
		}
		seen[v] = true
	}
	return true
}

// isSwapLast2Perm reports whether p is [0, …, r-3, r-1, r-2] or the
// identity.
func isSwapLast2Perm(p []int64) bool {
	r := len(p)
	for i, v := range p {
		want := int64(i)
		switch {
		case r >= 2 && i == r-2 && v == int64(r-1):
			want = v
		case r >= 2 && i == r-1 && v == int64(r-2):
			want = v
		}
		if v != want {
			return false
		}
	}
	return true
}

// fuseGatherGradSums finds trees of Add whose leaves are GatherGrad nodes
// (one data value, one axis, constant scalar indices), every inner value
// read once, and records their GatherGradSum replacement (at the root
// Add) in replaced and the rest of the tree in drop.
func fuseGatherGradSums(g *Graph, producer map[string]*Node, readers map[string]int,
	scalarIndex func(string) (int64, bool), outPerm func(string) (*Node, []int64),
	drop map[*Node]bool, replaced map[*Node]*Node) int {
	isGG := func(n *Node) bool {
		return n != nil && n.Domain == InternalDomain && n.OpType == "GatherGrad" && len(n.Inputs) == 3 &&
			len(n.Outputs) == 1 && n.Inputs[0] != "" && n.Inputs[1] != ""
	}
	isAdd := func(n *Node) bool {
		return n != nil && n.OpType == "Add" && isPlain(n) && len(n.Inputs) == 2 && len(n.Outputs) == 1 && n.Outputs[0] != ""
	}
	// leaves collects the GatherGrad leaves of the Add tree rooted at n
	// (in left-to-right order) and its inner Adds; false if it is not
	// such a tree.
	var leaves func(name string, root bool, gg, adds *[]*Node) bool
	leaves = func(name string, root bool, gg, adds *[]*Node) bool {
		p := producer[name]
		if p == nil || (!root && readers[name] != 1) || drop[p] || replaced[p] != nil {
			return false
		}
		switch {
		case isGG(p):
			*gg = append(*gg, p)
			return true
		case isAdd(p):
			*adds = append(*adds, p)
			return leaves(p.Inputs[0], false, gg, adds) && leaves(p.Inputs[1], false, gg, adds)
		}
		return false
	}
	fused := 0
	// Roots: Adds whose output is not itself read by one Add of a tree
	// (walk the nodes backwards so that the biggest tree is seen first).
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		if !isAdd(n) || drop[n] || replaced[n] != nil {
			continue
		}
		var gg, adds []*Node
		if !leaves(n.Outputs[0], true, &gg, &adds) || len(gg) < 2 {
			continue
		}
		data := gg[0].Inputs[1]
		axis := gg[0].AttrInt("axis", 0)
		indices := make([]int64, len(gg))
		ok := true
		for j, l := range gg {
			idx, isScalar := scalarIndex(l.Inputs[2])
			ok = ok && isScalar && l.Inputs[1] == data && l.AttrInt("axis", 0) == axis
			indices[j] = idx
		}
		if !ok {
			continue
		}
		chain := resolveView(data, producer, scalarIndex)
		inputs := make([]string, 0, len(gg)+1)
		for _, l := range gg {
			inputs = append(inputs, l.Inputs[0])
		}
		inputs = append(inputs, chain.base)
		attrs := map[string]*Attr{
			"axis":    {Name: "axis", Type: AttrInt, I: axis},
			"indices": IntsAttr("indices", indices...),
		}
		if chain.views {
			attrs["axes"] = IntsAttr("axes", chain.axes...)
			if len(chain.fixed) > 0 {
				attrs["fixed"] = IntsAttr("fixed", chain.fixed...)
			}
		}
		out := n.Outputs[0]
		if t, perm := outPerm(out); t != nil && !drop[t] {
			attrs["permY"] = IntsAttr("permY", perm...)
			out = t.Outputs[0]
			drop[t] = true
		}
		replaced[n] = &Node{Name: n.Name, OpType: GatherGradSum, Domain: FusedDomain,
			Inputs: inputs, Outputs: []string{out}, Attrs: attrs}
		for _, a := range adds[1:] {
			drop[a] = true
		}
		for _, l := range gg {
			drop[l] = true
		}
		fused++
	}
	return fused
}

func init() {
	fusedInferRules[PermutedMatMul] = inferPermutedMatMul
	fusedInferRules[GatherGradSum] = inferGatherGradSum
}

// inferView is the shape of input i seen through the view that the
// attributes axes and fixed describe (ok false when unknown or when the
// attributes do not fit; the kernel reports those).
func inferView(c *inferCall, i int, axesAttr, fixedAttr string) ([]Dim, bool) {
	s, ok := c.shape(i)
	if !ok {
		return nil, false
	}
	axes, fixed := c.n.AttrInts(axesAttr, nil), c.n.AttrInts(fixedAttr, nil)
	if axes == nil && fixed == nil {
		return s, true
	}
	if len(fixed)%2 != 0 || len(axes)+len(fixed)/2 != len(s) {
		return nil, false
	}
	out := make([]Dim, len(axes))
	for j, a := range axes {
		if a < 0 || a >= int64(len(s)) {
			return nil, false
		}
		out[j] = s[a]
	}
	return out, true
}

// permuteDims applies the node's permY (if any) to s.
func permuteDims(c *inferCall, s []Dim) ([]Dim, bool) {
	perm := c.n.AttrInts("permY", nil)
	if perm == nil {
		return s, true
	}
	if len(perm) != len(s) || !isPerm(perm) {
		return nil, false
	}
	out := make([]Dim, len(s))
	for i, p := range perm {
		out[i] = s[p]
	}
	return out, true
}

// inferPermutedMatMul: MatMul's shape for the views (numpy batch
// broadcasting, operands of rank 2 or more), or the shape of the operand a
// gradient is for, permuted by permY.
func inferPermutedMatMul(c *inferCall) error {
	dt := c.dtype(0)
	var out []Dim
	ok := false
	switch c.n.AttrInt("grad", 0) {
	case 0:
		a, okA := inferView(c, 0, "axes0", "fixed0")
		b, okB := inferView(c, 1, "axes1", "fixed1")
		if okA && okB && len(a) >= 2 && len(b) >= 2 {
			out, ok = broadcastBatch(a[:len(a)-2], b[:len(b)-2])
			out = append(out, a[len(a)-2], b[len(b)-1])
		}
	case 1:
		out, ok = inferView(c, 1, "axes1", "fixed1")
	case 2:
		out, ok = inferView(c, 2, "axes2", "fixed2")
	}
	if ok {
		out, ok = permuteDims(c, out)
	}
	c.setShapeOrUnranked(0, dt, out, ok)
	return nil
}

// broadcastBatch broadcasts two batch shapes numpy-style; a dim is
// unknown where the inputs do not tell.
func broadcastBatch(a, b []Dim) ([]Dim, bool) {
	r := max(len(a), len(b))
	out := make([]Dim, r)
	for i := 0; i < r; i++ {
		da, db := Dim{Value: 1, Known: true}, Dim{Value: 1, Known: true}
		if j := i - (r - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (r - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da.Known && da.Value == 1:
			out[i] = db
		case db.Known && db.Value == 1:
			out[i] = da
		case da.Known:
			out[i] = da
		case db.Known:
			out[i] = db
		default:
			out[i] = Dim{}
		}
	}
	return out, true
}

// inferGatherGradSum: the shape of the data's view (the last input),
// permuted by permY, with the gradients' dtype.
func inferGatherGradSum(c *inferCall) error {
	last := len(c.n.Inputs) - 1
	dt := c.dtype(0)
	out, ok := inferView(c, last, "axes", "fixed")
	if ok {
		out, ok = permuteDims(c, out)
	}
	c.setShapeOrUnranked(0, dt, out, ok)
	return nil
}
