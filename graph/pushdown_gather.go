package graph

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// PushDownGather makes a forward graph compute only the rows its outputs
// read. A Gather with a constant index, or a Slice with constant bounds on
// one axis (step 1), that selects rows of a value whose producer works row
// by row along that axis is moved above that producer: the producer then
// computes the selected rows only, from selected rows of its inputs, and
// the selection moves on up until it reaches a value something else reads
// in full. torchvision's ViT is the case it was written for: its head reads
// the class token only (x[:, 0], a Gather on axis 1), so the last encoder
// block's MLP, LayerNorms, residual adds, out-projection and the query
// rows of its attention compute one token instead of 197, and since the
// pass runs before autodiff, their gradients shrink with them.
//
// A Gather with a scalar index becomes a Gather of the one-element index
// vector (which keeps the axis) followed by Squeeze, so that every op the
// selection passes keeps its rank; the selections the pass makes are such
// Gathers (Slices for ranges of rows). The ops
// it passes (all in the ai.onnx domain): elementwise ops with numpy
// broadcasting (an input broadcast along the axis is read whole),
// Dropout when it draws nothing (ratio 0, or not training),
// LayerNormalization over later axes, Softmax and LogSoftmax over another
// axis, MatMul on a row of its result (batched or not), on a column of B
// when B is a matrix, or on a batch axis, Gemm without transA, Transpose, and Reshape
// where the axis keeps its size
// and the elements before it (the target's other entries are kept; the
// axis's entry becomes the selection's length); and the chain Reshape to
// rows → Gemm → Reshape back that nn.MultiheadAttention's out-projection
// is when the batch comes second, whose selected rows are rows
// [l·batch, (l+1)·batch) of the Gemm: the selection is made on the rows
// before the first Reshape and the chain rebuilt on them (rowGemm). A
// value that is a graph
// output, is read by anything but selections of the same rows, or is made
// by any other op stops the selection, which then stays where it is.
//
// Each moved op computes the same elements of the same inputs; a kernel
// may still round them differently when it sees fewer rows (a reduction
// over the rows, such as LayerNormalization's parameter gradients in the
// backward, sums fewer terms in another order), so results agree to
// rounding, not always bit for bit. It returns the number of ops the selections moved
// above. g must be topologically sorted; it is sorted again afterwards.
func PushDownGather(g *Graph, opset int64) (int, error) {
	if opset < 13 {
		// Slice's bounds as inputs (10) and Squeeze's axes as an input
		// (13): older graphs are left alone.
		return 0, nil
	}
	ps := &pushState{g: g, opset: opset}
	ps.names = map[string]bool{}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			ps.names[o] = true
		}
	}
	for _, in := range g.Inputs {
		ps.names[in.Name] = true
	}
	for name := range g.Initializers {
		ps.names[name] = true
	}
	if err := TopoSort(g); err != nil {
		return 0, nil // not this pass's error to report: the graph is left alone
	}
	// Types are inferred once; the nodes the pass makes get theirs as
	// they are made (in an order where their inputs are typed), and the
	// order stays topological: new nodes take the place of the op they
	// replace, and merged selections read the first of them.
	ps.st, _ = inferGraph(g, opset, nil, true) // partial types are fine: what is unknown is not moved
	ps.index()
	ps.canonicalGathers()
	moved := 0
	for {
		ps.index()
		if ps.mergeSelections() {
			ps.index()
		}
		if !ps.pushOne() {
			break
		}
		moved++
	}
	ps.restoreUnmoved()
	ps.dropUnreadConstants()
	if err := TopoSort(g); err != nil {
		return moved, fmt.Errorf("pushdown-gather: %w", err)
	}
	return moved, nil
}

// rowSel is a selection of the contiguous elements [start, end) of one
// axis (Slice's bounds: negative counts from the end, clamped).
type rowSel struct {
	axis       int
	start, end int64
}

// pushState is what one round of the pass knows about the graph.
type pushState struct {
	g       *Graph
	opset   int64
	st      *inferState
	readers map[string][]*Node
	outputs map[string]bool
	prod    map[string]*Node
	names   map[string]bool
	count   int
	// pending are nodes a plan made (Reshape's new target) that go in
	// with the moved op.
	pending []*Node
	// made are the constants the pass added.
	made []string
	// canon are the scalar-index Gathers rewritten into a selection and a
	// Squeeze.
	canon []canonGather
}

