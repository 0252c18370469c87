package gradient

import (
	"math"
	"slices"
	"sort"
	"sync"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Backward kernels of the pools and of Resize/Upsample (the rules are in
// graph/grad_conv.go):
//
//	MaxPoolGrad(dy, X[, Indices])  dy goes to the first maximum of each window
//	                               (recomputed from X, or read from Indices)
//	GlobalMaxPoolGrad(dy, X)       dy goes to the first maximum of each plane
//	AveragePoolGrad(dy, shape(X))  dy spreads evenly over each window
//	ResizeGrad(dy, shape(X), roi, scales, sizes)
//	                               dy scatters back with the interpolation weights
//
// Each takes the forward node's attributes and resolves the same windows
// (or interpolation taps) the forward kernel does.

func init() {
	register("MaxPoolGrad", maxPoolGrad)
	register("GlobalMaxPoolGrad", globalMaxPoolGrad)
	register("AveragePoolGrad", averagePoolGrad)
	register("ResizeGrad", resizeGrad)
}

// poolGradPlan lists, per spatial axis and output coordinate, the input
// indices of the window taps that fall inside the input (in tap order) and
// how many taps fall inside the padded extent.
type poolGradPlan struct {
	win       *gradWindow
	inStride  []int
	start     [][]int // start[j][o]..start[j][o+1] index idx[j]
	idx       [][]int
	padded    [][]int
	spanCache nn.SpanCache[tapSpan]
}

func newPoolGradPlan(w *gradWindow) *poolGradPlan {
	r := len(w.in)
	p := &poolGradPlan{win: w, inStride: make([]int, r), start: make([][]int, r), idx: make([][]int, r), padded: make([][]int, r)}
	acc := 1
	for j := r - 1; j >= 0; j-- {
		p.inStride[j] = acc
		acc *= w.in[j]
	}
	for j := 0; j < r; j++ {
		p.start[j] = make([]int, w.out[j]+1)
		p.padded[j] = make([]int, w.out[j])
		for o := 0; o < w.out[j]; o++ {
			p.start[j][o] = len(p.idx[j])
			s := o*w.strides[j] - w.padBegin[j]
			for t := 0; t < w.kernel[j]; t++ {
				i := s + t*w.dilations[j]
				if i >= 0 && i < w.in[j] {
					p.idx[j] = append(p.idx[j], i)
				}
				if i >= -w.padBegin[j] && i < w.in[j]+w.padEnd[j] {
					p.padded[j][o]++
				}
			}
		}
		p.start[j][w.out[j]] = len(p.idx[j])
	}
	return p
}

// forWindows calls fn for every output position of one plane, in row-major
// order, with the plane offsets of its window's taps inside the input in
// row-major tap order (the order the forward kernels scan) and the count of
// its taps inside the padded extent. taps is reused between calls.
func (p *poolGradPlan) forWindows(fn func(out int, taps []int, padded int)) {
	w := p.win
	r := len(w.in)
	if w.outSize == 0 {
		return
	}
	o := make([]int, r)
	var taps, tmp []int
	for pos := 0; pos < w.outSize; pos++ {
		taps = append(taps[:0], 0)
		padded := 1
		for j := 0; j < r; j++ {
			list := p.idx[j][p.start[j][o[j]]:p.start[j][o[j]+1]]
			padded *= p.padded[j][o[j]]
			tmp = tmp[:0]
			for _, b := range taps {
				for _, i := range list {
					tmp = append(tmp, b+i*p.inStride[j])
				}
			}
			taps, tmp = tmp, taps
		}
		fn(pos, taps, padded)
		for j := r - 1; j >= 0; j-- {
			o[j]++
			if o[j] < w.out[j] {
				break
			}
			o[j] = 0
		}
	}
}

// poolGradWindow reads a pool's kernel_shape and resolves its window over
// the spatial dims of shape.
func poolGradWindow(n *graph.Node, shape []int) (*gradWindow, error) {
	if len(shape) < 3 {
		return nil, n.Errorf("input X must have rank >= 3 (N, C, spatial...), has shape %v", shape)
	}
	if !n.HasAttr("kernel_shape") {
		return nil, n.Errorf("attribute kernel_shape is required")
	}
	kernel, err := nn.IntsAttr(n, "kernel_shape", len(shape)-2, 1)
	if err != nil {
		return nil, err
	}
	return resolveGradWindow(n, shape[2:], kernel, true)
}

// checkPoolGrad checks dy's dtype and that its shape is (N, C, w.out...).
func checkPoolGrad(n *graph.Node, dy *graph.Tensor, shape []int, w *gradWindow) error {
	if dy.DType != graph.Float32 && dy.DType != graph.Float64 {
		return n.Errorf("dtype %v is not supported (float32, float64)", dy.DType)
	}
	ok := len(dy.Shape) == 2+len(w.out) && dy.Shape[0] == shape[0] && dy.Shape[1] == shape[1]
	for i := 0; ok && i < len(w.out); i++ {
		ok = dy.Shape[2+i] == w.out[i]
	}
	if !ok {
		want := append([]int{shape[0], shape[1]}, w.out...)
		return n.Errorf("gradient has shape %v, the forward output %v", dy.Shape, want)
	}
	return nil
}

// maxPoolGrad implements MaxPoolGrad(dy, X[, Indices]).
func maxPoolGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, x, indices := in[0], in[1], kern.Opt(in, 2)
	// The window and its plan are kept per node for the input shape
	// they were made for.
	st := kern.State[poolGradState](n)
	if st.plan == nil || !slices.Equal(st.in, x.Shape) {
		w, err := poolGradWindow(n, x.Shape)
		if err != nil {
			return nil, err
		}
		st.in = append(st.in[:0], x.Shape...)
		st.plan = newPoolGradPlan(w)
	}
	w := st.plan.win
	if err := checkPoolGrad(n, dy, x.Shape, w); err != nil {
		return nil, err
	}
	if x.DType != dy.DType {
		return nil, n.Errorf("gradient has dtype %v, the forward input %v", dy.DType, x.DType)
	}
	// Without Indices each plane of dX is cleared by the worker that
	// scatters into it (while it is in cache), so the storage need not be
	// zeroed first.
	alloc := kern.NewUninit
	if indices != nil {
		alloc = kern.New
	}
	dx, err := alloc(n, dy.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	planes := x.Shape[0] * x.Shape[1]
	if indices != nil {
		if !graph.SameShape(indices.Shape, dy.Shape) || indices.DType != graph.Int64 {
			return nil, n.Errorf("indices have %v of shape %v, want int64 of shape %v", indices.DType, indices.Shape, dy.Shape)
		}
		colMajor := n.AttrInt("storage_order", 0) != 0
		switch d := dy.Data.(type) {
		case []float32:
			err = scatterPoolIndices(n, d, dx.Data.([]float32), indices.Int64s(), w, planes, colMajor)
		case []float64:
			err = scatterPoolIndices(n, d, dx.Data.([]float64), indices.Int64s(), w, planes, colMajor)
		}
		if err != nil {
			return nil, err
		}
		return kern.Results(n, dx), nil
	}
	plan := st.plan
	switch d := dy.Data.(type) {
	case []float32:
		maxPoolBackward(plan, d, x.Data.([]float32), dx.Data.([]float32), planes)
	case []float64:
		maxPoolBackward(plan, d, x.Data.([]float64), dx.Data.([]float64), planes)
	}
	return kern.Results(n, dx), nil
}

// poolGradState is what a MaxPool gradient node keeps between runs: the
// forward input shape in and the window plan made for it.
type poolGradState struct {
	in   []int
	plan *poolGradPlan
}

// maxPoolBackward adds each window's gradient to the window's first maximum
// (the first tap in row-major order holding the largest value, as the
// forward kernel and PyTorch pick it).
func maxPoolBackward[T float32 | float64](p *poolGradPlan, dy, x, dx []T, planes int) {
	inSize, outSize := p.win.inSize, p.win.outSize
	workers := gradWorkers(planes, outSize*max(p.win.kernelSize, 1))
	if len(p.win.in) == 2 {
		rows, rowsOK := p.spanCache.Get(0, p.spans)
		cols, colsOK := p.spanCache.Get(1, p.spans)
		x32, _ := any(x).([]float32)
		separable := x32 != nil && rowsOK && colsOK && separableFits(rows, cols, p.win.in[1])
		nn.ParallelItemsOf(planes, workers, false, maxPoolBackward2DTask[T]{p: p, dy: dy, x: x, dx: dx, x32: x32,
			rows: rows, cols: cols, spans: rowsOK && colsOK, separable: separable,
			twoByTwo: rowsOK && colsOK && pairsFromZero(rows) && pairsFromZero(cols)})
		return
	}
	nn.ParallelItems(planes, workers, false, func(_, c int) {
		xp := x[c*inSize : (c+1)*inSize]
		dxp := dx[c*inSize : (c+1)*inSize]
		dyp := dy[c*outSize : (c+1)*outSize]
		clear(dxp)
		p.forWindows(func(out int, taps []int, _ int) {
			best, at := T(math.Inf(-1)), -1
			for _, t := range taps {
				if v := xp[t]; v > best || at < 0 {
					best, at = v, t
				}
			}
			if at >= 0 {
				dxp[at] += dyp[out]
			}
		})
	})
}

// maxPoolBackward2DTask is maxPoolBackward's work for a 2-D pool: item c
// is plane c.
type maxPoolBackward2DTask[T float32 | float64] struct {
	p                *poolGradPlan
	dy, x, dx        []T
	x32              []float32
	rows, cols       []tapSpan
	spans, separable bool
	twoByTwo         bool // 2x2 windows at stride 2 from the origin, no padding
}

// pairsFromZero reports whether window o's taps along an axis are 2o and
// 2o+1 for every o (a 2-wide window at stride 2, unpadded).
func pairsFromZero(spans []tapSpan) bool {
	for o, s := range spans {
		if s.lo != 2*o || s.n != 2 {
			return false
		}
	}
	return true
}

// maxPoolBackward2x2 is maxPoolBackward2D for 2x2 windows at stride 2
// (non-overlapping, unpadded): each window's gradient goes to its first
// tap, in row-major order, that no later tap exceeds, exactly the scan's
// choice (NaN included: a NaN first tap keeps it). dx must be zero; input
// rows and columns past the last window keep zeros.
func maxPoolBackward2x2[T float32 | float64](dy, x, dx []T, iw, oh, ow int) {
	for r := 0; r < oh; r++ {
		x0, x1 := x[2*r*iw:(2*r+1)*iw], x[(2*r+1)*iw:(2*r+2)*iw]
		d0, d1 := dx[2*r*iw:(2*r+1)*iw], dx[(2*r+1)*iw:(2*r+2)*iw]
		g := dy[r*ow : (r+1)*ow]
		for q, gq := range g {
			j := 2 * q
			best, row, col := x0[j], 0, j
			if v := x0[j+1]; v > best {
				best, col = v, j+1
			}
			if v := x1[j]; v > best {
				best, row, col = v, 1, j
			}
			if v := x1[j+1]; v > best {
				row, col = 1, j+1
			}
			if row == 0 {
				d0[col] += gq
			} else {
				d1[col] += gq
			}
		}
	}
}

func (t *maxPoolBackward2DTask[T]) Item(_, c int) {
	p, dy, x, dx := t.p, t.dy, t.x, t.dx
	inSize, outSize := p.win.inSize, p.win.outSize
	dyp, dxp := dy[c*outSize:(c+1)*outSize], dx[c*inSize:(c+1)*inSize]
	clear(dxp)
	if t.twoByTwo {
		maxPoolBackward2x2(dyp, x[c*inSize:(c+1)*inSize], dxp, p.win.in[1], len(t.rows), len(t.cols))
		return
	}
	if t.separable && maxPoolBackwardSeparable(t.rows, t.cols, p.win.in[1], any(dyp).([]float32), t.x32[c*inSize:(c+1)*inSize], any(dxp).([]float32)) {
		return
	}
	if t.spans {
		clear(dxp) // the separable path may have stopped part way
		maxPoolBackward2DSpans(t.rows, t.cols, p.win.in[1], dyp, x[c*inSize:(c+1)*inSize], dxp)
		return
	}
	maxPoolBackward2D(p, dyp, x[c*inSize:(c+1)*inSize], dxp)
}

// maxPoolBackward2D is maxPoolBackward for one plane of a 2-D pool: the
// same row-major scan of each window's taps (rows, then columns), without
// building tap lists.
func maxPoolBackward2D[T float32 | float64](p *poolGradPlan, dy, x, dx []T) {
	w := p.win
	iw, oh, ow := w.in[1], w.out[0], w.out[1]
	for r := 0; r < oh; r++ {
		rowTaps := p.idx[0][p.start[0][r]:p.start[0][r+1]]
		for q := 0; q < ow; q++ {
			colTaps := p.idx[1][p.start[1][q]:p.start[1][q+1]]
			best, at := T(0), -1
			for _, i := range rowTaps {
				line := x[i*iw : (i+1)*iw]
				for _, j := range colTaps {
					if v := line[j]; v > best || at < 0 {
						best, at = v, i*iw+j
					}
				}
			}
			if at >= 0 {
				dx[at] += dy[r*ow+q]
			}
		}
	}
}

// tapSpan is a window's taps along one axis when they are consecutive
// input indices lo, ..., lo+n-1 (n = 0 for a window wholly in padding).
type tapSpan struct{ lo, n int }

// spans returns the taps of axis j as one span per output coordinate, and
// false when some window's taps are not consecutive (dilation > 1).
func (p *poolGradPlan) spans(j int) ([]tapSpan, bool) {
	out := make([]tapSpan, p.win.out[j])
	for o := range out {
		list := p.idx[j][p.start[j][o]:p.start[j][o+1]]
		for k, i := range list {
			if i != list[0]+k {
				return nil, false
			}
		}
		if len(list) > 0 {
			out[o] = tapSpan{list[0], len(list)}
		}
	}
	return out, true
}

// maxPoolBackward2DSpans is maxPoolBackward2D for windows of consecutive
// taps, with full 2×2 and 3×3 windows unrolled; the scan order (rows, then
// columns, the first tap taken and replaced only by a strictly greater
// value) is the same, so ties and NaNs pick the same tap. The window scan
// repeats nn.maxPool2DSpans's on purpose: a shared (non-inlined) argmax
// function measured 2-3% slower on the Fashion-MNIST CNN step; a change to
// one scan must be made in both.
func maxPoolBackward2DSpans[T float32 | float64](rows, cols []tapSpan, iw int, dy, x, dx []T) {
	ow := len(cols)
	for r, rs := range rows {
		g := dy[r*ow : (r+1)*ow]
		rowOff := rs.lo * iw
		for q, cs := range cols {
			o := rowOff + cs.lo
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
				at = o + k
			case rs.n == 3 && cs.n == 3:
				w := x[o : o+2*iw+3]
				k := 0
				k = pickIf(w[1] > w[k], 1, k)
				k = pickIf(w[2] > w[k], 2, k)
				for _, t := range [6]int{iw, iw + 1, iw + 2, 2 * iw, 2*iw + 1, 2*iw + 2} {
					k = pickIf(w[t] > w[k], t, k)
				}
				at = o + k
			case rs.n > 0 && cs.n > 0:
				best := x[o]
				for i := 0; i < rs.n; i++ {
					line := x[o+i*iw : o+i*iw+cs.n]
					for j, v := range line {
						if v > best {
							best, at = v, o+i*iw+j
						}
					}
				}
			default:
				continue
			}
			dx[at] += g[q]
		}
	}
}

// Limits of the separable MaxPoolGrad path: window rows, and the input
// and output widths (the lengths of the row buffers).
const (
	sepRows  = 4
	sepWidth = 2048
)

// sepBuf holds one row of vertical maxima (v), one of window maxima (m)
// and one of argmax taps (i); sepBufPool keeps them between calls.
type sepBuf struct {
	v, m [sepWidth]float32
	i    [sepWidth]int32
}

var sepBufPool = sync.Pool{New: func() any { return new(sepBuf) }}

// separableFits reports whether maxPoolBackwardSeparable can take windows
// of these spans over rows iw wide: at most sepRows rows per window, and
// iw and the output width at most sepWidth.
func separableFits(rows, cols []tapSpan, iw int) bool {
	if len(cols) > sepWidth || iw > sepWidth {
		return false
	}
	for _, rs := range rows {
		if rs.n > sepRows {
			return false
		}
	}
	return true
}

// maxPoolBackwardSeparable is maxPoolBackward2DSpans for one float32
// plane. Each window's argmax is its first tap, in row-major order, equal
// to the window's maximum: without NaN this is the row-major scan's tap
// (the first one no later tap strictly exceeds; +0 and -0 compare equal
// in both), and the equality tests do not depend on each other as the
// scan's running maximum does. Runs of 3-wide windows two columns apart
// over 2 or 3 rows get their argmax taps from nn.PoolArgmax3x3S2 (AVX2);
// other output rows find their windows' maxima as nn's maxPool2DSeparable
// does (vertical maxima of the window rows, then maxima over the window
// columns), and the other windows from their taps. A NaN in a tap a
// window reads makes it return false part way, with part of dx written;
// the caller clears dx and runs the scan, whose NaN rule differs.
func maxPoolBackwardSeparable(rows, cols []tapSpan, iw int, dy, x, dx []float32) bool {
	ow := len(cols)
	buf := sepBufPool.Get().(*sepBuf)
	defer sepBufPool.Put(buf)
	v, m, ib := buf.v[:iw], buf.m[:ow], buf.i[:ow]
	qa, qb, k := nn.PoolStride2Run(len(cols), func(i int) (int, int) { return cols[i].lo, cols[i].n })
	tapOff := [9]int{0, 1, 2, iw, iw + 1, iw + 2, 2 * iw, 2*iw + 1, 2*iw + 2}
	for r, rs := range rows {
		if rs.n == 0 {
			continue
		}
		lo, hi := rs.lo, rs.lo+rs.n
		xr := x[lo*iw:]
		g := dy[r*ow : (r+1)*ow]
		dr := dx[lo*iw:]
		if k == 3 && (rs.n == 2 || rs.n == 3) && qb-qa >= 8 && nn.PoolScatterLoop() {
			// The run's windows find their argmax and add their
			// gradient in one vector call; the borders before and
			// after it from their taps, in window order.
			s2 := iw
			if rs.n == 2 {
				s2 = 0
			}
			for q := 0; q < qa; q++ {
				if !addBorderWindow(xr, dr, iw, rs.n, cols[q], g[q]) {
					return false
				}
			}
			if _, nan := nn.PoolArgmaxScatter3x3S2(dr[cols[qa].lo:], g[qa:qb], xr[cols[qa].lo:], iw, s2); nan {
				return false
			}
			for q := qb; q < ow; q++ {
				if !addBorderWindow(xr, dr, iw, rs.n, cols[q], g[q]) {
					return false
				}
			}
			continue
		}
		useIdx := false
		if k == 3 && (rs.n == 2 || rs.n == 3) {
			// With s2 = 0 a window of two rows reads its second row twice.
			s2 := iw
			if rs.n == 2 {
				s2 = 0
			}
			ok, nan := nn.PoolArgmax3x3S2(ib[qa:qb], xr[cols[qa].lo:], iw, s2)
			if nan {
				return false
			}
			useIdx = ok
		}
		if useIdx {
			// The windows outside the run (borders) from their taps.
			for q, cs := range cols {
				if q >= qa && q < qb {
					dr[cs.lo+tapOff[ib[q]]] += g[q]
					continue
				}
				if cs.n == 0 {
					continue
				}
				t := xr[cs.lo]
				for i := 0; i < rs.n; i++ {
					for _, u := range xr[i*iw+cs.lo : i*iw+cs.lo+cs.n] {
						if u != u {
							return false
						}
						t = max(t, u)
					}
				}
				dr[firstEqual(xr, iw, rs.n, cs, t)] += g[q]
			}
			continue
		}
		if !windowRowMax(v, x, iw, lo, hi) {
			return false
		}
		if k > 0 {
			nn.PoolHMaxS2(m[qa:qb], v[cols[qa].lo:], k)
		}
		for q := 0; q < ow; q++ {
			if k > 0 && q == qa {
				q = qb - 1 // written by PoolHMaxS2
				continue
			}
			cs := cols[q]
			if cs.n == 0 {
				continue
			}
			w := v[cs.lo : cs.lo+cs.n]
			t := w[0]
			for _, u := range w[1:] {
				t = max(t, u)
			}
			m[q] = t
		}
		for q, cs := range cols {
			if cs.n == 0 {
				continue
			}
			t := m[q]
			if rs.n == 3 && cs.n == 3 {
				// The taps from last to first: the first equal one stays.
				w := xr[cs.lo : cs.lo+2*iw+3]
				at := 2*iw + 2
				at = pickIf(w[2*iw+1] == t, 2*iw+1, at)
				at = pickIf(w[2*iw] == t, 2*iw, at)
				at = pickIf(w[iw+2] == t, iw+2, at)
				at = pickIf(w[iw+1] == t, iw+1, at)
				at = pickIf(w[iw] == t, iw, at)
				at = pickIf(w[2] == t, 2, at)
				at = pickIf(w[1] == t, 1, at)
				at = pickIf(w[0] == t, 0, at)
				dr[cs.lo+at] += g[q]
				continue
			}
			dr[firstEqual(xr, iw, rs.n, cs, t)] += g[q]
		}
	}
	return true
}

// addBorderWindow adds g to dx (laid out as x, rows iw wide) at the
// first tap holding the maximum of the window over rows 0..n-1 of x and
// the columns cs, and reports false, adding nothing, for a NaN tap.
func addBorderWindow(x, dx []float32, iw, n int, cs tapSpan, g float32) bool {
	if cs.n == 0 {
		return true
	}
	if cs.n == 2 && (n == 2 || n == 3) {
		// A 3×3 window cut by the padding to two columns (ResNet's
		// stem): the row-major scan, which picks what firstEqual picks
		// when no tap is NaN, with the tap index moved by pickIf.
		w := x[cs.lo : cs.lo+(n-1)*iw+2]
		nan := w[0] != w[0] || w[1] != w[1] || w[iw] != w[iw] || w[iw+1] != w[iw+1]
		k := 0
		k = pickIf(w[1] > w[k], 1, k)
		k = pickIf(w[iw] > w[k], iw, k)
		k = pickIf(w[iw+1] > w[k], iw+1, k)
		if n == 3 {
			nan = nan || w[2*iw] != w[2*iw] || w[2*iw+1] != w[2*iw+1]
			k = pickIf(w[2*iw] > w[k], 2*iw, k)
			k = pickIf(w[2*iw+1] > w[k], 2*iw+1, k)
		}
		if nan {
			return false
		}
		dx[cs.lo+k] += g
		return true
	}
	t := x[cs.lo]
	for i := 0; i < n; i++ {
		for _, u := range x[i*iw+cs.lo : i*iw+cs.lo+cs.n] {
			if u != u {
				return false
			}
			t = max(t, u)
		}
	}
	dx[firstEqual(x, iw, n, cs, t)] += g
	return true
}

// firstEqual returns the offset in x (rows iw wide) of the first tap, in
// row-major order, of the window over rows 0..n-1 and the columns cs that
// equals t (t is the window's maximum, so one does).
func firstEqual(x []float32, iw, n int, cs tapSpan, t float32) int {
	at := 0
	for i := n - 1; i >= 0; i-- {
		for j := cs.lo + cs.n - 1; j >= cs.lo; j-- {
			at = pickIf(x[i*iw+j] == t, i*iw+j, at)
		}
	}
	return at
}

// windowRowMax sets v to the elementwise maximum of rows lo..hi-1 of x
// (iw wide) and reports whether none of them holds a NaN.
func windowRowMax(v, x []float32, iw, lo, hi int) bool {
	a := x[lo*iw : (lo+1)*iw]
	if hi-lo == 1 {
		return !nn.PoolVMax(v, a, a)
	}
	nan := nn.PoolVMax(v, a, x[(lo+1)*iw:(lo+2)*iw])
	for i := lo + 2; i < hi; i++ {
		nan = nn.PoolVMax(v, v, x[i*iw:(i+1)*iw]) || nan
	}
	return !nan
}

// scatterPoolIndices adds dy to dx at MaxPool's Indices output: flat
// indices into X, the within-plane part column-major when colMajor
// (storage_order=1); -1 marks a window with no input tap.
func scatterPoolIndices[T float32 | float64](n *graph.Node, dy, dx []T, idx []int64, w *gradWindow, planes int, colMajor bool) error {
	inSize, outSize := w.inSize, w.outSize
	total := int64(planes * inSize)
	r := len(w.in)
	strides := make([]int, r)
	acc := 1
	for j := r - 1; j >= 0; j-- {
		strides[j] = acc
		acc *= w.in[j]
	}
	for k, v := range idx {
		if v < 0 {
			continue
		}
		if v >= total {
			return n.Errorf("index %d is outside the input's %d elements", v, total)
		}
		at := int(v)
		if colMajor {
			// Decode the column-major offset (axis 0 fastest) and re-encode
			// it row-major (last axis fastest).
			plane, off := at/inSize, at%inSize
			rowMajor := 0
			for j := 0; j < r; j++ {
				rowMajor += (off % w.in[j]) * strides[j]
				off /= w.in[j]
			}
			at = plane*inSize + rowMajor
		}
		if at/inSize != k/outSize {
			return n.Errorf("index %d of output %d points outside its plane", v, k)
		}
		dx[at] += dy[k]
	}
	return nil
}

// globalMaxPoolGrad implements GlobalMaxPoolGrad(dy, X): each plane's
// gradient goes to its first maximum.
func globalMaxPoolGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, x := in[0], in[1]
	if len(x.Shape) < 3 {
		return nil, n.Errorf("input X must have rank >= 3 (N, C, spatial...), has shape %v", x.Shape)
	}
	if dy.DType != graph.Float32 && dy.DType != graph.Float64 {
		return nil, n.Errorf("dtype %v is not supported (float32, float64)", dy.DType)
	}
	if x.DType != dy.DType {
		return nil, n.Errorf("gradient has dtype %v, the forward input %v", dy.DType, x.DType)
	}
	planes := x.Shape[0] * x.Shape[1]
	if dy.Size() != planes || len(dy.Shape) != len(x.Shape) {
		return nil, n.Errorf("gradient has shape %v, want (N, C, 1, ...) for input %v", dy.Shape, x.Shape)
	}
	dx, err := kern.New(n, dy.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	size := product(x.Shape[2:])
	switch d := dy.Data.(type) {
	case []float32:
		globalMaxBackward(d, x.Data.([]float32), dx.Data.([]float32), planes, size)
	case []float64:
		globalMaxBackward(d, x.Data.([]float64), dx.Data.([]float64), planes, size)
	}
	return []*graph.Tensor{dx}, nil
}

func globalMaxBackward[T float32 | float64](dy, x, dx []T, planes, size int) {
	if size == 0 {
		return
	}
	for c := 0; c < planes; c++ {
		xp := x[c*size : (c+1)*size]
		best, at := xp[0], 0
		for i, v := range xp {
			if v > best {
				best, at = v, i
			}
		}
		dx[c*size+at] = dy[c]
	}
}

// averagePoolGrad implements AveragePoolGrad(dy, shape(X)): each window's
// gradient divided by the window's count (taps inside the input, or inside
// the padded input with count_include_pad) goes to every tap inside the
// input.
func averagePoolGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, shapeT := in[0], in[1]
	if !shapeT.DType.IsInt() || len(shapeT.Shape) != 1 {
		return nil, n.Errorf("input 1 must be a 1-D integer shape, has %v of shape %v", shapeT.DType, shapeT.Shape)
	}
	shape := shapeT.Ints()
	w, err := poolGradWindow(n, shape)
	if err != nil {
		return nil, err
	}
	if err := checkPoolGrad(n, dy, shape, w); err != nil {
		return nil, err
	}
	dx, err := kern.New(n, dy.DType, shape)
	if err != nil {
		return nil, err
	}
	plan := newPoolGradPlan(w)
	includePad := n.AttrInt("count_include_pad", 0) != 0
	planes := shape[0] * shape[1]
	switch d := dy.Data.(type) {
	case []float32:
		avgPoolBackward(plan, d, dx.Data.([]float32), planes, includePad)
	case []float64:
		avgPoolBackward(plan, d, dx.Data.([]float64), planes, includePad)
	}
	return []*graph.Tensor{dx}, nil
}

