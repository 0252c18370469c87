package optimizer

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.InternalDomain, graph.SGDUpdateProductOp, kern.Spec{Fn: updateProduct})
	kern.RegisterSpec(graph.InternalDomain, graph.AdamUpdateProductOp, kern.Spec{Fn: updateProduct})
}

// productBlockBytes is about the size of the block of gradient rows an
// SGDUpdateProduct or AdamUpdateProduct makes, then applies, at a time.
var productBlockBytes = 4 << 20

// ProductBufferElems is the elements of the gradient buffer an
// SGDUpdateProduct or AdamUpdateProduct of a k×cols matrix X over m rows
// of the batch takes from the step's memory plan with an infinite (or no)
// max_norm (productRows): the shape plan (backend/cpu memplan_shapes.go)
// replays it.
func ProductBufferElems(k, cols, m int) int {
	if k <= 0 || cols <= 0 {
		return 0
	}
	rows, _ := productRows(k, cols, m, false)
	return rows * cols
}

// productRows is how many rows of G a product update of a k×cols X over
// m rows of the batch makes, then applies, at a time: a block of whole
// rows, about productBlockBytes of them; all of G (whole) when a finite
// max_norm may scale it before the update (clipAll), or where blocks of
// rows would not have the whole product's bits (it does not run as
// packed blocks: gemm.RowsExact).
func productRows(k, cols, m int, clipAll bool) (rows int, whole bool) {
	if clipAll || !gemm.RowsExact(k, cols, m) {
		return k, true
	}
	return min(max(1, productBlockBytes/4/max(cols, 1)), k), false
}

// productTimer, when set, is told the time of every block's product
// (SetProductTimer).
var productTimer atomic.Pointer[func(label string, flops float64, d time.Duration)]

// SetProductTimer makes the product updates report each block's product:
// its label (the op type and "/dW"), flops and time. A benchmark that
// times the update nodes as the optimizer's subtracts it (the product is
// the backward's work), and an op profile lists it as a product. Its
// restore function puts the previous timer back.
func SetProductTimer(f func(label string, flops float64, d time.Duration)) (restore func()) {
	old := productTimer.Swap(&f)
	return func() { productTimer.Store(old) }
}

// productState is what an SGDUpdateProduct or AdamUpdateProduct node keeps
// between runs: the update's state, and during a run the block of
// gradient rows being applied and where it starts.
type productState struct {
	nodeState
	g     []float32
	r0    int // the block's first row
	cols  int
	adam  bool
	label string
}