// canonGather is a Gather and what replaced it.
type canonGather struct {
	gather, slice, squeeze *Node
}

// restoreUnmoved puts back each Gather whose selection moved nowhere, so that
// a graph the pass cannot improve is left as it was.
func (ps *pushState) restoreUnmoved() {
	for _, c := range ps.canon {
		at := slices.Index(ps.g.Nodes, c.slice)
		if at < 0 || c.slice.Inputs[0] != c.gather.Inputs[0] {
			continue
		}
		if ps.outputs[c.slice.Outputs[0]] || len(ps.readers[c.slice.Outputs[0]]) != 1 {
			continue // another selection of the same rows was merged into it
		}
		ps.g.Nodes[at] = c.gather
		ps.g.Nodes = slices.DeleteFunc(ps.g.Nodes, func(n *Node) bool { return n == c.squeeze })
	}
}

// index recomputes the readers and producers of every value.
func (ps *pushState) index() {
	ps.readers = map[string][]*Node{}
	ps.prod = map[string]*Node{}
	ps.outputs = map[string]bool{}
	for _, n := range ps.g.Nodes {
		for _, in := range n.Inputs {
			if in != "" {
				ps.readers[in] = append(ps.readers[in], n)
			}
		}
		for _, sg := range n.Subgraphs() {
			forEachName(sg, func(name string) { ps.outputs[name] = true })
		}
		for _, o := range n.Outputs {
			if o != "" {
				ps.prod[o] = n
			}
		}
	}
	for _, o := range ps.g.Outputs {
		ps.outputs[o.Name] = true
	}
}

// typeNew infers the types of nodes the pass made.
func (ps *pushState) typeNew(nodes ...*Node) {
	for _, n := range nodes {
		_ = ps.st.inferNode(n) // what stays unknown is not moved further
	}
}

// fresh returns a new value name derived from base.
func (ps *pushState) fresh(base string) string {
	for {
		ps.count++
		name := fmt.Sprintf("%s/rows_%d", base, ps.count)
		if !ps.names[name] {
			ps.names[name] = true
			return name
		}
	}
}

// constInts returns the integer constant named, or nil.
func (ps *pushState) constInts(name string) ([]int64, bool) {
	t := ps.st.consts[name]
	if t == nil || !t.DType.IsInt() || t.Rank() > 1 {
		return nil, false
	}
	out := make([]int64, t.Size())
	for i := range out {
		out[i] = t.Int(i)
	}
	return out, true
}

// shapeOf returns the inferred shape of a value.
func (ps *pushState) shapeOf(name string) ([]Dim, bool) {
	t := ps.st.types[name]
	if t == nil || t.Kind != KindTensor || !t.HasShape {
		return nil, false
	}
	return t.Shape, true
}

// constName adds an int64 constant vector and returns its name.
func (ps *pushState) constName(base string, v ...int64) string {
	name := ps.fresh(base)
	t := FromInt64(v, len(v))
	ps.g.Initializers[name] = t
	ps.st.types[name] = typeOfTensor(t)
	ps.st.setConst(name, t)
	ps.made = append(ps.made, name)
	return name
}

// selectionOf reports whether n is a selection this pass can move: a
// Slice with constant bounds on one axis and step 1, or a Gather with a
// constant one-element index vector (which keeps the axis).
func (ps *pushState) selectionOf(n *Node) (rowSel, bool) {
	if !isPlain(n) || len(n.Outputs) != 1 || len(n.Inputs) < 2 {
		return rowSel{}, false
	}
	shape, ok := ps.shapeOf(n.Inputs[0])
	if !ok {
		return rowSel{}, false
	}
	if n.OpType == "Gather" {
		sel, rank, ok := ps.gatherRow(n, shape)
		return sel, ok && rank == 1
	}
	if n.OpType != "Slice" || len(n.Inputs) < 3 {
		return rowSel{}, false
	}
	starts, ok1 := ps.constInts(n.Inputs[1])
	ends, ok2 := ps.constInts(n.Inputs[2])
	if !ok1 || !ok2 || len(starts) != 1 || len(ends) != 1 {
		return rowSel{}, false
	}
	axis := int64(0)
	if n.Input(3) != "" {
		axes, ok := ps.constInts(n.Input(3))
		if !ok || len(axes) != 1 {
			return rowSel{}, false
		}
		axis = axes[0]
	}
	if n.Input(4) != "" {
		steps, ok := ps.constInts(n.Input(4))
		if !ok || len(steps) != 1 || steps[0] != 1 {
			return rowSel{}, false
		}
	}
	ax, err := normAxis(axis, len(shape))
	if err != nil {
		return rowSel{}, false
	}
	return rowSel{axis: ax, start: starts[0], end: ends[0]}, true
}

