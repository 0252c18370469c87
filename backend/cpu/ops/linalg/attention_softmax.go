package linalg

import (
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/gradient"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/reduce"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.AttentionSoftmax, kern.Spec{Fn: attentionSoftmaxKernel})
	kern.RegisterSpec(graph.FusedDomain, graph.AttentionSoftmaxGrad, kern.Spec{Fn: attentionSoftmaxGradKernel})
	kern.RegisterSpec(graph.FusedDomain, graph.AttentionSoftmaxGradConcat, kern.Spec{Fn: attentionSoftmaxGradConcatKernel})
}

// attnState is what an attention node keeps between runs: its products
// as PermutedMatMul nodes (built from its attributes once), their plans,
// and the per-core T×T buffers the heads' scores (or dP and dS) live in.
type attnState struct {
	subs   [5]*graph.Node
	labels [5]string // the products' profile labels
	plans  [5]permutedState
	// fwd: plans[0] the scores (Q·Kᵀ), plans[1] P·V. grad: plans[0] dP,
	// plans[1] dV, plans[2] dQ, plans[3] dK, and with recompute plans[4]
	// the scores again.
	grad bool
	// recompute: the gradient computes each head's P again
	// (graph.AttnRecomputeP) into the second half of its buffer.
	recompute bool
	scale     float32
	hasScale  bool
	// header: P's shape without storage, when P is omitted.
	header graph.Tensor
	// p: P's storage (the output, or nil when omitted); rows, cols: a
	// head's T×T shape.
	p          []float32
	rows, cols int
	serial     bool
	// dqOnA, dkOnA: dS is the A side of the dQ and dK plans (else B).
	dqOnA, dkOnA bool
	// With graph.AttnPackedQKV: qkv[i] is a header of part i (q, k, v)
	// of the packed tensor, over its data, with the attribute's shape; e
	// is a part's run (the packed last axis / 3); ops holds the operands
	// with the headers in place of the packed tensor.
	packed bool
	qkv    [3]graph.Tensor
	e      int
	ops    [5]*graph.Tensor
	// yShape: AttentionSoftmaxGradConcat's output shape (its attribute).
	yShape []int
	// causal: the forward's scores take a causal mask (graph.AttnCausal).
	causal bool
	// reach: how far past its diagonal the products that read a causal
	// head's P (forward, P omitted; the gradient's recomputed P) or dS read
	// each row (reduce.CausalRowEnd), set by run; 0 (whole rows) unless
	// every one of them follows its causal structure. The gradient's dP
	// is then left unfilled and dS made row prefix by row prefix.
	reach int
}

// unpack reads a node's graph.AttnPackedQKV: without it in is returned as
// it is; with it the operands that are q, k and v (graph.AttentionQKV)
// must be one float32 tensor X whose last axis holds the three parts side by side, and the
// operands are returned with a header of each part in X's place (read in
// place through permutedState.packInput). The headers' shapes reuse their
// storage (graph.AttnPackedShape would allocate a step).
func (s *attnState) unpack(n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	s.packed = false
	pos := graph.AttentionQKV(n.OpType)
	x, shape, size, e, err := packedOperand(n, in, pos)
	if err != nil || shape == nil {
		return in, err
	}
	for _, p := range pos[1:] {
		if size > 0 && &in[p].Float32s()[0] != &x.Float32s()[0] {
			return nil, n.Errorf("inputs %d, %d and %d must be one packed tensor (q, k and v side by side)", pos[0], pos[1], pos[2])
		}
	}
	if len(in) > len(s.ops) {
		return nil, n.Errorf("has %d inputs, want at most %d", len(in), len(s.ops))
	}
	ops := s.ops[:len(in)]
	copy(ops, in)
	for i := range s.qkv {
		h := &s.qkv[i]
		h.DType, h.Data = graph.Float32, x.Data
		h.Shape = h.Shape[:0]
		for _, d := range shape {
			h.Shape = append(h.Shape, int(d))
		}
		ops[pos[i]] = h
	}
	s.packed, s.e = true, e
	return ops, nil
}

// packedOperand reads graph.AttnPackedQKV (shape nil without it): the
// packed tensor x (the operand at pos[0], the same as at pos[1] and
// pos[2]) checked against the parts' shape, each part of size elements,
// e of them a run of x's last axis.
func packedOperand(n *graph.Node, in []*graph.Tensor, pos [3]int) (x *graph.Tensor, shape []int64, size, e int, err error) {
	shape = n.AttrInts(graph.AttnPackedQKV, nil)
	if shape == nil {
		return nil, nil, 0, 0, nil
	}
	x = in[pos[0]]
	if err := x.Validate(); err != nil {
		return nil, nil, 0, 0, n.Errorf("packed q, k and v (input %d): %v", pos[0], err)
	}
	for _, p := range pos[1:] {
		if t := in[p]; t.DType != x.DType || !slices.Equal(t.Shape, x.Shape) || t.Size() != x.Size() {
			return nil, nil, 0, 0, n.Errorf("inputs %d, %d and %d must be one packed tensor (q, k and v side by side)", pos[0], pos[1], pos[2])
		}
	}
	size = 1
	for _, d := range shape {
		if d < 0 {
			return nil, nil, 0, 0, n.Errorf("attribute %s %v has a negative dimension", graph.AttnPackedQKV, shape)
		}
		size *= int(d)
	}
	if x.Rank() == 0 || x.Shape[x.Rank()-1]%3 != 0 || x.Shape[x.Rank()-1] == 0 || 3*size != x.Size() {
		return nil, nil, 0, 0, n.Errorf("packed q, k and v of shape %v do not hold three parts of shape %v side by side along the last axis", x.Shape, shape)
	}
	e = x.Shape[x.Rank()-1] / 3
	if size%e != 0 {
		return nil, nil, 0, 0, n.Errorf("parts of shape %v are not whole rows of %d of the packed shape %v", shape, e, x.Shape)
	}
	return x, shape, size, e, nil
}

