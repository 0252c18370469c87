package gradient

import (
	"slices"
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/graph"
)

// MaxPoolArgmaxGrad(dY, Codes, Shape(X)) = dX (graph.MaxPoolArgmaxGrad):
// MaxPoolGrad(dY, X) with each window's argmax read from the one-byte
// codes its forward MaxPoolArgmax wrote instead of found again in X. Each
// plane of dX is cleared by the worker that adds into it (while it is in
// cache), then each window's dY goes to the tap its code names, window
// after window in row-major order as MaxPoolGrad adds them, so the sums
// are the same bits. Runs of more than eight 3×3 windows two columns
// apart with three rows inside the input (ResNet's stem pool) take an AVX2
// loop eight windows at a time (argmaxRun3): each of the three rows'
// elements gathers the gradients of the windows whose code names it, in
// the same order. A code that names no tap of its window (or 255 for a
// window that has taps) is an error naming the output.

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.MaxPoolArgmaxGrad, kern.Spec{Fn: maxPoolArgmaxGrad})
}

// argmaxGradState is what a MaxPoolArgmaxGrad node keeps between runs:
// the forward input shape in, its window's spans along both axes, and per
// code its tap's row and column within the window and its offset from
// the window's first tap in a plane iw wide.
type argmaxGradState struct {
	in         []int
	win        *gradWindow
	rows, cols []tapSpan
	row, col   [256]uint8
	off        [256]int32
	// [qa, qb) is the run of 3-wide windows two columns apart of a
	// 3-wide kernel (ResNet's stem pool), whose codes are checked by one
	// comparison (qb = qa: none).
	qa, qb int
	// bad is the flat index of the first output met whose code names no
	// tap of its window, or -1 (set by the workers of a call).
	bad atomic.Int64
}

// maxPoolArgmaxGrad implements graph.MaxPoolArgmaxGrad.
func maxPoolArgmaxGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	dy, codes, shapeT := in[0], in[1], in[2]
	if !shapeT.DType.IsInt() || len(shapeT.Shape) != 1 {
		return nil, n.Errorf("input 2 must be a 1-D integer shape, has %v of shape %v", shapeT.DType, shapeT.Shape)
	}
	st := kern.State[argmaxGradState](n)
	if st.win == nil || !shapeHolds(shapeT, st.in) {
		if err := st.plan(n, shapeT.Ints()); err != nil {
			return nil, err
		}
	}
	w := st.win
	if dy.DType != graph.Float32 {
		return nil, n.Errorf("dtype %v is not supported (float32)", dy.DType)
	}
	if err := checkPoolGrad(n, dy, st.in, w); err != nil {
		return nil, err
	}
	if codes.DType != graph.Uint8 || !graph.SameShape(codes.Shape, dy.Shape) {
		return nil, n.Errorf("codes have %v of shape %v, want uint8 of shape %v", codes.DType, codes.Shape, dy.Shape)
	}
	// Each plane is cleared by the worker that adds into it.
	dx, err := kern.NewUninit(n, graph.Float32, st.in)
	if err != nil {
		return nil, err
	}
	planes := st.in[0] * st.in[1]
	st.bad.Store(-1)
	// With planes large enough to fetch ahead, each worker takes a run of
	// consecutive planes (static), so that the plane after its current
	// one is its own and it can fetch that plane's lines of dX while it
	// scatters into this one.
	nn.ParallelItemsOf(planes, gradWorkers(planes, w.inSize/4+w.outSize), st.fetchesAhead(), argmaxGradTask{st: st,
		dy: dy.Float32s(), codes: codes.Data.([]uint8), dx: dx.Float32s()})
	if at := st.bad.Load(); at >= 0 {
		return nil, n.Errorf("code %d of output %d names no tap of its window", codes.Data.([]uint8)[at], at)
	}
	return kern.Results(n, dx), nil
}

