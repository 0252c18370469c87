package gradient

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func register(op string, fn kern.Kernel) {
	kern.RegisterSpec(graph.InternalDomain, op, kern.Spec{Fn: fn})
}

func init() {
	register("SumToShape", sumToShape)
}

// sumToShape reduces in[0] to the shape of in[1] by summing over the
// dimensions that broadcasting expanded (the gradient of broadcasting).
func sumToShape(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	g, like := in[0], in[1]
	if graph.SameShape(g.Shape, like.Shape) {
		return kern.Results(n, g), nil
	}
	target := like.Shape
	if len(target) > len(g.Shape) {
		return nil, n.Errorf("cannot sum shape %v down to %v", g.Shape, target)
	}
	// Align target to g's rank; every dim must be equal or 1.
	off := len(g.Shape) - len(target)
	var fullBuf [8]int
	full := fullBuf[:0]
	if len(g.Shape) <= len(fullBuf) {
		full = fullBuf[:len(g.Shape)]
	} else {
		full = make([]int, len(g.Shape))
	}
	for i := range full {
		full[i] = 1
		if i >= off {
			full[i] = target[i-off]
			if full[i] != g.Shape[i] && full[i] != 1 {
				return nil, n.Errorf("cannot sum shape %v down to %v", g.Shape, target)
			}
		}
	}
	out, err := kern.New(n, g.DType, target)
	if err != nil {
		return nil, err
	}
	if outer, rows, cols, ok := columnSumLayout(g.Shape, full); ok {
		switch src := g.Data.(type) {
		case []float32:
			columnSums(kern.State[colSumTask[float32]](n), src, out.Data.([]float32), outer, rows, cols)
			return kern.Results(n, out), nil
		case []float64:
			columnSums(kern.State[colSumTask[float64]](n), src, out.Data.([]float64), outer, rows, cols)
			return kern.Results(n, out), nil
		}
	}
	// Output strides in g's index space: 0 on summed dims.
	st := kern.BroadcastStrides(full, g.Shape)
	switch src := g.Data.(type) {
	case []float32:
		accumulate(src, out.Data.([]float32), g.Shape, st)
	case []float64:
		accumulate(src, out.Data.([]float64), g.Shape, st)
	default:
		return nil, n.Errorf("dtype %v is not supported", g.DType)
	}
	return kern.Results(n, out), nil
}

// columnSumLayout reports whether summing shape down to full (same rank,
// full[i] = shape[i] or 1) is, in row-major order, outer blocks of rows ×
// cols elements each summed over its rows to cols elements (outer·cols
// results), with cols at least 4: the bias gradient (N, ..., C) → (C), and
// (A, R, B) → (A, 1, B) in general. Dims of size 1 are skipped.
func columnSumLayout(shape, full []int) (outer, rows, cols int, ok bool) {
	// Runs of kept (k) and summed (s) dims, size-1 dims dropped; the
	// pattern must be [k] s k.
	outer, rows, cols = 1, 1, 1
	phase := 0 // 0: leading kept dims, 1: summed dims, 2: trailing kept dims
	for i, d := range shape {
		if d == 1 {
			continue
		}
		summed := full[i] == 1
		switch {
		case phase == 0 && !summed:
			outer *= d
		case phase <= 1 && summed:
			phase = 1
			rows *= d
		case phase >= 1 && !summed:
			phase = 2
			cols *= d
		default: // a summed dim after the trailing kept ones
			return 0, 0, 0, false
		}
	}
	if phase == 0 {
		return 0, 0, 0, false // nothing summed (the shapes differ only by ones)
	}
	if phase == 1 {
		// Everything after the leading kept dims is summed: row sums
		// (or one total), left to accumulate.
		return 0, 0, 0, false
	}
	return outer, rows, cols, cols >= 4
}

// columnSumChunkRows is the fewest rows of a column sum one work item
// takes, columnSumChunks the most runs of rows an outer block is split
// into, and columnSumCols the most columns one work item takes. The work
// items depend on the shape only, so the results do not depend on
// GOMAXPROCS.
const (
	columnSumChunkRows = 64
	columnSumChunks    = 16
	columnSumCols      = 1024
)

// columnSumDirectRows is the most rows an outer block may have for its
// column sums to go straight into dst, a column at a time, without the
// float64 partial sums (the position embedding's gradient: four rows of
// 98,304 columns at the GPT's shape, where clearing, writing and reading
// back 768 KiB of partial sums cost more than the sums).
const columnSumDirectRows = 8

