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
//
// A plan is the node's state (kern.State): for a node the executor runs
// again and again, it and its buffers are reused, and up to inlineRank
// dims of up to inlineOps operands need no allocation.
type bcastPlan struct {
	out     []int   // broadcast output shape
	size    int     // number of output elements
	dims    []int   // collapsed dims, outermost first; never empty
	strides [][]int // per operand, a stride per collapsed dim
	inner   int     // dims[len(dims)-1]

	outBuf    [inlineRank]int
	dimsBuf   [inlineRank]int
	strideBuf [inlineOps][inlineRank]int
	strideHdr [inlineOps][]int
	// task is the binary kernels' Chunker (runBinary), kept with the plan.
	task any
}

// The plan's inline buffers.
const (
	inlineRank = 8
	inlineOps  = 3
)

// ints returns buf[:n] when it fits, a new slice otherwise.
func ints(buf []int, n int) []int {
	if n <= cap(buf) {
		return buf[:n]
	}
	return make([]int, n)
}

// newPlan broadcasts the shapes together, into n's plan.
func newPlan(n *graph.Node, shapes ...[]int) (*bcastPlan, error) {
	p := kern.State[bcastPlan](n)
	if err := p.init(n, shapes); err != nil {
		return nil, err
	}
	return p, nil
}

// init makes p the plan of broadcasting shapes together.
func (p *bcastPlan) init(n *graph.Node, shapes [][]int) error {
	rank, ops := 0, len(shapes)
	for _, s := range shapes {
		rank = max(rank, len(s))
	}
	p.out = ints(p.outBuf[:], rank)
	for i := range p.out {
		p.out[i] = 1
	}
	for _, s := range shapes {
		off := rank - len(s)
		for i, d := range s {
			switch o := p.out[off+i]; {
			case o == d || d == 1:
			case o == 1:
				p.out[off+i] = d
			default:
				// (a copy: shapes itself stays on the caller's stack)
				return n.Errorf("shapes %v cannot be broadcast together", append([][]int(nil), shapes...))
			}
		}
	}
	size, err := graph.NumElements(p.out)
	if err != nil {
		return n.Errorf("broadcast output: %v", err)
	}
	p.size = size
	if ops <= inlineOps {
		p.strides = p.strideHdr[:ops]
	} else {
		p.strides = make([][]int, ops)
	}
	for j := range p.strides {
		if j < inlineOps {
			p.strides[j] = ints(p.strideBuf[j][:], rank)[:0]
		} else {
			p.strides[j] = make([]int, 0, rank)
		}
	}
	// From the innermost output dim outwards: each operand's stride along
	// it (0 where the operand repeats), dims of size 1 dropped, and a dim
	// merged into the group inside it when every operand's stride there
	// equals its stride in the group times the group's size. The groups
	// come out innermost first.
	dims := ints(p.dimsBuf[:], rank)[:0]
	var accBuf [inlineOps]int
	acc := ints(accBuf[:], ops)
	for j := range acc {
		acc[j] = 1
	}
	for i := rank - 1; i >= 0; i-- {
		d := p.out[i]
		g := len(dims) - 1
		merge := g >= 0
		for j, s := range shapes {
			st := 0
			if k := i - (rank - len(s)); k >= 0 && s[k] != 1 {
				st = acc[j]
				acc[j] *= s[k]
			}
			if d != 1 && merge && st != p.strides[j][g]*dims[g] {
				merge = false
			}
			if d != 1 {
				p.strides[j] = append(p.strides[j], st) // dropped below if merged
			}
		}
		if d == 1 {
			continue
		}
		if merge {
			dims[g] *= d
			for j := range p.strides {
				p.strides[j] = p.strides[j][:g+1]
			}
			continue
		}
		dims = append(dims, d)
	}
	if len(dims) == 0 {
		// A single element: every operand holds exactly one element.
		dims = append(dims, 1)
		for j := range p.strides {
			p.strides[j] = append(p.strides[j][:0], 1)
		}
	}
	reverse(dims)
	for _, st := range p.strides {
		reverse(st)
	}
	p.dims = dims
	p.inner = dims[len(dims)-1]
	return nil
}

func reverse(s []int) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
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

