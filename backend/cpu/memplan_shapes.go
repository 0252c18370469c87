package cpu

// Memory planning from shapes alone: the liveness the recording run finds
// (memplan.go), worked out from the graph specialised to a set of input
// shapes and shape inference, without running a kernel on the inputs or
// allocating a value. estimate-memory uses it, so that a batch far larger
// than the machine is answered at once.

import (
	"fmt"
	"sort"

	"github.com/onnxtrain/onnxtrain/graph"
)

// ShapePlan is the memory of one run of a plan, worked out from shapes: the
// values the kernels produce, each placed when its step runs and retired
// after the last step that reads it (or any value sharing its storage).
// Sizes are in bytes, each value rounded up to the arena's alignment.
type ShapePlan struct {
	// PeakBytes is the largest sum of live values at any step: what a run
	// holds at its peak besides its inputs and weights (MemoryStats'
	// PeakBytes, less the fragmentation of the arena's placement).
	PeakBytes int64
	// TotalBytes is the sum of all values: what a run would hold if
	// nothing were freed or shared (MemoryStats' TotalBytes).
	TotalBytes int64
	// OutputBytes is the part of PeakBytes the graph's outputs hold.
	OutputBytes int64
	// Values is the number of values placed; Unsized names the values
	// (and their op) whose shape inference left a dimension open, counted
	// as 0 bytes.
	Values  int
	Unsized []string
}

// viewOps return a view of their first input (kern.View): no storage of
// their own, and they keep the input's storage alive while they are.
var viewOps = map[string]bool{"Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true, "Identity": true}

// PlanShapes plans a run on inputs of the given shapes (every graph input
// the run is fed, state included) from shapes alone: the graph is
// specialised to them as the first Run of those shapes would do (shape
// computations folded), fused as then, and its values sized by shape
// inference. Nothing runs on the inputs and no value is allocated.
func (e *Executable) PlanShapes(shapes map[string][]int) (peak, total int64, unsized []string, err error) {
	sp, err := e.PlanMemoryFromShapes(shapes)
	return sp.PeakBytes, sp.TotalBytes, sp.Unsized, err
}

// PlanMemoryFromShapes is PlanShapes with the whole ShapePlan.
func (e *Executable) PlanMemoryFromShapes(shapes map[string][]int) (ShapePlan, error) {
	sg, err := graph.Specialize(e.main.g, e.opset, shapes, e.evaluate)
	if err != nil {
		return ShapePlan{}, fmt.Errorf("cpu: %w", err)
	}
	// The specialised graph's value types (what inference found before
	// the fusions below renamed nothing but rewired the chains they fuse).
	types := map[string]*graph.Type{}
	for _, in := range sg.Inputs {
		if in.Type != nil {
			types[in.Name] = in.Type
		}
	}
	for name, vi := range sg.ValueInfo {
		if vi != nil && vi.Type != nil {
			types[name] = vi.Type
		}
	}
	for _, o := range sg.Outputs {
		if _, ok := types[o.Name]; !ok && o.Type != nil {
			types[o.Name] = o.Type
		}
	}
	if !e.opts.DisableFused && !e.opts.PrimitivesOnly {
		graph.FuseMatMulBias(sg)
		graph.FuseGeluErfGrad(sg)
	}
	p, err := e.planGraph(sg, false)
	if err != nil {
		return ShapePlan{}, fmt.Errorf("cpu: %w", err)
	}
	// Values the lowering and fusions made: inference over the planned
	// graph, as far as it goes.
	if more, err := graph.InferShapes(p.g, e.opset, types); err == nil || more != nil {
		for name, t := range more {
			if _, ok := types[name]; !ok {
				types[name] = t
			}
		}
	}
	return planFromTypes(p, types), nil
}

// planFromTypes is the liveness sweep of PlanShapes over p's steps.
func planFromTypes(p *plan, types map[string]*graph.Type) ShapePlan {
	var sp ShapePlan
	last := lastUses(p)
	type storage struct {
		bytes      int64
		start, end int
		output     bool
	}
	var stores []*storage
	of := make([]*storage, len(p.names)) // slot -> its storage
	isOut := make([]bool, len(p.names))
	for _, o := range p.outs {
		isOut[o] = true
	}
	unsized := map[string]bool{}
	for s, st := range p.steps {
		n := st.node
		for j, slot := range st.out {
			if slot < 0 {
				continue
			}
			end := max(last[slot], s)
			if j == 0 && viewOps[n.OpType] && len(st.in) > 0 && st.in[0] >= 0 {
				if src := of[st.in[0]]; src != nil {
					of[slot] = src
					src.end = max(src.end, end)
					src.output = src.output || isOut[slot]
					continue
				}
				continue // a view of an input or weight: not the run's
			}
			if st.inplace && isStateUpdate(p, n, j) {
				continue // written into the state buffer it replaces
			}
			b, ok := valueBytes(types[p.names[slot]])
			if !ok {
				unsized[p.names[slot]+" ("+n.OpType+")"] = true
			}
			sto := &storage{bytes: b, start: s, end: end, output: isOut[slot]}
			of[slot] = sto
			stores = append(stores, sto)
		}
	}
	// Sweep: a storage is live from its step to its end, inclusive.
	starts := make([][]*storage, len(p.steps)+1)
	for _, sto := range stores {
		starts[sto.start] = append(starts[sto.start], sto)
		sp.TotalBytes += sto.bytes
	}
	byEnd := append([]*storage(nil), stores...)
	sort.SliceStable(byEnd, func(a, b int) bool { return byEnd[a].end < byEnd[b].end })
	var live, outs int64
	k := 0
	for s := range p.steps {
		for _, sto := range starts[s] {
			live += sto.bytes
			if sto.output {
				outs += sto.bytes
			}
		}
		if live > sp.PeakBytes {
			sp.PeakBytes, sp.OutputBytes = live, outs
		}
		for k < len(byEnd) && byEnd[k].end <= s {
			live -= byEnd[k].bytes
			if byEnd[k].output {
				outs -= byEnd[k].bytes
			}
			k++
		}
	}
	sp.Values = len(stores)
	for name := range unsized {
		sp.Unsized = append(sp.Unsized, name)
	}
	sort.Strings(sp.Unsized)
	return sp
}

// isStateUpdate reports whether output j of n replaces a state input in
// place (graph.UpdatedInput).
func isStateUpdate(p *plan, n *graph.Node, j int) bool {
	upd := graph.UpdatedInput(n)
	return j < len(upd) && upd[j] >= 0
}

// valueBytes is the arena bytes of a value of type t (rounded up to
// arenaAlign); false when t leaves a dimension open.
func valueBytes(t *graph.Type) (int64, bool) {
	if t == nil || !t.HasShape || t.Kind != graph.KindTensor {
		return 0, false
	}
	elems := int64(1)
	for _, d := range t.Shape {
		if !d.Known || d.Value < 0 {
			return 0, false
		}
		elems = satMul(elems, d.Value)
	}
	if !plannable(t.DType) {
		return 0, true
	}
	b := satMul(elems, int64(t.DType.Size()))
	if b == 0 {
		return 0, true
	}
	return (b + arenaAlign - 1) / arenaAlign * arenaAlign, true
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > (1<<62)/b {
		return 1 << 62
	}
	return a * b
}