// part is the part of the packed q, k, v that t is a header of, or -1.
func (s *attnState) part(t *graph.Tensor) int {
	if s.packed {
		for i := range s.qkv {
			if t == &s.qkv[i] {
				return i
			}
		}
	}
	return -1
}

// dropPacked drops the packed headers' data.
func (s *attnState) dropPacked() {
	for i := range s.qkv {
		s.qkv[i].Data = nil
	}
	clear(s.ops[:])
	s.packed = false
}

// unpackedCopy makes, for the unfused kernels, the three parts of a
// packed q, k, v operand (graph.AttnPackedQKV) as tensors of their own, of
// any dtype, in the operands that are q, k and v.
func unpackedCopy(n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	pos := graph.AttentionQKV(n.OpType)
	x, shape, size, e, err := packedOperand(n, in, pos)
	if err != nil || shape == nil {
		return in, err
	}
	dims := graph.AttnPackedShape(n)
	out := slices.Clone(in)
	for part, p := range pos {
		t := graph.Zeros(x.DType, dims...)
		at := packing{e, part}
		for f := 0; f < size; f++ {
			t.SetFloat(f, x.Float(at.at(f)))
		}
		out[p] = t
	}
	return out, nil
}

// attnTimer, when set, receives the time of every product the attention
// kernels run (SetAttentionProductTimer).
var attnTimer atomic.Pointer[func(label string, flops float64, d time.Duration)]

// SetAttentionProductTimer makes the attention kernels report each
// product they run (one head's) to f, until restore is called: label
// names the op and the product ("AttentionSoftmaxGrad/dq"), flops its
// floating-point work, d its time, divided by the cores when the heads
// run on all of them at once (the product's share of the op's wall
// time). bench --op-profile reads the products inside the fused op
// with it.
func SetAttentionProductTimer(f func(label string, flops float64, d time.Duration)) (restore func()) {
	old := attnTimer.Swap(&f)
	return func() { attnTimer.Store(old) }
}

// attnBuffers holds the per-core buffers of every attention node: the
// nodes run one at a time, so a step needs one buffer per core, not one
// per core and node (24 nodes of ViT-B/16 kept 7 MiB of them).
var attnBuffers struct {
	mu   sync.Mutex
	free [][]float32
}

// buffer takes a buffer of a head's T×T elements and one row more, and
// for a gradient that recomputes P another T×T after them (a new one
// when none free is large enough). backend/cpu's attnScratchBytes replays
// buffer and release from shapes: keep the three in step.
func (s *attnState) buffer() []float32 {
	want := (s.rows + 1) * s.cols
	if s.grad && s.recompute {
		want += s.rows * s.cols
	}
	attnBuffers.mu.Lock()
	defer attnBuffers.mu.Unlock()
	var b []float32
	var ok bool
	if attnBuffers.free, b, ok = TakeKept(attnBuffers.free, bufferCap, want); ok {
		return b[:want]
	}
	return make([]float32, want)
}

func bufferCap(b []float32) int { return cap(b) }

// TakeKept is the head buffers' take over kept items of the given sizes
// (buffer; backend/cpu's attnScratchBytes replays it over capacities):
// it removes from kept and returns the smallest item of at least want,
// ok false when there is none. The smallest that fits, so that which
// items stay kept does not depend on the order in which the cores gave
// theirs back (taking the last that fitted, a forward's head could take a
// gradient's larger buffer and the gradient allocate another, beyond the
// replay).
func TakeKept[T any](kept []T, size func(T) int, want int) (rest []T, item T, ok bool) {
	best := -1
	for i, x := range kept {
		if size(x) >= want && (best < 0 || size(x) < size(kept[best])) {
			best = i
		}
	}
	if best < 0 {
		return kept, item, false
	}
	item = kept[best]
	return append(kept[:best], kept[best+1:]...), item, true
}

