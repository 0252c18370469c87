package cpu

// Memory planning from shapes alone: the liveness the recording run finds
// (memplan.go), worked out from the graph specialised to a set of input
// shapes and shape inference, without running a kernel on the inputs or
// allocating a value. estimate-memory uses it, so that a batch far larger
// than the machine is answered at once.

import (
	"fmt"
	"runtime"
	"sort"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/linalg"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/optimizer"
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
	// RecordingBytes is what the first run of these shapes, which records
	// the plan, holds resident at its fullest step: the recorder serves a
	// request from the storage of a retired value of exactly the same byte
	// size, or allocates, and keeps what it allocated until the run ends;
	// a retired buffer of releaseMinBytes or more has its pages handed
	// back while it waits (releasePages), so only the smaller ones count
	// beside the live values.
	RecordingBytes int64
	// ScratchBytes is the kernels' scratch buffers (scratchBytes).
	ScratchBytes int64
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
func (e *Executable) PlanShapes(shapes map[string][]int) (peak, recording, scratch int64, unsized []string, err error) {
	sp, err := e.PlanMemoryFromShapes(shapes)
	return sp.PeakBytes, sp.RecordingBytes, sp.ScratchBytes, sp.Unsized, err
}

// PlanMemoryFromShapes is PlanShapes with the whole ShapePlan.
func (e *Executable) PlanMemoryFromShapes(shapes map[string][]int) (ShapePlan, error) {
	// The pipeline a run with these shapes goes through (planFor): the
	// specialised passes on a copy of the main graph, then the plan.
	sg := copyGraph(e.main.g)
	env := e.passEnv(false, nil)
	env.Shapes = shapes
	if _, err := e.specialisedPipe.Run(sg, env); err != nil {
		return ShapePlan{}, fmt.Errorf("cpu: %w", err)
	}
	// The specialised graph's value types.
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
	p, err := e.buildPlan(sg)
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
	sp := planFromTypes(p, types)
	sp.ScratchBytes = scratchBytes(p, types, e.opts.Winograd) + attnScratchBytes(p, types, e.opset)
	return sp, nil
}

// attnScratchBytes replays the attention kernels' head buffers (ops/linalg
// attnState.buffer and release) over two steps of the planned graph: each
// call takes one buffer per core running its heads, of a head's T×Tk
// scores and one row more, and a gradient that recomputes P
// (graph.AttnRecomputeP) T×Tk more; a request takes a kept buffer or
// allocates and gives it back as the kernels do (linalg.TakeKept,
// linalg.ReleaseKept).
func attnScratchBytes(p *plan, types map[string]*graph.Type, opset int64) int64 {
	var kept []int64 // capacities in elements
	size := func(c int64) int { return int(c) }
	take := func(n int64) int64 {
		var c int64
		var ok bool
		if kept, c, ok = linalg.TakeKept(kept, size, int(n)); ok {
			return c
		}
		return n
	}
	workers := kern.Workers()
	release := func(c int64) { kept = linalg.ReleaseKept(kept, size, c, workers) }
	type request struct{ elems, count int64 }
	var reqs []request
	for _, st := range p.steps {
		n := st.node
		if n.Domain != graph.FusedDomain || (n.OpType != graph.AttentionSoftmax && n.OpType != graph.AttentionSoftmaxGrad && n.OpType != graph.AttentionSoftmaxGradConcat) {
			continue
		}
		heads, rows, cols, ok := attnHeadShape(n, types, opset)
		if !ok {
			continue
		}
		elems := (rows + 1) * cols
		if n.OpType != graph.AttentionSoftmax && n.AttrInt(graph.AttnRecomputeP, 0) == 1 {
			elems += rows * cols
		}
		reqs = append(reqs, request{elems, min(int64(workers), heads)})
	}
	for range 2 {
		for _, r := range reqs {
			got := make([]int64, r.count)
			for i := range got {
				got[i] = take(r.elems)
			}
			for _, c := range got {
				release(c)
			}
		}
	}
	var total int64
	for _, c := range kept {
		total += 4 * c
	}
	return total
}

// attnHeadShape is the heads and each head's T×Tk matrix of attention
// node n: P's shape, where n writes or reads P, else the scores' product
// (qk.*) inferred over q and k's types (with graph.AttnPackedQKV, at the
// attribute's shape).
func attnHeadShape(n *graph.Node, types map[string]*graph.Type, opset int64) (heads, rows, cols int64, ok bool) {
	var pt *graph.Type
	switch {
	case n.OpType == graph.AttentionSoftmax && len(n.Outputs) > 1 && n.Outputs[1] != "":
		pt = types[n.Outputs[1]]
	case n.OpType != graph.AttentionSoftmax && len(n.Inputs) > 1 && n.Inputs[1] != "":
		pt = types[n.Inputs[1]]
	default:
		qkv := graph.AttentionQKV(n.OpType)
		g := graph.NewGraph("attention-scores")
		for i, op := range qkv[:2] {
			t := &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true}
			if packed := graph.AttnPackedShape(n); packed != nil {
				for _, d := range packed {
					t.Shape = append(t.Shape, graph.Dim{Value: int64(d), Known: true})
				}
			} else if op < len(n.Inputs) && types[n.Inputs[op]] != nil {
				t = types[n.Inputs[op]]
			} else {
				return 0, 0, 0, false
			}
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: fmt.Sprintf("in%d", i), Type: t})
		}
		g.Nodes = []*graph.Node{graph.AttentionProduct(n, graph.AttnQK, []string{"in0", "in1"}, "p")}
		g.Outputs = []*graph.ValueInfo{{Name: "p"}}
		out, err := graph.InferShapes(g, opset, nil)
		if err != nil {
			return 0, 0, 0, false
		}
		pt = out["p"]
	}
	if pt == nil || !pt.HasShape || len(pt.Shape) < 2 {
		return 0, 0, 0, false
	}
	heads = 1
	for i, d := range pt.Shape {
		if !d.Known {
			return 0, 0, 0, false
		}
		switch i {
		case len(pt.Shape) - 2:
			rows = d.Value
		case len(pt.Shape) - 1:
			cols = d.Value
		default:
			heads = satMul(heads, d.Value)
		}
	}
	return heads, rows, cols, true
}

