package linalg

import (
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.PermutedMatMul, kern.Spec{Fn: permutedMatMulKernel})
	kern.RegisterSpec(graph.FusedDomain, graph.GatherGradSum, kern.Spec{Fn: gatherGradSumKernel})
}

// maxViewRank bounds the rank of the views the strided paths handle
// without allocating; larger ones take the materialising fallback.
const maxViewRank = 8

// strided is a view of a tensor's data: element (i0, i1, …) lies at
// off + Σ ij·strides[j].
type strided struct {
	rank    int
	off     int
	shape   [maxViewRank]int
	strides [maxViewRank]int
}

func (v *strided) dims() []int { return v.shape[:v.rank] }

// viewOf computes the view of a tensor of shape base that the node's
// attributes axes and fixed (graph.PermutedMatMul) describe: view axis j
// is base axis axes[j], the other base axes fixed at their indices. An
// absent axes attribute is the tensor itself. big is set when the rank
// exceeds maxViewRank (then v is not filled).
func viewOf(n *graph.Node, base []int, axesAttr, fixedAttr string) (v strided, big bool, err error) {
	r := len(base)
	if r > maxViewRank {
		return v, true, nil
	}
	var st [maxViewRank]int
	s := 1
	for i := r - 1; i >= 0; i-- {
		st[i] = s
		s *= base[i]
	}
	axes := n.AttrInts(axesAttr, nil)
	fixed := n.AttrInts(fixedAttr, nil)
	if axes == nil && fixed == nil {
		v.rank = r
		copy(v.shape[:], base)
		copy(v.strides[:], st[:r])
		return v, false, nil
	}
	if len(fixed)%2 != 0 || len(axes)+len(fixed)/2 != r {
		return v, false, n.Errorf("view %s=%v %s=%v does not cover the %d axes of an input of shape %v", axesAttr, axes, fixedAttr, fixed, r, base)
	}
	var used [maxViewRank]bool
	claim := func(a int64) bool {
		if a < 0 || a >= int64(r) || used[a] {
			return false
		}
		used[a] = true
		return true
	}
	for i := 0; i < len(fixed); i += 2 {
		a, idx := fixed[i], fixed[i+1]
		if !claim(a) {
			return v, false, n.Errorf("view %s=%v names axis %d twice or out of the %d axes", fixedAttr, fixed, a, r)
		}
		d := int64(base[a])
		if idx < 0 {
			idx += d
		}
		if idx < 0 || idx >= d {
			return v, false, n.Errorf("index %d is out of range for axis %d of an input of shape %v", fixed[i+1], a, base)
		}
		v.off += int(idx) * st[a]
	}
	v.rank = len(axes)
	for j, a := range axes {
		if !claim(a) {
			return v, false, n.Errorf("view %s=%v names axis %d twice or out of the %d axes", axesAttr, axes, a, r)
		}
		v.shape[j] = base[a]
		v.strides[j] = st[a]
	}
	return v, false, nil
}

// matrixLayout returns how GEMM reads the rows×cols matrix whose rows are
// rs and columns cs elements apart: stored as is (trans false) with row
// stride ld, or stored transposed (trans true) with row stride ld. ok is
// false when neither axis is contiguous.
func matrixLayout(rows, cols, rs, cs int) (trans bool, ld int, ok bool) {
	switch {
	case cs == 1 || cols == 1:
		if rows == 1 {
			rs = max(cols, 1)
		}
		return false, rs, rs >= cols
	case rs == 1 || rows == 1:
		return true, cs, cs >= rows
	}
	return false, 0, false
}

// permutedState is what a PermutedMatMul node keeps between runs: the
// plan of its batched product, which is also the Chunker that runs it.
type permutedState struct {
	yShape     []int
	alpha      float32
	ta, tb     bool
	m, n, k    int
	lda, ldb   int
	ldc        int
	a, b, c    []float32
	batchRank  int
	batchShape [maxViewRank]int
	sa, sb, sc [maxViewRank]int
	offA, offB int
	offC       int
	// batch is the number of products.
	batch int
	// label names the product for SetAttentionProductTimer.
	label string
	// swapC: C is stored column-major, so the plan computes Cᵀ = op(B)ᵀ·op(A)ᵀ
	// (a and b hold the data of op(B) and op(A)).
	swapC bool
	// serial: each product runs on the goroutine that took it (the batch
	// is spread over the cores instead of each product).
	serial bool
	// tri: the triangular structure each product's blocks follow
	// (permuted_causal.go), fill: what the skipped part of C gets;
	// unfilled: the skipped part of C is left as it was instead (set by
	// a caller that reads none of it: the fused attention's causal
	// scores, whose softmax takes each row's prefix).
	tri      gemm.Tri
	fill     float32
	unfilled bool
	// inA, inB: the operands (indices into plan's in) whose data a and b
	// are. packA, packB, packC: where A, B and C lie when their matrix is
	// a part of a packed tensor (packInput, packInto).
	inA, inB            int
	packA, packB, packC packing
}

