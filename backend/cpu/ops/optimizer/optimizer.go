// Package optimizer holds the CPU kernels of onnxtrain's optimizer-step ops
// (graph.SGDUpdateOp, AdamUpdateOp, ClipGradNormOp, ClipGradValueOp,
// UnscaleGradsOp, AccumulateGradOp): each updates all the tensors of a step
// in one pass, split into chunks of at most chunkElems elements of one
// tensor that the kernel pool's workers share, so that the pass is spread
// over the cores whatever the sizes of the tensors. The element-wise
// arithmetic is PyTorch 1.13's (see graph/optimizer_ops.go); every element
// is computed the same way whichever goroutine runs it, so results do not
// depend on the split.
package optimizer

import (
	"math"
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	for op, fn := range map[string]kern.Kernel{
		graph.SGDUpdateOp:      sgdUpdate,
		graph.AdamUpdateOp:     adamUpdate,
		graph.ClipGradNormOp:   clipGradNorm,
		graph.ClipGradValueOp:  clipGradValue,
		graph.UnscaleGradsOp:   unscaleGrads,
		graph.AccumulateGradOp: accumulateGrad,
	} {
		kern.RegisterSpec(graph.InternalDomain, op, kern.Spec{Fn: fn})
	}
}

// Element-wise updates are split into chunks of chunkElems elements of one
// tensor, spread over GOMAXPROCS goroutines once a step updates at least
// parallelElems elements.
const (
	chunkElems    = 1 << 14
	parallelElems = 1 << 16
)

// nodeState is what a node keeps between runs (kern.State), so that a
// steady-state step allocates nothing: the outputs, the operand slices
// per tensor, the chunk list and the callback that runs them.
type nodeState struct {
	outs    []*graph.Tensor
	ops     [][]float32 // operand group g of tensor i at ops[g*n+i]
	sizes   []int
	runner  chunkRunner
	fn      func(i, lo, hi int)
	sgd     sgdConsts
	adam    adamConsts
	hyper   []float32
	partial []float64 // ClipGradNorm: per-tensor sums of squares
	found   []int32   // UnscaleGrads: inf/NaN seen, by tensor (atomic)
	n       int
	node    *graph.Node
	upd     []int
	scalar  float32
	fresh   bool
	fusedIn []*graph.Tensor // a fused update's inputs, X for G (prepareFused)
}

// prepareFused is prepare for a fused update of one tensor (X at input
// lead) whose gradient operand (input lead+1) holds what the gradient is
// made from: X stands in for it, so that prepare checks G's group against
// X's sizes. Defer finishFused.
func (st *nodeState) prepareFused(ctx *kern.Context, n *graph.Node, in []*graph.Tensor, lead int) error {
	st.fusedIn = append(st.fusedIn[:0], in...)
	st.fusedIn[lead+1] = in[lead]
	return prepare(ctx, n, st.fusedIn, st)
}

// finishFused forgets a fused update's operands (dropOperands).
func (st *nodeState) finishFused() {
	clear(st.fusedIn)
	st.dropOperands()
}

// applyRows updates elements [lo, hi) of the one tensor of a fused update
// (SGDUpdateGathered, SGDUpdateProduct and their Adam forms) and of its
// buffers from the gradient elements g (at least as long), as SGDUpdate
// or AdamUpdate updates them.
func (st *nodeState) applyRows(adam bool, lo, hi int, g []float32) {
	// The operand groups in st.ops (one tensor each): X, G (X's stand-in,
	// unread), then the buffers.
	rows := func(k int) []float32 {
		if k >= len(st.ops) || st.ops[k] == nil {
			return nil
		}
		return st.ops[k][lo:hi]
	}
	if adam {
		var mx []float32
		if st.adam.amsgrad {
			mx = rows(4)
		}
		adamSlices(st, 0, rows(0), g, rows(2), rows(3), mx)
		return
	}
	var b []float32
	if st.sgd.momentum {
		b = rows(2)
	}
	sgdSlices(st, 0, rows(0), g, b)
}