// gatherRow reads a Gather of data of the given shape with a constant
// one-element index (a scalar, rank 0, or a vector, rank 1) in range: the
// row it selects and the index's rank.
func (ps *pushState) gatherRow(n *Node, shape []Dim) (sel rowSel, indexRank int, ok bool) {
	idx, ok := ps.constInts(n.Inputs[1])
	if !ok || len(idx) != 1 {
		return rowSel{}, 0, false
	}
	ax, err := normAxis(n.AttrInt("axis", 0), len(shape))
	if err != nil {
		return rowSel{}, 0, false
	}
	if d := shape[ax]; !d.Known || idx[0] >= d.Value || idx[0] < -d.Value {
		return rowSel{}, 0, false // out of range (or unknown): Gather's error stays
	}
	return oneRow(ax, idx[0]), ps.st.consts[n.Inputs[1]].Rank(), true
}

// oneRow is the selection of index i of an axis.
func oneRow(axis int, i int64) rowSel {
	if i == -1 {
		return rowSel{axis: axis, start: -1, end: math.MaxInt64}
	}
	return rowSel{axis: axis, start: i, end: i + 1}
}

// selectNode makes the node that selects sel's rows of in into out: a
// Gather of a one-element index for one row (its kernel plans once and
// allocates nothing per run), a Slice otherwise.
func (ps *pushState) selectNode(in, out string, sel rowSel) *Node {
	if sel.end == sel.start+1 || (sel.start == -1 && sel.end == math.MaxInt64) {
		return &Node{Name: ps.fresh(in + "/Gather"), OpType: "Gather", Inputs: []string{in, ps.constName(out+"/index", sel.start)},
			Outputs: []string{out}, Attrs: map[string]*Attr{"axis": IntAttr("axis", int64(sel.axis))}}
	}
	return &Node{Name: ps.fresh(in + "/Slice"), OpType: "Slice",
		Inputs: []string{in, ps.constName(out+"/starts", sel.start), ps.constName(out+"/ends", sel.end),
			ps.constName(out+"/axes", int64(sel.axis))},
		Outputs: []string{out}}
}

// canonicalGathers rewrites each Gather with a constant scalar index whose
// data a movable op makes into a Gather of the one-element index vector
// (which keeps the axis) and a Squeeze. It returns the number rewritten.
func (ps *pushState) canonicalGathers() int {
	done := 0
	for i := 0; i < len(ps.g.Nodes); i++ {
		n := ps.g.Nodes[i]
		if !isPlain(n) || n.OpType != "Gather" || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
			continue
		}
		shape, ok := ps.shapeOf(n.Inputs[0])
		if !ok {
			continue
		}
		sel, rank, ok := ps.gatherRow(n, shape)
		if !ok || rank != 0 {
			continue
		}
		p := ps.prod[n.Inputs[0]]
		if p == nil || movableOp(p) == "" || len(ps.readers[n.Inputs[0]]) != 1 || ps.outputs[n.Inputs[0]] {
			continue
		}
		kept := ps.fresh(n.Outputs[0])
		sl := ps.selectNode(n.Inputs[0], kept, sel)
		sq := &Node{Name: ps.fresh(n.Label()), OpType: "Squeeze",
			Inputs: []string{kept, ps.constName(kept+"/squeeze_axes", int64(sel.axis))}, Outputs: []string{n.Outputs[0]}}
		repl := []*Node{sl, sq}
		ps.typeNew(repl...)
		ps.canon = append(ps.canon, canonGather{gather: n, slice: sl, squeeze: sq})
		ps.g.Nodes = slices.Replace(ps.g.Nodes, i, i+1, repl...)
		i += len(repl) - 1
		done++
	}
	return done
}