// packing places a matrix that is part part of a tensor holding three
// parts of one size side by side along a last axis of 3e elements: offset
// f of the part's own row-major layout lies at at(f). The zero value
// (e = 0) is no packing.
type packing struct{ e, part int }

func (k packing) at(f int) int {
	if k.e == 0 {
		return f
	}
	return f/k.e*3*k.e + k.part*k.e + f%k.e
}

// side names the matrices of a plan, for inRuns.
type side int

const (
	sideA side = iota
	sideB
	sideC
)

// inRuns reports whether every row of matrix s of every product (width
// elements from its offset, ld apart) lies inside one run of e elements,
// so that the matrix can be read or written as part of a packed tensor.
func (p *permutedState) inRuns(s side, e, width, ld int) bool {
	if e <= 0 || ld%e != 0 || width > e || p.batch <= 0 {
		return false
	}
	idx := p.index(0)
	for i := 0; i < p.batch; i++ {
		oa, ob, oc := p.offsets(&idx)
		o := [3]int{oa, ob, oc}[s]
		if o%e+width > e {
			return false
		}
		p.advance(&idx)
	}
	return true
}

// packInto makes p write its products into part part (0, 1 or 2) of y,
// which holds three outputs of p's size side by side along a last axis
// of 3e elements (packing). It reports false, changing nothing, when some
// row of some product's C would cross from one run of e elements into the
// next (then the caller writes the part and copies it).
func (p *permutedState) packInto(y []float32, e, part int) bool {
	if p.m <= 0 || !p.inRuns(sideC, e, p.n, p.ldc) {
		return false
	}
	p.c, p.packC, p.ldc = y, packing{e, part}, 3*p.ldc
	return true
}

// packInput makes p read its operand in (an index into the operands
// plan was given) from part part of a packed tensor, whose data that
// operand's was (packing). It reports false, changing nothing, when a row
// of some product's matrix of that operand would cross from one run of e
// elements into the next. An operand the product does not read (dV's V,
// there for its shape) needs nothing.
func (p *permutedState) packInput(in, e, part int) bool {
	useA, useB := p.inA == in, p.inB == in
	// The stored matrices: A is m×k (k×m transposed), B k×n (n×k).
	wa, wb := p.k, p.n
	if p.ta {
		wa = p.m
	}
	if p.tb {
		wb = p.k
	}
	if (useA && !p.inRuns(sideA, e, wa, p.lda)) || (useB && !p.inRuns(sideB, e, wb, p.ldb)) {
		return false
	}
	if useA {
		p.packA, p.lda = packing{e, part}, 3*p.lda
	}
	if useB {
		p.packB, p.ldb = packing{e, part}, 3*p.ldb
	}
	return true
}

// index is the multi-index of product i of the batch.
func (p *permutedState) index(i int) (idx [maxViewRank]int) {
	for d := p.batchRank - 1; d >= 0; d-- {
		idx[d] = i % p.batchShape[d]
		i /= p.batchShape[d]
	}
	return idx
}

// Chunk runs products [lo, hi) of the batch.
func (p *permutedState) Chunk(lo, hi int) {
	idx := p.index(lo)
	oa, ob, oc := p.offsets(&idx)
	for i := lo; i < hi; i++ {
		p.advance(&idx)
		var next *gemm.Operands
		var nx gemm.Operands
		var na, nb, nc int
		if i+1 < hi {
			na, nb, nc = p.offsets(&idx)
			next = p.operandsAt(&nx, na, nb)
		}
		if p.tri != gemm.TriNone {
			p.causalProduct(oa, ob, oc, next)
		} else if p.serial {
			// Each product whole on this goroutine; while its last
			// block computes, the next product's operands are fetched
			// (attention's heads come from memory: 3-10% on one core).
			gemm.SgemmSerialNext(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a[oa:], p.lda, p.b[ob:], p.ldb, 0, p.c[oc:], p.ldc, next)
		} else {
			gemm.Sgemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a[oa:], p.lda, p.b[ob:], p.ldb, 0, p.c[oc:], p.ldc)
		}
		oa, ob, oc = na, nb, nc
	}
}

