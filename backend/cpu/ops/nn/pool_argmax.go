package nn

import (
	"math"
	"slices"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// MaxPoolArgmax(X) = (Y, Codes): a 2-D float32 MaxPool that also writes
// each window's argmax as a one-byte code (graph.MaxPoolArgmax: the tap at
// row i and column j of the window cut to the input has code i·kw + j;
// graph.MaxPoolNoTap for a window wholly in padding), so that its
// gradient (ops/gradient, MaxPoolArgmaxGrad) need not read X. The argmax
// is the row-major scan's (the first tap taken, replaced only by a
// strictly greater value), and Y is the value at it: MaxPool's Y bit for
// bit. Runs of 3×3 windows two columns apart take the same scan eight
// windows at a time (poolArgmaxMax3x3S2, AVX2: codes and values in one
// pass, NaNs and signed zeros as the scan orders them); every other
// window takes the scan in Go.

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.MaxPoolArgmax, kern.Spec{Fn: maxPoolArgmaxKernel})
}

// maxPoolArgmaxKernel implements graph.MaxPoolArgmax.
func maxPoolArgmaxKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if x.DType != graph.Float32 || len(x.Shape) != 4 {
		return nil, n.Errorf("input X must be float32 of rank 4 (N, C, H, W), has %v of shape %v", x.DType, x.Shape)
	}
	st := kern.State[argmaxPoolState](n)
	if st.plan == nil || !slices.Equal(st.in, x.Shape) {
		kernel, err := kernelShapeAttr(n, 2)
		if err != nil {
			return nil, err
		}
		if kernel[0]*kernel[1] > graph.MaxPoolNoTap {
			return nil, n.Errorf("kernel_shape %v has more than %d taps, too many for a one-byte code", kernel, graph.MaxPoolNoTap)
		}
		w, err := resolveWindow(n, x.Shape[2:], kernel, windowOpts{ceil: true})
		if err != nil {
			return nil, err
		}
		plan := newPoolPlan(w)
		for axis := range 2 {
			if _, ok := plan.spanCache.Get(axis, plan.spans); !ok {
				return nil, n.Errorf("dilations %v: the window's taps must be consecutive for argmax codes", n.AttrInts("dilations", nil))
			}
		}
		st.in = append(st.in[:0], x.Shape...)
		st.out = concatShape(x.Shape[:2], w.out)
		st.plan = plan
		st.kw = kernel[1]
		cols, _ := plan.spanCache.Get(1, plan.spans)
		st.qa, st.qb, st.k = PoolStride2Run(len(cols), func(i int) (int, int) { return int(cols[i].lo), int(cols[i].n) })
	}
	y, err := kern.NewUninit(n, graph.Float32, st.out)
	if err != nil {
		return nil, err
	}
	codes, err := kern.NewUninit(n, graph.Uint8, st.out)
	if err != nil {
		return nil, err
	}
	plan := st.plan
	rows, _ := plan.spanCache.Get(0, plan.spans)
	cols, _ := plan.spanCache.Get(1, plan.spans)
	planes := x.Shape[0] * x.Shape[1]
	maxPoolArgmaxPlanes(rows, cols, plan.in[1], st.kw, st.qa, st.qb, st.k, x.Float32s(), y.Float32s(), codes.Data.([]uint8),
		planes, nnWorkers(planes, plan.poolCost()))
	return kern.Results(n, y, codes), nil
}

// argmaxPoolState is what a MaxPoolArgmax node keeps between runs: the
// input shape in, the output shape out, the window plan made for them and
// the kernel's width kw; [qa, qb) is the run of k-wide windows two columns
// apart (PoolStride2Run).
type argmaxPoolState struct {
	in, out   []int
	plan      *poolPlan
	kw        int
	qa, qb, k int
}

// poolArgmaxAhead is how many input rows past a window's first row the
// vector loop prefetches (and the row after that): 5 and 6 are the new
// rows two output rows on.
const poolArgmaxAhead = 5

// negInf32 is what MaxPool writes for a window with no tap.
var negInf32 = float32(math.Inf(-1))

// maxPoolArgmaxPlanes computes planes planes of graph.MaxPoolArgmax: the
// window of output (r, q) covers the rows rows[r] and the columns cols[q]
// of its plane of x (len(x)/planes values, rows iw wide); kw is the
// kernel's width (the code's row stride); [qa, qb) is the run of k-wide
// windows two columns apart (PoolStride2Run of cols). y and codes get
// len(rows)·len(cols) values per plane.
func maxPoolArgmaxPlanes(rows, cols []span, iw, kw, qa, qb, k int, x, y []float32, codes []uint8, planes, workers int) {
	if planes == 0 {
		return
	}
	ParallelItemsOf(planes, workers, false, maxPoolArgmaxTask{rows: rows, cols: cols, iw: iw, kw: kw, x: x, y: y,
		codes: codes, inSize: len(x) / planes, outSize: len(rows) * len(cols),
		qa: qa, qb: qb, vector: kw == 3 && k == 3 && qb-qa >= 8 && len(cols) <= sepWidth})
}