// ReleaseKept is the head buffers' release over kept items of the given
// sizes (release; replayed as TakeKept is): item is kept unless kept holds
// workers items of its size already (a chunk's goroutine descheduled
// while it holds its buffer lets a third chunk take another on two
// cores), and of more than AttentionBuffersKept items the smallest goes.
func ReleaseKept[T any](kept []T, size func(T) int, item T, workers int) []T {
	same := 0
	for _, x := range kept {
		if size(x) == size(item) {
			same++
		}
	}
	if same >= workers {
		return kept
	}
	kept = append(kept, item)
	if len(kept) > AttentionBuffersKept {
		small := 0
		for i, x := range kept {
			if size(x) < size(kept[small]) {
				small = i
			}
		}
		kept = append(kept[:small], kept[small+1:]...)
	}
	return kept
}

// AttentionBufferBytes is the bytes of the head buffers the attention
// kernels keep between calls (what backend/cpu's attnScratchBytes replays
// for estimate-memory's workspace). For tests.
func AttentionBufferBytes() int64 {
	attnBuffers.mu.Lock()
	defer attnBuffers.mu.Unlock()
	var n int64
	for _, b := range attnBuffers.free {
		n += 4 * int64(cap(b))
	}
	return n
}

// DropAttentionBuffers forgets the kept head buffers. For tests.
func DropAttentionBuffers() {
	attnBuffers.mu.Lock()
	defer attnBuffers.mu.Unlock()
	attnBuffers.free = nil
}

// AttentionBuffersKept is how many head buffers the attention kernels keep
// between calls (the largest, so that a smaller head reuses a larger
// head's buffer): release's bound, which backend/cpu's attnScratchBytes
// replays.
const AttentionBuffersKept = 8

// release returns a buffer taken by buffer to the kept ones (ReleaseKept).
func (s *attnState) release(b []float32) {
	attnBuffers.mu.Lock()
	defer attnBuffers.mu.Unlock()
	attnBuffers.free = ReleaseKept(attnBuffers.free, bufferCap, b, kern.Workers())
}

// sub returns product i's node, built from the attributes under prefix.
func (s *attnState) sub(n *graph.Node, i int, prefix string) *graph.Node {
	if s.subs[i] == nil {
		s.subs[i] = graph.AttentionProduct(n, prefix, nil, "")
	}
	return s.subs[i]
}

// planSub plans product i of the attention node over in (operand
// header, if not -1, is a header whose data the kernel supplies: not
// validated); an error when the strided path cannot run it (the fusion
// only makes attention nodes of products the strided path takes).
func (s *attnState) planSub(n *graph.Node, i int, prefix string, in []*graph.Tensor, header int) error {
	sub := s.sub(n, i, prefix)
	grad := sub.AttrInt("grad", 0)
	need := 2
	if grad != 0 {
		need = 3
	}
	if grad < 0 || grad > 2 || len(in) != need {
		return n.Errorf("product %s: grad %d with %d operands", prefix, grad, len(in))
	}
	var views [3]strided
	for j, t := range in { // float32: the kernels run other dtypes unfused
		if j != header && s.part(t) < 0 {
			if err := t.Validate(); err != nil {
				return n.Errorf("product %s: operand %d: %v", prefix, j, err)
			}
		}
		a, f := viewAttrs(j)
		v, big, err := viewOf(sub, t.Shape, a, f)
		if err != nil {
			return err
		}
		if big || v.rank < 2 {
			return n.Errorf("product %s: operand %d of shape %v has no strided view", prefix, j, t.Shape)
		}
		views[j] = v
	}
	ok, err := s.plans[i].plan(sub, in, views[:need], grad, sub.AttrInts("permY", nil))
	if err != nil {
		return err
	}
	// The causal structure the product may follow (its hints, as the
	// unfused PermutedMatMul reads them); run keeps it only where the
	// heads run serially.
	if ok && followCausalHints && (sub.Attr(graph.CausalLowerYAttr) != nil || sub.Attr(graph.CausalLowerAttr) != nil) {
		if kind, fill := causalKind(sub, grad, views[:need], s.plans[i].swapC); s.plans[i].causalUsable(kind) {
			s.plans[i].tri, s.plans[i].fill = kind, fill
		}
	}
	if s.labels[i] == "" {
		s.labels[i] = n.OpType + "/" + strings.TrimSuffix(prefix, ".")
	}
	s.plans[i].label = s.labels[i] // made once: a step allocates nothing
	if !ok {
		return n.Errorf("product %s of operands %v has no strided plan", prefix, shapesOf(in))
	}
	for j, t := range in {
		if part := s.part(t); part >= 0 && !s.plans[i].packInput(j, s.e, part) {
			return n.Errorf("product %s: operand %d (part %d of the packed q, k and v) has rows that cross the packed rows of %d", prefix, j, part, s.e)
		}
	}
	return nil
}

func shapesOf(in []*graph.Tensor) [][]int {
	out := make([][]int, len(in))
	for i, t := range in {
		out[i] = t.Shape
	}
	return out
}

// operands is operandsAt for product i of plan p, without the side
// that x stands for (A when onA, else B: a head's buffer, already in the
// cache); nil past the batch.
func (p *permutedState) operands(o *gemm.Operands, i int, x []float32, onA bool) *gemm.Operands {
	if i >= p.batch {
		return nil
	}
	idx := p.index(i)
	oa, ob, _ := p.offsets(&idx)
	if o = p.operandsAt(o, oa, ob); o != nil && x != nil {
		if onA {
			o.A = nil
		} else {
			o.B = nil
		}
	}
	return o
}