func avgPoolBackward[T float32 | float64](p *poolGradPlan, dy, dx []T, planes int, includePad bool) {
	inSize, outSize := p.win.inSize, p.win.outSize
	workers := gradWorkers(planes, outSize*max(p.win.kernelSize, 1))
	nn.ParallelItems(planes, workers, false, func(_, c int) {
		dxp := dx[c*inSize : (c+1)*inSize]
		dyp := dy[c*outSize : (c+1)*outSize]
		p.forWindows(func(out int, taps []int, padded int) {
			div := len(taps)
			if includePad {
				div = padded
			}
			if div == 0 {
				return
			}
			g := dyp[out] / T(div)
			for _, t := range taps {
				dxp[t] += g
			}
		})
	})
}

// resizeGrad implements ResizeGrad(dy, shape(X), roi, scales, sizes), the
// adjoint of Resize: the forward is a separable linear map (one set of taps
// per axis), so its adjoint scatters dy back axis by axis. The legacy
// attribute (set for Upsample and Resize before opset 11) selects the
// opset 7-10 rules, where the scales may also be the attribute scales.
func resizeGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, shapeT := in[0], in[1]
	roi, scales, sizes := kern.Opt(in, 2), kern.Opt(in, 3), kern.Opt(in, 4)
	if dy.DType != graph.Float32 && dy.DType != graph.Float64 {
		return nil, n.Errorf("dtype %v is not supported (float32, float64)", dy.DType)
	}
	if !shapeT.DType.IsInt() || len(shapeT.Shape) != 1 {
		return nil, n.Errorf("input 1 must be a 1-D integer shape, has %v of shape %v", shapeT.DType, shapeT.Shape)
	}
	xShape := shapeT.Ints()
	legacy := n.AttrInt("legacy", 0) != 0
	ras, fwd, err := nn.ResizePlan(n, xShape, roi, scales, sizes, legacy)
	if err != nil {
		return nil, err
	}
	yShape := append([]int{}, xShape...)
	for _, a := range ras {
		yShape[a.Axis] = a.Out
	}
	if !graph.SameShape(dy.Shape, yShape) {
		return nil, n.Errorf("gradient has shape %v, the forward output %v", dy.Shape, yShape)
	}
	type pass struct {
		axis int
		taps *graph.ResizeTaps
	}
	// The forward passes in the order of the axes (the stable sort below
	// then breaks ties as it always has).
	byAxis := map[int]*graph.ResizeTaps{}
	for _, t := range fwd {
		byAxis[t.Axis] = t
	}
	var passes []pass
	for _, a := range ras {
		if t := byAxis[a.Axis]; t != nil {
			passes = append(passes, pass{a.Axis, t})
		}
	}
	// Shrink first (the adjoint of the largest upsampling first) so the
	// intermediates stay small.
	sort.SliceStable(passes, func(i, j int) bool {
		ri := float64(xShape[passes[i].axis]) / float64(yShape[passes[i].axis])
		rj := float64(xShape[passes[j].axis]) / float64(yShape[passes[j].axis])
		return ri < rj
	})
	if product(xShape) == 0 || product(yShape) == 0 {
		dx, err := kern.New(n, dy.DType, xShape)
		if err != nil {
			return nil, err
		}
		return []*graph.Tensor{dx}, nil
	}
	cur := dy
	shape := append([]int{}, yShape...)
	for _, p := range passes {
		next := append([]int{}, shape...)
		next[p.axis] = xShape[p.axis]
		t, err := kern.New(n, dy.DType, next)
		if err != nil {
			return nil, err
		}
		outer, inner := product(shape[:p.axis]), product(shape[p.axis+1:])
		switch src := cur.Data.(type) {
		case []float32:
			resizeScatter(t.Data.([]float32), src, outer, shape[p.axis], next[p.axis], inner, p.taps)
		case []float64:
			resizeScatter(t.Data.([]float64), src, outer, shape[p.axis], next[p.axis], inner, p.taps)
		}
		cur, shape = t, next
	}
	if cur == dy {
		cur = dy.Clone()
	}
	return []*graph.Tensor{cur}, nil
}