// operandsAt sets *o to the stored operands of the product whose A and B
// start at offsets oa and ob, at the plan's whole shape (a causal
// product's last block is smaller), for gemm.SgemmSerialNext to prefetch,
// and returns o; nil where prefetchNextProduct is off. o is the
// caller's, so that a step allocates nothing.
func (p *permutedState) operandsAt(o *gemm.Operands, oa, ob int) *gemm.Operands {
	if !prefetchNextProduct {
		return nil
	}
	*o = gemm.Operands{LDA: p.lda, LDB: p.ldb, TransA: p.ta, TransB: p.tb, M: p.m, N: p.n, K: p.k}
	if p.a != nil {
		o.A = p.a[p.packA.at(oa):]
	}
	if p.b != nil {
		o.B = p.b[p.packB.at(ob):]
	}
	return o
}

// prefetchNextProduct makes each product of a serial batch prefetch the
// next one's operands while its last block computes, where the CPU gains
// from it (gemm.NextOperandsPrefetchHelps: AMD's Zen 4, where attention's
// heads ran 0-31% faster with it; not the AVX-512 Xeon, where the burst
// of prefetches, up to 200 KiB of the next head in the last block's few
// tiles, held the line fill buffers that the kernel's own loads and
// stores wait on, and every attention product ran 2-8% slower:
// BenchmarkAttentionWallViT, -cpu 1 and 2, CPU time against the 2048³
// GEMM, 4 December 2026). Benchmarks switch it to compare.
var prefetchNextProduct = gemm.NextOperandsPrefetchHelps()

// offsets are where product idx's A, B and C start.
func (p *permutedState) offsets(idx *[maxViewRank]int) (oa, ob, oc int) {
	oa, ob, oc = p.offA, p.offB, p.offC
	for d := 0; d < p.batchRank; d++ {
		oa += idx[d] * p.sa[d]
		ob += idx[d] * p.sb[d]
		oc += idx[d] * p.sc[d]
	}
	return oa, ob, oc
}

// advance moves idx to the next product of the batch.
func (p *permutedState) advance(idx *[maxViewRank]int) {
	for d := p.batchRank - 1; d >= 0; d-- {
		idx[d]++
		if idx[d] < p.batchShape[d] {
			return
		}
		idx[d] = 0
	}
}

// permutedMatMulKernel is graph.PermutedMatMul. float32 products whose
// views keep one axis of every matrix contiguous run as GEMMs over the
// data in place, spread over the cores by batch; anything else (other
// dtypes, 1-D operands, broadcast gradients, views without a contiguous
// axis) materialises the views and runs MatMul (or MatMulGradA/B) and
// Transpose.
func permutedMatMulKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	grad := n.AttrInt("grad", 0)
	need := 2
	if grad != 0 {
		need = 3
	}
	if grad < 0 || grad > 2 {
		return nil, n.Errorf("grad %d is not 0, 1 or 2", grad)
	}
	if err := kern.Need(n, in, need); err != nil {
		return nil, err
	}
	if len(in) > need {
		return nil, n.Errorf("grad %d takes %d inputs, got %d", grad, need, len(in))
	}
	var views [3]strided
	big := false
	for i, t := range in {
		if err := t.Validate(); err != nil {
			return nil, n.Errorf("input %d: %v", i, err)
		}
		a, f := viewAttrs(i)
		v, b, err := viewOf(n, t.Shape, a, f)
		if err != nil {
			return nil, err
		}
		views[i], big = v, big || b
	}
	permY := n.AttrInts("permY", nil)
	if !big && allFloat32(in) {
		out, ok, err := permutedF32(n, in, views[:need], grad, permY)
		if err != nil || ok {
			return out, err
		}
	}
	return permutedFallback(ctx, n, in, grad, permY)
}

// viewAttrs are the attribute names of input i's view.
func viewAttrs(i int) (axes, fixed string) {
	if i < len(viewAttrNames) {
		return viewAttrNames[i][0], viewAttrNames[i][1]
	}
	d := string(rune('0' + i))
	return "axes" + d, "fixed" + d
}