// mergeSelections makes selections of the same rows of the same value read
// one node: the duplicates' readers read the first. It reports whether
// it merged any.
func (ps *pushState) mergeSelections() bool {
	type key struct {
		in  string
		sel rowSel
	}
	first := map[key]string{}
	rename := map[string]string{}
	drop := map[*Node]bool{}
	for _, n := range ps.g.Nodes {
		sel, ok := ps.selectionOf(n)
		if !ok {
			continue
		}
		k := key{n.Inputs[0], sel}
		if f, ok := first[k]; ok && !ps.outputs[n.Outputs[0]] {
			rename[n.Outputs[0]] = f
			drop[n] = true
			continue
		}
		first[k] = n.Outputs[0]
	}
	if len(rename) == 0 {
		return false
	}
	for _, n := range ps.g.Nodes {
		for i, in := range n.Inputs {
			if r, ok := rename[in]; ok {
				n.Inputs[i] = r
			}
		}
	}
	removeNodes(ps.g, drop)
	return true
}

// dropUnreadConstants deletes the constants the pass made that nothing
// reads any more (those of merged selections).
func (ps *pushState) dropUnreadConstants() {
	read := map[string]bool{}
	forEachName(ps.g, func(name string) { read[name] = true })
	for _, name := range ps.made {
		if !read[name] {
			delete(ps.g.Initializers, name)
		}
	}
}

// movableOp names the rule that moves a selection above n's op, or "".
func movableOp(n *Node) string {
	if !isPlain(n) {
		return ""
	}
	switch n.OpType {
	case "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "PRelu",
		"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Tanh", "Sigmoid", "Relu",
		"LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "Softplus", "Softsign", "HardSigmoid",
		"HardSwish", "Mish", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Identity",
		"Cast", "Clip", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not",
		"And", "Or", "Xor", "IsNaN", "IsInf", "ThresholdedRelu", "Shrink":
		return "elementwise"
	case "Dropout", "LayerNormalization", "Softmax", "LogSoftmax", "MatMul", "Gemm", "Transpose", "Reshape", "Slice":
		return n.OpType
	}
	return ""
}

// pushOne moves one selection above its producer; it reports whether it
// did.
func (ps *pushState) pushOne() bool {
	for _, n := range ps.g.Nodes {
		sel, ok := ps.selectionOf(n)
		if !ok {
			continue
		}
		v := n.Inputs[0]
		p := ps.prod[v]
		if p == nil || movableOp(p) == "" || ps.outputs[v] || p.Outputs[0] != v {
			continue
		}
		if len(ps.readers[v]) != 1 {
			if outShape, ok := ps.shapeOf(v); ok && sel.axis < len(outShape) && ps.splitProjection(p, n, sel, outShape) {
				return true
			}
			continue
		}
		// The producer's other outputs (Dropout's mask, LayerNorm's
		// statistics) must be unread.
		extraRead := false
		for _, o := range p.Outputs[1:] {
			if o != "" && (len(ps.readers[o]) > 0 || ps.outputs[o]) {
				extraRead = true
			}
		}
		if extraRead {
			continue
		}
		outShape, ok := ps.shapeOf(v)
		if !ok || sel.axis >= len(outShape) {
			continue
		}
		if d := outShape[sel.axis]; d.Known && d.Value <= 1 {
			continue // nothing to leave out
		}
		plan, ok := ps.planFor(p, sel, outShape)
		if !ok {
			if ps.rowGemm(p, n, sel, outShape) {
				return true
			}
			continue
		}
		ps.apply(p, n, plan)
		return true
	}
	return false
}

