package graph

import "slices"

// knownInts returns the values of a small integer vector when inference
// knows every element: a constant, or shape arithmetic on known dims (the
// bounds PyTorch's chunk exports as Shape → Gather → Add → Div → Mul).
func (ps *pushState) knownInts(name string) ([]int64, bool) {
	if v, ok := ps.constInts(name); ok {
		return v, true
	}
	if s := ps.st.syms[name]; s != nil {
		return s.values()
	}
	return nil, false
}

// sliceAxes reads a Slice's axes and step: the normalised axes (starts'
// length of leading axes when absent) and whether every step is 1.
func (ps *pushState) sliceAxes(n *Node, rank int) ([]int, bool) {
	if len(n.Inputs) < 3 {
		return nil, false
	}
	starts, ok := ps.knownInts(n.Inputs[1])
	if !ok {
		s, ok := ps.shapeOf(n.Inputs[1])
		if !ok || len(s) != 1 || !s[0].Known {
			return nil, false
		}
		starts = make([]int64, s[0].Value)
	}
	axes := make([]int64, len(starts))
	for i := range axes {
		axes[i] = int64(i)
	}
	if n.Input(3) != "" {
		a, ok := ps.knownInts(n.Input(3))
		if !ok || len(a) != len(starts) {
			return nil, false
		}
		axes = a
	}
	if n.Input(4) != "" {
		steps, ok := ps.knownInts(n.Input(4))
		if !ok {
			return nil, false
		}
		for _, st := range steps {
			if st != 1 {
				return nil, false
			}
		}
	}
	out := make([]int, len(axes))
	for i, a := range axes {
		ax, err := normAxis(a, rank)
		if err != nil {
			return nil, false
		}
		out[i] = ax
	}
	return out, true
}

// planSlice: a Slice that cuts other axes than the selection's (attention's
// q, k and v columns of the in-projection, cut with bounds computed from the
// projection's shape) reads the selected rows of its data; its bounds are
// read as they are.
func (ps *pushState) planSlice(p *Node, sel rowSel, outShape []Dim, plan []inputPlan) ([]inputPlan, bool) {
	in, ok := ps.shapeOf(p.Inputs[0])
	if !ok || len(in) != len(outShape) || !sameDim(in[sel.axis], outShape[sel.axis]) {
		return nil, false
	}
	axes, ok := ps.sliceAxes(p, len(in))
	if !ok || slices.Contains(axes, sel.axis) {
		return nil, false
	}
	plan[0] = inputPlan{sel: sel}
	return plan, true
}

// columnSlice reads a Slice of one axis, the last of a rank-rank value,
// step 1, with known bounds: the columns [lo, hi) of n columns it keeps.
func (ps *pushState) columnSlice(s *Node, rank int, n int64) (lo, hi int64, ok bool) {
	if !isPlain(s) || s.OpType != "Slice" || len(s.Outputs) != 1 || len(s.Inputs) < 3 {
		return 0, 0, false
	}
	axes, ok := ps.sliceAxes(s, rank)
	if !ok || len(axes) != 1 || axes[0] != rank-1 {
		return 0, 0, false
	}
	starts, ok1 := ps.knownInts(s.Inputs[1])
	ends, ok2 := ps.knownInts(s.Inputs[2])
	if !ok1 || !ok2 || len(starts) != 1 || len(ends) != 1 {
		return 0, 0, false
	}
	first, count := sliceRange(starts[0], ends[0], 1, n)
	if count <= 0 {
		return 0, 0, false
	}
	return first, first + count, true
}