// head runs product i of plan p. With x set, the operand on side A
// (onA) or B of the plan is read from x at offset 0 instead of its
// batch position; with c set, C is written there at offset 0. With next
// set (run serially), the product prefetches those operands while its
// last block computes.
func (p *permutedState) head(i int, x []float32, onA bool, c []float32, next *gemm.Operands) {
	idx := p.index(i)
	oa, ob, oc := p.offsets(&idx)
	oa, ob = p.packA.at(oa), p.packB.at(ob)
	a, b := p.a, p.b
	if x != nil {
		if onA {
			a, oa = x, 0
		} else {
			b, ob = x, 0
		}
	}
	if c == nil {
		c, oc = p.c, p.packC.at(oc)
	} else {
		oc = 0
	}
	if t := attnTimer.Load(); t != nil {
		start := time.Now()
		defer func() {
			d := time.Since(start)
			if p.serial {
				d /= time.Duration(max(kern.Workers(), 1)) // the heads share the cores
			}
			(*t)(p.label, 2*float64(p.m)*float64(p.n)*float64(p.k), d)
		}()
	}
	if p.tri != gemm.TriNone {
		p.causalProductOf(a, b, c, oa, ob, oc, next)
		return
	}
	if p.serial {
		gemm.SgemmSerialNext(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a[oa:], p.lda, b[ob:], p.ldb, 0, c[oc:], p.ldc, next)
		return
	}
	gemm.Sgemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a[oa:], p.lda, b[ob:], p.ldb, 0, c[oc:], p.ldc)
}

// headMatrix checks that plan p writes each product as one row-major
// matrix of rows×cols with rows cols apart and products rows·cols apart
// (the layout the T×T buffers take).
func headMatrix(p *permutedState, rows, cols int) bool {
	if p.swapC || p.m != rows || p.n != cols || p.ldc != cols {
		return false
	}
	s := rows * cols
	for d := p.batchRank - 1; d >= 0; d-- {
		if p.sc[d] != s {
			return false
		}
		s *= p.batchShape[d]
	}
	return true
}

// attentionSoftmaxKernel is graph.AttentionSoftmax: per head, the scores
// into a buffer of the core's, their Softmax row by row into P (back into
// the buffer, through a row of its own, when P is omitted), and P·V from
// there. Every value is what PermutedMatMul, Softmax and
// PermutedMatMul compute, bit for bit.
func attentionSoftmaxKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	if len(n.Outputs) != 2 {
		return nil, n.Errorf("has %d outputs, want O and P", len(n.Outputs))
	}
	if !allFloat32(in) {
		in, err := unpackedCopy(n, in)
		if err != nil {
			return nil, err
		}
		return attentionUnfused(ctx, n, in)
	}
	s := kern.State[attnState](n)
	s.grad = false
	s.causal = n.AttrInt(graph.AttnCausal, 0) == 1
	in, err := s.unpack(n, in)
	if err != nil {
		return nil, err
	}
	defer s.dropPacked()
	if err := s.planSub(n, 0, graph.AttnQK, in[:2], -1); err != nil {
		return nil, err
	}
	qk := &s.plans[0]
	// A causal head's scores leave the tiles above the diagonal that
	// the product skips unwritten instead of filled with −inf:
	// reduce.SoftmaxCausalRows32 reads only each row's prefix and writes
	// the −inf past the diagonal itself. At GPT-2's T = 1024 the fill (2
	// MiB of stores a head) was 40% of the scores' time.
	qk.unfilled = s.causal
	rows, cols := qk.m, qk.n
	if !headMatrix(qk, rows, cols) {
		return nil, n.Errorf("the scores' product %v writes no row-major T×T matrix per head", qk.yShape)
	}
	s.rows, s.cols = rows, cols
	if s.causal && rows != cols {
		return nil, n.Errorf("causal: each head's scores must be square, got %d×%d", rows, cols)
	}
	var pt *graph.Tensor
	header := -1
	if n.Outputs[1] != "" {
		if pt, err = kern.NewUninit(n, graph.Float32, qk.yShape); err != nil { // every element is written
			return nil, err
		}
	} else {
		// P only as the values' product reads it: a header over no
		// storage plans that product (each head's P is a buffer).
		s.header = graph.Tensor{DType: graph.Float32, Shape: append(s.header.Shape[:0], qk.yShape...), Data: []float32(nil)}
		pt, header = &s.header, 0
	}
	if err := s.planSub(n, 1, graph.AttnPV, []*graph.Tensor{pt, in[2]}, header); err != nil {
		return nil, err
	}
	pv := &s.plans[1]
	if pv.batch != qk.batch {
		return nil, n.Errorf("the values' product (batch %d) does not read P (batch %d) as the scores' product writes it", pv.batch, qk.batch)
	}
	out, err := kern.NewUninit(n, graph.Float32, pv.yShape) // every element is written
	if err != nil {
		return nil, err
	}
	pv.c = out.Float32s()
	s.p = nil
	if pt.Data != nil {
		s.p = pt.Float32s()
	}
	if qk.batch > 0 && rows > 0 && cols > 0 && pv.m > 0 && pv.n > 0 {
		s.run(qk.batch, rows*cols*max(qk.k, 1))
	}
	qk.a, qk.b, pv.a, pv.b, pv.c, s.p = nil, nil, nil, nil, nil, nil
	if pt.Data == nil {
		return kern.Results(n, out, nil), nil
	}
	return kern.Results(n, out, pt), nil
}