// rowGemm moves a selection of leading rows through a linear layer applied
// to rows that merge the selection's axis with the next ones, as PyTorch
// exports nn.MultiheadAttention's out-projection (batch second): T [L, …]
// → Reshape to (L·M, K) → Gemm → Reshape to [L, M, N], the selection on
// axis 0 of the last. Row l of the result is rows [l·M, (l+1)·M) of the
// Gemm, bounds that depend on M (the batch); so instead the rows of T are
// selected and the chain is rebuilt on them, the Reshapes' targets [-1, K]
// and [length, M, N] (M as the old target read it, else -1). The old Gemm
// and first Reshape may be read by Shape nodes besides the chain (the
// export's reshape targets); once the old last Reshape is gone nothing
// reads them, and they go with that shape arithmetic. It reports whether
// it moved the selection.
func (ps *pushState) rowGemm(p, s *Node, sel rowSel, outShape []Dim) bool {
	if p.OpType != "Reshape" || sel.axis != 0 || len(outShape) != 3 || !outShape[0].Known || !outShape[2].Known ||
		len(p.Inputs) != 2 {
		return false
	}
	gm := ps.prod[p.Inputs[0]]
	if gm == nil || !isPlain(gm) || gm.OpType != "Gemm" || gm.AttrInt("transA", 0) != 0 || len(gm.Outputs) != 1 ||
		len(gm.Inputs) < 2 || gm.Inputs[0] == "" {
		return false
	}
	// Reshapes keep the element count: the Gemm's R rows of N are L·M,
	// and T (L·M·K elements, L leading) holds in T[l] the K-wide rows
	// [l·M, (l+1)·M) of the Gemm's input, whatever M is.
	gs, ok := ps.shapeOf(gm.Outputs[0])
	if !ok || len(gs) != 2 || !sameDim(gs[1], outShape[2]) {
		return false
	}
	r := ps.prod[gm.Inputs[0]]
	if r == nil || !isPlain(r) || r.OpType != "Reshape" || len(r.Inputs) != 2 || len(r.Outputs) != 1 {
		return false
	}
	as, ok1 := ps.shapeOf(gm.Inputs[0])
	ts, ok2 := ps.shapeOf(r.Inputs[0])
	if !ok1 || !ok2 || len(as) != 2 || !as[1].Known || len(ts) < 2 || !sameDim(ts[0], outShape[0]) {
		return false
	}
	// Nothing but Shape nodes may read the Gemm's rows or its input's
	// besides the chain; C must be the same for every row.
	onlyShapes := func(v string, user *Node) bool {
		if ps.outputs[v] {
			return false
		}
		for _, rd := range ps.readers[v] {
			if rd != user && !(isPlain(rd) && rd.OpType == "Shape") {
				return false
			}
		}
		return true
	}
	if !onlyShapes(gm.Outputs[0], p) || !onlyShapes(r.Outputs[0], gm) {
		return false
	}
	if c := gm.Input(2); c != "" {
		cs, ok := ps.shapeOf(c)
		if !ok || len(cs) > 2 || (len(cs) == 2 && !(cs[0].Known && cs[0].Value == 1)) {
			return false
		}
	}
	_, length := sliceRange(sel.start, sel.end, 1, outShape[0].Value)
	if length <= 0 {
		return false
	}
	rows, a, y := ps.fresh(r.Inputs[0]), ps.fresh(gm.Inputs[0]), ps.fresh(gm.Outputs[0])
	gin := slices.Clone(gm.Inputs)
	gin[0] = a
	nodes := []*Node{
		ps.selectNode(r.Inputs[0], rows, rowSel{axis: 0, start: sel.start, end: sel.end}),
		{Name: ps.fresh(r.Name), OpType: "Reshape", Inputs: []string{rows, ps.constName(a+"/shape", -1, as[1].Value)}, Outputs: []string{a}},
		{Name: ps.fresh(gm.Name), OpType: "Gemm", Domain: gm.Domain, Attrs: gm.Attrs, Inputs: gin, Outputs: []string{y}},
	}
	// The last Reshape's target: [length, M, N], M taken from the old
	// target where it is a Concat of one-element pieces (the export's:
	// its M is the batch, so the shape stays symbolic), else -1. Its
	// other pieces read the old Gemm's Shape, which must not stay live.
	target := ps.constName(s.Outputs[0]+"/shape", length, -1, outShape[2].Value)
	if c := ps.prod[p.Inputs[1]]; c != nil && isPlain(c) && c.OpType == "Concat" && c.AttrInt("axis", 0) == 0 && len(c.Inputs) == 3 {
		if m, ok := ps.shapeOf(c.Inputs[1]); ok && len(m) == 1 && m[0].Known && m[0].Value == 1 {
			target = ps.fresh(s.Outputs[0] + "/shape")
			nodes = append(nodes, &Node{Name: ps.fresh(c.Name), OpType: "Concat", Outputs: []string{target},
				Inputs: []string{ps.constName(target+"/length", length), c.Inputs[1], ps.constName(target+"/width", outShape[2].Value)},
				Attrs:  map[string]*Attr{"axis": IntAttr("axis", 0)}})
		}
	}
	// The last Reshape keeps its name (p goes), as apply's moved ops do.
	nodes = append(nodes, &Node{Name: p.Name, OpType: "Reshape", Inputs: []string{y, target}, Outputs: []string{s.Outputs[0]}})
	ps.typeNew(nodes...)
	at := slices.Index(ps.g.Nodes, p)
	ps.g.Nodes = slices.Replace(ps.g.Nodes, at, at+1, nodes...)
	ps.g.Nodes = slices.DeleteFunc(ps.g.Nodes, func(n *Node) bool { return n == s })
	dropUnreadProducers(ps.g, p.Inputs, pureOp)
	return true
}