// plan sets st up for the forward input shape (N, C, H, W) of node n.
func (st *argmaxGradState) plan(n *graph.Node, shape []int) error {
	if len(shape) != 4 {
		return n.Errorf("the forward input must have rank 4 (N, C, H, W), has shape %v", shape)
	}
	w, err := poolGradWindow(n, shape)
	if err != nil {
		return err
	}
	if w.kernelSize > graph.MaxPoolNoTap {
		return n.Errorf("kernel_shape %v has more than %d taps, too many for a one-byte code", w.kernel, graph.MaxPoolNoTap)
	}
	p := newPoolGradPlan(w)
	rows, ok1 := p.spans(0)
	cols, ok2 := p.spans(1)
	if !ok1 || !ok2 {
		return n.Errorf("dilations %v: the window's taps must be consecutive for argmax codes", w.dilations)
	}
	st.in = append(st.in[:0], shape...)
	st.win, st.rows, st.cols = w, rows, cols
	kh, kw := w.kernel[0], w.kernel[1]
	qa, qb, k := nn.PoolStride2Run(len(cols), func(i int) (int, int) { return cols[i].lo, cols[i].n })
	st.qa, st.qb = 0, 0
	if k == 3 && kw == 3 {
		st.qa, st.qb = qa, qb
	}
	for c := range 256 {
		st.row[c], st.col[c], st.off[c] = 255, 255, 0
		if c < kh*kw {
			st.row[c], st.col[c] = uint8(c/kw), uint8(c%kw)
			st.off[c] = int32(c/kw*w.in[1] + c%kw)
		}
	}
	return nil
}

// argmaxGradTask is maxPoolArgmaxGrad's work: item c is plane c. st.bad
// receives the flat index of an output whose code names no tap of its
// window.
type argmaxGradTask struct {
	st     *argmaxGradState
	dy, dx []float32
	codes  []uint8
}

func (t *argmaxGradTask) Item(_, c int) {
	st := t.st
	inSize, outSize, iw, ow := st.win.inSize, st.win.outSize, st.win.in[1], len(st.cols)
	dx := t.dx[c*inSize : (c+1)*inSize]
	var next []float32
	if st.fetchesAhead() && (c+2)*inSize <= len(t.dx) {
		next = t.dx[(c+1)*inSize : (c+2)*inSize]
	}
	clear(dx)
	if at := argmaxScatterPlane(st, t.dy[c*outSize:(c+1)*outSize], t.codes[c*outSize:(c+1)*outSize], dx, iw, ow, next); at >= 0 {
		st.bad.CompareAndSwap(-1, int64(c*outSize+at))
	}
}

// fetchNextPlaneBytes is the smallest plane of dX whose lines the worker
// fetches for its next plane (argmaxScatterPlane): ResNet-50's stem pool
// gradient (112×112 planes, 49 KiB, 25.7 MB over the batch) spent a third
// of its time clearing planes whose lines came from memory, read for
// ownership when the clear first wrote them. Fetched while the plane
// before is scattered, in runs of planes per worker: 2.54–2.70 → 1.81–2.11
// ms in ResNet-50's step with AVX-512 (0.46–0.48 → 0.58–0.67 of the
// triad; 7 December, docs/large-models.md). Smaller planes (the small
// fixtures' 4 KiB) stay in the caches anyway and are handed out one at a
// time.
const fetchNextPlaneBytes = 16 << 10

// fetchesAhead reports whether the planes of dX are large enough to fetch
// the next one's lines while one is scattered (fetchNextPlaneBytes); the
// workers then take runs of consecutive planes.
func (st *argmaxGradState) fetchesAhead() bool { return 4*st.win.inSize >= fetchNextPlaneBytes }

