package gradient

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// layerNormRowsBlock is the rows whose dscale and dbias terms
// layerNormRowsBackward sums in the element type before adding them to a
// float64 partial sum; layerNormChunks is the most work items (runs of
// whole blocks, each with its own float64 partial sums) it splits the rows
// into. Both are fixed, so that the partial sums, and hence the results, do
// not depend on GOMAXPROCS.
const (
	layerNormRowsBlock = 32
	layerNormChunks    = 16
)

// layerNormRowsBackward is the backward of LayerNormalization over rows of
// size elements (element i of every row has scale[i]): it writes dx and
// adds Σ dy·x̂ and Σ dy over the rows to dscale and dbias. The rows are
// spread over the cores in up to layerNormChunks chunks of whole blocks of
// layerNormRowsBlock rows. Each block sums its rows' contributions to
// dscale and dbias in the element type and adds them to its chunk's
// float64 sums; the chunks' sums are added in chunk order.
func layerNormRowsBackward[F float](dy, x, dx []F, rows, size int, eps float64, scale, dscale, dbias []float64) {
	layerNormRowsBackwardWith(new(lnGradTask[F]), dy, x, dx, nil, rows, size, eps, scale, dscale, dbias)
}

// layerNormRowsBackwardWith is layerNormRowsBackward with the work object
// t (a node's, kept between runs); when res is not nil, each row of res
// is added to its row of dx as soon as that row is written
// (LayerNormGradAdd).
func layerNormRowsBackwardWith[F float](t *lnGradTask[F], dy, x, dx, res []F, rows, size int, eps float64, scale, dscale, dbias []float64) {
	if size == 0 || rows == 0 {
		return
	}
	blocks := (rows + layerNormRowsBlock - 1) / layerNormRowsBlock
	chunks := min(blocks, layerNormChunks)
	workers := min(gradWorkers(blocks, 8*layerNormRowsBlock*size), chunks)
	// A pair of float64 partial sums per chunk, then the scale rounded to
	// the element type, as float64.
	partial := kern.Scratch[float64]((2*chunks + 1) * size)
	defer kern.ReleaseScratch(partial)
	// The scale in the element type, then a pair of element-type block
	// sums per chunk.
	buf := kern.Scratch[F]((1 + 2*chunks) * size)
	defer kern.ReleaseScratch(buf)
	scaleF, scaleR := buf[:size], partial[2*chunks*size:]
	for i, s := range scale[:size] {
		scaleF[i] = F(s)
		scaleR[i] = float64(scaleF[i])
	}
	*t = lnGradTask[F]{dy: dy, x: x, dx: dx, res: res, buf: buf, scaleF: scaleF, partial: partial, scaleR: scaleR,
		rows: rows, size: size, blocks: blocks, chunks: chunks, eps: eps}
	kern.RunTask("LayerNormalizationGrad", chunks, workers, t)
	*t = lnGradTask[F]{}
	for c := 0; c < chunks; c++ {
		ds, db := partial[2*c*size:(2*c+1)*size], partial[(2*c+1)*size:(2*c+2)*size]
		for i := range dscale {
			dscale[i] += ds[i]
			dbias[i] += db[i]
		}
	}
}

// lnGradTask is layerNormRowsBackward's work over its chunks.
type lnGradTask[F float] struct {
	dy, x, dx, res, buf, scaleF []F
	partial, scaleR             []float64
	rows, size, blocks, chunks  int
	eps                         float64
}

// Chunk runs chunks [lo, hi): their blocks of rows, each block's dscale
// and dbias terms summed in the element type, then added to the chunk's
// float64 partial sums.
func (t *lnGradTask[F]) Chunk(lo, hi int) {
	size, blocks, chunks := t.size, t.blocks, t.chunks
	buf, partial := t.buf, t.partial
	for c := lo; c < hi; c++ {
		ds, db := buf[(1+2*c)*size:(2+2*c)*size], buf[(2+2*c)*size:(3+2*c)*size]
		pds, pdb := partial[2*c*size:(2*c+1)*size], partial[(2*c+1)*size:(2*c+2)*size]
		for b := c * blocks / chunks; b < (c+1)*blocks/chunks; b++ {
			clear(ds)
			clear(db)
			lo, hi := b*layerNormRowsBlock, min((b+1)*layerNormRowsBlock, t.rows)
			layerNormRowsBackwardRange(t.dy, t.x, t.dx, t.res, lo, hi, size, t.eps, t.scaleR, t.scaleF, ds, db)
			for i := range pds {
				pds[i] += float64(ds[i])
				pdb[i] += float64(db[i])
			}
		}
	}
}