// pureOp are the ops rowGemm may remove once nothing reads them (the old
// chain and the shape arithmetic of its Reshape's target): their outputs
// are functions of their inputs, with no state and no random draws (a
// Dropout, which draws, stays).
var pureOp = map[string]bool{
	"Shape": true, "Gather": true, "Unsqueeze": true, "Squeeze": true, "Concat": true, "Reshape": true,
	"Gemm": true, "MatMul": true, "Cast": true, "Constant": true, "Slice": true, "Transpose": true, "Identity": true,
	"Add": true, "Sub": true, "Mul": true, "Div": true,
}

// inputPlan says what the moved op reads for one input: the input as it
// is (keep), or its rows under sel; replace, when set, is a new name for
// the input (Reshape's target).
type inputPlan struct {
	keep    bool
	sel     rowSel
	replace string
}

// planFor decides how p computes only the rows sel of its output: per
// input, whole or selected. It reports false when p's op or shapes do not
// allow it.
func (ps *pushState) planFor(p *Node, sel rowSel, outShape []Dim) ([]inputPlan, bool) {
	plan := make([]inputPlan, len(p.Inputs))
	for i := range plan {
		plan[i].keep = true
	}
	R := len(outShape)
	// broadcastInput plans input i of a broadcasting op, aligned to the
	// output's trailing axes.
	broadcastInput := func(i int) bool {
		if p.Inputs[i] == "" {
			return true
		}
		s, ok := ps.shapeOf(p.Inputs[i])
		if !ok || len(s) > R {
			return false
		}
		b := sel.axis - (R - len(s))
		switch {
		case b < 0:
			return true
		case s[b].Known && s[b].Value == 1:
			return true
		case sameDim(s[b], outShape[sel.axis]):
			plan[i] = inputPlan{sel: rowSel{axis: b, start: sel.start, end: sel.end}}
			return true
		}
		return false
	}
	switch movableOp(p) {
	case "elementwise":
		for i := range p.Inputs {
			if !broadcastInput(i) {
				return nil, false
			}
		}
		return plan, true
	case "Dropout":
		if !ps.dropoutDrawsNothing(p) {
			return nil, false
		}
		return plan, broadcastInput(0)
	case "LayerNormalization":
		axis, err := normAxis(p.AttrInt("axis", -1), R)
		if err != nil || sel.axis >= axis {
			return nil, false
		}
		for i := range p.Inputs {
			if !broadcastInput(i) {
				return nil, false
			}
		}
		return plan, true
	case "Softmax", "LogSoftmax":
		axis, err := normAxis(p.AttrInt("axis", -1), R)
		if err != nil || sel.axis == axis {
			return nil, false
		}
		return plan, broadcastInput(0)
	case "Transpose":
		perm := p.AttrInts("perm", nil)
		if len(perm) != R {
			return nil, false
		}
		plan[0] = inputPlan{sel: rowSel{axis: int(perm[sel.axis]), start: sel.start, end: sel.end}}
		return plan, true
	case "MatMul":
		return ps.planMatMul(p, sel, outShape, plan)
	case "Gemm":
		if p.AttrInt("transA", 0) != 0 || R != 2 {
			return nil, false
		}
		if sel.axis == 0 {
			plan[0] = inputPlan{sel: rowSel{axis: 0, start: sel.start, end: sel.end}}
		} else {
			plan[1] = inputPlan{sel: rowSel{axis: int(1 - p.AttrInt("transB", 0)), start: sel.start, end: sel.end}}
		}
		if len(p.Inputs) > 2 && !broadcastInput(2) {
			return nil, false
		}
		return plan, true
	case "Reshape":
		return ps.planReshape(p, sel, outShape, plan)
	case "Slice":
		return ps.planSlice(p, sel, outShape, plan)
	}
	return nil, false
}

