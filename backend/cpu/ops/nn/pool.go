package nn

import (
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// poolKind selects what a pooling window computes.
type poolKind int

const (
	poolMax poolKind = iota
	poolAvg
	poolLp
)

// poolPlan describes the windows of one (N, C) plane axis by axis: for
// axis j and output coordinate o, the valid input indices are
// idx[j][start[j][o]:start[j][o+1]] and padded[j][o] counts the window taps
// inside the padded extent (AveragePool count_include_pad=1). A window is the
// product of its axes' index lists, so the plan stays small however large
// the kernel.
type poolPlan struct {
	in, out   []int
	stride    []int // row-major input strides
	start     [][]int32
	idx       [][]int32
	padded    [][]int32
	inSize    int
	outSize   int
	colMajor  bool // MaxPool storage_order=1 indices
	spanCache SpanCache[span]
}

// newPoolPlan enumerates the window taps of every axis of w.
func newPoolPlan(w *window) *poolPlan {
	r := w.rank()
	p := &poolPlan{in: w.in, out: w.out, stride: make([]int, r), start: make([][]int32, r),
		idx: make([][]int32, r), padded: make([][]int32, r), inSize: prod(w.in), outSize: prod(w.out)}
	acc := 1
	for j := r - 1; j >= 0; j-- {
		p.stride[j] = acc
		acc *= w.in[j]
	}
	for j := 0; j < r; j++ {
		p.start[j] = make([]int32, w.out[j]+1)
		p.padded[j] = make([]int32, w.out[j])
		for o := 0; o < w.out[j]; o++ {
			p.start[j][o] = int32(len(p.idx[j]))
			s := o*w.strides[j] - w.padBegin[j]
			for t := 0; t < w.kernel[j]; t++ {
				i := s + t*w.dilations[j]
				if i >= 0 && i < w.in[j] {
					p.idx[j] = append(p.idx[j], int32(i))
				}
				if i >= -w.padBegin[j] && i < w.in[j]+w.padEnd[j] {
					p.padded[j][o]++
				}
			}
		}
		p.start[j][w.out[j]] = int32(len(p.idx[j]))
	}
	return p
}

// axisList returns the valid input indices of axis j at output coordinate o.
func (p *poolPlan) axisList(j, o int) []int32 {
	return p.idx[j][p.start[j][o]:p.start[j][o+1]]
}

// forRows calls fn once per line of outputs along the last axis, with the
// flat offset of the line's first output and, for its window, the input
// offsets of every tap combination on the other axes (bases) and how many
// of their taps lie in the padded extent (padded).
func (p *poolPlan) forRows(fn func(outOff int, bases []int, padded int)) {
	r := len(p.out)
	oLast := p.out[r-1]
	rows := p.outSize / max(oLast, 1)
	if oLast == 0 {
		rows = 0
	}
	o := make([]int, r)
	var bases, tmp []int
	for row := 0; row < rows; row++ {
		bases = append(bases[:0], 0)
		padded := 1
		for j := 0; j < r-1; j++ {
			list := p.axisList(j, o[j])
			padded *= int(p.padded[j][o[j]])
			tmp = tmp[:0]
			for _, b := range bases {
				for _, i := range list {
					tmp = append(tmp, b+int(i)*p.stride[j])
				}
			}
			bases, tmp = tmp, bases
		}
		fn(row*oLast, bases, padded)
		for j := r - 2; j >= 0; j-- {
			o[j]++
			if o[j] < p.out[j] {
				break
			}
			o[j] = 0
		}
	}
}

// colMajorIndex converts a row-major offset within a plane to the
// column-major offset of the same element.
func (p *poolPlan) colMajorIndex(off int) int {
	r := len(p.in)
	out, acc := 0, 1
	for j := 0; j < r; j++ {
		out += (off / p.stride[j] % p.in[j]) * acc
		acc *= p.in[j]
	}
	return out
}

// ordered is the element types MaxPool compares.
type ordered interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// poolFloat is the element types AveragePool and LpPool compute in.
type poolFloat interface{ ~float32 | ~float64 }

// poolKernel returns the MaxPool, AveragePool or LpPool kernel.
func poolKernel(kind poolKind) kern.Kernel {
	return func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0]
		if err := spatialInput(n, x, "input X"); err != nil {
			return nil, err
		}
		// The window and its plan are kept per node for the input shape
		// they were made for.
		st := kern.State[poolState](n)
		if st.plan == nil || !slices.Equal(st.in, x.Shape) {
			r := len(x.Shape) - 2
			kernel, err := kernelShapeAttr(n, r)
			if err != nil {
				return nil, err
			}
			w, err := resolveWindow(n, x.Shape[2:], kernel, windowOpts{ceil: true})
			if err != nil {
				return nil, err
			}
			st.in = append(st.in[:0], x.Shape...)
			st.out = concatShape(x.Shape[:2], w.out)
			st.plan = newPoolPlan(w)
		}
		// Every pool writes each output element (an empty window too).
		y, err := kern.NewUninit(n, x.DType, st.out)
		if err != nil {
			return nil, err
		}
		planes := x.Shape[0] * x.Shape[1]
		switch kind {
		case poolMax:
			return maxPool(n, x, y, st.plan, planes)
		case poolAvg:
			plan := st.plan
			includePad := n.AttrInt("count_include_pad", 0) != 0
			switch xd := x.Data.(type) {
			case []float32:
				avgPool(plan, xd, y.Data.([]float32), planes, includePad)
			case []float64:
				avgPool(plan, xd, y.Data.([]float64), planes, includePad)
			default:
				return nil, n.Errorf("dtype %v is not supported", x.DType)
			}
		case poolLp:
			p, err := lpPoolP(n)
			if err != nil {
				return nil, err
			}
			plan := st.plan
			switch xd := x.Data.(type) {
			case []float32:
				lpPool(plan, xd, y.Data.([]float32), planes, p)
			case []float64:
				lpPool(plan, xd, y.Data.([]float64), planes, p)
			default:
				return nil, n.Errorf("dtype %v is not supported", x.DType)
			}
		}
		return kern.Results(n, y), nil
	}
}