// columnSums sets dst[o·cols + i] to Σ_r src[(o·rows + r)·cols + i]. The
// rows of each outer block are split into up to columnSumChunks runs and
// the columns into blocks of up to columnSumCols; each (run, column block)
// is summed in float64 (colSum32 for float32) into its own partial sums,
// and the runs' partial sums are added in run order and rounded once. t is
// the work object the cores share (a node's, kept between runs).
func columnSums[F float](t *colSumTask[F], src, dst []F, outer, rows, cols int) {
	chunks := max(1, min(columnSumChunks, rows/columnSumChunkRows))
	if rows*cols < 1<<14 {
		chunks = 1
	}
	colBlocks := (cols + columnSumCols - 1) / columnSumCols
	var partial []float64
	if chunks > 1 || rows > columnSumDirectRows {
		partial = kern.Scratch[float64](outer * chunks * cols)
		defer kern.ReleaseScratch(partial)
	}
	perOuter := chunks * colBlocks
	items := outer * perOuter
	// A core is worth waking for every 64K elements (about 10 µs of work).
	workers := min(kern.Workers(), items, max(1, outer*rows*cols/(1<<16)))
	*t = colSumTask[F]{src: src, dst: dst, partial: partial, rows: rows, cols: cols, chunks: chunks, colBlocks: colBlocks, perOuter: perOuter}
	kern.RunTask("SumToShape", items, workers, t)
	t.src, t.dst, t.partial = nil, nil, nil
	if chunks == 1 {
		return // each item rounded its sums into dst
	}
	for o := 0; o < outer; o++ {
		d := dst[o*cols : (o+1)*cols]
		sums := partial[o*chunks*cols : (o*chunks+1)*cols]
		for c := 1; c < chunks; c++ {
			for i, v := range partial[(o*chunks+c)*cols : (o*chunks+c+1)*cols] {
				sums[i] += v
			}
		}
		for i, v := range sums {
			d[i] = F(v)
		}
	}
}

// colSumTask is columnSums's work: items [lo, hi) of (outer block, run of
// rows, column block), each summed into its own partial sums; with one run
// of rows per outer block (chunks 1) an item's sums are final, and it
// rounds them into dst itself, on its core, instead of leaving them to the
// one-core pass that adds the runs.
type colSumTask[F float] struct {
	src, dst                                []F
	partial                                 []float64
	rows, cols, chunks, colBlocks, perOuter int
}

// Chunk sums items [lo, hi).
func (t *colSumTask[F]) Chunk(lo, hi int) {
	rows, cols, chunks, colBlocks, perOuter := t.rows, t.cols, t.chunks, t.colBlocks, t.perOuter
	src, partial := t.src, t.partial
	for it := lo; it < hi; it++ {
		o, c, cb := it/perOuter, it%perOuter/colBlocks, it%colBlocks
		r0, r1 := c*rows/chunks, (c+1)*rows/chunks
		c0, c1 := cb*columnSumCols, min(cols, (cb+1)*columnSumCols)
		if partial == nil {
			// Few rows, one run: each column's float64 sum from +0 in row
			// order, rounded once, as the partial sums would give it.
			var s []F
			if rows > 0 {
				s = src[o*rows*cols+c0:]
			}
			columnSumsDirect(t.dst[o*cols+c0:o*cols+c1], s, rows, cols)
			continue
		}
		acc := partial[(o*chunks+c)*cols+c0 : (o*chunks+c)*cols+c1]
		if r1 > r0 {
			block := src[(o*rows+r0)*cols+c0 : (o*rows+r1-1)*cols+c1]
			if s32, ok := any(block).([]float32); ok {
				colSum32(acc, s32, r1-r0, cols)
			} else {
				for r := 0; r < r1-r0; r++ {
					for i, v := range block[r*cols : r*cols+c1-c0] {
						acc[i] += float64(v)
					}
				}
			}
		}
		if chunks == 1 {
			d := t.dst[o*cols+c0 : o*cols+c1]
			for i, v := range acc {
				d[i] = F(v)
			}
		}
	}
}

// columnSumsDirect sets dst[i] to the float64 sum, from +0 in row order,
// of src[r·stride + i] over rows r, rounded once to F.
func columnSumsDirect[F float](dst, src []F, rows, stride int) {
	n := len(dst)
	if rows <= 0 || n == 0 {
		clear(dst) // the sum of no rows: +0
		return
	}
	_ = src[(rows-1)*stride+n-1]
	if d32, ok := any(dst).([]float32); ok && rowAsm && n >= 8 {
		body := n &^ 7
		colSumRoundAVX2(&d32[0], &any(src).([]float32)[0], body, rows, stride)
		dst, src = dst[body:], src[body:]
	}
	for i := range dst {
		s := 0.0
		for r := 0; r < rows; r++ {
			s += float64(src[r*stride+i])
		}
		dst[i] = F(s)
	}
}

// accumulate adds every element of src (of shape shape) into dst at the
// offset given by the strides st (0 on reduced dims).
func accumulate[T float32 | float64](src, dst []T, shape, st []int) {
	rank := len(shape)
	if rank == 0 {
		dst[0] += src[0]
		return
	}
	inner := shape[rank-1]
	innerSt := st[rank-1]
	idx := make([]int, rank-1)
	off := 0
	for base := 0; base < len(src); base += inner {
		row := src[base : base+inner]
		if innerSt == 0 {
			var s T
			for _, v := range row {
				s += v
			}
			dst[off] += s
		} else {
			d := dst[off : off+inner]
			for i, v := range row {
				d[i] += v
			}
		}
		for d := rank - 2; d >= 0; d-- {
			idx[d]++
			off += st[d]
			if idx[d] < shape[d] {
				break
			}
			off -= st[d] * idx[d]
			idx[d] = 0
		}
	}
}