// resizeScatter is the adjoint of one axis pass: src is outer × out × inner,
// dst outer × in × inner, and dst[b, idx, :] += w·src[b, o, :] over the taps
// of every output index o. dst is zero on entry.
func resizeScatter[T float32 | float64](dst, src []T, outer, out, in, inner int, taps *graph.ResizeTaps) {
	workers := gradWorkers(outer, out*inner*2)
	nn.ParallelItems(outer, workers, false, func(_, b int) {
		s := src[b*out*inner : (b+1)*out*inner]
		d := dst[b*in*inner : (b+1)*in*inner]
		for o := 0; o < out; o++ {
			row := s[o*inner : (o+1)*inner]
			for k := taps.Start[o]; k < taps.Start[o+1]; k++ {
				wk := T(taps.W[k])
				drow := d[taps.Idx[k]*inner : (taps.Idx[k]+1)*inner]
				drow = drow[:len(row)]
				for j, v := range row {
					drow[j] += wk * v
				}
			}
		}
	})
}

// pickIf returns a when cond holds, else b, without a branch: cond's
// byte (0 or 1, read through a pointer so that the compiler sets it from
// the flags instead of jumping on them) becomes an all-ones or zero mask.
func pickIf(cond bool, a, b int) int {
	m := -int(*(*uint8)(unsafe.Pointer(&cond)))
	return b ^ ((a ^ b) & m)
}