// poolState is what a pooling node keeps between runs: the input shape
// in, the output shape out and the window plan made for them.
type poolState struct {
	in, out []int
	plan    *poolPlan
}

// lpPoolP reads LpPool's p: a float before opset 2, an int after.
func lpPoolP(n *graph.Node) (float64, error) {
	p := 2.0
	if a := n.Attr("p"); a != nil {
		if a.Type == graph.AttrFloat {
			p = float64(a.F)
		} else {
			p = float64(a.I)
		}
	}
	if p <= 0 {
		return 0, n.Errorf("p = %g must be positive", p)
	}
	return p, nil
}

// maxPool dispatches MaxPool on the element type and fills the optional
// Indices output.
func maxPool(n *graph.Node, x, y *graph.Tensor, plan *poolPlan, planes int) ([]*graph.Tensor, error) {
	wantIdx := len(n.Outputs) > 1 && n.Outputs[1] != ""
	plan.colMajor = n.AttrInt("storage_order", 0) != 0
	var idx []int64
	var it *graph.Tensor
	if wantIdx {
		var err error
		if it, err = kern.New(n, graph.Int64, y.Shape); err != nil {
			return nil, err
		}
		idx = it.Data.([]int64)
	}
	switch xd := x.Data.(type) {
	case []float32:
		maxPoolRun(plan, xd, y.Data.([]float32), idx, planes, float32(math.Inf(-1)))
	case []float64:
		maxPoolRun(plan, xd, y.Data.([]float64), idx, planes, math.Inf(-1))
	case []int8:
		maxPoolRun(plan, xd, y.Data.([]int8), idx, planes, math.MinInt8)
	case []uint8:
		maxPoolRun(plan, xd, y.Data.([]uint8), idx, planes, 0)
	case []int16:
		maxPoolRun(plan, xd, y.Data.([]int16), idx, planes, math.MinInt16)
	case []int32:
		maxPoolRun(plan, xd, y.Data.([]int32), idx, planes, math.MinInt32)
	case []int64:
		maxPoolRun(plan, xd, y.Data.([]int64), idx, planes, math.MinInt64)
	default:
		return nil, n.Errorf("dtype %v is not supported", x.DType)
	}
	if wantIdx {
		return kern.Results(n, y, it), nil
	}
	return kern.Results(n, y), nil
}