// run spreads the heads over the cores as PermutedMatMul spreads its
// batch.
func (s *attnState) run(batch, work int) {
	var workers int
	workers, s.serial = spread(batch, work)
	for i := range s.plans {
		p := &s.plans[i]
		p.serial = s.serial
		switch {
		case p.tri == gemm.TriNone:
		case s.serial:
			causalCuts.Add(1)
		default:
			p.tri = gemm.TriNone // a product split over the cores runs whole
		}
	}
	s.reach = 0
	switch {
	case !s.grad && s.causal:
		s.reach = causalReach(&s.plans[1])
	case s.grad && s.plans[0].tri == gemm.TriCLower: // dP's hint: causal attention
		s.reach = causalReach(&s.plans[1], &s.plans[2], &s.plans[3])
		// dS takes each row's prefix of dP (gradient.
		// SoftmaxGradCausalRows32): the tiles dP's product skips need no
		// fill.
		s.plans[0].unfilled = s.reach > 0
	}
	kern.RunTask("Attention", batch, min(workers, batch), s)
}

// causalReach is how far past its diagonal a row of a causal head's
// buffer is read by the products readers (reduce.CausalRowEnd's reach):
// the widest tile step or block their structured products take; 0, the
// whole row, where one of them runs whole (no structure, or split over the
// cores).
func causalReach(readers ...*permutedState) int {
	for _, p := range readers {
		if p.tri == gemm.TriNone {
			return 0
		}
	}
	mr, nr := gemm.KernelShape()
	return max(causalBlockSize, 2*nr, mr)
}

// Chunk runs heads [lo, hi).
func (s *attnState) Chunk(lo, hi int) {
	buf := s.buffer()
	defer s.release(buf)
	if s.grad {
		s.gradHeads(lo, hi, buf)
		return
	}
	qk, pv := &s.plans[0], &s.plans[1]
	size := s.rows * s.cols
	row := buf[size:]
	// P's side of the values' plan: A unless the plan swapped the product.
	pOnA := !pv.swapC
	var nextQK, nextPV gemm.Operands
	for h := lo; h < hi; h++ {
		// While a product's last block computes, the next one's operands
		// from memory are fetched: V with the scores, the next head's Q
		// and K with P·V (P is in the cache: the buffer, or just written).
		var after *gemm.Operands
		if h+1 < hi {
			after = qk.operands(&nextQK, h+1, nil, false)
		}
		if s.p != nil {
			qk.head(h, nil, false, buf, pv.operands(&nextPV, h, s.p, pOnA))
			if s.causal {
				reduce.SoftmaxCausalRows32(s.p[h*size:(h+1)*size], buf[:size], row, s.cols)
			} else {
				reduce.SoftmaxRows32(s.p[h*size:(h+1)*size], buf[:size], s.cols)
			}
			pv.head(h, nil, false, nil, after)
			continue
		}
		qk.head(h, nil, false, buf, pv.operands(&nextPV, h, buf, pOnA))
		if s.causal {
			reduce.SoftmaxCausalRowsReach32(buf[:size], buf[:size], row, s.cols, s.reach)
			pv.head(h, buf, pOnA, nil, after)
			continue
		}
		for r := 0; r < s.rows; r++ {
			x := buf[r*s.cols : (r+1)*s.cols]
			reduce.SoftmaxRow32(row, x)
			copy(x, row)
		}
		pv.head(h, buf, pOnA, nil, after)
	}
}

// attentionSoftmaxGradKernel is graph.AttentionSoftmaxGrad: per head, dP
// into a buffer of the core's, dS over it row by row (scaled), then dV,
// dQ and dK, P and dS read while they are in the cache. Every value is
// what the PermutedMatMul gradients, SoftmaxGrad and Mul compute, bit for
// bit.
func attentionSoftmaxGradKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := needGradInputs(n, in); err != nil {
		return nil, err
	}
	if len(n.Outputs) != 3 {
		return nil, n.Errorf("has %d outputs, want dQ, dK and dV", len(n.Outputs))
	}
	if !allFloat32(in) {
		in, err := unpackedCopy(n, in)
		if err != nil {
			return nil, err
		}
		return attentionGradUnfused(ctx, n, in)
	}
	return attentionGrad(n, in, nil)
}

