package optimizer

import (
	"math"
	"slices"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.InternalDomain, graph.SGDUpdateGatheredOp, kern.Spec{Fn: updateGathered})
	kern.RegisterSpec(graph.InternalDomain, graph.AdamUpdateGatheredOp, kern.Spec{Fn: updateGathered})
}

// gatheredState is what an SGDUpdateGathered or AdamUpdateGathered node
// keeps between runs: the update's state, each table row's slot among the
// rows the indices name (-1: none), those rows in slot order, their
// gradient rows, and a run of zero rows (scaled by the norm's coefficient
// with norm=1) that the rows no index names read as their gradient.
type gatheredState struct {
	nodeState
	slot    []int32
	touched []int
	sorted  []int // touched in row order (the norm's sum)
	rows    []float32
	zeros   []float32
	inner   int
	task    gatheredTask
}

// isAdam reports whether the node's update is Adam's (else SGD's).
func (st *gatheredState) isAdam() bool { return st.node.OpType == graph.AdamUpdateGatheredOp }

// updateGathered is graph.SGDUpdateGatheredOp and AdamUpdateGatheredOp:
// SGDUpdate or AdamUpdate of the table X with G = GatherGrad(dY, X,
// indices) along axis 0. G's rows are summed from +0 in index order into a
// row per distinct index (as GatherGrad adds them into its zeros), then
// every row of X and its buffers is updated as the update updates it,
// reading its summed row or zeros: the same arithmetic on the same values,
// so the same bits, without G's table being written and read.
func updateGathered(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	lead, groups, ok := graph.UpdateOperands(n) // X at lead, the indices before it
	if !ok || !graph.IsGatheredUpdate(n) {
		return nil, n.Errorf("is not a gathered update")
	}
	norm := n.AttrInt("norm", 0) == 1 // max_norm before the indices
	if want := lead + groups; len(in) != want {
		return nil, n.Errorf("has %d inputs, want %d", len(in), want)
	}
	ind, x, dy := in[lead-1], in[lead], in[lead+1]
	if ind == nil || !ind.DType.IsInt() {
		return nil, n.Errorf("input %d (indices) must be an integer tensor", lead-1)
	}
	if x == nil || x.DType != graph.Float32 || x.Rank() == 0 {
		return nil, n.Errorf("input %d (the table) must be float32 of rank 1 or more", lead)
	}
	if dy == nil || dy.DType != graph.Float32 {
		return nil, n.Errorf("input %d (dY) must be float32", lead+1)
	}
	if wantShape := append(slices.Clone(ind.Shape), x.Shape[1:]...); !graph.SameShape(dy.Shape, wantShape) {
		return nil, n.Errorf("dY has shape %v, want %v (the indices' shape, then the table's rows)", dy.Shape, wantShape)
	}
	st := kern.State[gatheredState](n)
	defer st.finishFused()
	if err := st.prepareFused(ctx, n, in, lead); err != nil {
		return nil, err
	}
	var maxNorm float32
	if norm {
		var err error
		if maxNorm, err = scalarF32(n, in, lead-2, "max_norm"); err != nil {
			return nil, err
		}
	}
	dim := x.Shape[0]
	inner := 1
	for _, d := range x.Shape[1:] {
		inner *= d
	}
	if err := st.sumRows(n, ind, dy.Float32s(), dim, inner); err != nil {
		return nil, err
	}
	defer st.forget()
	zero := float32(0) // what the rows no index names read
	if norm {
		// ClipGradNorm of the one tensor G, from its named rows: its sum
		// of squares in element order is theirs in row order (the other
		// rows add exact zeros), and scaling G scales them and turns its
		// zeros into 0·coef.
		sorted := append(st.sorted[:0], st.touched...)
		slices.Sort(sorted)
		st.sorted = sorted
		var sq float64
		for _, r := range sorted {
			s := int(st.slot[r])
			sq = sumSquares(sq, st.rows[s*inner:(s+1)*inner])
		}
		total, coef := clipCoef([]float64{sq}, maxNorm)
		if coef < 1 {
			scaleBy(st.rows[:len(st.touched)*inner], coef)
			zero *= coef
		}
		if err := st.setNorm(n, total); err != nil {
			return nil, err
		}
	}
	if skip, err := skipped(n, in); err != nil || skip {
		if err != nil {
			return nil, err
		}
		return kern.Results(n, st.outs...), nil
	}
	var err error
	if st.isAdam() {
		err = st.adamSetup(n, in)
	} else {
		err = st.sgdSetup(n, in)
	}
	if err != nil {
		return nil, err
	}
	if dim*inner == 0 {
		return kern.Results(n, st.outs...), nil
	}
	// Chunks of whole rows, about chunkElems elements each.
	per := max(1, chunkElems/max(inner, 1))
	if len(st.zeros) < per*inner || math.Float32bits(st.zeros[0]) != math.Float32bits(zero) {
		st.zeros = kern.Grow(st.zeros, per*inner)
		for i := range st.zeros {
			st.zeros[i] = zero
		}
	}
	r := &st.runner
	r.chunks = r.chunks[:0]
	for lo := 0; lo < dim; lo += per {
		r.chunks = append(r.chunks, chunk{0, lo, min(lo+per, dim)})
	}
	if st.fn == nil {
		st.task.st = st
		st.fn = st.task.rows // made once: a step allocates nothing
	}
	r.run(dim*inner, st.fn)
	st.hyper = nil
	return kern.Results(n, st.outs...), nil
}