// poolCost estimates the taps of one plane, for sizing the worker count.
func (p *poolPlan) poolCost() int {
	c := 1
	for j := range p.out {
		c *= max(len(p.idx[j]), 1)
	}
	return c + p.outSize
}

// maxPoolRun computes the window maxima of every plane; idx (when not nil)
// receives the flat input index of each maximum (the first one on ties).
func maxPoolRun[T ordered](plan *poolPlan, x, y []T, idx []int64, planes int, lowest T) {
	inSize, outSize := plan.inSize, plan.outSize
	r := len(plan.out)
	workers := nnWorkers(planes, plan.poolCost())
	if r == 2 && !plan.colMajor {
		rows, rowsOK := plan.spanCache.Get(0, plan.spans)
		cols, colsOK := plan.spanCache.Get(1, plan.spans)
		x32, _ := any(x).([]float32)
		separable := idx == nil && x32 != nil && rowsOK && colsOK && separableFits(rows, plan.in[1])
		if separable {
			if colOff, ok := stride3S2Cols(rows, cols, plan.in[1]); ok {
				maxPool3S2Planes(rows, cols, plan.in[1], colOff, x32, any(y).([]float32), planes, inSize, workers)
				return
			}
		}
		ParallelItemsOf(planes, workers, false, maxPool2DTask[T]{plan: plan, x: x, y: y, x32: x32, idx: idx,
			rows: rows, cols: cols, spans: rowsOK && colsOK, separable: separable, lowest: lowest})
		return
	}
	parallelFor(planes, workers, func(_, c int) {
		xp := x[c*inSize : (c+1)*inSize]
		yp := y[c*outSize : (c+1)*outSize]
		plan.forRows(func(outOff int, bases []int, _ int) {
			for ol := 0; ol < plan.out[r-1]; ol++ {
				inner := plan.axisList(r-1, ol)
				best, bestAt := lowest, -1
				for _, b := range bases {
					row := xp[b:]
					for _, i := range inner {
						if v := row[i]; v > best || bestAt < 0 {
							best, bestAt = v, b+int(i)
						}
					}
				}
				yp[outOff+ol] = best
				if idx != nil {
					switch {
					case bestAt < 0:
						idx[c*outSize+outOff+ol] = -1
					case plan.colMajor:
						idx[c*outSize+outOff+ol] = int64(c*inSize + plan.colMajorIndex(bestAt))
					default:
						idx[c*outSize+outOff+ol] = int64(c*inSize + bestAt)
					}
				}
			}
		})
	})
}

// maxPool2DTask is maxPoolRun's work for a 2-D row-major pool: item c is
// plane c.
type maxPool2DTask[T ordered] struct {
	plan             *poolPlan
	x, y             []T
	x32              []float32
	idx              []int64
	rows, cols       []span
	spans, separable bool
	lowest           T
}

func (t *maxPool2DTask[T]) Item(_, c int) {
	plan, x, y, idx := t.plan, t.x, t.y, t.idx
	inSize, outSize := plan.inSize, plan.outSize
	var ip []int64
	if idx != nil {
		ip = idx[c*outSize : (c+1)*outSize]
	}
	if t.separable && maxPool2DSeparable(t.rows, t.cols, plan.in[1], t.x32[c*inSize:(c+1)*inSize], any(y).([]float32)[c*outSize:(c+1)*outSize]) {
		return
	}
	if t.spans {
		maxPool2DSpans(t.rows, t.cols, plan.in[1], x[c*inSize:(c+1)*inSize], y[c*outSize:(c+1)*outSize], ip, c*inSize, t.lowest)
		return
	}
	maxPool2D(plan, x[c*inSize:(c+1)*inSize], y[c*outSize:(c+1)*outSize], ip, c*inSize, t.lowest)
}