// dropoutDrawsNothing reports whether a Dropout node is the identity
// without drawing random numbers: ratio 0, or not in training mode.
func (ps *pushState) dropoutDrawsNothing(p *Node) bool {
	if p.Input(2) == "" {
		return true // training_mode defaults to false
	}
	if t := ps.st.consts[p.Input(2)]; t != nil && t.Size() == 1 && t.Float(0) == 0 {
		return true
	}
	if p.Input(1) == "" {
		return false // ratio defaults to 0.5
	}
	t := ps.st.consts[p.Input(1)]
	return t != nil && t.Size() == 1 && t.Float(0) == 0
}

// planMatMul: a row or batch axis of the result selects rows or batches of
// A (and batches of B where B has them); the last axis selects columns of
// B when B is a matrix. Rows of a batched product (attention's P·V and
// scores, [B·H, T, T]·[B·H, T, D]) select the query rows of A, B read
// whole: ViT-B/16's last block then scores one query per head instead of
// 197. Its kernels round a one-row product differently from that row of a
// taller one, so the gradients move by rounding (3e-6 of their RMS on
// vit_tiny and vit_tv, whose gradients stay as close to PyTorch's as
// without the pass: TestPushDownGatherGradients).
func (ps *pushState) planMatMul(p *Node, sel rowSel, outShape []Dim, plan []inputPlan) ([]inputPlan, bool) {
	sa, ok1 := ps.shapeOf(p.Inputs[0])
	sb, ok2 := ps.shapeOf(p.Inputs[1])
	R := len(outShape)
	if !ok1 || !ok2 || len(sa) < 2 || len(sb) < 2 || R != max(len(sa), len(sb)) {
		return nil, false
	}
	if len(sb) > 2 && (sel.axis == R-1 || sel.axis < R-2 && sel.axis-(R-len(sb)) < 0) {
		// A batched product's columns, or a batch axis its B broadcasts
		// along: no model needs them moved, so they stay where they are.
		return nil, false
	}
	switch {
	case sel.axis == R-2:
		plan[0] = inputPlan{sel: rowSel{axis: len(sa) - 2, start: sel.start, end: sel.end}}
		return plan, true
	case sel.axis == R-1:
		plan[1] = inputPlan{sel: rowSel{axis: len(sb) - 1, start: sel.start, end: sel.end}}
		return plan, true
	}
	for i, s := range [][]Dim{sa, sb} {
		b := sel.axis - (R - len(s))
		switch {
		case b < 0, s[b].Known && s[b].Value == 1:
		case sameDim(s[b], outShape[sel.axis]):
			plan[i] = inputPlan{sel: rowSel{axis: b, start: sel.start, end: sel.end}}
		default:
			return nil, false
		}
	}
	return plan, true
}