// viewAttrNames are viewAttrs's names of the inputs PermutedMatMul takes
// (built once, not on every call).
var viewAttrNames = [...][2]string{{"axes0", "fixed0"}, {"axes1", "fixed1"}, {"axes2", "fixed2"}}

// dimsOf is a copy of v's dims (for error messages: v itself stays on the
// caller's stack).
func dimsOf(v strided) []int { return append([]int(nil), v.dims()...) }

// swapped is v with its last two axes exchanged.
func swapped(v strided) strided {
	r := v.rank
	v.shape[r-2], v.shape[r-1] = v.shape[r-1], v.shape[r-2]
	v.strides[r-2], v.strides[r-1] = v.strides[r-1], v.strides[r-2]
	return v
}

// permutedF32 runs the strided float32 path; ok is false when the views
// do not suit it (the caller falls back).
func permutedF32(n *graph.Node, in []*graph.Tensor, views []strided, grad int64, permY []int64) ([]*graph.Tensor, bool, error) {
	for _, v := range views {
		if v.rank < 2 {
			return nil, false, nil
		}
	}
	ra, rb := views[0].rank, views[1].rank // op(A)'s and op(B)'s ranks
	if grad == 1 {
		rb = views[2].rank
	}
	if rb == 2 && ra > 2 && grad != 2 || grad == 2 && views[2].rank == 2 && views[1].rank > 2 {
		// A 2-D right operand (a Linear layer's weight) shared by every
		// product of the batch: one product over the batch's rows.
		if out, ok, err := permutedFlat(n, in, views, grad, permY, nil); err != nil || ok {
			return out, ok, err
		}
	}
	p := kern.State[permutedState](n)
	if ok, err := p.plan(n, in, views, grad, permY); !ok || err != nil {
		return nil, ok, err
	}
	out, err := kern.NewUninit(n, graph.Float32, p.yShape) // every element is written
	if err != nil {
		return nil, false, err
	}
	p.c = out.Float32s()
	if p.batch == 0 || p.m == 0 || p.n == 0 {
		p.a, p.b, p.c = nil, nil, nil
		return kern.Results(n, out), true, nil
	}
	var workers int
	workers, p.serial = spread(p.batch, p.m*p.n*max(p.k, 1))
	if p.serial && followCausalHints && (n.Attr(graph.CausalLowerYAttr) != nil || n.Attr(graph.CausalLowerAttr) != nil) {
		if kind, fill := causalKind(n, grad, views, p.swapC); p.causalUsable(kind) {
			p.tri, p.fill = kind, fill
			causalCuts.Add(1)
		}
	}
	kern.RunTask("PermutedMatMul", p.batch, min(workers, p.batch), p)
	p.a, p.b, p.c = nil, nil, nil
	return kern.Results(n, out), true, nil
}