// maxPool2D is maxPoolRun for one plane of a 2-D pool (row-major
// indices, offset by base): the same row-major scan of each window's taps,
// without the per-row tap lists of forRows.
func maxPool2D[T ordered](plan *poolPlan, x, y []T, idx []int64, base int, lowest T) {
	iw, oh, ow := plan.in[1], plan.out[0], plan.out[1]
	for r := 0; r < oh; r++ {
		rowTaps := plan.axisList(0, r)
		for q := 0; q < ow; q++ {
			colTaps := plan.axisList(1, q)
			best, bestAt := lowest, -1
			for _, i := range rowTaps {
				line := x[int(i)*iw : int(i+1)*iw]
				for _, j := range colTaps {
					if v := line[j]; v > best || bestAt < 0 {
						best, bestAt = v, int(i)*iw+int(j)
					}
				}
			}
			y[r*ow+q] = best
			if idx != nil {
				if bestAt < 0 {
					idx[r*ow+q] = -1
				} else {
					idx[r*ow+q] = int64(base + bestAt)
				}
			}
		}
	}
}

// span is a window's taps along one axis when they are consecutive input
// indices: lo, lo+1, ..., lo+n-1 (n = 0 for a window wholly in padding).
type span struct{ lo, n int32 }

// spans returns the taps of axis j as one span per output coordinate, and
// false when some window's taps are not consecutive (dilation > 1).
func (p *poolPlan) spans(j int) ([]span, bool) {
	out := make([]span, p.out[j])
	for o := range out {
		list := p.axisList(j, o)
		for k, i := range list {
			if i != list[0]+int32(k) {
				return nil, false
			}
		}
		if len(list) > 0 {
			out[o] = span{list[0], int32(len(list))}
		}
	}
	return out, true
}

// SpanCache keeps a pool plan's window spans along its first two axes,
// worked out on the plan's first call: a plan is kept per node, so later
// runs reuse them.
type SpanCache[S any] [2]struct {
	s        []S
	ok, done bool
}

// Get returns spans(j), from the cache for j < 2.
func (c *SpanCache[S]) Get(j int, spans func(int) ([]S, bool)) ([]S, bool) {
	if j >= len(c) {
		return spans(j)
	}
	e := &c[j]
	if !e.done {
		e.s, e.ok = spans(j)
		e.done = true
	}
	return e.s, e.ok
}

// maxPool2DSpans is maxPool2D for windows of consecutive taps, with the
// full 2×2 and 3×3 windows unrolled. The scan order is maxPool2D's (rows,
// then columns, the first tap taken unconditionally and replaced only by a
// strictly greater value), so ties and NaNs resolve exactly as there.
func maxPool2DSpans[T ordered](rows, cols []span, iw int, x, y []T, idx []int64, base int, lowest T) {
	ow := len(cols)
	for r, rs := range rows {
		yr := y[r*ow : (r+1)*ow]
		rowOff := int(rs.lo) * iw
		for q, cs := range cols {
			o := rowOff + int(cs.lo)
			var best T
			at := o
			switch {
			case rs.n == 2 && cs.n == 2:
				// The tap index k moves by pickIf, not by branches
				// (the comparisons are data dependent and mispredict);
				// w[k] is the running maximum.
				w := x[o : o+iw+2]
				k := 0
				k = pickIf(w[1] > w[k], 1, k)
				k = pickIf(w[iw] > w[k], iw, k)
				k = pickIf(w[iw+1] > w[k], iw+1, k)
				best, at = w[k], o+k
			case rs.n == 3 && cs.n == 3:
				w := x[o : o+2*iw+3]
				k := 0
				k = pickIf(w[1] > w[k], 1, k)
				k = pickIf(w[2] > w[k], 2, k)
				for _, t := range [6]int{iw, iw + 1, iw + 2, 2 * iw, 2*iw + 1, 2*iw + 2} {
					k = pickIf(w[t] > w[k], t, k)
				}
				best, at = w[k], o+k
			case rs.n > 0 && cs.n > 0:
				best = x[o]
				for i := 0; i < int(rs.n); i++ {
					line := x[o+i*iw : o+i*iw+int(cs.n)]
					for j, v := range line {
						if v > best {
							best, at = v, o+i*iw+j
						}
					}
				}
			default:
				best, at = lowest, -1
			}
			yr[q] = best
			if idx != nil {
				if at < 0 {
					idx[r*ow+q] = -1
				} else {
					idx[r*ow+q] = int64(base + at)
				}
			}
		}
	}
}