// attentionSoftmaxGradConcatKernel is graph.AttentionSoftmaxGradConcat:
// attentionSoftmaxGradKernel's heads, each product writing its rows where
// the output keeps them (permutedState.packInto); a part whose rows do
// not fit the output's runs is written apart and copied in.
func attentionSoftmaxGradConcatKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := needGradInputs(n, in); err != nil {
		return nil, err
	}
	if len(n.Outputs) != 1 {
		return nil, n.Errorf("has %d outputs, want one (dQ, dK and dV side by side)", len(n.Outputs))
	}
	shape := n.AttrInts("shape", nil)
	if len(shape) == 0 || shape[len(shape)-1] <= 0 || shape[len(shape)-1]%3 != 0 {
		return nil, n.Errorf("attribute shape %v must end in a positive dimension divisible by 3", shape)
	}
	s := kern.State[attnState](n)
	s.yShape = s.yShape[:0]
	for _, d := range shape {
		if d < 0 {
			return nil, n.Errorf("attribute shape %v has a negative dimension", shape)
		}
		s.yShape = append(s.yShape, int(d))
	}
	yShape := s.yShape
	if !allFloat32(in) {
		in, err := unpackedCopy(n, in)
		if err != nil {
			return nil, err
		}
		res, err := attentionGradUnfused(ctx, n, in)
		if err != nil {
			return nil, err
		}
		part := slices.Clone(yShape)
		part[len(part)-1] /= 3
		for i, t := range res {
			if t.Size()*3 != product(yShape) {
				return nil, n.Errorf("gradient %d has shape %v: three do not make attribute shape %v", i, t.Shape, shape)
			}
			res[i] = &graph.Tensor{DType: t.DType, Shape: part, Data: t.Data}
		}
		y, err := runSubOp(ctx, n, "", "Concat", res, graph.IntAttr("axis", -1))
		if err != nil {
			return nil, err
		}
		return kern.Results(n, y), nil
	}
	return attentionGrad(n, in, yShape)
}

// needGradInputs checks a gradient node's five operands: all present, but
// P (input 1) absent where the node recomputes it (graph.AttnRecomputeP).
func needGradInputs(n *graph.Node, in []*graph.Tensor) error {
	if n.AttrInt(graph.AttnRecomputeP, 0) != 1 {
		return kern.Need(n, in, 5)
	}
	if len(in) < 5 {
		return n.Errorf("needs 5 inputs, has %d", len(in))
	}
	for i, t := range in[:5] {
		switch {
		case i == 1 && t != nil:
			return n.Errorf("input 1 (P) must be empty: attribute %s recomputes it", graph.AttnRecomputeP)
		case i != 1 && t == nil:
			return n.Errorf("input %d is required", i)
		}
	}
	return nil
}

// gradPlans are the plans of the gradient's outputs dQ, dK and dV.
var gradPlans = [3]int{2, 3, 1}