// shapeStore is one storage of planFromTypes' sweep: its size, the steps
// it is live over (end: the last read of any value in it so far) and
// whether a graph output lies in it.
type shapeStore struct {
	bytes, exact int64 // rounded to arenaAlign, and as requested
	start, end   int
	output       bool
}

// planFromTypes is the liveness sweep of PlanShapes over p's steps.
func planFromTypes(p *plan, types map[string]*graph.Type) ShapePlan {
	var sp ShapePlan
	last := lastUses(p)
	var stores []*shapeStore
	of := make([]*shapeStore, len(p.names)) // slot -> its storage
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
				// Written into the input it replaces: a state buffer, or a
				// value of the run whose storage it then shares
				// (transientInPlace, state_order.go).
				if in := st.in[graph.UpdatedInput(n)[j]]; in >= 0 && of[in] != nil {
					of[slot] = of[in]
					of[in].end = max(of[in].end, end)
					of[in].output = of[in].output || isOut[slot]
				}
				continue
			}
			if j == 0 {
				// Written over a donated input (memplan_donate.go): the
				// first input the kernel may take whose value dies here
				// with its whole storage, shares it with no other input
				// and has the output's type.
				if in := donatedInput(p, s, last, types, slot, of); in >= 0 {
					of[slot] = of[in]
					of[in].end = max(of[in].end, end)
					of[in].output = of[in].output || isOut[slot]
					continue
				}
			}
			b, exact, ok := valueBytes(types[p.names[slot]])
			if !ok {
				unsized[p.names[slot]+" ("+n.OpType+")"] = true
			}
			sto := &shapeStore{bytes: b, exact: exact, start: s, end: end, output: isOut[slot]}
			of[slot] = sto
			stores = append(stores, sto)
		}
		if b := productBufferBytes(n, types); b > 0 {
			// The product update's gradient block, taken from the plan
			// and freed after the node.
			stores = append(stores, &shapeStore{bytes: (b + arenaAlign - 1) / arenaAlign * arenaAlign, exact: b, start: s, end: s})
		}
	}
	// Sweep: a storage is live from its step to its end, inclusive.
	starts := make([][]*shapeStore, len(p.steps)+1)
	for _, sto := range stores {
		starts[sto.start] = append(starts[sto.start], sto)
		sp.TotalBytes += sto.bytes
	}
	byEnd := append([]*shapeStore(nil), stores...)
	sort.SliceStable(byEnd, func(a, b int) bool { return byEnd[a].end < byEnd[b].end })
	var live, outs int64
	spare := map[int64]int{} // the recorder's retired storage, by exact size
	// The recording run's resident bytes: its live values' exact sizes,
	// and the retired buffers that keep their pages.
	var liveExact, spareResident int64
	resident := func(exact int64) bool { return !pagesReleased || exact < releaseMinBytes }
	k := 0
	for s := range p.steps {
		for _, sto := range starts[s] {
			live += sto.bytes
			liveExact += sto.exact
			if sto.output {
				outs += sto.bytes
			}
			if spare[sto.exact] > 0 {
				spare[sto.exact]--
				if resident(sto.exact) {
					spareResident -= sto.exact
				}
			}
		}
		if live > sp.PeakBytes {
			sp.PeakBytes, sp.OutputBytes = live, outs
		}
		sp.RecordingBytes = max(sp.RecordingBytes, liveExact+spareResident)
		for k < len(byEnd) && byEnd[k].end <= s {
			live -= byEnd[k].bytes
			liveExact -= byEnd[k].exact
			if byEnd[k].output {
				outs -= byEnd[k].bytes
			}
			if byEnd[k].exact > 0 {
				spare[byEnd[k].exact]++
				if resident(byEnd[k].exact) {
					spareResident += byEnd[k].exact
				}
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

// productBufferBytes is the gradient buffer a product update n
// (graph.SGDUpdateProductOp) takes from the step's plan
// (optimizer.ProductBufferElems), from its operands' types; 0 for other
// nodes.
func productBufferBytes(n *graph.Node, types map[string]*graph.Type) int64 {
	if !graph.IsProductUpdate(n) {
		return 0
	}
	lead, _, ok := graph.UpdateOperands(n)
	if !ok || lead < 1 || lead >= len(n.Inputs) {
		return 0
	}
	xt, at := types[n.Inputs[lead]], types[n.Inputs[lead-1]]
	_, xb, okX := valueBytes(xt)
	_, ab, okA := valueBytes(at)
	if !okX || !okA || len(xt.Shape) != 2 {
		return 0
	}
	k, cols := xt.Shape[0].Value, xt.Shape[1].Value
	if k <= 0 || cols <= 0 || xb == 0 {
		return 0
	}
	m := ab / 4 / k
	return 4 * int64(optimizer.ProductBufferElems(int(k), int(cols), int(m)))
}

// isStateUpdate reports whether output j of n replaces a state input in
// place (graph.UpdatedInput).
func isStateUpdate(p *plan, n *graph.Node, j int) bool {
	upd := graph.UpdatedInput(n)
	return j < len(upd) && upd[j] >= 0
}

// valueBytes is the arena bytes of a value of type t (rounded up to
// arenaAlign) and its exact bytes; false when t leaves a dimension open.
func valueBytes(t *graph.Type) (aligned, exact int64, ok bool) {
	if t == nil || !t.HasShape || t.Kind != graph.KindTensor {
		return 0, 0, false
	}
	elems := int64(1)
	for _, d := range t.Shape {
		if !d.Known || d.Value < 0 {
			return 0, 0, false
		}
		elems = satMul(elems, d.Value)
	}
	if !plannable(t.DType) {
		return 0, 0, true
	}
	b := satMul(elems, int64(t.DType.Size()))
	return (b + arenaAlign - 1) / arenaAlign * arenaAlign, b, true
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

// Kernel scratch. The convolution kernels keep their scratch matrices in
// free lists of a few buffers (ops/nn scratch/release for the forward pass,
// ops/gradient gradScratch/gradRelease for the gradients, scratchKept each):
// a request takes the smallest kept buffer large enough or allocates, and a
// released buffer is kept, in place of the smallest one when the list is
// full. What the lists hold after a step is the workspace a training
// process keeps besides its plan. scratchBytes replays those requests, from
// shapes:
//   - ungrouped 2-D convolutions run as implicit GEMMs (ops/nn Conv2D):
//     the forward pass and the filter gradient copy X with its padding,
//     N·C·(H+pads)·(W+pads) elements, and the input gradient (stride 1)
//     dY padded by kernel-1-pad, (strided, by stride phase) dY padded
//     once, the phases' products (N·C·H·W) and kernels (M·C·KH·KW)
//     (Conv2D.PhasedInputGradScratch); 1×1 windows copy nothing with unit
//     strides and N·C·OH·OW elements otherwise (Conv2D.OneByOneScratch);
//   - patchify convolutions (kernel = stride, Conv2D.PatchScratch): the
//     forward pass holds the patch matrix and the product matrix at once,
//     the filter gradient the patch matrix;
//   - the others gather the im2col columns of nb images side by side (nb
//     as many as fit twice the column budget, at least one) and a matrix
//     of the other operand's rows as wide, both held at once.
//
// Besides, every worker (GOMAXPROCS of them) packs panels of the largest
// product's operands (gemm.PanelBytes) while it runs. Passes that take
// Winograd's transform (nn.Conv2D.Winograd) make no such request; their
// transforms' own buffers are not replayed.
const (
	convColBudget = 1 << 19 // elements (ops/nn colBudget)
	scratchKept   = 6
)

// freeList replays one of the kernels' scratch free lists (capacities in
// elements).
type freeList struct{ kept []int64 }

func (f *freeList) take(n int64) int64 {
	best := -1
	for i, c := range f.kept {
		if c >= n && (best < 0 || c < f.kept[best]) {
			best = i
		}
	}
	if best < 0 {
		return n
	}
	c := f.kept[best]
	f.kept = append(f.kept[:best], f.kept[best+1:]...)
	return c
}

func (f *freeList) release(c int64) {
	if len(f.kept) < scratchKept {
		f.kept = append(f.kept, c)
		return
	}
	small := 0
	for i, k := range f.kept {
		if k < f.kept[small] {
			small = i
		}
	}
	if c > f.kept[small] {
		f.kept[small] = c
	}
}

func (f *freeList) call(reqs ...int64) {
	got := make([]int64, len(reqs))
	for i, n := range reqs {
		got[i] = f.take(n)
	}
	for _, c := range got {
		f.release(c)
	}
}

// scratchBytes estimates the kernel scratch a training process holds after
// its steps of the planned graph, from its value types (float32 elements).
func scratchBytes(p *plan, types map[string]*graph.Type, winograd nn.WinogradPolicy) int64 {
	dims := func(name string) []int64 {
		t := types[name]
		if t == nil || !t.HasShape {
			return nil
		}
		out := make([]int64, len(t.Shape))
		for i, d := range t.Shape {
			if !d.Known {
				return nil
			}
			out[i] = d.Value
		}
		return out
	}
	prod := func(s []int64) int64 {
		n := int64(1)
		for _, v := range s {
			n = satMul(n, v)
		}
		return n
	}
	// imagesPerProduct is ops/nn imageBatch: how many images' columns of
	// perImage elements share one product.
	imagesPerProduct := func(n, perImage int64) int64 {
		if n < 2 || perImage <= 0 {
			return 1
		}
		most := 2 * convColBudget / perImage
		if most < 2 {
			return 1
		}
		tiles := (n + most - 1) / most
		return (n + tiles - 1) / tiles
	}
	padded := func(n, c, h, w int64, pads []int64) int64 {
		return n * c * (h + pads[0] + pads[2]) * (w + pads[1] + pads[3])
	}
	var fwd, grad freeList
	var panels int64 // the largest product's packing buffers, per worker
	for _, st := range p.steps {
		n := st.node
		switch n.OpType {
		case "Conv", "ConvBackwardFilter", "ConvBackwardData":
			dy := dims(n.Outputs[0])
			if n.OpType != "Conv" {
				dy = dims(n.Input(0))
			}
			if len(dy) >= 3 {
				panels = max(panels, gemm.PanelBytes(int(dy[0]*prod(dy[2:])), 1<<30))
			}
		case "MatMul", "Gemm", graph.TransposedMatMul, graph.MatMulAdd, graph.GemmRelu, graph.MatMulAddGeluErf, graph.MatMulGeluErfGrad, graph.MatMulAddAdd:
			if y := dims(n.Outputs[0]); len(y) >= 1 {
				panels = max(panels, gemm.PanelBytes(int(y[len(y)-1]), 1<<30))
			}
		}
	}
	for range 2 { // two steps: the lists reach their steady state
		for _, st := range p.steps {
			n := st.node
			if n.OpType != "Conv" && n.OpType != "ConvBackwardFilter" && n.OpType != "ConvBackwardData" {
				continue
			}
			var x, w []int64
			dy := dims(n.Outputs[0])
			switch n.OpType {
			case "Conv":
				x, w = dims(n.Input(0)), dims(n.Input(1))
			case "ConvBackwardFilter":
				dy, x, w = dims(n.Input(0)), dims(n.Input(1)), dims(n.Outputs[0])
			case "ConvBackwardData":
				dy, w, x = dims(n.Input(0)), dims(n.Input(1)), dims(n.Outputs[0])
			}
			if len(dy) < 3 || len(x) != len(dy) || len(w) != len(dy) {
				continue
			}
			pads := n.AttrInts("pads", nil)
			strides := n.AttrInts("strides", nil)
			unit := true
			for _, v := range strides {
				unit = unit && v == 1
			}
			if len(x) == 4 && n.AttrInt("group", 1) == 1 {
				// The implicit GEMM (ops/nn Conv2D): the forward pass and
				// the filter gradient pad X; the input gradient (stride 1)
				// pads dY by kernel-1-pad; unless the pass takes
				// Winograd's transform.
				if len(pads) != 4 {
					pads = []int64{0, 0, 0, 0}
				}
				sh, sw := int64(1), int64(1)
				if len(strides) == 2 {
					sh, sw = strides[0], strides[1]
				}
				dil := n.AttrInts("dilations", nil)
				dh, dw := int64(1), int64(1)
				if len(dil) == 2 {
					dh, dw = dil[0], dil[1]
				}
				g := nn.Conv2D{N: int(x[0]), C: int(x[1]), H: int(x[2]), W: int(x[3]), M: int(dy[1]), KH: int(w[2]), KW: int(w[3]),
					SH: int(sh), SW: int(sw), DH: int(dh), DW: int(dw), PadTop: int(pads[0]), PadLeft: int(pads[1]), OH: int(dy[2]), OW: int(dy[3])}
				g.Winograd = winograd
				winoFwd, winoFilter, winoInput := g.WinogradPasses()
				if ok, elems := g.OneByOneScratch(); ok {
					// 1×1 windows: strided ones copy their read
					// positions (or dX's) into a compact batch.
					if elems > 0 {
						fwd.call(int64(elems))
					}
					continue
				}
				if ok, patch, product := g.PatchScratch(); ok && n.OpType != "ConvBackwardData" {
					// Patchify windows (kernel = stride): the patch
					// matrix, and the forward's product beside it.
					if n.OpType == "Conv" {
						fwd.call(int64(patch), int64(product))
					} else {
						fwd.call(int64(patch))
					}
					continue
				}
				switch {
				case n.OpType == "Conv" && winoFwd, n.OpType == "ConvBackwardFilter" && winoFilter,
					n.OpType == "ConvBackwardData" && winoInput:
					continue
				case n.OpType != "ConvBackwardData":
					if pads[0]|pads[1]|pads[2]|pads[3] != 0 {
						fwd.call(padded(x[0], x[1], x[2], x[3], pads))
					}
					continue
				case !unit:
					// Strided windows by stride phase: dY padded
					// once, the phases' products and their kernels.
					if ok, pad, out, wts := g.PhasedInputGradScratch(); ok {
						if pad > 0 {
							fwd.call(int64(pad), int64(out), int64(wts))
						} else {
							fwd.call(int64(out), int64(wts))
						}
						continue
					}
				case unit:
					kh, kw := w[2], w[3]
					fwd.call(padded(dy[0], dy[1], dy[2], dy[3], []int64{kh - 1 - pads[0], kw - 1 - pads[1], kh - 1 - pads[2], kw - 1 - pads[3]}))
					continue
				}
			}
			// im2col: the columns of nb images side by side, and a matrix
			// of the other operand's rows as wide, both held at once.
			batch, ck := dy[0], prod(w[1:])
			L := prod(dy[2:])
			if n.OpType == "ConvBackwardData" && unit {
				L = prod(x[2:]) // the gather variant's columns span the input
			}
			nb := imagesPerProduct(batch, ck*L)
			grad.call(ck*nb*L, max(dy[1], x[1])*nb*L)
		}
	}
	total := satMul(panels, int64(runtime.GOMAXPROCS(0)))
	for _, c := range append(fwd.kept, grad.kept...) {
		total += satMul(c, 4)
	}
	return total
}

// donatedInput is the input slot of step s whose storage the static plan
// expects its kernel to write output slot out over (the recording run's
// rule, memplan_donate.go, over the sweep's storages, of: nil for values
// not the run's), or -1.
func donatedInput(p *plan, s int, last []int, types map[string]*graph.Type, out int, of []*shapeStore) int {
	st := &p.steps[s]
	ot := types[p.names[out]]
	for _, k := range st.spec.Overwrites {
		if k < 0 || k >= len(st.in) || st.in[k] < 0 {
			continue
		}
		in := st.in[k]
		sto := of[in]
		if sto == nil || last[in] != s || sto.end > s || !sameType(types[p.names[in]], ot) {
			continue
		}
		shared := false
		for k2, other := range st.in {
			if k2 != k && other >= 0 && (other == in || of[other] == sto) {
				shared = true
				break
			}
		}
		if !shared {
			return in
		}
	}
	return -1
}

// sameType reports whether a and b are tensor types of one dtype and the
// same known shape.
func sameType(a, b *graph.Type) bool {
	if a == nil || b == nil || a.Kind != graph.KindTensor || b.Kind != graph.KindTensor || a.DType != b.DType || !a.HasShape || !b.HasShape || len(a.Shape) != len(b.Shape) {
		return false
	}
	for i, d := range a.Shape {
		if !d.Known || !b.Shape[i].Known || d.Value != b.Shape[i].Value {
			return false
		}
	}
	return true
}