// Limits of the separable MaxPool path: window rows, and the input width
// (the length of the buffer of one row of vertical maxima).
const (
	sepRows  = 4
	sepWidth = 2048
)

// sepRowPool keeps the row buffers of maxPool2DSeparable between calls.
var sepRowPool = sync.Pool{New: func() any { return new([sepWidth]float32) }}

// separableFits reports whether maxPool2DSeparable can take windows of
// these spans over rows iw wide: at most sepRows rows per window and iw at
// most sepWidth.
func separableFits(rows []span, iw int) bool {
	if iw > sepWidth {
		return false
	}
	for _, rs := range rows {
		if rs.n > sepRows {
			return false
		}
	}
	return true
}

// PoolStride2Run returns the outputs [qa, qb) of a row of count windows
// (span(i): window i's first column and its number of taps) whose windows
// all hold k taps (the widest window's, 2 or 3) starting two columns
// apart, the run PoolHMaxS2 and PoolArgmax3x3S2 compute; k = 0 when there
// is no such run. MaxPool and its gradient both plan with it.
func PoolStride2Run(count int, span func(i int) (lo, taps int)) (qa, qb, k int) {
	for i := range count {
		_, n := span(i)
		k = max(k, n)
	}
	if k != 2 && k != 3 {
		return 0, 0, 0
	}
	for {
		if _, n := span(qa); n == k {
			break
		}
		qa++
	}
	lo0, _ := span(qa)
	for qb = qa; qb < count; qb++ {
		if lo, n := span(qb); n != k || lo != lo0+2*(qb-qa) {
			break
		}
	}
	return qa, qb, k
}

// PoolHMaxS2 sets dst[i] = max(v[2i], ..., v[2i+k-1]) (k = 2 or 3) for
// every i < len(dst), with the AVX2 loop where there is one; v holds no
// NaN and at least 2·len(dst)+k-2 values.
func PoolHMaxS2(dst, v []float32, k int) {
	done := poolHMaxS2(dst, v, k)
	if done > 0 && done < len(dst) {
		// The last block overlaps the ones written.
		last := len(dst) - 8
		poolHMaxS2(dst[last:], v[2*last:], k)
		done = len(dst)
	}
	for i := done; i < len(dst); i++ {
		w := v[2*i : 2*i+k]
		m := w[0]
		for _, x := range w[1:] {
			m = max(m, x)
		}
		dst[i] = m
	}
}

// maxPool2DSeparable is maxPool2DSpans for one float32 plane without
// Indices, computed as the maximum over each window's columns of the
// maxima over its rows: each output row takes the vertical maxima of its
// window rows (v, AVX2), then the maxima of v over each window's columns
// (stride-2 runs of 2- or 3-wide windows with AVX2 shuffles, the borders
// one by one). For data without NaN the value is the window's maximum as
// the row-major scan finds it, bit for bit: a zero maximum, whose sign
// max may pick differently when +0 and -0 tie, is taken from the window's
// first zero tap. A NaN in a row a window reads makes it return false
// having written nothing final, and the caller runs the scan, whose NaN
// rule (only a NaN first tap wins) differs. The gradient (ops/gradient
// maxPoolBackwardSeparable) finds each window's maximum the same way.
func maxPool2DSeparable(rows, cols []span, iw int, x, y []float32) bool {
	ow := len(cols)
	rp := sepRowPool.Get().(*[sepWidth]float32)
	defer sepRowPool.Put(rp)
	v := rp[:iw]
	qa, qb, k := PoolStride2Run(len(cols), func(i int) (int, int) { return int(cols[i].lo), int(cols[i].n) })
	for r, rs := range rows {
		yr := y[r*ow : (r+1)*ow]
		if rs.n == 0 {
			for q := range yr {
				yr[q] = float32(math.Inf(-1))
			}
			continue
		}
		lo, hi := int(rs.lo), int(rs.lo+rs.n)
		if !windowRowMax(v, x, iw, lo, hi) {
			return false
		}
		if k > 0 {
			PoolHMaxS2(yr[qa:qb], v[cols[qa].lo:], k)
		}
		for q := 0; q < ow; q++ {
			if k > 0 && q == qa {
				q = qb - 1 // written by PoolHMaxS2
				continue
			}
			cs := cols[q]
			if cs.n == 0 {
				yr[q] = float32(math.Inf(-1))
				continue
			}
			w := v[cs.lo : cs.lo+cs.n]
			m := w[0]
			for _, t := range w[1:] {
				m = max(m, t)
			}
			yr[q] = m
		}
		// A zero maximum may have the wrong sign (max prefers +0, the scan
		// the first of tied zeros): take it from the scan.
		for q, t := range yr {
			if t == 0 {
				yr[q] = firstZero(x[lo*iw:hi*iw], iw, cols[q])
			}
		}
	}
	return true
}