// attentionGrad runs attention's gradient over float32 operands: into
// dQ, dK and dV, or with packed (a shape) into one output of that shape
// holding them side by side along its last axis.
func attentionGrad(n *graph.Node, in []*graph.Tensor, packed []int) ([]*graph.Tensor, error) {
	s := kern.State[attnState](n)
	in, err := s.unpack(n, in)
	if err != nil {
		return nil, err
	}
	defer s.dropPacked()
	dO, p, v, q, k := in[0], in[1], in[2], in[3], in[4]
	s.grad = true
	s.scale, s.hasScale = n.AttrFloat(graph.AttnDSScale, 1), n.Attr(graph.AttnDSScale) != nil
	s.recompute = n.AttrInt(graph.AttnRecomputeP, 0) == 1
	pHeader := -1 // the operand that is P where P has no storage
	if s.recompute {
		// P as the forward computed it: the scores' product planned
		// from the forward's attributes, P a header of its shape over
		// no storage (each head's is the buffer's second half).
		s.causal = n.AttrInt(graph.AttnCausal, 0) == 1
		if err := s.planSub(n, 4, graph.AttnQK, []*graph.Tensor{q, k}, -1); err != nil {
			return nil, err
		}
		qk := &s.plans[4]
		qk.unfilled = s.causal // as the forward's scores (attentionSoftmaxKernel)
		if qk.swapC || qk.m <= 0 || !headMatrix(qk, qk.m, qk.n) || s.causal && qk.m != qk.n {
			return nil, n.Errorf("the recomputed scores' product %v writes no row-major (square, where causal) T×T matrix per head", qk.yShape)
		}
		s.header = graph.Tensor{DType: graph.Float32, Shape: append(s.header.Shape[:0], qk.yShape...), Data: []float32(nil)}
		p, pHeader = &s.header, 1
	} else if p.Validate() != nil || p.Rank() < 2 {
		return nil, n.Errorf("P (input 1) must be a tensor of rank 2 or more, got %v", p.Shape)
	}
	if err := s.planSub(n, 0, graph.AttnDP, []*graph.Tensor{dO, p, v}, pHeader); err != nil {
		return nil, err
	}
	dp := &s.plans[0]
	rows, cols := p.Shape[p.Rank()-2], p.Shape[p.Rank()-1]
	if !headMatrix(dp, rows, cols) || !slices.Equal(dp.yShape, p.Shape) {
		return nil, n.Errorf("dP's product %v writes no row-major T×T matrix per head of P %v", dp.yShape, p.Shape)
	}
	s.rows, s.cols = rows, cols
	if err := s.planSub(n, 1, graph.AttnDV, []*graph.Tensor{dO, p, v}, pHeader); err != nil {
		return nil, err
	}
	// dS as the dQ and dK plans see it: P's shape, its data the buffers.
	ds := &graph.Tensor{DType: graph.Float32, Shape: p.Shape, Data: p.Data}
	dsHeader := -1
	if s.recompute {
		dsHeader = 0
	}
	if err := s.planSub(n, 2, graph.AttnDQ, []*graph.Tensor{ds, q, k}, dsHeader); err != nil {
		return nil, err
	}
	if err := s.planSub(n, 3, graph.AttnDK, []*graph.Tensor{ds, q, k}, dsHeader); err != nil {
		return nil, err
	}
	// dS is op(A) of dQ's product (dS·K) and op(B) of dK's (dSᵀ·Q);
	// a plan that swapped its product holds it on the other side.
	s.dqOnA, s.dkOnA = !s.plans[2].swapC, s.plans[3].swapC
	last := 4
	if s.recompute {
		last = 5
	}
	for i := 1; i < last; i++ {
		if s.plans[i].batch != dp.batch {
			return nil, n.Errorf("the gradients' products have batches %d and %d", dp.batch, s.plans[i].batch)
		}
	}
	var outs [3]*graph.Tensor
	var y *graph.Tensor
	var apart [3][]float32 // parts written apart from a packed output
	e := 0
	if packed != nil {
		e = packed[len(packed)-1] / 3
		for i, pl := range gradPlans {
			if sz := product(s.plans[pl].yShape); sz*3 != product(packed) || sz%e != 0 {
				return nil, n.Errorf("gradient %d of shape %v: three do not make attribute shape %v", i, s.plans[pl].yShape, packed)
			}
		}
		var err error
		if y, err = kern.NewUninit(n, graph.Float32, packed); err != nil { // every element is written
			return nil, err
		}
	}
	for i, pl := range gradPlans {
		if y != nil {
			if !s.plans[pl].packInto(y.Float32s(), e, i) {
				apart[i] = kern.Scratch[float32](product(s.plans[pl].yShape))
				s.plans[pl].c = apart[i]
			}
			continue
		}
		t, err := kern.NewUninit(n, graph.Float32, s.plans[pl].yShape) // every element is written
		if err != nil {
			return nil, err
		}
		outs[i] = t
		s.plans[pl].c = t.Float32s()
	}
	s.p = nil
	if !s.recompute {
		s.p = p.Float32s()
	}
	if dp.batch > 0 && rows > 0 && cols > 0 {
		s.run(dp.batch, rows*cols*max(dp.k, 1))
	}
	for i := range s.plans {
		s.plans[i].a, s.plans[i].b, s.plans[i].c = nil, nil, nil
	}
	s.p = nil
	if y == nil {
		return kern.Results(n, outs[0], outs[1], outs[2]), nil
	}
	yd := y.Float32s()
	for i, part := range apart {
		if part == nil {
			continue
		}
		for r := 0; r < len(part)/e; r++ {
			copy(yd[r*3*e+i*e:r*3*e+(i+1)*e], part[r*e:(r+1)*e])
		}
		kern.ReleaseScratch(part)
	}
	return kern.Results(n, y), nil
}

// gradHeads runs heads [lo, hi) of the gradient with buf (T×T) as dP, then
// dS. With recompute each head's scores go into buf first, their Softmax
// (the forward's call, so P's bits are the forward's) into buf's second
// T×T, which the head's products then read as P.
func (s *attnState) gradHeads(lo, hi int, buf []float32) {
	dp, dv, dq, dk, qk := &s.plans[0], &s.plans[1], &s.plans[2], &s.plans[3], &s.plans[4]
	size := s.rows * s.cols
	pOnA := !dv.swapC // P's side of dV's plan (Pᵀ·dO)
	var pbuf []float32
	if s.recompute {
		pbuf = buf[size+s.cols : 2*size+s.cols]
	}
	var next [5]gemm.Operands
	for h := lo; h < hi; h++ {
		// Each product prefetches the next one's operands from memory
		// (see Chunk); dS, in buf, is in the cache.
		var after *gemm.Operands
		var ph []float32 // this head's P, where the products read it from
		if s.recompute {
			if h+1 < hi {
				after = qk.operands(&next[0], h+1, nil, false)
			}
			qk.head(h, nil, false, buf, dp.operands(&next[4], h, nil, false))
			if s.causal {
				reduce.SoftmaxCausalRowsReach32(pbuf, buf[:size], buf[size:size+s.cols], s.cols, s.reach)
			} else {
				reduce.SoftmaxRows32(pbuf, buf[:size], s.cols)
			}
			ph = pbuf
		} else if h+1 < hi {
			after = dp.operands(&next[0], h+1, nil, false)
		}
		dp.head(h, nil, false, buf, dv.operands(&next[1], h, ph, pOnA))
		p := ph
		if p == nil {
			p = s.p[h*size : (h+1)*size]
		}
		if s.reach > 0 {
			s.causalDS(buf[:size], p)
		} else {
			gradient.SoftmaxGradRows32(buf[:size], p, buf[:size], s.cols)
			if s.hasScale {
				x, c := buf[:size], s.scale
				for i := range x {
					x[i] *= c
				}
			}
		}
		dv.head(h, ph, pOnA, nil, dq.operands(&next[2], h, buf, s.dqOnA))
		dq.head(h, buf, s.dqOnA, nil, dk.operands(&next[3], h, buf, s.dkOnA))
		dk.head(h, buf, s.dkOnA, nil, after)
	}
}