// updateProduct is graph.SGDUpdateProductOp and AdamUpdateProductOp:
// SGDUpdate or AdamUpdate of the matrix X [k, n] with G =
// MatMulGradB(dY, A, X) = Aᵀ·dY over all m rows of A [..., m, k] and dY
// [..., m, n]. G is made a block of rows at a time, by the product
// MatMulGradB runs restricted to those rows (each element the same sum in
// the same order), and the block's rows of X and its buffers are updated
// before the next block: the same bits, without X's size of gradient
// held (where the product runs as packed blocks, gemm.RowsExact; else the
// whole of G is made first, as MatMulGradB makes it). With norm=1 the
// norm is ClipGradNorm's of G, its squares summed in element order across
// the blocks; a finite max_norm may scale G, so then the whole of G is
// made before any update.
func updateProduct(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	lead, groups, ok := graph.UpdateOperands(n) // X at lead, A before it
	if !ok || !graph.IsProductUpdate(n) {
		return nil, n.Errorf("is not a product update")
	}
	norm := n.AttrInt("norm", 0) == 1 // max_norm before A
	if want := lead + groups; len(in) != want {
		return nil, n.Errorf("has %d inputs, want %d", len(in), want)
	}
	a, x, dy := in[lead-1], in[lead], in[lead+1]
	if x == nil || x.DType != graph.Float32 || x.Rank() != 2 {
		return nil, n.Errorf("input %d (X) must be a float32 matrix", lead)
	}
	k, cols := x.Shape[0], x.Shape[1]
	if a == nil || a.DType != graph.Float32 || a.Rank() < 2 || a.Shape[a.Rank()-1] != k {
		return nil, n.Errorf("input %d (A) must be float32 [..., m, %d] for X %v", lead-1, k, x.Shape)
	}
	if dy == nil || dy.DType != graph.Float32 || dy.Rank() != a.Rank() || dy.Shape[dy.Rank()-1] != cols ||
		!graph.SameShape(dy.Shape[:dy.Rank()-1], a.Shape[:a.Rank()-1]) {
		return nil, n.Errorf("dY has shape %v, want A's rows %v then X's columns (%d)", dy.Shape, a.Shape[:a.Rank()-1], cols)
	}
	st := kern.State[productState](n)
	defer st.finishFused()
	if err := st.prepareFused(ctx, n, in, lead); err != nil {
		return nil, err
	}
	maxNorm := float32(math.Inf(1))
	if norm {
		var err error
		if maxNorm, err = scalarF32(n, in, lead-2, "max_norm"); err != nil {
			return nil, err
		}
	}
	skip, err := skipped(n, in)
	if err != nil {
		return nil, err
	}
	if skip && !norm {
		return kern.Results(n, st.outs...), nil
	}
	st.adam = n.OpType == graph.AdamUpdateProductOp
	if !skip {
		if st.adam {
			err = st.adamSetup(n, in)
		} else {
			err = st.sgdSetup(n, in)
		}
		if err != nil {
			return nil, err
		}
	}
	defer func() { st.hyper = nil }()
	if st.fn == nil {
		st.fn = st.rows // made once: a step allocates nothing
		st.label = n.OpType + "/dW"
	}
	m := a.Size() / max(k, 1)
	ad, dd := a.Float32s(), dy.Float32s()
	per, whole := productRows(k, cols, m, norm && !math.IsInf(float64(maxNorm), 1))
	// The block buffer comes from the step's memory plan, which frees it
	// after this node (the whole gradient in the arena, where it falls
	// back to that, as MatMulGradB's output would be).
	buf, err := kern.NewUninit(n, graph.Float32, []int{per, cols})
	if err != nil {
		return nil, err
	}
	st.g, st.cols = buf.Float32s(), cols
	defer func() { st.g = nil }()
	var report func(label string, flops float64, d time.Duration)
	if t := productTimer.Load(); t != nil {
		report = *t
	}
	var sq float64
	for r0 := 0; r0 < k; r0 += per {
		r1 := min(r0+per, k)
		blk := st.g[:(r1-r0)*cols]
		var t0 time.Time
		if report != nil {
			t0 = time.Now()
		}
		// Rows r0..r1 of Aᵀ·dY (columns r0..r1 of A), or all of it.
		if whole {
			gemm.Sgemm(true, false, k, cols, m, 1, ad, k, dd, cols, 0, blk, cols)
		} else {
			gemm.SgemmRows(true, false, k, cols, m, r0, r1, 1, ad, k, dd, cols, 0, blk, cols)
		}
		if report != nil {
			report(st.label, 2*float64(r1-r0)*float64(cols)*float64(m), time.Since(t0))
		}
		if norm {
			sq = sumSquares(sq, blk)
		}
		if !whole && !skip {
			st.applyBlock(r0, r1)
		}
	}
	if norm {
		total, coef := clipCoef([]float64{sq}, maxNorm)
		if err := st.setNorm(n, total); err != nil {
			return nil, err
		}
		if whole && coef < 1 {
			scaleBy(st.g[:k*cols], coef)
		}
	}
	if whole && !skip {
		st.applyBlock(0, k)
	}
	return kern.Results(n, st.outs...), nil
}

// applyBlock updates rows [r0, r1) of X and its buffers from st.g, which
// holds the gradient's rows from r0 on, in chunks of rows the pool's
// workers share.
func (st *productState) applyBlock(r0, r1 int) {
	st.r0 = r0
	per := max(1, chunkElems/max(st.cols, 1))
	r := &st.runner
	r.chunks = r.chunks[:0]
	for lo := r0; lo < r1; lo += per {
		r.chunks = append(r.chunks, chunk{0, lo, min(lo+per, r1)})
	}
	r.run((r1-r0)*st.cols, st.fn)
}

// rows updates rows [lo, hi) of X (a chunk of the block at st.r0).
func (st *productState) rows(_, lo, hi int) {
	c := st.cols
	st.applyRows(st.adam, lo*c, hi*c, st.g[(lo-st.r0)*c:(hi-st.r0)*c])
}