// windowRowMax sets v to the elementwise maximum of rows lo..hi-1 of x
// (iw wide) and reports whether none of them holds a NaN.
func windowRowMax(v, x []float32, iw, lo, hi int) bool {
	a := x[lo*iw : (lo+1)*iw]
	if hi-lo == 1 {
		return !PoolVMax(v, a, a)
	}
	nan := PoolVMax(v, a, x[(lo+1)*iw:(lo+2)*iw])
	for i := lo + 2; i < hi; i++ {
		nan = PoolVMax(v, v, x[i*iw:(i+1)*iw]) || nan
	}
	return !nan
}

// firstZero returns the first tap, in row-major order, of the window over
// the rows of x (iw wide) and the columns cs whose maximum is zero: the
// zero the scan keeps.
func firstZero(x []float32, iw int, cs span) float32 {
	for i := 0; i+iw <= len(x); i += iw {
		for _, v := range x[i+int(cs.lo) : i+int(cs.lo+cs.n)] {
			if v == 0 {
				return v
			}
		}
	}
	return 0
}

// avgPool averages each window, dividing by the window's taps inside the
// input, or inside the padded input when includePad is set.
func avgPool[T poolFloat](plan *poolPlan, x, y []T, planes int, includePad bool) {
	inSize, outSize := plan.inSize, plan.outSize
	r := len(plan.out)
	workers := nnWorkers(planes, plan.poolCost())
	parallelFor(planes, workers, func(_, c int) {
		xp := x[c*inSize : (c+1)*inSize]
		yp := y[c*outSize : (c+1)*outSize]
		plan.forRows(func(outOff int, bases []int, padded int) {
			for ol := 0; ol < plan.out[r-1]; ol++ {
				inner := plan.axisList(r-1, ol)
				var sum T
				for _, b := range bases {
					row := xp[b:]
					for _, i := range inner {
						sum += row[i]
					}
				}
				div := len(bases) * len(inner)
				if includePad {
					div = padded * int(plan.padded[r-1][ol])
				}
				if div > 0 {
					yp[outOff+ol] = sum / T(div)
				} else {
					yp[outOff+ol] = 0
				}
			}
		})
	})
}

// lpPool computes (sum |x|^p)^(1/p) over each window (padding adds zero).
func lpPool[T poolFloat](plan *poolPlan, x, y []T, planes int, p float64) {
	inSize, outSize := plan.inSize, plan.outSize
	r := len(plan.out)
	workers := nnWorkers(planes, plan.poolCost())
	parallelFor(planes, workers, func(_, c int) {
		xp := x[c*inSize : (c+1)*inSize]
		yp := y[c*outSize : (c+1)*outSize]
		plan.forRows(func(outOff int, bases []int, _ int) {
			for ol := 0; ol < plan.out[r-1]; ol++ {
				inner := plan.axisList(r-1, ol)
				var sum float64
				for _, b := range bases {
					row := xp[b:]
					for _, i := range inner {
						v := math.Abs(float64(row[i]))
						switch p {
						case 1:
							sum += v
						case 2:
							sum += v * v
						default:
							sum += math.Pow(v, p)
						}
					}
				}
				switch p {
				case 1:
					yp[outOff+ol] = T(sum)
				case 2:
					yp[outOff+ol] = T(math.Sqrt(sum))
				default:
					yp[outOff+ol] = T(math.Pow(sum, 1/p))
				}
			}
		})
	})
}