// causalDS makes a causal head's dS in place of its dP in d, P in p: each
// row's prefix (gradient.SoftmaxGradCausalRows32), scaled, and +0 on to
// where the dQ and dK products stop reading (s.reach).
func (s *attnState) causalDS(d, p []float32) {
	c := float32(1)
	if s.hasScale {
		c = s.scale
	}
	gradient.SoftmaxGradCausalRows32(d, p, d, s.cols, s.reach, c)
}

// allFloat32 reports whether every tensor is float32.
func allFloat32(in []*graph.Tensor) bool {
	for _, t := range in {
		if t != nil && t.DType != graph.Float32 {
			return false
		}
	}
	return true
}

// attentionUnfused runs AttentionSoftmax as the nodes it replaced,
// through their kernels (operands of other dtypes: under autocast), with
// their results on the heap.
func attentionUnfused(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	p, err := unfusedProbs(ctx, n, [2]string{n.Inputs[0], n.Inputs[1]}, in[0], in[1])
	if err != nil {
		return nil, err
	}
	o, err := permutedMatMulKernel(ctx, graph.AttentionProduct(n, graph.AttnPV, []string{n.Name + "/p", n.Inputs[2]}, n.Outputs[0]),
		[]*graph.Tensor{p, in[2]})
	if err != nil {
		return nil, err
	}
	if n.Outputs[1] == "" {
		p = nil
	}
	return kern.Results(n, o[0], p), nil
}

// unfusedProbs is P = Softmax(scores, axis=-1) of attention node n (its
// qk.* product of q and k, named qkNames, and its causal mask) through the
// unfused kernels.
func unfusedProbs(ctx *kern.Context, n *graph.Node, qkNames [2]string, q, k *graph.Tensor) (*graph.Tensor, error) {
	s, err := permutedMatMulKernel(ctx, graph.AttentionProduct(n, graph.AttnQK, qkNames[:], n.Name+"/scores"), []*graph.Tensor{q, k})
	if err != nil {
		return nil, err
	}
	if n.AttrInt(graph.AttnCausal, 0) == 1 {
		// The mask: −inf above each head's diagonal (+0 on and below it
		// leaves the scores as they are).
		sc := s[0]
		r := sc.Rank()
		if r < 2 || sc.Shape[r-1] != sc.Shape[r-2] {
			return nil, n.Errorf("causal: each head's scores must be square, got shape %v", sc.Shape)
		}
		t := sc.Shape[r-1]
		for i := 0; i < sc.Size(); i++ {
			if i%t > i/t%t {
				sc.SetFloat(i, math.Inf(-1))
			}
		}
	}
	return runSubOp(ctx, n, "", "Softmax", s[:1], graph.IntAttr("axis", -1))
}

// attentionGradUnfused is attentionUnfused for AttentionSoftmaxGrad.
func attentionGradUnfused(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	dO, p, v, q, k := in[0], in[1], in[2], in[3], in[4]
	if n.AttrInt(graph.AttnRecomputeP, 0) == 1 {
		var err error
		if p, err = unfusedProbs(ctx, n, [2]string{n.Inputs[3], n.Inputs[4]}, q, k); err != nil {
			return nil, err
		}
	}
	product := func(prefix string, ops ...*graph.Tensor) (*graph.Tensor, error) {
		r, err := permutedMatMulKernel(ctx, graph.AttentionProduct(n, prefix, make([]string, len(ops)), n.Name+"/"+prefix), ops)
		if err != nil {
			return nil, err
		}
		return r[0], nil
	}
	dP, err := product(graph.AttnDP, dO, p, v)
	if err != nil {
		return nil, err
	}
	dV, err := product(graph.AttnDV, dO, p, v)
	if err != nil {
		return nil, err
	}
	dS, err := runSubOp(ctx, n, graph.InternalDomain, "SoftmaxGrad", []*graph.Tensor{dP, p}, graph.IntAttr("axis", -1))
	if err != nil {
		return nil, err
	}
	if n.Attr(graph.AttnDSScale) != nil {
		c, err := graph.NewTensor(dS.DType, nil)
		if err != nil {
			return nil, n.Errorf("scale: %v", err)
		}
		c.SetFloat(0, float64(n.AttrFloat(graph.AttnDSScale, 1)))
		if dS, err = runSubOp(ctx, n, "", "Mul", []*graph.Tensor{dS, c}); err != nil {
			return nil, err
		}
	}
	dQ, err := product(graph.AttnDQ, dS, q, k)
	if err != nil {
		return nil, err
	}
	dK, err := product(graph.AttnDK, dS, q, k)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, dQ, dK, dV), nil
}