// argmaxScatterPlane adds each window's dy (the plane's outputs in
// row-major order) to dx at the tap its code names, and returns -1, or
// the index of the first output whose code names no tap of its window
// (the windows before it added). With next not nil (the next plane of dX,
// dx's size) it asks for next's lines a share with each row of windows,
// so that they arrive while this plane's windows are added.
func argmaxScatterPlane(st *argmaxGradState, dy []float32, codes []uint8, dx []float32, iw, ow int, next []float32) int {
	inRows := len(dx) / iw
	share := (inRows + len(st.rows) - 1) / max(len(st.rows), 1)
	for r, rs := range st.rows {
		if next != nil {
			if lo := r * share; lo < inRows {
				gemm.PrefetchRows(next[lo*iw:], iw, min(share, inRows-lo), iw)
			}
		}
		g, cr := dy[r*ow:(r+1)*ow], codes[r*ow:(r+1)*ow]
		if rs.n == 0 {
			for q, code := range cr {
				if code != graph.MaxPoolNoTap {
					return r*ow + q
				}
			}
			continue
		}
		base := rs.lo * iw
		qa, qb := st.qa, st.qb
		if qb > qa {
			// The run (kernel 3 wide): a code names a tap of its 3-wide
			// window iff it is below 3·rs.n.
			if at := argmaxScatterWindows(st, rs.n, g[:qa], cr[:qa], st.cols[:qa], dx[base:]); at >= 0 {
				return r*ow + at
			}
			lim := uint8(3 * rs.n)
			d, gr, crr := dx[base+st.cols[qa].lo:], g[qa:qb], cr[qa:qb]
			i := 0
			if rs.n == 3 && len(crr) > 8 && argmaxGradAsm {
				if at := argmaxRun3(st, d, iw, gr, crr); at >= 0 {
					return r*ow + qa + at
				}
				i = len(crr)
			}
			for ; i < len(crr); i++ {
				code := crr[i]
				if code >= lim {
					return r*ow + qa + i
				}
				d[2*i+int(st.off[code])] += gr[i]
			}
			if at := argmaxScatterWindows(st, rs.n, g[qb:], cr[qb:], st.cols[qb:], dx[base:]); at >= 0 {
				return r*ow + qb + at
			}
			continue
		}
		if at := argmaxScatterWindows(st, rs.n, g, cr, st.cols, dx[base:]); at >= 0 {
			return r*ow + at
		}
	}
	return -1
}

// argmaxRun3 adds each g[i] to d at the tap codes[i] names, for a run of
// more than eight 3×3 windows two columns apart (window i's taps start at
// d[2i] in each of three rows iw apart), in window order, with the vector
// loop: window 0's first two columns here, then blocks of eight windows
// (each block adding the third column of the window before it), the
// windows left as one more block that overlaps those added, and the last
// window's third column here. It returns -1, or the first i whose code
// names no tap (a window of three full rows has taps 0…8).
func argmaxRun3(st *argmaxGradState, d []float32, iw int, g []float32, codes []uint8) int {
	const lastTap = 8 // a 3×3 window's taps are 0…8
	n := len(codes)
	if codes[0] > lastTap {
		return 0
	}
	if c := codes[0]; st.col[c] < 2 {
		d[st.off[c]] += g[0]
	}
	blocks := (n - 1) / 8
	bad := argmaxGrad3x3S2(d[2:], iw, g, codes, blocks, 0)
	if done := 1 + 8*blocks; done < n {
		k := n - 8
		bad = argmaxGrad3x3S2(d[2*k:], iw, g[k-1:], codes[k-1:], 1, done-k) || bad
	}
	if bad {
		for i, c := range codes {
			if c > lastTap {
				return i
			}
		}
	}
	if c := codes[n-1]; st.col[c] == 2 {
		d[2*(n-1)+int(st.off[c])] += g[n-1]
	}
	return -1
}

// argmaxScatterWindows adds each g[q] to dx (from the first input row of
// the windows, which have rn rows) at the tap codes[q] names in the window
// of columns cols[q], in order, and returns -1, or the first q whose code
// names no tap of its window (255 is the code of a window with no column).
func argmaxScatterWindows(st *argmaxGradState, rn int, g []float32, codes []uint8, cols []tapSpan, dx []float32) int {
	for q, cs := range cols {
		code := codes[q]
		if int(st.row[code]) >= rn || int(st.col[code]) >= cs.n {
			if code == graph.MaxPoolNoTap && cs.n == 0 {
				continue
			}
			return q
		}
		dx[cs.lo+int(st.off[code])] += g[q]
	}
	return -1
}

// shapeHolds reports whether the 1-D integer tensor t holds shape, reading
// an int64 tensor in place (no copy per step).
func shapeHolds(t *graph.Tensor, shape []int) bool {
	if v, ok := t.Data.([]int64); ok {
		if len(v) != len(shape) {
			return false
		}
		for i, d := range v {
			if int(d) != shape[i] {
				return false
			}
		}
		return true
	}
	return slices.Equal(t.Ints(), shape)
}