// globalPoolKernel returns GlobalMaxPool, GlobalAveragePool or GlobalLpPool:
// the pool over all spatial dims, keeping them as ones.
func globalPoolKernel(kind poolKind) kern.Kernel {
	return func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0]
		if err := spatialInput(n, x, "input X"); err != nil {
			return nil, err
		}
		// The output shape lives in the node's state (kern.New copies it
		// for a planned node).
		st := kern.State[globalPoolState](n)
		st.shape = append(st.shape[:0], x.Shape...)
		shape := st.shape
		for i := 2; i < len(shape); i++ {
			shape[i] = 1
		}
		y, err := kern.New(n, x.DType, shape)
		if err != nil {
			return nil, err
		}
		planes := x.Shape[0] * x.Shape[1]
		size := prod(x.Shape[2:])
		p := 2.0
		if kind == poolLp {
			if p, err = lpPoolP(n); err != nil {
				return nil, err
			}
		}
		switch xd := x.Data.(type) {
		case []float32:
			globalPool(kind, xd, y.Data.([]float32), planes, size, p)
		case []float64:
			globalPool(kind, xd, y.Data.([]float64), planes, size, p)
		default:
			return nil, n.Errorf("dtype %v is not supported", x.DType)
		}
		return kern.Results(n, y), nil
	}
}

// globalPoolState is what a global pooling node keeps between runs.
type globalPoolState struct{ shape []int }

// globalPool reduces each plane of size elements to one value. The mean
// runs avgPlaneGroup planes per item (avgPlanes).
func globalPool[T poolFloat](kind poolKind, x, y []T, planes, size int, p float64) {
	workers := nnWorkers(planes, size)
	if kind == poolAvg {
		groups := (planes + avgItemPlanes - 1) / avgItemPlanes
		ParallelItemsOf(groups, min(workers, groups), true, avgPlanesTask[T]{x: x, y: y, planes: planes, size: size})
		return
	}
	ParallelItemsOf(planes, workers, false, globalPoolTask[T]{kind: kind, x: x, y: y, size: size, p: p})
}

// avgPlaneGroup is how many planes avgPlanes sums side by side: one plane's
// float64 sum is a chain of dependent adds (4 cycles each), so eight
// independent chains keep the adder busy where one left it idle three
// cycles in four (ResNet-50's 16,384 planes of 7×7 at batch 8: 1.5 ms,
// 2 GB/s, against a triad of 30).
const avgPlaneGroup = 8

// avgItemPlanes is the planes of one item of globalPool's mean: two
// groups, the sixteen planes avgPlanes16 takes in one call.
const avgItemPlanes = 2 * avgPlaneGroup

// avgPlanesTask is globalPool's mean: item g is planes [16g, 16g+16).
type avgPlanesTask[T poolFloat] struct {
	x, y         []T
	planes, size int
}

func (t *avgPlanesTask[T]) Item(_, g int) {
	c0, c1 := g*avgItemPlanes, min((g+1)*avgItemPlanes, t.planes)
	if c1-c0 == avgItemPlanes && avgPlanes16(t.x, t.y, c0, t.size) {
		return
	}
	for ; c0 < c1; c0 += avgPlaneGroup {
		avgPlanes(t.x, t.y, c0, min(c0+avgPlaneGroup, c1), t.size)
	}
}