// plan fills p with the batched product that node n (PermutedMatMul's
// attributes) makes of in seen through views: everything but the output
// storage, whose shape p.yShape is (p.c is left nil). p.a and p.b are the
// operands' data; the caller clears them after the run. ok is false when
// the views do not suit the strided path.
func (p *permutedState) plan(n *graph.Node, in []*graph.Tensor, views []strided, grad int64, permY []int64) (bool, error) {
	var va, vb strided // op(A), op(B) of the product
	var xa, xb []float32
	var ia, ib int // the operands they are
	switch grad {
	case 0:
		va, vb, ia, ib = views[0], views[1], 0, 1
	case 1: // dY·Bᵀ
		va, vb, ia, ib = views[0], swapped(views[2]), 0, 2
	case 2: // Aᵀ·dY
		va, vb, ia, ib = swapped(views[1]), views[0], 1, 0
	}
	xa, xb = in[ia].Float32s(), in[ib].Float32s()
	ra, rb := va.rank, vb.rank
	m, k, kb, nn := va.shape[ra-2], va.shape[ra-1], vb.shape[rb-2], vb.shape[rb-1]
	if k != kb {
		if grad != 0 {
			return false, nil // the gradient kernel reports it
		}
		return false, n.Errorf("inner dimensions differ: A has shape %v, B has shape %v", dimsOf(va), dimsOf(vb))
	}
	// Batch dims, broadcast numpy-style (aligned from the right); the
	// gradients only take the path without broadcasting.
	br := max(ra, rb) - 2
	if br+2 > maxViewRank {
		return false, nil
	}
	var rShape [maxViewRank]int
	var sa, sb [maxViewRank]int
	for d := 0; d < br; d++ {
		da, db := 1, 1
		ia, ib := d-(br-(ra-2)), d-(br-(rb-2))
		if ia >= 0 {
			da = va.shape[ia]
		}
		if ib >= 0 {
			db = vb.shape[ib]
		}
		switch {
		case da == db:
			rShape[d] = da
		case da == 1 && grad == 0:
			rShape[d] = db
		case db == 1 && grad == 0:
			rShape[d] = da
		case grad == 0:
			return false, n.Errorf("batch dimensions of A %v and B %v do not broadcast", dimsOf(va), dimsOf(vb))
		default:
			return false, nil
		}
		if ia >= 0 && da != 1 {
			sa[d] = va.strides[ia]
		}
		if ib >= 0 && db != 1 {
			sb[d] = vb.strides[ib]
		}
	}
	if grad != 0 && (ra != rb) {
		return false, nil
	}
	rShape[br], rShape[br+1] = m, nn
	rr := br + 2
	if grad != 0 {
		// The result must be shaped like the operand it is the gradient
		// of, and dY like the product.
		like, dy := views[1], views[0]
		if grad == 2 {
			like = views[2]
		}
		if like.rank != rr || dy.rank != rr {
			return false, nil
		}
		for d := 0; d < rr; d++ {
			if like.shape[d] != rShape[d] {
				return false, nil
			}
		}
		// dY must be the product of A and B: [batch, M, N] with
		// A = [batch, M, K], B = [batch, K, N] (checked through the
		// shapes of op(A) and op(B) above, whose batch dims are equal).
		a, b := views[1], views[2]
		if a.rank != rr || b.rank != rr || a.shape[rr-1] != b.shape[rr-2] ||
			dy.shape[rr-2] != a.shape[rr-2] || dy.shape[rr-1] != b.shape[rr-1] {
			return false, nil
		}
		for d := 0; d < br; d++ {
			if a.shape[d] != b.shape[d] || dy.shape[d] != a.shape[d] {
				return false, nil
			}
		}
	}
	// Where R's elements go in Y = Transpose(R, permY).
	var yShape, rStride [maxViewRank]int
	if permY != nil {
		if len(permY) != rr {
			return false, n.Errorf("permY %v has %d entries, the product has rank %d", permY, len(permY), rr)
		}
		var seen [maxViewRank]bool
		for i, p := range permY {
			if p < 0 || p >= int64(rr) || seen[p] {
				return false, n.Errorf("permY %v is not a permutation of %d axes", permY, rr)
			}
			seen[p] = true
			yShape[i] = rShape[p]
		}
	} else {
		copy(yShape[:], rShape[:rr])
	}
	s := 1
	for i := rr - 1; i >= 0; i-- {
		ax := i
		if permY != nil {
			ax = int(permY[i])
		}
		rStride[ax] = s
		s *= yShape[i]
	}
	ta, lda, okA := matrixLayout(m, k, va.strides[ra-2], va.strides[ra-1])
	tb, ldb, okB := matrixLayout(k, nn, vb.strides[rb-2], vb.strides[rb-1])
	tc, ldc, okC := matrixLayout(m, nn, rStride[rr-2], rStride[rr-1])
	if !okA || !okB || !okC {
		return false, nil
	}
	// The shape goes through the node's state, not yShape: a stack array
	// handed to the allocator would escape, on every call.
	*p = permutedState{
		yShape: append(p.yShape[:0], yShape[:rr]...),
		alpha:  n.AttrFloat("alpha", 1),
		ta:     ta, tb: tb, m: m, n: nn, k: k, lda: lda, ldb: ldb, ldc: ldc,
		a: xa, b: xb, batchRank: br,
		offA: va.off, offB: vb.off,
		swapC: tc, inA: ia, inB: ib,
	}
	if tc {
		// C is stored column-major: compute Cᵀ = op(B)ᵀ·op(A)ᵀ, whose
		// every element is the same sum in the same order.
		p.ta, p.tb = !tb, !ta
		p.lda, p.ldb = ldb, lda
		p.a, p.b = xb, xa
		p.inA, p.inB = ib, ia
		p.offA, p.offB = vb.off, va.off
		p.m, p.n = nn, m
		sa, sb = sb, sa
	}
	p.batch = 1
	for d := 0; d < br; d++ {
		p.batchShape[d] = rShape[d]
		p.sa[d], p.sb[d], p.sc[d] = sa[d], sb[d], rStride[d]
		p.batch *= rShape[d]
	}
	return true, nil
}