// rowGrain is the fewest rows worth handing to a goroutine. An empty
// output may have an empty inner dim, so it never divides by zero.
func (p *bcastPlan) rowGrain() int { return max(1, parallelGrain/max(1, p.inner)) }

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
	parallelRange(p.rows(), p.rowGrain(), func(lo, hi int) {
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

// runBinary applies the row kernels over a two-operand plan. The fan-out
// goes through a Chunker kept in the plan, so that a node the executor
// runs again allocates nothing here.
func runBinary[A, B, O any](p *bcastPlan, dst []O, a []A, b []B, k binLoops[A, B, O]) {
	t, ok := p.task.(*binTask[A, B, O])
	if !ok {
		t = &binTask[A, B, O]{}
		p.task = t
	}
	*t = binTask[A, B, O]{p: p, dst: dst, a: a, b: b, k: k, sa: p.innerStride(0), sb: p.innerStride(1)}
	// The most common cases get a single loop without row bookkeeping.
	if len(p.dims) == 1 && (t.sa == 1 || t.sb == 1) {
		t.flat = true
		parallelTask(p.size, parallelGrain, t)
	} else {
		parallelTask(p.rows(), p.rowGrain(), t)
	}
	*t = binTask[A, B, O]{} // keeps no operand alive
}

// binTask is one runBinary call: element ranges of the output when flat,
// row ranges otherwise.
type binTask[A, B, O any] struct {
	p      *bcastPlan
	dst    []O
	a      []A
	b      []B
	k      binLoops[A, B, O]
	sa, sb int
	flat   bool
}

// Chunk implements kern.Chunker.
func (t *binTask[A, B, O]) Chunk(lo, hi int) {
	dst, a, b, k := t.dst, t.a, t.b, t.k
	sa, sb := t.sa, t.sb
	if t.flat {
		switch {
		case sa == 1 && sb == 1:
			k.vv(dst[lo:hi], a[lo:hi], b[lo:hi])
		case sa == 1:
			k.vs(dst[lo:hi], a[lo:hi], b[0])
		default:
			k.sv(dst[lo:hi], a[0], b[lo:hi])
		}
		return
	}
	p := t.p
	if lo >= hi {
		return
	}
	inner := p.inner
	outer := len(p.dims) - 1
	var cntBuf [inlineRank]int
	cnt := ints(cntBuf[:], outer)
	st0, st1 := p.strides[0], p.strides[1]
	// Counters over the outer dims for row lo, and the offsets they give.
	oa, ob := 0, 0
	for d, r := outer-1, lo; d >= 0; d-- {
		cnt[d] = r % p.dims[d]
		r /= p.dims[d]
		oa += cnt[d] * st0[d]
		ob += cnt[d] * st1[d]
	}
	for r := lo; r < hi; r++ {
		o := r * inner
		row := dst[o : o+inner]
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
		for d := outer - 1; d >= 0; d-- {
			cnt[d]++
			oa += st0[d]
			ob += st1[d]
			if cnt[d] < p.dims[d] {
				break
			}
			oa -= st0[d] * p.dims[d]
			ob -= st1[d] * p.dims[d]
			cnt[d] = 0
		}
	}
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
	return applyBinaryOver(n, a, b, od, k, nil)
}

// applyBinaryOver is applyBinary that writes the output over the first of
// over (inputs the executor donated, nil or absent for none) whose dtype
// and shape are the output's: each output element is then written over
// the same element of that operand, after the loops read it.
func applyBinaryOver[A, B, O any](n *graph.Node, a, b *graph.Tensor, od graph.DType, k binLoops[A, B, O], over []*graph.Tensor) (*graph.Tensor, error) {
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
	var out *graph.Tensor
	for _, t := range over {
		if t != nil && t.DType == od && graph.SameShape(t.Shape, p.out) {
			out = t
			break
		}
	}
	if out == nil {
		if out, err = newFull(n, od, p.out); err != nil {
			return nil, err
		}
	}
	dst, ok := out.Data.([]O)
	if !ok {
		return nil, n.Errorf("output dtype %v does not hold %T", od, *new(O))
	}
	runBinary(p, dst, as, bs, k)
	return out, nil
}