// avgPlanes16 is avgPlanes over planes [c0, c0+16) of float32 x in one
// vector loop, where there is one (avgPlanes16AVX2: the same sums, bit
// for bit, the element of eight planes gathered at a time), and reports
// whether it ran. ResNet-50's 16,384 planes of 7×7 in cache
// (BenchmarkMemboundSmallResNet50Tail/GlobalAveragePool, no eviction):
// 0.36 → 0.27 ms on one core, 0.21 → 0.16 on two; this host's gathers
// take about 8 cycles each, so the loop is bound by them, not the adds.
func avgPlanes16[T poolFloat](x, y []T, c0, size int) bool {
	if !poolAVX2 || unsafe.Sizeof(x[0]) != 4 || size < 1 || size > avgGatherMax {
		return false
	}
	_ = x[(c0+avgItemPlanes)*size-1]
	_ = y[c0+avgItemPlanes-1]
	avgPlanes16AVX2((*float32)(unsafe.Pointer(&y[c0])), (*float32)(unsafe.Pointer(&x[c0*size])), size, float64(size))
	return true
}

// avgGatherMax bounds the plane size avgPlanes16 takes: its gather offsets
// (up to 15·size elements, in bytes) are int32s.
const avgGatherMax = 1 << 24

// avgPlanes writes the means of planes [c0, c1) of size elements each into
// y: each plane summed in float64 in its own order, as one plane alone
// would be (the same bits), eight planes at a time.
func avgPlanes[T poolFloat](x, y []T, c0, c1, size int) {
	if size == 0 {
		return
	}
	if c1-c0 == avgPlaneGroup {
		p0 := x[c0*size : (c0+1)*size]
		p1 := x[(c0+1)*size : (c0+2)*size][:len(p0)]
		p2 := x[(c0+2)*size : (c0+3)*size][:len(p0)]
		p3 := x[(c0+3)*size : (c0+4)*size][:len(p0)]
		p4 := x[(c0+4)*size : (c0+5)*size][:len(p0)]
		p5 := x[(c0+5)*size : (c0+6)*size][:len(p0)]
		p6 := x[(c0+6)*size : (c0+7)*size][:len(p0)]
		p7 := x[(c0+7)*size : (c0+8)*size][:len(p0)]
		var s0, s1, s2, s3, s4, s5, s6, s7 float64
		for i := range p0 {
			s0 += float64(p0[i])
			s1 += float64(p1[i])
			s2 += float64(p2[i])
			s3 += float64(p3[i])
			s4 += float64(p4[i])
			s5 += float64(p5[i])
			s6 += float64(p6[i])
			s7 += float64(p7[i])
		}
		n := float64(size)
		out := y[c0 : c0+8]
		out[0], out[1], out[2], out[3] = T(s0/n), T(s1/n), T(s2/n), T(s3/n)
		out[4], out[5], out[6], out[7] = T(s4/n), T(s5/n), T(s6/n), T(s7/n)
		return
	}
	for c := c0; c < c1; c++ {
		var sum float64
		for _, v := range x[c*size : (c+1)*size] {
			sum += float64(v)
		}
		y[c] = T(sum / float64(size))
	}
}

// globalPoolTask is globalPool's work for the max and Lp pools: item c is
// plane c.
type globalPoolTask[T poolFloat] struct {
	kind poolKind
	x, y []T
	size int
	p    float64
}

func (t *globalPoolTask[T]) Item(_, c int) {
	kind, x, y, size, p := t.kind, t.x, t.y, t.size, t.p
	xp := x[c*size : (c+1)*size]
	switch kind {
	case poolMax:
		best := T(math.Inf(-1))
		for i, v := range xp {
			if v > best || i == 0 {
				best = v
			}
		}
		y[c] = best
	case poolLp:
		var sum float64
		for _, v := range xp {
			sum += math.Pow(math.Abs(float64(v)), p)
		}
		y[c] = T(math.Pow(sum, 1/p))
	}
}

// pickIf returns a when cond holds, else b, without a branch: cond's
// byte (0 or 1, read through a pointer so that the compiler sets it from
// the flags instead of jumping on them) becomes an all-ones or zero mask.
func pickIf(cond bool, a, b int) int {
	m := -int(*(*uint8)(unsafe.Pointer(&cond)))
	return b ^ ((a ^ b) & m)
}