// spread is how a batch of products of work m·n·k each runs: in how many
// chunks (batchWorkers), and whether each product runs whole on the
// goroutine that takes it (serial: one core, or the products spread
// over the cores).
func spread(batch, work int) (workers int, serial bool) {
	procs := kern.Workers()
	workers = batchWorkers(batch, work, procs)
	return workers, workers > 1 || procs < 2
}

// batchWorkers is how many chunks a batch of products of work m·n·k each
// is cut into. With at least two products per core the batch is spread
// over the cores and every product runs whole on one of them (no packing
// repeated per core, no fan-out per product: attention's 48 products of
// 128×128×64 each split over the cores ran at a third of the GEMM's
// rate); eight chunks per core, taken as the cores free up, so that a core
// another process holds for a while delays one small chunk, not half the
// batch, and the cores finish within a few products of each other (48
// attention heads as 16 chunks of 3 rather than 8 of 6: ViT-B/16's six
// products 0.57 → 0.64 of the 2048³ GEMM in wall time at two threads,
// BenchmarkAttentionWallViT, three alternating rounds). With fewer products, one big enough to split itself does so (1
// is returned); smaller ones are still spread by batch, and a batch of
// tiny products runs in sequence.
func batchWorkers(batch, work, procs int) int {
	switch {
	case procs < 2 || batch < 2 || work*batch < 1<<16:
		return 1
	case batch < 2*procs && work >= 128*128*64:
		return 1
	case work >= 1<<23 && batch%procs != 0 && batch < 8*procs:
		// A few large products that do not divide evenly between the
		// cores: split each instead of leaving a core idle at the end.
		return 1
	}
	return min(8*procs, batch)
}

// permutedFallbacks counts the PermutedMatMul calls that took the
// materialising fallback (tests check that the strided path ran).
var permutedFallbacks atomic.Int64

// permutedFallback materialises the views and runs the unfused ops.
func permutedFallback(ctx *kern.Context, n *graph.Node, in []*graph.Tensor, grad int64, permY []int64) ([]*graph.Tensor, error) {
	permutedFallbacks.Add(1)
	args := make([]*graph.Tensor, len(in))
	for i, t := range in {
		a, f := viewAttrs(i)
		v, err := materializeView(n, t, a, f)
		if err != nil {
			return nil, err
		}
		args[i] = v
	}
	domain, op := "", "MatMul"
	switch grad {
	case 1:
		domain, op = graph.InternalDomain, "MatMulGradA"
	case 2:
		domain, op = graph.InternalDomain, "MatMulGradB"
	}
	res, err := runSubOp(ctx, n, domain, op, args)
	if err != nil {
		return nil, err
	}
	if alpha := n.AttrFloat("alpha", 1); alpha != 1 {
		switch y := res.Data.(type) {
		case []float32:
			for i := range y {
				y[i] *= alpha
			}
		case []float64:
			for i := range y {
				y[i] *= float64(alpha)
			}
		default:
			return nil, n.Errorf("alpha %v on a %v product is not supported", alpha, res.DType)
		}
	}
	if permY != nil {
		if res, err = runSubOp(ctx, n, "", "Transpose", []*graph.Tensor{res}, graph.IntsAttr("perm", permY...)); err != nil {
			return nil, err
		}
	}
	return kern.Results(n, res), nil
}

// materializeView returns the view of t that the node's attributes axes
// and fixed describe, as a new contiguous tensor (t itself when there is
// no view).
func materializeView(n *graph.Node, t *graph.Tensor, axesAttr, fixedAttr string) (*graph.Tensor, error) {
	if n.Attr(axesAttr) == nil && n.Attr(fixedAttr) == nil {
		return t, nil
	}
	if len(t.Shape) > maxViewRank {
		return nil, n.Errorf("input of rank %d: views of rank above %d are not supported", len(t.Shape), maxViewRank)
	}
	v, _, err := viewOf(n, t.Shape, axesAttr, fixedAttr)
	if err != nil {
		return nil, err
	}
	out, err := graph.NewTensor(t.DType, v.dims())
	if err != nil {
		return nil, n.Errorf("view: %w", err)
	}
	switch s := t.Data.(type) {
	case []float32:
		copyView(out.Data.([]float32), s, &v)
	case []float64:
		copyView(out.Data.([]float64), s, &v)
	case []uint16:
		copyView(out.Data.([]uint16), s, &v)
	case []int8:
		copyView(out.Data.([]int8), s, &v)
	case []int16:
		copyView(out.Data.([]int16), s, &v)
	case []int32:
		copyView(out.Data.([]int32), s, &v)
	case []int64:
		copyView(out.Data.([]int64), s, &v)
	case []uint8:
		copyView(out.Data.([]uint8), s, &v)
	case []uint32:
		copyView(out.Data.([]uint32), s, &v)
	case []uint64:
		copyView(out.Data.([]uint64), s, &v)
	default:
		return nil, n.Errorf("dtype %v is not supported", t.DType)
	}
	return out, nil
}

