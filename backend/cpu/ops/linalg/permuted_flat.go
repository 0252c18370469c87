package linalg

import (
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// rowsOf reports whether the view v (rank 2 or more) is a matrix of rows:
// its last axis contiguous and its other axes flattening into one axis
// of rows ld elements apart (each outer axis's stride the next one's
// stride times its size). rows, the product of those axes' sizes, is set
// either way.
func rowsOf(v *strided) (rows, ld int, ok bool) {
	r := v.rank
	cols := v.shape[r-1]
	rows, ld = 1, -1
	for d := 0; d < r-1; d++ {
		rows *= v.shape[d]
	}
	if cols > 1 && v.strides[r-1] != 1 {
		return rows, 0, false
	}
	next := 0
	for d := r - 2; d >= 0; d-- {
		switch {
		case v.shape[d] == 1:
		case ld < 0:
			ld, next = v.strides[d], v.strides[d]*v.shape[d]
		case v.strides[d] != next:
			return rows, 0, false
		default:
			next *= v.shape[d]
		}
	}
	if ld < 0 {
		ld = max(cols, 1)
	}
	return rows, ld, ld >= cols
}

// gatherRowRange copies rows [i0, i1) of the view v of src (its last axis
// the columns, its other axes flattened the rows) to the same rows of the
// contiguous dst.
func gatherRowRange(dst, src []float32, v *strided, i0, i1 int) {
	r := v.rank - 1
	inner, innerStride := v.shape[r], v.strides[r]
	if i1 <= i0 || inner == 0 {
		return
	}
	cur := newRowCursor(v, i0)
	for i := i0; i < i1; i++ {
		o := cur.offset()
		row := dst[i*inner : (i+1)*inner]
		if innerStride == 1 {
			copy(row, src[o:o+inner])
		} else {
			for q := range row {
				row[q] = src[o+q*innerStride]
			}
		}
		cur.next()
	}
}

// rowCursor walks the rows of a view whose last axis is the row and whose
// other axes, flattened in row-major order, number the rows: offset is
// the current row's first element in the view's data, next moves to the
// following row.
type rowCursor struct {
	v   *strided
	idx [maxViewRank]int
}

// newRowCursor starts at row i of v.
func newRowCursor(v *strided, i int) rowCursor {
	c := rowCursor{v: v}
	for d := v.rank - 2; d >= 0; d-- {
		c.idx[d] = i % v.shape[d]
		i /= v.shape[d]
	}
	return c
}

func (c *rowCursor) offset() int {
	o := c.v.off
	for d := 0; d < c.v.rank-1; d++ {
		o += c.idx[d] * c.v.strides[d]
	}
	return o
}

func (c *rowCursor) next() {
	for d := c.v.rank - 2; d >= 0; d-- {
		c.idx[d]++
		if c.idx[d] < c.v.shape[d] {
			return
		}
		c.idx[d] = 0
	}
}

// gatherTask is gatherRows's copy in flight: chunk w copies rows
// [w·rows/parts, (w+1)·rows/parts).
type gatherTask struct {
	dst, src    []float32
	v           strided
	rows, parts int
}

// Chunk copies the rows of chunks [lo, hi).
func (t *gatherTask) Chunk(lo, hi int) {
	gatherRowRange(t.dst, t.src, &t.v, lo*t.rows/t.parts, hi*t.rows/t.parts)
}

// gatherMinElems is the smallest view gatherRows copies on more than one
// worker.
const gatherMinElems = 1 << 17

// gatherRows copies the view v of src (rows·cols elements) into the
// contiguous dst, a run along the last axis at a time, spread over the
// workers when the view is large: the operand rows a
// shared-weight product gathers before its GEMM (x viewed as [T, B, E]:
// 2.4 MB for ViT-B/16's in-projection, in the forward and the weight
// gradient) otherwise cost one core a copy while the other waits.
func gatherRows(n *graph.Node, dst, src []float32, v *strided, rows, cols int) {
	workers := kern.Workers()
	if !spreadGathers || workers < 2 || rows < 2 || rows*cols < gatherMinElems {
		gatherRowRange(dst, src, v, 0, rows)
		return
	}
	t := kern.State[gatherTask](n)
	t.dst, t.src, t.v, t.rows, t.parts = dst, src, *v, rows, min(workers, rows)
	gatherSplits.Add(1)
	kern.RunTask("PermutedMatMul gather", t.parts, t.parts, t)
	t.dst, t.src = nil, nil
}

// spreadGathers switches gatherRows's split off (benchmarks compare).
var spreadGathers = true

// gatherSplits counts the gathers gatherRows spread over the workers
// (tests check that the path ran).
var gatherSplits atomic.Int64

// outputLayout is where the elements of a product R of shape rShape go in
// Y = Transpose(R, permY): Y's shape, and R as a view of Y's data.
func outputLayout(n *graph.Node, rShape []int, permY []int64) (yShape []int, rv strided, err error) {
	rr := len(rShape)
	var ys [maxViewRank]int
	if permY != nil {
		if len(permY) != rr {
			return nil, rv, n.Errorf("permY %v has %d entries, the product has rank %d", permY, len(permY), rr)
		}
		var seen [maxViewRank]bool
		for i, p := range permY {
			if p < 0 || p >= int64(rr) || seen[p] {
				return nil, rv, n.Errorf("permY %v is not a permutation of %d axes", permY, rr)
			}
			seen[p] = true
			ys[i] = rShape[p]
		}
	} else {
		copy(ys[:], rShape)
	}
	rv.rank = rr
	copy(rv.shape[:], rShape)
	s := 1
	for i := rr - 1; i >= 0; i-- {
		ax := i
		if permY != nil {
			ax = int(permY[i])
		}
		rv.strides[ax] = s
		s *= ys[i]
	}
	st := kern.State[permutedState](n)
	st.yShape = append(st.yShape[:0], ys[:rr]...)
	return st.yShape, rv, nil
}

// permutedFlat runs a PermutedMatMul whose right operand B is a matrix
// shared by every product of the batch (x·Wᵀ of a Linear layer inside
// nn.MultiheadAttention, whose x is a permuted view) as one GEMM over all
// the batch's rows: Y = A·B and dA = dY·Bᵀ with the rows of A (of dY)
// stacked, dB = Σ Aᵀ·dY as one product whose shared dimension is every
// row. The batched path would run one product per batch index, as many
// as the sequence is long, each a few rows high, and cannot sum dB over
// the batch. A view whose rows do not stack is copied into scratch rows
// first, and a result whose rows do not stack in the output is computed
// into scratch and scattered. ok is false when the shapes do not suit
// (the caller goes on with the other paths, which report errors).
//
// bias, when not nil (grad 0 only, its length the product's column count,
// and permY keeping the last axis last: the caller checks), is added to
// every row in the GEMM's epilogue (PermutedMatMulAdd).
func permutedFlat(n *graph.Node, in []*graph.Tensor, views []strided, grad int64, permY []int64, bias []float32) ([]*graph.Tensor, bool, error) {
	alpha := n.AttrFloat("alpha", 1)
	if grad == 2 {
		return permutedFlatGradB(n, in, views, permY, alpha)
	}
	a, xa := views[0], in[0].Float32s()
	bv, xb := views[1], in[1].Float32s()
	if grad == 1 { // dY·Bᵀ
		bv, xb = swapped(views[2]), in[2].Float32s()
	}
	r := a.rank
	k, nn := a.shape[r-1], bv.shape[1]
	if k != bv.shape[0] {
		return nil, false, nil
	}
	var rShape [maxViewRank]int
	copy(rShape[:], a.shape[:r-1])
	rShape[r-1] = nn
	if grad == 1 {
		// The result is shaped like A, and dY like A·B.
		like := views[1]
		if like.rank != r || views[2].shape[0] != nn {
			return nil, false, nil
		}
		for d := 0; d < r; d++ {
			if like.shape[d] != rShape[d] {
				return nil, false, nil
			}
		}
	}
	tb, ldb, okB := matrixLayout(k, nn, bv.strides[0], bv.strides[1])
	if !okB {
		return nil, false, nil
	}
	yShape, rv, err := outputLayout(n, rShape[:r], permY)
	if err != nil {
		return nil, false, err
	}
	out, err := kern.NewUninit(n, graph.Float32, yShape) // every element is written
	if err != nil {
		return nil, false, err
	}
	rows, lda, okA := rowsOf(&a)
	if rows == 0 || nn == 0 {
		return kern.Results(n, out), true, nil
	}
	av := xa[a.off:]
	if !okA {
		sa := kern.Scratch[float32](rows * k)
		defer kern.ReleaseScratch(sa)
		gatherRows(n, sa, xa, &a, rows, k)
		av, lda = sa, max(k, 1)
	}
	y := out.Float32s()
	if bias != nil && (grad != 0 || len(bias) != nn) {
		return nil, false, n.Errorf("bias of %d elements for a product of %d columns (grad %d)", len(bias), nn, grad)
	}
	if pieces := flatRowPieces(grad, rows, nn, k, kern.Workers()); pieces > 1 {
		flatByRows(n, pieces, rows, nn, k, alpha, tb, av, lda, xb[bv.off:], ldb, y, &rv)
		return kern.Results(n, out), true, nil
	}
	ep := gemm.Epilogue{Bias: bias}
	if _, ldc, okC := rowsOf(&rv); okC {
		gemm.SgemmEpilogue(false, tb, rows, nn, k, alpha, av, lda, xb[bv.off:], ldb, 0, y, ldc, ep)
	} else {
		sc := kern.Scratch[float32](rows * nn)
		defer kern.ReleaseScratch(sc)
		gemm.SgemmEpilogue(false, tb, rows, nn, k, alpha, av, lda, xb[bv.off:], ldb, 0, sc, nn, ep)
		scatterView(y, sc, 0, &rv, false)
	}
	return kern.Results(n, out), true, nil
}

// permutedFlatGradB is permutedFlat's dB = Σ Aᵀ·dY: the batch's rows of A
// and of dY stacked, the sum over the batch being the product's shared
// dimension.
func permutedFlatGradB(n *graph.Node, in []*graph.Tensor, views []strided, permY []int64, alpha float32) ([]*graph.Tensor, bool, error) {
	dy, a, b := views[0], views[1], views[2]
	r := a.rank
	if dy.rank != r || b.rank != 2 {
		return nil, false, nil
	}
	k, nn := a.shape[r-1], dy.shape[r-1]
	if b.shape[0] != k || b.shape[1] != nn {
		return nil, false, nil
	}
	for d := 0; d < r-1; d++ {
		if a.shape[d] != dy.shape[d] {
			return nil, false, nil
		}
	}
	yShape, rv, err := outputLayout(n, b.dims(), permY)
	if err != nil {
		return nil, false, err
	}
	tc, ldc, okC := matrixLayout(k, nn, rv.strides[0], rv.strides[1])
	if !okC {
		return nil, false, nil
	}
	out, err := kern.NewUninit(n, graph.Float32, yShape) // every element is written
	if err != nil {
		return nil, false, err
	}
	y := out.Float32s()
	rows, lda, okA := rowsOf(&a)
	_, ldd, okD := rowsOf(&dy)
	if k == 0 || nn == 0 {
		return kern.Results(n, out), true, nil
	}
	xa, xd := in[1].Float32s()[a.off:], in[0].Float32s()[dy.off:]
	if rows == 0 {
		clear(y)
		return kern.Results(n, out), true, nil
	}
	if !okA {
		s := kern.Scratch[float32](rows * k)
		defer kern.ReleaseScratch(s)
		gatherRows(n, s, in[1].Float32s(), &a, rows, k)
		xa, lda = s, k
	}
	if !okD {
		s := kern.Scratch[float32](rows * nn)
		defer kern.ReleaseScratch(s)
		gatherRows(n, s, in[0].Float32s(), &dy, rows, nn)
		xd, ldd = s, nn
	}
	if tc {
		// dB stored transposed: dBᵀ = dYᵀ·A, the same sums.
		gemm.Sgemm(true, false, nn, k, rows, alpha, xd, ldd, xa, lda, 0, y, ldc)
	} else {
		gemm.Sgemm(true, false, k, nn, rows, alpha, xa, lda, xd, ldd, 0, y, ldc)
	}
	return kern.Results(n, out), true, nil
}

// flatRowPieces is how many pieces of rows permutedFlat cuts a product of
// rows×n×k into, each computed whole on one worker (1: the GEMM splits
// it). Only the input gradient dX = dY·W takes it: with the shared
// dimension the layer's outputs (2304 for the in-projection, nine of the
// kernel's k blocks), the GEMM's own choice is to split k, and nine
// blocks over two cores leave one core a block longer than the other.
// By rows, ViT-B/16's dX ran 11% faster alone (BenchmarkFlatInProj) and
// at 0.95-0.98 of the GEMM in the step instead of 0.82-0.93 (6% faster
// with AVX-512, 12% with AVX2; the GPT's 8% with AVX2:
// docs/large-models.md, 5 December 2026). Each worker then packs all of
// W, which is small beside the product while every worker has at least
// flatMinStrips strips of rows. The result is the one-core product's,
// bit for bit, whatever the worker count.
func flatRowPieces(grad int64, rows, n, k, workers int) int {
	mr, _ := gemm.KernelShape()
	if !flatRowSplit || grad != 1 || workers < 2 || rows*n*k < flatMinWork || rows < flatMinStrips*mr*workers {
		return 1
	}
	return workers
}

// flatRowSplit switches flatRowPieces's cut off (benchmarks compare).
var flatRowSplit = true

const (
	// flatMinWork is the least work (rows·n·k) permutedFlat splits by
	// rows itself.
	flatMinWork = 1 << 22
	// flatMinStrips is the least number of the kernel's row strips each
	// piece of a row split gets.
	flatMinStrips = 16
)

// flatRowsTask is permutedFlat's product cut into pieces of rows, each
// run on one worker and, when the result's rows do not stack in Y,
// computed into scratch and scattered by the same worker.
type flatRowsTask struct {
	n, k, lda, ldb int
	alpha          float32
	tb             bool
	a, b, y        []float32
	rv             strided
	bounds         [maxFlatPieces + 1]int
	ldc            int // > 0: the rows stack in y, ldc apart
	scratch        []float32
}

const maxFlatPieces = 64

// Chunk computes pieces [lo, hi).
func (t *flatRowsTask) Chunk(lo, hi int) {
	for w := lo; w < hi; w++ {
		i0, i1 := t.bounds[w], t.bounds[w+1]
		if i1 <= i0 {
			continue
		}
		a := t.a[i0*t.lda:]
		if t.ldc > 0 {
			gemm.SgemmSerial(false, t.tb, i1-i0, t.n, t.k, t.alpha, a, t.lda, t.b, t.ldb, 0, t.y[i0*t.ldc:], t.ldc)
			continue
		}
		c := t.scratch[i0*t.n : i1*t.n]
		gemm.SgemmSerial(false, t.tb, i1-i0, t.n, t.k, t.alpha, a, t.lda, t.b, t.ldb, 0, c, t.n)
		scatterRows(t.y, c, &t.rv, i0, i1)
	}
}

// flatByRows runs permutedFlat's rows×n×k product (A rows lda apart, op(B)
// from b) in pieces of whole row strips, one per worker, into Y through
// its view rv.
func flatByRows(node *graph.Node, pieces, rows, n, k int, alpha float32, tb bool, a []float32, lda int, b []float32, ldb int, y []float32, rv *strided) {
	t := kern.State[flatRowsTask](node)
	pieces = min(pieces, maxFlatPieces)
	mr, _ := gemm.KernelShape()
	strips := (rows + mr - 1) / mr
	for w := 0; w <= pieces; w++ {
		t.bounds[w] = min(rows, strips*w/pieces*mr)
	}
	t.n, t.k, t.lda, t.ldb, t.alpha, t.tb = n, k, lda, ldb, alpha, tb
	t.a, t.b, t.y, t.rv = a, b, y, *rv
	t.ldc = 0
	if _, ldc, ok := rowsOf(rv); ok {
		t.ldc = ldc
	} else {
		t.scratch = kern.Scratch[float32](rows * n)
		defer kern.ReleaseScratch(t.scratch)
	}
	flatRowSplits.Add(1)
	kern.RunTask("PermutedMatMul", pieces, pieces, t)
	t.a, t.b, t.y, t.scratch = nil, nil, nil, nil
}

// flatRowSplits counts the products flatByRows ran (tests check that the
// path ran).
var flatRowSplits atomic.Int64

// scatterRows writes rows [i0, i1) of the contiguous rows×n matrix src
// (src holding those rows only, from its start) to the view rv of dst,
// whose last axis is the n columns and whose other axes, flattened, are
// the rows.
func scatterRows(dst, src []float32, rv *strided, i0, i1 int) {
	r := rv.rank - 1
	n, cs := rv.shape[r], rv.strides[r]
	cur := newRowCursor(rv, i0)
	for i := i0; i < i1; i++ {
		o := cur.offset()
		row := src[(i-i0)*n : (i-i0+1)*n]
		if cs == 1 {
			copy(dst[o:o+n], row)
		} else {
			for q, v := range row {
				dst[o+q*cs] = v
			}
		}
		cur.next()
	}
}
