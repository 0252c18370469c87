package graph

import (
	"math"
	"sort"
)

// FuseSliceGradConcat rewrites the gradient of a value cut into slices
// along one axis — a tree of Adds whose leaves are SliceGrad(dYi, X, …) of
// the same X, each slicing one axis with step 1, the slices together
// covering that axis without overlap — into one Concat of the dYi in the
// order of their slices. nn.MultiheadAttention's packed in-projection is
// such a value (q, k and v are three Slices of one product): its gradient
// was three zero-filled tensors of the product's size, each with one slice
// written, and two Adds over them; the Concat writes every element once.
// The values are the same (each element is one dYi's plus zeros), except
// that a -0 of a dYi stays -0 instead of becoming +0.
//
// It needs a specialised graph: X's shape from g.ValueInfo, the slices'
// starts, ends and axes constant. Every value inside the tree must be read
// by the tree alone. Nodes are in topological order. It returns the number
// of rewrites.
func FuseSliceGradConcat(g *Graph) int {
	readers := readCounts(g)
	producer := map[string]*Node{}
	for _, n := range g.Nodes {
		if len(n.Outputs) == 1 && n.Outputs[0] != "" {
			producer[n.Outputs[0]] = n
		}
	}
	constants := graphConstants(g) // not the initializers fed as inputs
	ints := func(name string) ([]int64, bool) { return constInts(constants, name) }
	isSliceGrad := func(n *Node) bool {
		return n != nil && n.Domain == InternalDomain && n.OpType == "SliceGrad" && len(n.Inputs) >= 4 &&
			len(n.Outputs) == 1 && n.Inputs[0] != "" && n.Inputs[1] != ""
	}
	isAdd := func(n *Node) bool {
		return n != nil && n.OpType == "Add" && isPlain(n) && len(n.Inputs) == 2 && len(n.Outputs) == 1 && n.Outputs[0] != ""
	}
	drop := map[*Node]bool{}
	var leaves func(name string, root bool, sg, adds *[]*Node) bool
	leaves = func(name string, root bool, sg, adds *[]*Node) bool {
		p := producer[name]
		if p == nil || (!root && readers[name] != 1) || drop[p] {
			return false
		}
		switch {
		case isSliceGrad(p):
			*sg = append(*sg, p)
			return true
		case isAdd(p):
			*adds = append(*adds, p)
			return leaves(p.Inputs[0], false, sg, adds) && leaves(p.Inputs[1], false, sg, adds)
		}
		return false
	}
	type piece struct {
		start, end int64
		dy         string
	}
	// cut returns the one axis and the [start, end) a SliceGrad's slice
	// takes of a value shaped like shape, or false.
	cut := func(n *Node, shape []int) (axis int, p piece, ok bool) {
		starts, ok1 := ints(n.Inputs[2])
		ends, ok2 := ints(n.Inputs[3])
		if !ok1 || !ok2 || len(starts) != 1 || len(ends) != 1 {
			return 0, p, false
		}
		axis = 0
		if len(n.Inputs) > 4 && n.Inputs[4] != "" {
			axes, ok := ints(n.Inputs[4])
			if !ok || len(axes) != 1 {
				return 0, p, false
			}
			axis = int(axes[0])
		}
		if len(n.Inputs) > 5 && n.Inputs[5] != "" {
			steps, ok := ints(n.Inputs[5])
			if !ok || len(steps) != 1 || steps[0] != 1 {
				return 0, p, false
			}
		}
		if axis < 0 {
			axis += len(shape)
		}
		if axis < 0 || axis >= len(shape) {
			return 0, p, false
		}
		dim := int64(shape[axis])
		clamp := func(v int64) int64 {
			if v < 0 {
				v += dim
			}
			return max(0, min(v, dim))
		}
		s, e := clamp(starts[0]), ends[0]
		if e == math.MaxInt64 || e > dim {
			e = dim
		}
		e = clamp(e)
		if e <= s {
			return 0, p, false
		}
		return axis, piece{start: s, end: e, dy: n.Inputs[0]}, true
	}
	replaced := map[*Node]*Node{}
	fused := 0
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		if !isAdd(n) || drop[n] {
			continue
		}
		var sg, adds []*Node
		if !leaves(n.Outputs[0], true, &sg, &adds) || len(sg) < 2 {
			continue
		}
		x := sg[0].Inputs[1]
		shape, _, known := knownTensorType(g, x)
		if !known || len(shape) == 0 {
			continue
		}
		axis := -1
		pieces := make([]piece, 0, len(sg))
		ok := true
		for _, l := range sg {
			a, p, good := cut(l, shape)
			ok = ok && good && l.Inputs[1] == x && (axis < 0 || a == axis)
			if !ok {
				break
			}
			axis = a
			pieces = append(pieces, p)
		}
		if !ok {
			continue
		}
		sort.Slice(pieces, func(a, b int) bool { return pieces[a].start < pieces[b].start })
		at := int64(0)
		for _, p := range pieces {
			ok = ok && p.start == at
			at = p.end
		}
		if !ok || at != int64(shape[axis]) {
			continue
		}
		inputs := make([]string, len(pieces))
		for j, p := range pieces {
			inputs[j] = p.dy
		}
		replaced[n] = &Node{Name: n.Name, OpType: "Concat", Inputs: inputs, Outputs: []string{n.Outputs[0]},
			Attrs: map[string]*Attr{"axis": {Name: "axis", Type: AttrInt, I: int64(axis)}}}
		for _, a := range adds[1:] {
			drop[a] = true
		}
		for _, l := range sg {
			drop[l] = true
		}
		fused++
	}
	if fused == 0 {
		return 0
	}
	keep := g.Nodes[:0]
	for _, n := range g.Nodes {
		switch {
		case drop[n]:
		case replaced[n] != nil:
			keep = append(keep, replaced[n])
		default:
			keep = append(keep, n)
		}
	}
	clear(g.Nodes[len(keep):])
	g.Nodes = keep
	return fused
}

// PruneUnreadDropoutMasks drops the mask output of every Dropout whose mask
// nothing reads (no node, subgraph or graph output): training names the
// mask for the gradient rule, which no longer reads it where the ratio is a
// constant 0, and a kernel need not write an all-true tensor for no one.
// It returns the number of masks dropped.
func PruneUnreadDropoutMasks(g *Graph) int {
	readers := readCounts(g)
	pruned := 0
	for _, n := range g.Nodes {
		if n.OpType != "Dropout" || !isPlain(n) || len(n.Outputs) != 2 || n.Outputs[1] == "" || readers[n.Outputs[1]] != 0 {
			continue
		}
		n.Outputs = n.Outputs[:1]
		pruned++
	}
	return pruned
}

// constInts is the value of the int64 or int32 constant name (of
// graphConstants), or false.
func constInts(constants map[string]*Tensor, name string) ([]int64, bool) {
	t := constants[name]
	if t == nil || (t.DType != Int64 && t.DType != Int32) {
		return nil, false
	}
	out := make([]int64, t.Size())
	for i := range out {
		out[i] = t.Int(i)
	}
	return out, true
}