// copyView copies the view v of src into the contiguous dst.
func copyView[T any](dst, src []T, v *strided) {
	size := 1
	for _, d := range v.dims() {
		size *= d
	}
	if size == 0 {
		return
	}
	var idx [maxViewRank]int
	r := v.rank
	for i := range dst[:size] {
		o := v.off
		for d := 0; d < r; d++ {
			o += idx[d] * v.strides[d]
		}
		dst[i] = src[o]
		for d := r - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < v.shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// gatherGradSumKernel is graph.GatherGradSum: the sum of the GatherGrads
// of G0…Gk-1 into the view of X (only its shape is read), transposed by
// permY. When the indices name every index of the axis once, each Gj is
// copied to its place and nothing is zeroed or added; otherwise the output
// starts at zero and the Gj are added in order (as the Adds would, since
// x + 0 = x).
func gatherGradSumKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) < 2 {
		return nil, n.Errorf("needs the gradients and the data, got %d inputs", len(in))
	}
	if err := kern.Need(n, in, len(in)); err != nil {
		return nil, err
	}
	gs, x := in[:len(in)-1], in[len(in)-1]
	indices := n.AttrInts("indices", nil)
	if len(indices) != len(gs) {
		return nil, n.Errorf("indices %v: want one per gradient (%d)", indices, len(gs))
	}
	if len(x.Shape) > maxViewRank {
		return nil, n.Errorf("data of rank %d: ranks above %d are not supported", len(x.Shape), maxViewRank)
	}
	v, _, err := viewOf(n, x.Shape, "axes", "fixed")
	if err != nil {
		return nil, err
	}
	r := v.rank
	if r == 0 {
		return nil, n.Errorf("data must have rank 1 or more")
	}
	ax, err := kern.NormAxis(n, int(n.AttrInt("axis", 0)), r)
	if err != nil {
		return nil, err
	}
	dim := v.shape[ax]
	// Y = Transpose(D, permY): where D's axis q lies in Y.
	permY := n.AttrInts("permY", nil)
	var yShape, dStride [maxViewRank]int
	if permY != nil {
		if len(permY) != r {
			return nil, n.Errorf("permY %v has %d entries, the data view has rank %d", permY, len(permY), r)
		}
		var seen [maxViewRank]bool
		for i, p := range permY {
			if p < 0 || p >= int64(r) || seen[p] {
				return nil, n.Errorf("permY %v is not a permutation of %d axes", permY, r)
			}
			seen[p] = true
			yShape[i] = v.shape[p]
		}
	} else {
		copy(yShape[:], v.shape[:r])
	}
	s := 1
	for i := r - 1; i >= 0; i-- {
		q := i
		if permY != nil {
			q = int(permY[i])
		}
		dStride[q] = s
		s *= yShape[i]
	}
	// Each gradient is D's shape without the axis; as a view of Y: the
	// other axes' strides, offset by its index along the axis.
	var g strided
	g.rank = r - 1
	for q, j := 0, 0; q < r; q++ {
		if q == ax {
			continue
		}
		g.shape[j], g.strides[j] = v.shape[q], dStride[q]
		j++
	}
	var covered [64]bool
	distinct := len(gs) == dim && dim <= len(covered)
	st := kern.State[gradSumState](n)
	if cap(st.offs) < len(gs) {
		st.offs = make([]int, len(gs))
		st.srcs = make([][]float32, len(gs))
	}
	offs := st.offs[:len(gs)]
	for j, idx := range indices {
		i := idx
		if i < 0 {
			i += int64(dim)
		}
		if i < 0 || i >= int64(dim) {
			return nil, n.Errorf("index %d is out of range for axis %d of size %d", idx, ax, dim)
		}
		offs[j] = int(i) * dStride[ax]
		if distinct {
			distinct = !covered[i]
			covered[i] = true
		}
		gt := gs[j]
		if gt.DType != gs[0].DType {
			return nil, n.Errorf("gradient %d is %v, gradient 0 is %v", j, gt.DType, gs[0].DType)
		}
		if !graph.SameShape(gt.Shape, g.dims()) {
			return nil, n.Errorf("gradient %d has shape %v, want %v", j, gt.Shape, dimsOf(g))
		}
		if err := gt.Validate(); err != nil {
			return nil, n.Errorf("gradient %d: %v", j, err)
		}
	}
	alloc := kern.New
	if distinct {
		alloc = kern.NewUninit // every element is written once
	}
	st.yShape = append(st.yShape[:0], yShape[:r]...) // (yShape itself stays on the stack)
	out, err := alloc(n, gs[0].DType, st.yShape)
	if err != nil {
		return nil, err
	}
	switch dst := out.Data.(type) {
	case []float32:
		if !distinct || g.rank == 0 {
			for j, gt := range gs {
				scatterView(dst, gt.Data.([]float32), offs[j], &g, !distinct)
			}
			break
		}
		// Each gradient's rows copied to their places, the rows of all
		// gradients spread over the cores.
		st.dst, st.srcs, st.view = dst, st.srcs[:len(gs)], g
		for j, gt := range gs {
			st.srcs[j] = gt.Data.([]float32)
		}
		inner := 1
		if g.rank > 0 {
			inner = g.shape[g.rank-1]
		}
		st.rows = 0
		if inner > 0 {
			st.rows = g.size() / inner
		}
		total := st.rows * len(gs)
		workers := 1
		if g.size()*len(gs) >= 1<<16 {
			workers = kern.Workers()
		}
		kern.RunTask("GatherGradSum", total, min(workers, max(total, 1)), st)
		st.dst = nil
		clear(st.srcs)
	case []float64:
		for j, gt := range gs {
			scatterView(dst, gt.Data.([]float64), offs[j], &g, !distinct)
		}
	default:
		return nil, n.Errorf("dtype %v is not supported", gs[0].DType)
	}
	return kern.Results(n, out), nil
}