// splitProjection moves a selection of rows through a linear projection
// whose columns other Slices read whole: nn.MultiheadAttention's packed
// in-projection, P = x·Wᵀ + b, cut into q, k and v along its last axis,
// where the class token's selection has reached q's Slice and k's and v's
// read every row. The selected rows' columns of q get a projection of
// their own (the selected rows of x times q's rows of W, plus q's part of
// b), and the projection of every row is narrowed to the columns k and v
// read, which their Slices now take from it with constant bounds: ViT-B/16's
// last block projects one query per image instead of 197 and no query for
// the rest. s is the selection of rows sel of P (p its producer, an Add of
// a MatMul and a bias vector, or the MatMul alone) and must be read by
// one column Slice only; P may be read besides by other column Slices of
// known bounds, all on one side of the first's columns, and by Shape nodes
// whose values only those Slices' bounds read (the export's chunk
// arithmetic, removed with them). It reports whether it rewrote the graph.
func (ps *pushState) splitProjection(p, s *Node, sel rowSel, outShape []Dim) bool {
	v := p.Outputs[0]
	R := len(outShape)
	if R < 2 || sel.axis >= R-1 || !outShape[R-1].Known || len(p.Outputs) != 1 {
		return false
	}
	N := outShape[R-1].Value
	sout := s.Outputs[0]
	if ps.outputs[sout] || len(ps.readers[sout]) != 1 {
		return false
	}
	c := ps.readers[sout][0]
	c0, c1, ok := ps.columnSlice(c, R, N)
	if !ok || c.Inputs[0] != sout || ps.outputs[c.Outputs[0]] {
		return false
	}
	// The projection: MatMul(X, WT) [+ bias of N elements].
	mm, bias := p, ""
	if p.OpType == "Add" {
		if !isPlain(p) || len(p.Inputs) != 2 {
			return false
		}
		for i, in := range p.Inputs {
			if q := ps.prod[in]; q != nil && isPlain(q) && q.OpType == "MatMul" {
				mm, bias = q, p.Inputs[1-i]
				break
			}
		}
		if mm == p {
			return false
		}
		bs, ok := ps.shapeOf(bias)
		if !ok || len(bs) != 1 || !bs[0].Known || bs[0].Value != N {
			return false
		}
		if ps.outputs[mm.Outputs[0]] || len(ps.readers[mm.Outputs[0]]) != 1 {
			return false
		}
	}
	if !isPlain(mm) || mm.OpType != "MatMul" || len(mm.Inputs) != 2 || len(mm.Outputs) != 1 {
		return false
	}
	x, wt := mm.Inputs[0], mm.Inputs[1]
	xs, ok1 := ps.shapeOf(x)
	ws, ok2 := ps.shapeOf(wt)
	if !ok1 || !ok2 || len(xs) != R || len(ws) != 2 || !ws[1].Known || ws[1].Value != N || !sameDim(xs[sel.axis], outShape[sel.axis]) {
		return false
	}
	// P's other readers: column Slices (the columns each keeps), and
	// Shapes feeding their bounds.
	var others []*Node
	var kept [][2]int64
	bounds := map[*Node]bool{c: true}
	var shapes []*Node
	k0, k1 := N, int64(0)
	for _, r := range ps.readers[v] {
		switch {
		case r == s:
		case isPlain(r) && r.OpType == "Shape":
			shapes = append(shapes, r)
		default:
			lo, hi, ok := ps.columnSlice(r, R, N)
			if !ok || r.Inputs[0] != v || slices.Contains(r.Inputs[1:], v) {
				return false
			}
			others = append(others, r)
			kept = append(kept, [2]int64{lo, hi})
			bounds[r] = true
			k0, k1 = min(k0, lo), max(k1, hi)
		}
	}
	if len(others) == 0 || k1-k0 >= N || (k0 < c1 && c0 < k1) {
		return false // nothing to narrow, or the ranges overlap
	}
	if !ps.onlyFeedsBounds(shapes, bounds) {
		return false
	}
	// W's rows as columns of WT: a Slice of W under the Transpose when WT
	// is W transposed (so the product still reads the weight in place),
	// else a Slice of WT's columns.
	var nodes []*Node
	slice := func(in string, axis int, lo, hi int64) string {
		out := ps.fresh(in)
		nodes = append(nodes, ps.selectNode(in, out, rowSel{axis: axis, start: lo, end: hi}))
		return out
	}
	cols := func(lo, hi int64) string {
		if t := ps.prod[wt]; t != nil && isPlain(t) && t.OpType == "Transpose" && len(t.Inputs) == 1 &&
			slices.Equal(t.AttrInts("perm", nil), []int64{1, 0}) {
			out := ps.fresh(wt)
			w := slice(t.Inputs[0], 0, lo, hi)
			nodes = append(nodes, &Node{Name: ps.fresh(t.Name), OpType: "Transpose", Inputs: []string{w}, Outputs: []string{out},
				Attrs: map[string]*Attr{"perm": IntsAttr("perm", 1, 0)}})
			return out
		}
		return slice(wt, 1, lo, hi)
	}
	project := func(rows, out string, lo, hi int64) {
		prod := out
		if bias != "" {
			prod = ps.fresh(mm.Outputs[0])
		}
		nodes = append(nodes, &Node{Name: ps.fresh(mm.Name), OpType: "MatMul", Inputs: []string{rows, cols(lo, hi)}, Outputs: []string{prod}})
		if bias != "" {
			in := slices.Clone(p.Inputs)
			for i := range in {
				if in[i] == bias {
					in[i] = slice(bias, 0, lo, hi)
				} else {
					in[i] = prod
				}
			}
			nodes = append(nodes, &Node{Name: ps.fresh(p.Name), OpType: "Add", Inputs: in, Outputs: []string{out}})
		}
	}
	// The selected rows' columns [c0, c1), into c's output.
	xrows := ps.fresh(x)
	nodes = append(nodes, ps.selectNode(x, xrows, sel))
	project(xrows, c.Outputs[0], c0, c1)
	// Every row's columns [k0, k1), read by the other Slices.
	kv := ps.fresh(v)
	project(x, kv, k0, k1)
	ps.typeNew(nodes...)
	var oldBounds []string
	for _, r := range append([]*Node{c}, others...) {
		oldBounds = append(oldBounds, r.Inputs[1:]...)
	}
	for i, r := range others {
		// A new node in r's place (r keeps its name and output).
		moved := ps.selectNode(kv, r.Outputs[0], rowSel{axis: R - 1, start: kept[i][0] - k0, end: kept[i][1] - k0})
		moved.Name = r.Name
		ps.typeNew(moved)
		ps.g.Nodes[slices.Index(ps.g.Nodes, r)] = moved
	}
	at := slices.Index(ps.g.Nodes, p)
	ps.g.Nodes = slices.Replace(ps.g.Nodes, at, at+1, nodes...)
	ps.g.Nodes = slices.DeleteFunc(ps.g.Nodes, func(n *Node) bool { return n == s || n == c || n == mm })
	dropUnreadProducers(ps.g, append(oldBounds, wt), pureOp)
	return true
}

// onlyFeedsBounds reports whether everything the Shape nodes compute is
// read, directly or through pure ops, only as the bounds (inputs after the
// first) of the Slices in bounds, so that it all goes once those Slices
// take constant bounds.
func (ps *pushState) onlyFeedsBounds(shapes []*Node, bounds map[*Node]bool) bool {
	seen := map[*Node]bool{}
	work := slices.Clone(shapes)
	for len(work) > 0 {
		n := work[len(work)-1]
		work = work[:len(work)-1]
		if seen[n] {
			continue
		}
		seen[n] = true
		if !pureOp[n.OpType] || !isPlain(n) {
			return false
		}
		for _, o := range n.Outputs {
			if o == "" {
				continue
			}
			if ps.outputs[o] {
				return false
			}
			for _, r := range ps.readers[o] {
				if bounds[r] {
					if r.Inputs[0] == o {
						return false // read as data
					}
					continue
				}
				work = append(work, r)
			}
		}
	}
	return true
}