// maxPoolArgmaxTask is maxPoolArgmaxPlanes's work: item c is plane c.
// [qa, qb) is the run of 3-wide windows two columns apart, taken by the
// vector loop when vector is set.
type maxPoolArgmaxTask struct {
	rows, cols      []span
	iw, kw          int
	x, y            []float32
	codes           []uint8
	inSize, outSize int
	qa, qb          int
	vector          bool
}

func (t *maxPoolArgmaxTask) Item(_, c int) {
	rows, cols, iw, kw, qa, qb, vector := t.rows, t.cols, t.iw, t.kw, t.qa, t.qb, t.vector
	x, y, codes := t.x[c*t.inSize:(c+1)*t.inSize], t.y[c*t.outSize:(c+1)*t.outSize], t.codes[c*t.outSize:(c+1)*t.outSize]
	ow := len(cols)
	for r, rs := range rows {
		yr, cr := y[r*ow:(r+1)*ow], codes[r*ow:(r+1)*ow]
		xr := x[int(rs.lo)*iw:]
		if vector && (rs.n == 2 || rs.n == 3) {
			// With s2 = 0 a window of two rows reads its second row twice
			// (and, the first equal tap winning, never picks the copy).
			s2 := iw
			if rs.n == 2 {
				s2 = 0
			}
			// Fetch the two rows that output row r+2 reads first
			// (windows two rows apart: rows 2r+4 and 2r+5 where this
			// row's start at 2r−1), so that memory keeps up with the
			// compares; past the plane, the next plane's first rows.
			if poolArgmaxMax3x3S2(cr[qa:qb], yr[qa:qb], xr[cols[qa].lo:], iw, s2, 4*poolArgmaxAhead*iw) {
				for q := 0; q < qa; q++ {
					cr[q], yr[q] = argmaxWindow(xr, iw, kw, int(rs.n), cols[q])
				}
				for q := qb; q < ow; q++ {
					cr[q], yr[q] = argmaxWindow(xr, iw, kw, int(rs.n), cols[q])
				}
				continue
			}
		}
		for q, cs := range cols {
			cr[q], yr[q] = argmaxWindow(xr, iw, kw, int(rs.n), cs)
		}
	}
}

// argmaxWindow returns the code and value of the first maximum, in the
// row-major scan's order, of the window over rows 0..n-1 of x (iw wide)
// and the columns cs; kw is the code's row stride. A window with no tap
// gets graph.MaxPoolNoTap and -Inf, as MaxPool writes it.
func argmaxWindow(x []float32, iw, kw, n int, cs span) (uint8, float32) {
	if n == 0 || cs.n == 0 {
		return graph.MaxPoolNoTap, negInf32
	}
	o := int(cs.lo)
	switch {
	case n == 3 && cs.n == 3:
		// The tap index k moves by pickIf (the comparisons are data
		// dependent and mispredict); w[k] is the running maximum.
		w := x[o : o+2*iw+3]
		k, c := 0, 0
		for i, t := range [8]int{1, 2, iw, iw + 1, iw + 2, 2 * iw, 2*iw + 1, 2*iw + 2} {
			up := w[t] > w[k]
			k = pickIf(up, t, k)
			c = pickIf(up, (i+1)/3*kw+(i+1)%3, c)
		}
		return uint8(c), w[k]
	case cs.n == 2 && (n == 2 || n == 3):
		// Two columns of two or three rows (a 3×3 window cut by the
		// padding, ResNet's stem; a 2×2 window): tap i = 1 .. 2n−1 is
		// at row i/2, column i%2.
		w := x[o : o+(n-1)*iw+2]
		k, c := 0, 0
		for i := 1; i < 2*n; i++ {
			up := w[i/2*iw+i%2] > w[k]
			k = pickIf(up, i/2*iw+i%2, k)
			c = pickIf(up, i/2*kw+i%2, c)
		}
		return uint8(c), w[k]
	}
	best, c := x[o], 0
	for i := 0; i < n; i++ {
		for j, v := range x[i*iw+o : i*iw+o+int(cs.n)] {
			if v > best {
				best, c = v, i*kw+j
			}
		}
	}
	return uint8(c), best
}
