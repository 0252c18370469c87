package elementwise

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// bcastPlan describes a numpy-style broadcast of several operands to a common
// output shape, with the output's dimensions collapsed as far as possible:
// size-1 output dimensions are dropped, and adjacent dimensions that every
// operand walks contiguously (or every operand repeats) are merged. After
// collapsing, every operand's innermost stride is 0 or 1, so kernels run a
// tight loop over rows of length inner.
type bcastPlan struct {
	out     []int   // broadcast output shape
	size    int     // number of output elements
	dims    []int   // collapsed dims, outermost first; never empty
	strides [][]int // per operand, a stride per collapsed dim
	inner   int     // dims[len(dims)-1]
}

// newPlan broadcasts the shapes together.
func newPlan(n *graph.Node, shapes ...[]int) (*bcastPlan, error) {
	out, err := kern.BroadcastShape(shapes...)
	if err != nil {
		return nil, n.Errorf("%v", err)
	}
	size, err := graph.NumElements(out)
	if err != nil {
		return nil, n.Errorf("broadcast output: %v", err)
	}
	p := &bcastPlan{out: out, size: size, strides: make([][]int, len(shapes))}
	full := make([][]int, len(shapes))
	for j, s := range shapes {
		full[j] = kern.BroadcastStrides(s, out)
	}
	// Keep the output dims larger than one.
	for i, d := range out {
		if d == 1 {
			continue
		}
		p.dims = append(p.dims, d)
		for j := range shapes {
			p.strides[j] = append(p.strides[j], full[j][i])
		}
	}
	if len(p.dims) == 0 {
		// A single element: every operand holds exactly one element.
		p.dims = []int{1}
		for j := range shapes {
			p.strides[j] = []int{1}
		}
		p.inner = 1
		return p, nil
	}
	// Merge from the inside out: dim i joins dim i+1 when every operand's
	// stride at i equals its stride at i+1 times dim i+1.
	dims := []int{p.dims[len(p.dims)-1]}
	st := make([][]int, len(shapes))
	for j := range shapes {
		st[j] = []int{p.strides[j][len(p.dims)-1]}
	}
	for i := len(p.dims) - 2; i >= 0; i-- {
		merge := true
		for j := range shapes {
			if p.strides[j][i] != st[j][0]*dims[0] {
				merge = false
				break
			}
		}
		if merge {
			dims[0] *= p.dims[i]
			continue
		}
		dims = append([]int{p.dims[i]}, dims...)
		for j := range shapes {
			st[j] = append([]int{p.strides[j][i]}, st[j]...)
		}
	}
	p.dims, p.strides = dims, st
	p.inner = dims[len(dims)-1]
	return p, nil
}

// innerStride is operand j's stride along the innermost collapsed dim (0 or 1).
func (p *bcastPlan) innerStride(j int) int { return p.strides[j][len(p.dims)-1] }

// rows is the number of inner-length rows of the output.
func (p *bcastPlan) rows() int {
	if p.size == 0 {
		return 0
	}
	return p.size / p.inner
}

// eachRow calls fn for every row of inner output elements with the output
// offset of the row and each operand's offset (offs is reused between calls).
func (p *bcastPlan) eachRow(fn func(out int, offs []int)) { p.eachRowIn(0, p.rows(), fn) }

// eachRowIn is eachRow for rows [lo, hi) only; calls for disjoint ranges
// may run concurrently.
func (p *bcastPlan) eachRowIn(lo, hi int, fn func(out int, offs []int)) {
	if lo >= hi {
		return
	}
	ops := len(p.strides)
	offs := make([]int, ops)
	outer := len(p.dims) - 1
	// Counters over the outer dims for row lo, and the offsets they give.
	cnt := make([]int, outer)
	for d, r := outer-1, lo; d >= 0; d-- {
		cnt[d] = r % p.dims[d]
		r /= p.dims[d]
		for j := 0; j < ops; j++ {
			offs[j] += cnt[d] * p.strides[j][d]
		}
	}
	for r := lo; r < hi; r++ {
		fn(r*p.inner, offs)
		for d := outer - 1; d >= 0; d-- {
			cnt[d]++
			for j := 0; j < ops; j++ {
				offs[j] += p.strides[j][d]
			}
			if cnt[d] < p.dims[d] {
				break
			}
			for j := 0; j < ops; j++ {
				offs[j] -= p.strides[j][d] * p.dims[d]
			}
			cnt[d] = 0
		}
	}
}