// planReshape: the axis must keep its size and the number of elements
// before it, so that its rows are the same contiguous runs of the input;
// the target's entry for the axis becomes the selection's length.
func (ps *pushState) planReshape(p *Node, sel rowSel, outShape []Dim, plan []inputPlan) ([]inputPlan, bool) {
	in, ok := ps.shapeOf(p.Inputs[0])
	if !ok || len(p.Inputs) != 2 {
		return nil, false
	}
	d := outShape[sel.axis]
	if !d.Known {
		return nil, false
	}
	b := -1
	for j := range in {
		if sameDim(in[j], d) && sameProduct(in[:j], outShape[:sel.axis]) {
			b = j
			break
		}
	}
	if b < 0 {
		return nil, false
	}
	// The target's entries: a 0 (copy the input's dim) at the input's
	// sliced axis would copy the new length to the wrong place.
	target := ps.st.syms[p.Inputs[1]]
	if target == nil || len(target.dims) != len(outShape) {
		return nil, false
	}
	if p.AttrInt("allowzero", 0) == 0 {
		for j, t := range target.dims {
			switch {
			case j == sel.axis, t.Known && t.Value != 0, t.Param != "":
			case j != b:
				// 0 (or an entry computed at run time, such as the
				// head split's batch×heads, that may be 0): the
				// input's dim j, which keeps its size.
			default:
				return nil, false
			}
		}
	}
	_, length := sliceRange(sel.start, sel.end, 1, d.Value)
	if length <= 0 {
		return nil, false
	}
	plan[0] = inputPlan{sel: rowSel{axis: b, start: sel.start, end: sel.end}}
	plan[1] = inputPlan{keep: true, replace: ps.newTarget(p.Inputs[1], sel.axis, len(outShape), length)}
	return plan, true
}

// newTarget builds Reshape's new target: the old one with entry axis set
// to length (a constant when the old one is).
func (ps *pushState) newTarget(target string, axis, rank int, length int64) string {
	if v, ok := ps.constInts(target); ok {
		v = slices.Clone(v)
		v[axis] = length
		return ps.constName(target, v...)
	}
	var parts []string
	piece := func(start, end int) {
		out := ps.fresh(target)
		ps.pending = append(ps.pending, &Node{Name: ps.fresh(target + "/Slice"), OpType: "Slice",
			Inputs:  []string{target, ps.constName(out+"/starts", int64(start)), ps.constName(out+"/ends", int64(end)), ps.constName(out+"/axes", 0)},
			Outputs: []string{out}})
		parts = append(parts, out)
	}
	if axis > 0 {
		piece(0, axis)
	}
	parts = append(parts, ps.constName(target+"/length", length))
	if axis < rank-1 {
		piece(axis+1, rank)
	}
	out := ps.fresh(target)
	ps.pending = append(ps.pending, &Node{Name: ps.fresh(target + "/Concat"), OpType: "Concat", Inputs: parts, Outputs: []string{out},
		Attrs: map[string]*Attr{"axis": IntAttr("axis", 0)}})
	return out
}

// sameProduct reports whether two lists of dims certainly multiply to the
// same number: equal products of the numbers and the same named dims.
func sameProduct(a, b []Dim) bool {
	prod := func(ds []Dim) (int64, []string, bool) {
		p := int64(1)
		var names []string
		for _, d := range ds {
			switch {
			case d.Known:
				p *= d.Value
			case d.Param != "":
				names = append(names, d.Param)
			default:
				return 0, nil, false
			}
		}
		sort.Strings(names)
		return p, names, true
	}
	pa, na, ok1 := prod(a)
	pb, nb, ok2 := prod(b)
	return ok1 && ok2 && pa == pb && slices.Equal(na, nb)
}

// apply replaces p and its selection s by selections of p's inputs and a
// copy of p that computes the selected rows into s's output.
func (ps *pushState) apply(p, s *Node, plan []inputPlan) {
	var repl []*Node
	repl = append(repl, ps.pending...)
	ps.pending = nil
	// The moved op keeps its name (p goes), so --split-at and profiles
	// still find it.
	moved := &Node{Name: p.Name, OpType: p.OpType, Domain: p.Domain, Attrs: p.Attrs,
		Inputs: slices.Clone(p.Inputs), Outputs: []string{s.Outputs[0]}}
	for i, pl := range plan {
		switch {
		case pl.replace != "":
			moved.Inputs[i] = pl.replace
		case !pl.keep:
			in := p.Inputs[i]
			out := ps.fresh(in)
			repl = append(repl, ps.selectNode(in, out, pl.sel))
			moved.Inputs[i] = out
		}
	}
	repl = append(repl, moved)
	ps.typeNew(repl...)
	at := slices.Index(ps.g.Nodes, p)
	ps.g.Nodes = slices.Replace(ps.g.Nodes, at, at+1, repl...)
	ps.g.Nodes = slices.DeleteFunc(ps.g.Nodes, func(n *Node) bool { return n == s })
}