// dropOperands forgets the operand slices of the latest run (prepare sets
// them anew on every run). Kept, they would hold the gradients of the
// memory plan's recording run, which come from the Go heap, past that run
// and its collection: for the GPT's 50257-wide head alone 147 MiB that
// stay resident beside the arena.
func (st *nodeState) dropOperands() { clear(st.ops[:cap(st.ops)]) }

// prepare checks an optimizer op's operands and sets st.ops (every
// operand's float32 data) and st.outs (the updated tensors: the inputs
// themselves when the executor allows in-place updates, copies otherwise).
// The op's leading scalar outputs (graph.UpdatedInput's -1 entries) are
// left to the caller.
func prepare(ctx *kern.Context, n *graph.Node, in []*graph.Tensor, st *nodeState) error {
	if st.node != n {
		st.node, st.upd = n, graph.UpdatedInput(n)
	}
	upd := st.upd
	if upd == nil {
		return n.Errorf("malformed %s node (inputs %d, outputs %d, tensors=%d)", n.OpType, len(n.Inputs), len(n.Outputs), n.AttrInt("tensors", -1))
	}
	lead := 0
	for lead < len(upd) && upd[lead] < 0 {
		lead++
	}
	first := upd[lead] // the first operand: tensor 0 of the first updated group
	nt := 0            // tensors per operand group
	for lead+nt < len(upd) && upd[lead+nt] == first+nt {
		nt++
	}
	total := len(in) - first // operand tensors, all groups
	st.n = nt
	st.ops = kern.Grow(st.ops, total)
	st.sizes = kern.Grow(st.sizes, nt)
	for j := 0; j < total; j++ {
		t := in[first+j]
		if t == nil {
			return n.Errorf("operand %d (%q) is missing", first+j, n.Input(first+j))
		}
		d, ok := t.Data.([]float32)
		if !ok || t.DType != graph.Float32 || len(d) != t.Size() {
			return n.Errorf("operand %q must be float32, got %v", n.Input(first+j), t.DType)
		}
		i := j % nt
		if j < nt {
			st.sizes[i] = len(d)
		} else if len(d) != st.sizes[i] {
			return n.Errorf("operand %q has %d elements, its tensor %q has %d", n.Input(first+j), len(d), n.Input(first+i), st.sizes[i])
		}
		st.ops[j] = d
	}
	st.outs = kern.Grow(st.outs, len(upd))
	for j, i := range upd {
		if i < 0 {
			continue
		}
		src := in[i]
		if ctx != nil && ctx.InPlace {
			st.outs[j] = src
			continue
		}
		c, err := kern.NewUninit(n, graph.Float32, src.Shape)
		if err != nil {
			return err
		}
		d := c.Float32s()
		copy(d, src.Float32s())
		st.outs[j] = c
		st.ops[i-first] = d
	}
	return nil
}

// chunkRunner runs a step's element-wise updates in chunks (forChunks).
type chunkRunner struct {
	chunks []chunk
	next   atomic.Int64
	fn     func(i, lo, hi int)
}

type chunk struct{ i, lo, hi int }

// Chunk implements kern.Chunker: each of the pool's workers takes chunks
// until none is left.
func (r *chunkRunner) Chunk(_, _ int) {
	for {
		c := int(r.next.Add(1)) - 1
		if c >= len(r.chunks) {
			return
		}
		r.fn(r.chunks[c].i, r.chunks[c].lo, r.chunks[c].hi)
	}
}

// forChunks calls fn(i, lo, hi) for ranges [lo, hi) covering [0, sizes[i])
// for every i, concurrently for large totals.
func (r *chunkRunner) forChunks(sizes []int, fn func(i, lo, hi int)) {
	total := 0
	for _, n := range sizes {
		total += n
	}
	r.chunks = r.chunks[:0]
	for i, n := range sizes {
		for lo := 0; lo < n; lo += chunkElems {
			r.chunks = append(r.chunks, chunk{i, lo, min(lo+chunkElems, n)})
		}
	}
	r.run(total, fn)
}