// gradSumState is a GatherGradSum node's scratch between runs, and the
// Chunker that copies the rows of its gradients.
type gradSumState struct {
	yShape []int
	offs   []int
	srcs   [][]float32
	dst    []float32
	view   strided
	rows   int // rows (runs along the last axis) per gradient
}

// Chunk copies rows [lo, hi) of the gradients taken end to end: each
// gradient's share scattered into its place of dst (the view at that
// gradient's offset).
func (s *gradSumState) Chunk(lo, hi int) {
	inner := s.view.shape[s.view.rank-1]
	for t := lo; t < hi; {
		j, row := t/s.rows, t%s.rows
		end := min(hi, (j+1)*s.rows)
		v := s.view
		v.off = s.offs[j]
		scatterRows(s.dst, s.srcs[j][row*inner:], &v, row, row+end-t)
		t = end
	}
}

// size is the number of elements of the view.
func (v *strided) size() int {
	s := 1
	for _, d := range v.dims() {
		s *= d
	}
	return s
}

// scatterView writes (or adds, when add is set) the contiguous src to the
// view of dst at offset off with v's shape and strides; runs along the
// last axis are copied whole when it is contiguous.
func scatterView[T float32 | float64](dst, src []T, off int, v *strided, add bool) {
	r := v.rank
	inner, innerStride := 1, 1
	if r > 0 {
		inner, innerStride = v.shape[r-1], v.strides[r-1]
		r--
	}
	size := inner
	for d := 0; d < r; d++ {
		size *= v.shape[d]
	}
	if size == 0 {
		return
	}
	var idx [maxViewRank]int
	for i := 0; i < size; i += inner {
		o := off
		for d := 0; d < r; d++ {
			o += idx[d] * v.strides[d]
		}
		s := src[i : i+inner]
		switch {
		case innerStride == 1 && !add:
			copy(dst[o:o+inner], s)
		case innerStride == 1:
			d := dst[o : o+inner]
			for q, x := range s {
				d[q] += x
			}
		default:
			for q, x := range s {
				if add {
					dst[o+q*innerStride] += x
				} else {
					dst[o+q*innerStride] = x
				}
			}
		}
		for d := r - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < v.shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}