// sumRows sums dY's rows into st.rows, one row per distinct index in the
// order the indices first name them (st.slot, st.touched), each from +0
// in index order; an index outside [-dim, dim) is an error, as
// GatherGrad's.
func (st *gatheredState) sumRows(n *graph.Node, ind *graph.Tensor, dy []float32, dim, inner int) error {
	if len(st.slot) < dim {
		st.slot = make([]int32, dim)
		for i := range st.slot {
			st.slot[i] = -1
		}
	}
	st.inner = inner
	st.touched = st.touched[:0]
	k := ind.Size()
	st.rows = kern.Grow(st.rows, k*inner) // at most one row per index; each cleared when first named
	for p := range k {
		v := ind.Int(p)
		if v < -int64(dim) || v >= int64(dim) {
			st.forget()
			return n.Errorf("index %d is out of range for an axis of size %d", v, dim)
		}
		if v < 0 {
			v += int64(dim)
		}
		row := int(v)
		s := int(st.slot[row])
		if s < 0 {
			s = len(st.touched)
			st.slot[row] = int32(s)
			st.touched = append(st.touched, row)
			clear(st.rows[s*inner : (s+1)*inner])
		}
		d, src := st.rows[s*inner:(s+1)*inner], dy[p*inner:(p+1)*inner]
		for i, g := range src {
			d[i] += g
		}
	}
	return nil
}

// forget sets the slots of the rows named in this run back to -1.
func (st *gatheredState) forget() {
	for _, row := range st.touched {
		st.slot[row] = -1
	}
	st.touched = st.touched[:0]
}

// gatheredTask runs SGDUpdateGathered's chunks of rows.
type gatheredTask struct{ st *gatheredState }

// rows updates rows [lo, hi) of the table: each run of rows no index
// names from st.zeros, each named row from its summed gradient row.
func (t gatheredTask) rows(_, lo, hi int) {
	st := t.st
	inner := st.inner
	for r := lo; r < hi; {
		if s := int(st.slot[r]); s >= 0 {
			st.apply(r, r+1, st.rows[s*inner:(s+1)*inner])
			r++
			continue
		}
		e := r + 1
		for e < hi && st.slot[e] < 0 {
			e++
		}
		st.apply(r, e, st.zeros)
		r = e
	}
}

// apply updates rows [a, c) of the table and its buffers from the gradient
// rows g (at least as long).
func (st *gatheredState) apply(a, c int, g []float32) {
	st.applyRows(st.isAdam(), a*st.inner, c*st.inner, g)
}