// run calls fn for each of r.chunks, concurrently when they cover at
// least parallelElems elements (total).
func (r *chunkRunner) run(total int, fn func(i, lo, hi int)) {
	workers := min(kern.Workers(), total/parallelElems+1)
	if workers <= 1 {
		for _, c := range r.chunks {
			fn(c.i, c.lo, c.hi)
		}
		return
	}
	r.next.Store(0)
	r.fn = fn
	kern.RunTask("optimizer worker", workers, workers, r)
	r.fn = nil
}

// scalarF32 reads a float32 (or other float) scalar input.
func scalarF32(n *graph.Node, in []*graph.Tensor, i int, what string) (float32, error) {
	if i >= len(in) || in[i] == nil || in[i].Size() != 1 || !in[i].DType.IsFloat() || in[i].Validate() != nil {
		return 0, n.Errorf("input %d (%s) must be a float scalar", i, what)
	}
	return float32(in[i].Float(0)), nil
}

// hyperRows reads the hyper input: nt rows of cols float32 values.
func hyperRows(n *graph.Node, t *graph.Tensor, nt, cols int) ([]float32, error) {
	if t == nil || t.DType != graph.Float32 || len(t.Float32s()) != nt*cols || t.Size() != nt*cols {
		return nil, n.Errorf("input 1 (hyper) must be float32 [%d, %d]", nt, cols)
	}
	return t.Float32s(), nil
}

// sqrt32 is the correctly rounded float32 square root.
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// fma32 returns x*y+z rounded once to float32, as ATen's vectorised
// fmadd (and the FMA-contracted scalar loops) compute it. The common case
// is small enough to be inlined into the update loops.
func fma32(x, y, z float32) float32 {
	// x*y is exact in float64 (24+24 bits fit in 53); rounding the float64
	// sum to float32 can only go wrong when it lies exactly halfway between
	// two float32 values, which for results in float32's normal range
	// means its low 29 mantissa bits are 1000...0.
	// (b<<1 drops the sign: its top 11 bits are the exponent field, at
	// least 1023-126 for a sum in float32's normal range.)
	s := float64(x)*float64(y) + float64(z)
	b := math.Float64bits(s)
	if b&(1<<29-1) != 1<<28 && b<<1 >= (1023-126)<<53 {
		return float32(s)
	}
	return fma32Slow(x, y, z)
}

// fmaAxpy32Go sets y[i] = fma32(alpha, x[i], y[i]) for every i (len(x)
// >= len(y)), with fma32's common case written out, as the compiler does
// not inline it.
func fmaAxpy32Go(alpha float32, x, y []float32) {
	x = x[:len(y)]
	a := float64(alpha)
	for i, v := range x {
		s := a*float64(v) + float64(y[i])
		if b := math.Float64bits(s); b&(1<<29-1) != 1<<28 && b<<1 >= (1023-126)<<53 {
			y[i] = float32(s)
			continue
		}
		y[i] = fma32Slow(alpha, v, y[i])
	}
}

// fma32Slow is fma32 for sums at a float32 rounding tie or outside
// float32's normal range.
func fma32Slow(x, y, z float32) float32 {
	p := float64(x) * float64(y)
	zz := float64(z)
	s := p + zz
	r := float32(s)
	if math.IsInf(s, 0) || math.IsNaN(s) || float64(r) == s {
		return r
	}
	// s is rounded; rounding it again to float32 is wrong only when s
	// lies exactly halfway between two float32 values and the exact sum
	// does not. TwoSum gives the exact error e = (p+zz) - s.
	bb := s - p
	e := (p - (s - bb)) + (zz - bb)
	if e == 0 {
		return r
	}
	other := math.Nextafter32(r, float32(math.Copysign(math.Inf(1), s-float64(r))))
	if (float64(r)+float64(other))/2 != s {
		return r
	}
	// A tie for the float64 sum; the exact sum lies on e's side of it.
	if (e > 0) == (float64(other) > float64(r)) {
		return other
	}
	return r
}