// layerNormRowsBackwardRange writes the LayerNorm input gradient of rows
// [lo, hi) of size > 0 elements (upstream gradient dy, per-element scale,
// given as float64 and in the element type) into dx and adds the rows'
// dy·x̂ and dy into ds and db (size elements each, as are the scales).
//
// It reads each row twice while it sits in L1. The first pass (lnGradSums)
// accumulates in float64 the sums of d = x − x[0], d², g = dy·scale and
// g·d; shifting by x[0] keeps Σd²/n − (Σd/n)² accurate when the mean is
// large next to the spread. The second (lnGradApply), in the element type,
// writes dx = inv·(g − mean(g)) − inv·mean(g·x̂)·x̂ and adds dy·x̂ and dy
// to ds and db. x − m is computed as (x − mHi) − mLo with mHi the mean
// rounded to the element type, so that rows whose mean is large next to
// their spread lose no accuracy; on a row of one element g − mean(g) and
// x̂ are exactly 0, and so is dx. The sums of row j+1 are taken before the
// scalars of row j, so that they overlap its square root and divisions.
func layerNormRowsBackwardRange[F float](dy, x, dx, res []F, lo, hi, size int, eps float64, scale64 []float64, scale, ds, db []F) {
	if lo >= hi {
		return
	}
	fn := float64(size)
	x0 := float64(x[lo*size])
	sd, sq, sg, sgd := lnGradSums(x[lo*size:(lo+1)*size], dy[lo*size:(lo+1)*size], scale64, x0)
	for j := lo; j < hi; j++ {
		rx0, rsd, rsq, rsg, rsgd := x0, sd, sq, sg, sgd
		if j+1 < hi {
			x0 = float64(x[(j+1)*size])
			sd, sq, sg, sgd = lnGradSums(x[(j+1)*size:(j+2)*size], dy[(j+1)*size:(j+2)*size], scale64, x0)
		}
		md := rsd / fn // mean − x0
		inv := 1 / math.Sqrt(max(rsq/fn-md*md, 0)+eps)
		// mean(g·x̂) = inv·Σ g·(x − m)/n, with Σ g·(x − m) = Σ g·d − (m − x0)·Σ g.
		meanGXhat := inv * (rsgd - md*rsg) / fn
		m := rx0 + md
		mHi := F(m)
		c := [5]F{mHi, F(m - float64(mHi)), F(inv), F(rsg / fn), F(-inv * meanGXhat)}
		var r []F
		if res != nil {
			r = res[j*size : (j+1)*size]
		}
		// The rows lie end to end (the next block's too): the
		// prefetches look a row length on.
		lnGradApply(x[j*size:(j+1)*size], dy[j*size:(j+1)*size], scale, dx[j*size:(j+1)*size], ds, db, r, &c, size)
	}
}

// layerNormGrad is LayerNormalizationGrad(dy, X, Scale) with attributes
// axis and epsilon; outputs dX, and dScale and dB shaped like X.shape[axis:]
// (the rule sums them down to the shapes of Scale and B, which may
// broadcast).
func layerNormGrad(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	dy, x, scaleT := in[0], in[1], in[2]
	if err := sameFloat(n, dy, x, "dy"); err != nil {
		return nil, err
	}
	var res *graph.Tensor
	if n.OpType == graph.LayerNormGradAdd {
		if err := kern.Need(n, in, 4); err != nil {
			return nil, err
		}
		res = in[3]
		if err := sameFloat(n, res, x, "R"); err != nil {
			return nil, err
		}
		if !graph.SameShape(res.Shape, x.Shape) {
			return nil, n.Errorf("R has shape %v, X %v: LayerNormGradAdd adds R to dX of X's shape", res.Shape, x.Shape)
		}
	}
	rank := x.Rank()
	if rank == 0 {
		return nil, n.Errorf("X must have rank 1 or more")
	}
	axis, err := kern.NormAxis(n, int(n.AttrInt("axis", -1)), rank)
	if err != nil {
		return nil, err
	}
	normShape := x.Shape[axis:]
	outer, size := product(x.Shape[:axis]), product(normShape)
	// The scale (as float64) lives in the node's state between runs.
	st := kern.State[layerNormGradState](n)
	var scale []float64
	if graph.SameShape(scaleT.Shape, normShape) {
		st.scale = kern.Float64sInto(st.scale, scaleT)
		scale = st.scale
	} else {
		bs, err := kern.BroadcastShape(scaleT.Shape, normShape)
		if err != nil || !graph.SameShape(bs, normShape) {
			return nil, n.Errorf("Scale of shape %v does not broadcast to the normalised shape %v", scaleT.Shape, normShape)
		}
		sv := toFloat64s(scaleT)
		idx := kern.BroadcastIndex(scaleT.Shape, normShape)
		scale = make([]float64, len(idx))
		for i, j := range idx {
			scale[i] = sv[j]
		}
	}
	if len(scale) < size {
		return nil, n.Errorf("Scale holds %d elements, the normalised shape %v %d", len(scale), normShape, size)
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	dscale := kern.Scratch[float64](2 * size)
	defer kern.ReleaseScratch(dscale)
	dscale, dbias := dscale[:size], dscale[size:]
	// dX over R, or else over dY, when the executor hands that input's
	// storage over (its last reader): each row of R and dY is read,
	// element by element, just before the same elements of dX are
	// written, and the sums of row j+1, taken before row j is written,
	// read row j+1.
	var dx *graph.Tensor
	switch {
	case res != nil && ctx.MayOverwrite(3):
		dx = res
	case ctx.MayOverwrite(0) && graph.SameShape(dy.Shape, x.Shape):
		dx = dy
	default:
		if dx, err = kern.NewUninit(n, x.DType, x.Shape); err != nil { // every row is written
			return nil, err
		}
	}
	switch xs := x.Data.(type) {
	case []float32:
		var rs []float32
		if res != nil {
			rs = res.Data.([]float32)
		}
		layerNormRowsBackwardWith(kern.State[lnGradTask[float32]](n), dy.Data.([]float32), xs, dx.Data.([]float32), rs, outer, size, eps, scale, dscale, dbias)
	case []float64:
		var rs []float64
		if res != nil {
			rs = res.Data.([]float64)
		}
		layerNormRowsBackwardWith(kern.State[lnGradTask[float64]](n), dy.Data.([]float64), xs, dx.Data.([]float64), rs, outer, size, eps, scale, dscale, dbias)
	}
	ds, err := fromFloat64s(n, x.DType, normShape, dscale)
	if err != nil {
		return nil, err
	}
	db, err := fromFloat64s(n, x.DType, normShape, dbias)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, dx, ds, db), nil
}

// layerNormGradState is what a LayerNormalizationGrad node keeps between
// runs.
type layerNormGradState struct{ scale []float64 }