// eachRowParallel is eachRow spread over goroutines for large outputs.
func (p *bcastPlan) eachRowParallel(fn func(out int, offs []int)) {
	parallelRange(p.rows(), max(1, parallelGrain/p.inner), func(lo, hi int) {
		p.eachRowIn(lo, hi, fn)
	})
}

// binLoops are the three row kernels of a binary op: both operands
// contiguous (vv), the second repeated (vs) and the first repeated (sv).
type binLoops[A, B, O any] struct {
	vv func(dst []O, a []A, b []B)
	vs func(dst []O, a []A, b B)
	sv func(dst []O, a A, b []B)
}

// runBinary applies the row kernels over a two-operand plan.
func runBinary[A, B, O any](p *bcastPlan, dst []O, a []A, b []B, k binLoops[A, B, O]) {
	inner := p.inner
	sa, sb := p.innerStride(0), p.innerStride(1)
	// The most common cases get a single loop without row bookkeeping.
	if len(p.dims) == 1 && (sa == 1 || sb == 1) {
		parallelRange(p.size, parallelGrain, func(lo, hi int) {
			switch {
			case sa == 1 && sb == 1:
				k.vv(dst[lo:hi], a[lo:hi], b[lo:hi])
			case sa == 1:
				k.vs(dst[lo:hi], a[lo:hi], b[0])
			default:
				k.sv(dst[lo:hi], a[0], b[lo:hi])
			}
		})
		return
	}
	p.eachRowParallel(func(o int, offs []int) {
		row := dst[o : o+inner]
		oa, ob := offs[0], offs[1]
		switch {
		case sa == 1 && sb == 1:
			k.vv(row, a[oa:oa+inner], b[ob:ob+inner])
		case sa == 1:
			k.vs(row, a[oa:oa+inner], b[ob])
		case sb == 1:
			k.sv(row, a[oa], b[ob:ob+inner])
		default:
			k.vv(row[:1], a[oa:oa+1], b[ob:ob+1])
			for i := 1; i < len(row); i++ {
				row[i] = row[0]
			}
		}
	})
}

// loopsOf builds row kernels from a scalar function. It costs an indirect
// call per element, so it serves the less common ops and dtypes; hot float
// ops have hand-written loops.
func loopsOf[A, B, O any](f func(a A, b B) O) binLoops[A, B, O] {
	return binLoops[A, B, O]{
		vv: func(dst []O, a []A, b []B) {
			b = b[:len(a)]
			dst = dst[:len(a)]
			for i := range a {
				dst[i] = f(a[i], b[i])
			}
		},
		vs: func(dst []O, a []A, b B) {
			dst = dst[:len(a)]
			for i := range a {
				dst[i] = f(a[i], b)
			}
		},
		sv: func(dst []O, a A, b []B) {
			dst = dst[:len(b)]
			for i := range b {
				dst[i] = f(a, b[i])
			}
		},
	}
}

// dataAs returns t's data as []T, or an error naming the input when the
// tensor holds another type or a length its shape does not call for.
func dataAs[T any](n *graph.Node, t *graph.Tensor, idx int) ([]T, error) {
	s, ok := t.Data.([]T)
	if !ok {
		return nil, n.Errorf("input %d holds %T for dtype %v, which does not match the other inputs", idx, t.Data, t.DType)
	}
	if want := t.Size(); len(s) != want {
		return nil, n.Errorf("input %d of shape %v holds %d elements, want %d", idx, t.Shape, len(s), want)
	}
	return s, nil
}

// applyBinary broadcasts a and b, allocates an output of dtype od and runs
// the loops. a's data must be []A and b's []B.
func applyBinary[A, B, O any](n *graph.Node, a, b *graph.Tensor, od graph.DType, k binLoops[A, B, O]) (*graph.Tensor, error) {
	as, err := dataAs[A](n, a, 0)
	if err != nil {
		return nil, err
	}
	bs, err := dataAs[B](n, b, 1)
	if err != nil {
		return nil, err
	}
	p, err := newPlan(n, a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	out, err := newFull(n, od, p.out)
	if err != nil {
		return nil, err
	}
	dst, ok := out.Data.([]O)
	if !ok {
		return nil, n.Errorf("output dtype %v does not hold %T", od, *new(O))
	}
	runBinary(p, dst, as, bs, k)
	return out, nil
}
