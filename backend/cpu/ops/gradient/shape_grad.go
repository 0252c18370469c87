package gradient

import (
	"slices"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	shapeops "github.com/onnxtrain/onnxtrain/backend/cpu/ops/shape"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Backward kernels of matrix multiplication and of the data-movement ops.
// Each takes the output gradient dy first, then the forward values it needs
// for shapes and indices, and returns the gradient of one forward input,
// shaped like it. Gradients are float32 or float64 (half types arrive as
// float32: these kernels are registered without Half).

func init() {
	register("MatMulGradA", matMulGradA)
	register("MatMulGradB", matMulGradB)
	register("SplitLike", splitLike)
	register("SliceGrad", sliceGrad)
	register("PadGrad", padGrad)
	register("TileGrad", tileGrad)
	register("GatherGrad", gatherGrad)
	register("GatherElementsGrad", gatherElementsGrad)
}

// ---------------------------------------------------------------- MatMul

// matMulGradPlan is the shape analysis of Y = MatMul(A, B) seen from its
// gradient: operands promoted to matrices (a 1-D A is 1×K, a 1-D B is K×1),
// batch dims broadcast, and for product i of the broadcast batch the
// matrices of A and B it read.
type matMulGradPlan struct {
	m, k, n    int
	batch      int
	aIdx, bIdx []int
}

// newMatMulGradPlan checks dy, a and b against each other.
func newMatMulGradPlan(n *graph.Node, dy, a, b *graph.Tensor) (*matMulGradPlan, error) {
	as, bs := a.Shape, b.Shape
	if len(as) == 0 || len(bs) == 0 {
		return nil, n.Errorf("operands must have rank >= 1, got shapes %v and %v", as, bs)
	}
	if dy.DType != a.DType || dy.DType != b.DType {
		return nil, n.Errorf("dy is %v, A is %v and B is %v: dtypes must agree", dy.DType, a.DType, b.DType)
	}
	aMat, bMat := as, bs
	if len(as) == 1 {
		aMat = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bMat = []int{bs[0], 1}
	}
	p := &matMulGradPlan{m: aMat[len(aMat)-2], k: aMat[len(aMat)-1], n: bMat[len(bMat)-1]}
	if bMat[len(bMat)-2] != p.k {
		return nil, n.Errorf("inner dimensions differ: A has shape %v, B has shape %v", as, bs)
	}
	aBatch, bBatch := aMat[:len(aMat)-2], bMat[:len(bMat)-2]
	batch, err := kern.BroadcastShape(aBatch, bBatch)
	if err != nil {
		return nil, n.Errorf("batch dimensions of A %v and B %v do not broadcast", as, bs)
	}
	want := append([]int{}, batch...)
	if len(as) > 1 {
		want = append(want, p.m)
	}
	if len(bs) > 1 {
		want = append(want, p.n)
	}
	if !graph.SameShape(dy.Shape, want) {
		return nil, n.Errorf("dy has shape %v, the product of %v and %v has shape %v", dy.Shape, as, bs, want)
	}
	p.batch = 1
	for _, d := range batch {
		p.batch *= d
	}
	p.aIdx = kern.BroadcastIndex(aBatch, batch)
	p.bIdx = kern.BroadcastIndex(bBatch, batch)
	return p, nil
}

// gradPlanState is a MatMul gradient node's plan kept between runs
// (kern.State) with the shapes it was made for.
type gradPlanState struct {
	dy, as, bs []int
	valid      bool
	p          matMulGradPlan
}

// nodeMatMulGradPlan is newMatMulGradPlan through the node's kept plan: a
// node that runs again on the same shapes does not plan (and allocate)
// again. The plan belongs to the node.
func nodeMatMulGradPlan(n *graph.Node, dy, a, b *graph.Tensor) (*matMulGradPlan, error) {
	st := kern.State[gradPlanState](n)
	if st.valid && dy.DType == a.DType && dy.DType == b.DType &&
		slices.Equal(st.dy, dy.Shape) && slices.Equal(st.as, a.Shape) && slices.Equal(st.bs, b.Shape) {
		return &st.p, nil
	}
	st.valid = false
	p, err := newMatMulGradPlan(n, dy, a, b)
	if err != nil {
		return nil, err
	}
	st.p = *p
	st.dy = append(st.dy[:0], dy.Shape...)
	st.as = append(st.as[:0], a.Shape...)
	st.bs = append(st.bs[:0], b.Shape...)
	st.valid = true
	return &st.p, nil
}

// batchStride reports whether idx[i] == i·stride for every i (0: shared,
// 1: consecutive), returning stride.
func batchStride(idx []int) (int, bool) {
	if len(idx) < 2 {
		return 0, true
	}
	s := idx[1] - idx[0]
	for i, v := range idx {
		if v != i*s {
			return 0, false
		}
	}
	return s, true
}

// consecutive reports whether idx is 0, 1, 2, ... (the operand has the
// whole batch); shared whether every entry is 0 (one matrix for all).
func consecutive(idx []int) bool {
	for i, v := range idx {
		if v != i {
			return false
		}
	}
	return true
}

func shared(idx []int) bool {
	for _, v := range idx {
		if v != 0 {
			return false
		}
	}
	return true
}

// matMulGradA(dy, a, b) is dA = dY·Bᵀ per product, summed over the batch
// dims along which A was broadcast, shaped like a.
func matMulGradA(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	dy, a, b := in[0], in[1], in[2]
	p, err := nodeMatMulGradPlan(n, dy, a, b)
	if err != nil {
		return nil, err
	}
	alloc := kern.New
	if _, ok := batchStride(p.bIdx); ok && dy.DType == graph.Float32 && consecutive(p.aIdx) {
		alloc = kern.NewUninit // the float32 products below overwrite all of dA
	}
	out, err := alloc(n, dy.DType, a.Shape)
	if err != nil {
		return nil, err
	}
	m, k, nn := p.m, p.k, p.n
	switch g := dy.Data.(type) {
	case []float32:
		bd, da := b.Data.([]float32), out.Data.([]float32)
		if consecutive(p.aIdx) && shared(p.bIdx) {
			// One tall product: every row block of dY times the same Bᵀ.
			gemm.Sgemm(false, true, p.batch*m, k, nn, 1, g, nn, bd, nn, 0, da, k)
			break
		}
		if sb, ok := batchStride(p.bIdx); ok && consecutive(p.aIdx) {
			// Every product writes its own block of dA (attention's
			// batched products): independent, spread over the cores.
			gemm.SgemmStrided(false, true, m, k, nn, 1, g, nn, m*nn, bd, nn, sb*k*nn, 0, da, k, m*k, p.batch)
			break
		}
		for i := 0; i < p.batch; i++ {
			gemm.Sgemm(false, true, m, k, nn, 1, g[i*m*nn:], nn, bd[p.bIdx[i]*k*nn:], nn, 1, da[p.aIdx[i]*m*k:], k)
		}
	case []float64:
		bd, da := b.Data.([]float64), out.Data.([]float64)
		for i := 0; i < p.batch; i++ {
			addMatMulABt(m, k, nn, g[i*m*nn:], bd[p.bIdx[i]*k*nn:], da[p.aIdx[i]*m*k:])
		}
	default:
		return nil, n.Errorf("dtype %v is not supported", dy.DType)
	}
	return kern.Results(n, out), nil
}

// matMulGradB(dy, a, b) is dB = Aᵀ·dY per product, summed over the batch
// dims along which B was broadcast, shaped like b.
func matMulGradB(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	dy, a, b := in[0], in[1], in[2]
	p, err := nodeMatMulGradPlan(n, dy, a, b)
	if err != nil {
		return nil, err
	}
	alloc := kern.New
	if _, ok := batchStride(p.aIdx); ok && dy.DType == graph.Float32 && consecutive(p.bIdx) {
		alloc = kern.NewUninit // the float32 products below overwrite all of dB
	}
	out, err := alloc(n, dy.DType, b.Shape)
	if err != nil {
		return nil, err
	}
	m, k, nn := p.m, p.k, p.n
	switch g := dy.Data.(type) {
	case []float32:
		ad, db := a.Data.([]float32), out.Data.([]float32)
		if consecutive(p.aIdx) && shared(p.bIdx) {
			// B was shared by the whole batch: one product over all rows.
			gemm.Sgemm(true, false, k, nn, p.batch*m, 1, ad, k, g, nn, 0, db, nn)
			break
		}
		if sa, ok := batchStride(p.aIdx); ok && consecutive(p.bIdx) {
			// Every product writes its own block of dB: independent,
			// spread over the cores.
			gemm.SgemmStrided(true, false, k, nn, m, 1, ad, k, sa*m*k, g, nn, m*nn, 0, db, nn, k*nn, p.batch)
			break
		}
		for i := 0; i < p.batch; i++ {
			gemm.Sgemm(true, false, k, nn, m, 1, ad[p.aIdx[i]*m*k:], k, g[i*m*nn:], nn, 1, db[p.bIdx[i]*k*nn:], nn)
		}
	case []float64:
		ad, db := a.Data.([]float64), out.Data.([]float64)
		for i := 0; i < p.batch; i++ {
			addMatMulAtB(m, k, nn, ad[p.aIdx[i]*m*k:], g[i*m*nn:], db[p.bIdx[i]*k*nn:])
		}
	default:
		return nil, n.Errorf("dtype %v is not supported", dy.DType)
	}
	return kern.Results(n, out), nil
}

// addMatMulABt adds g·bᵀ to c, with g m×n, b k×n and c m×k (row-major).
func addMatMulABt[T float32 | float64](m, k, n int, g, b, c []T) {
	for i := 0; i < m; i++ {
		grow := g[i*n : i*n+n]
		crow := c[i*k : i*k+k]
		for q := 0; q < k; q++ {
			brow := b[q*n : q*n+n]
			var s T
			for j, v := range grow {
				s += v * brow[j]
			}
			crow[q] += s
		}
	}
}

// addMatMulAtB adds aᵀ·g to c, with a m×k, g m×n and c k×n (row-major).
func addMatMulAtB[T float32 | float64](m, k, n int, a, g, c []T) {
	for i := 0; i < m; i++ {
		arow := a[i*k : i*k+k]
		grow := g[i*n : i*n+n]
		for q, av := range arow {
			crow := c[q*n : q*n+n]
			for j, v := range grow {
				crow[j] += av * v
			}
		}
	}
}

// ---------------------------------------------------------------- scatter

// scatterAdd adds every element of src (of shape shape) into dst: element
// (i_0, ..., i_{r-1}) goes to offset tables[0][i_0] + ... + tables[r-1][i_{r-1}],
// and is dropped when any of those entries is negative (a padded position).
func scatterAdd[T float32 | float64](dst, src []T, shape []int, tables [][]int) {
	r := len(shape)
	if r == 0 {
		if len(src) > 0 && len(dst) > 0 {
			dst[0] += src[0]
		}
		return
	}
	for _, d := range shape {
		if d == 0 {
			return
		}
	}
	inner := tables[r-1]
	// The odometer lives on the stack up to rank 9.
	var idxBuf [8]int
	idx := idxBuf[:0]
	if r-1 <= len(idxBuf) {
		idx = idxBuf[:r-1]
	} else {
		idx = make([]int, r-1)
	}
	for pos := 0; pos < len(src); pos += len(inner) {
		base, skip := 0, false
		for a, i := range idx {
			o := tables[a][i]
			if o < 0 {
				skip = true
				break
			}
			base += o
		}
		if !skip {
			row := src[pos : pos+len(inner)]
			for j, o := range inner {
				if o >= 0 {
					dst[base+o] += row[j]
				}
			}
		}
		for d := r - 2; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// scatterAddNew returns zeros of shape like with dy scattered into them
// through tables (see scatterAdd).
func scatterAddNew(n *graph.Node, dy *graph.Tensor, like []int, tables [][]int) (*graph.Tensor, error) {
	out, err := kern.New(n, dy.DType, like)
	if err != nil {
		return nil, err
	}
	switch src := dy.Data.(type) {
	case []float32:
		scatterAdd(out.Data.([]float32), src, dy.Shape, tables)
	case []float64:
		scatterAdd(out.Data.([]float64), src, dy.Shape, tables)
	default:
		return nil, n.Errorf("dtype %v is not supported", dy.DType)
	}
	return out, nil
}

// checkGradShape fails unless dy has the shape the forward op produced.
func checkGradShape(n *graph.Node, dy *graph.Tensor, want []int) error {
	if !graph.SameShape(dy.Shape, want) {
		// (a copy: want may be the caller's stack buffer)
		return n.Errorf("dy has shape %v, the forward output has shape %v", dy.Shape, append([]int(nil), want...))
	}
	return nil
}

// intsOf reads an integer tensor (scalar or 1-D) as int64s.
func intsOf(n *graph.Node, t *graph.Tensor, what string) ([]int64, error) {
	if !t.DType.IsInt() {
		return nil, n.Errorf("input %s must be an integer tensor, got %v", what, t.DType)
	}
	if t.Rank() > 1 {
		return nil, n.Errorf("input %s must be 1-D, has shape %v", what, t.Shape)
	}
	out := make([]int64, t.Size())
	for i := range out {
		out[i] = t.Int(i)
	}
	return out, nil
}

// normAxesList maps possibly negative axes into [0, rank), rejecting
// repeats and axes out of range.
func normAxesList(n *graph.Node, axes []int64, rank int) ([]int, error) {
	out := make([]int, len(axes))
	seen := make([]bool, rank)
	for i, a := range axes {
		if a < int64(-rank) || a >= int64(rank) {
			return nil, n.Errorf("axis %d is out of range for rank %d", a, rank)
		}
		if a < 0 {
			a += int64(rank)
		}
		if seen[a] {
			return nil, n.Errorf("axis %d is repeated in %v", a, axes)
		}
		seen[a] = true
		out[i] = int(a)
	}
	return out, nil
}

// ---------------------------------------------------------------- SplitLike

// splitLike(dy, like_0, ..., like_{k-1}) cuts dy along axis into k pieces,
// piece i as long as like_i along axis: the gradient of Concat.
func splitLike(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	for i := range in {
		if in[i] == nil {
			return nil, n.Errorf("input %d is required", i)
		}
	}
	dy := in[0]
	r := dy.Rank()
	if r == 0 {
		return nil, n.Errorf("dy must have rank 1 or more")
	}
	ax, err := kern.NormAxis(n, int(n.AttrInt("axis", 0)), r)
	if err != nil {
		return nil, err
	}
	total := 0
	for i, like := range in[1:] {
		if like.Rank() != r {
			return nil, n.Errorf("input %d has shape %v, dy has %v: ranks differ", i+1, like.Shape, dy.Shape)
		}
		total += like.Shape[ax]
	}
	if total != dy.Shape[ax] {
		return nil, n.Errorf("the pieces add up to %d along axis %d, dy has shape %v", total, ax, dy.Shape)
	}
	if dy.DType != graph.Float32 && dy.DType != graph.Float64 {
		return nil, n.Errorf("dtype %v is not supported", dy.DType)
	}
	outer, inner := 1, 1
	for a, d := range dy.Shape {
		switch {
		case a < ax:
			outer *= d
		case a > ax:
			inner *= d
		}
	}
	// The result slice and the pieces' shape live in the node's state
	// (the allocator copies the shape).
	st := kern.State[splitLikeState](n)
	outs := append(st.outs[:0], make([]*graph.Tensor, len(in)-1)...)
	st.outs = outs
	off := 0
	for i, like := range in[1:] {
		shape := append(st.shape[:0], dy.Shape...)
		st.shape = shape
		shape[ax] = like.Shape[ax]
		// Every element of a piece is copied from dy: no zeroing pass.
		out, err := kern.NewUninit(n, dy.DType, shape)
		if err != nil {
			return nil, err
		}
		// Rows of the piece's width, dy's rows apart, over the cores.
		if err := shapeops.CopyRows(n, out.Data, dy.Data, outer, shape[ax]*inner, dy.Shape[ax]*inner, off*inner); err != nil {
			return nil, n.Errorf("%v", err)
		}
		off += shape[ax]
		outs[i] = out
	}
	return outs, nil
}

// splitLikeState is what a SplitLike node keeps between runs. Its result
// slice is reused like kern.Results's (the executor copies the results out
// before the node runs again).
type splitLikeState struct {
	outs  []*graph.Tensor
	shape []int
}

// ---------------------------------------------------------------- SliceGrad

// sliceGrad(dy, x[, starts, ends, axes, steps]) scatters dy into zeros
// shaped like x at the positions Slice read. Like Slice, it takes starts,
// ends and axes as attributes (Slice before opset 10) or as inputs 2-5.
func sliceGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, x := in[0], in[1]
	// The resolved ranges and the offset tables live in the node's state,
	// so that a step allocates none of them.
	ss := kern.State[sliceGradState](n)
	r := &ss.ranges
	if err := r.Resolve(n, x.Shape, in[2:]); err != nil {
		return nil, err
	}
	total := 0
	for _, c := range r.Count {
		total += c
	}
	flat := append(ss.flat[:0], make([]int, total)...)
	tables := append(ss.tables[:0], make([][]int, x.Rank())...)
	st := 1
	for a := x.Rank() - 1; a >= 0; a-- {
		total -= r.Count[a]
		t := flat[total : total+r.Count[a]]
		for j := range t {
			t[j] = (r.First[a] + j*r.Step[a]) * st
		}
		tables[a] = t
		st *= x.Shape[a]
	}
	ss.flat, ss.tables = flat, tables
	if err := checkGradShape(n, dy, r.Count); err != nil {
		return nil, err
	}
	out, err := scatterAddNew(n, dy, x.Shape, tables)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// sliceGradState is a SliceGrad node's scratch between runs: the resolved
// slice and the per-axis offset tables (in one backing array).
type sliceGradState struct {
	ranges shapeops.SliceRanges
	flat   []int
	tables [][]int
}

// ---------------------------------------------------------------- PadGrad

// padGrad(dy, x[, pads, constant_value, axes]) is the gradient of Pad with
// respect to its data: each element of dy goes back to the element of x it
// was copied from (none for constant padding; several elements of dy may
// come from one of x in edge, reflect and wrap modes, and they add up).
// Pads are input 2 (opset 11 on) or the pads/paddings attribute; axes are
// input 4 (opset 18 on); mode is the forward node's.
func padGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, x := in[0], in[1]
	r := x.Rank()
	mode := n.AttrString("mode", "constant")
	var pads []int64
	var axes []int
	var err error
	if t := kern.Opt(in, 2); t != nil {
		if pads, err = intsOf(n, t, "pads"); err != nil {
			return nil, err
		}
		if t := kern.Opt(in, 4); t != nil {
			raw, err := intsOf(n, t, "axes")
			if err != nil {
				return nil, err
			}
			if axes, err = normAxesList(n, raw, r); err != nil {
				return nil, err
			}
		}
	} else {
		a := n.Attr("pads")
		if a == nil {
			a = n.Attr("paddings")
		}
		if a == nil {
			return nil, n.Errorf("pads are required (input 2 or attribute pads)")
		}
		pads = a.Ints
	}
	begin, end, shape, err := graph.PadBounds(n, x.Shape, pads, axes)
	if err != nil {
		return nil, err
	}
	st := graph.Strides(x.Shape)
	tables := make([][]int, r)
	for a, d := range x.Shape {
		b, e := begin[a], end[a]
		if tables[a], err = graph.PadSources(n, mode, d, int(b), int(e), st[a], -1); err != nil {
			return nil, err
		}
	}
	if err := checkGradShape(n, dy, shape); err != nil {
		return nil, err
	}
	out, err := scatterAddNew(n, dy, x.Shape, tables)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// ---------------------------------------------------------------- TileGrad

// tileGrad(dy, x) sums dy over the tiles: the gradient of Tile. dy's dims
// are multiples of x's.
func tileGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, x := in[0], in[1]
	if dy.Rank() != x.Rank() {
		return nil, n.Errorf("dy has shape %v, x has %v: ranks differ", dy.Shape, x.Shape)
	}
	st := graph.Strides(x.Shape)
	tables := make([][]int, x.Rank())
	for a, d := range x.Shape {
		if (d == 0 && dy.Shape[a] != 0) || (d != 0 && dy.Shape[a]%d != 0) {
			return nil, n.Errorf("dy has shape %v, which does not tile x of shape %v", dy.Shape, x.Shape)
		}
		t := make([]int, dy.Shape[a])
		for i := range t {
			t[i] = (i % d) * st[a]
		}
		tables[a] = t
	}
	out, err := scatterAddNew(n, dy, x.Shape, tables)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// ---------------------------------------------------------------- Gather

// wrapIndex maps a possibly negative index into [0, dim).
func wrapIndex(n *graph.Node, v int64, dim int) (int, error) {
	if v < -int64(dim) || v >= int64(dim) {
		return 0, n.Errorf("index %d is out of range for an axis of size %d", v, dim)
	}
	if v < 0 {
		v += int64(dim)
	}
	return int(v), nil
}

// gatherGrad(dy, data, indices) adds each slice of dy into zeros shaped like
// data at the position its index names along axis (repeated indices add
// up; negative indices count from the end): the gradient of Gather.
func gatherGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	dy, data, ind := in[0], in[1], in[2]
	r := data.Rank()
	if r == 0 {
		return nil, n.Errorf("data must have rank 1 or more")
	}
	if !ind.DType.IsInt() {
		return nil, n.Errorf("indices must be an integer tensor, got %v", ind.DType)
	}
	ax, err := kern.NormAxis(n, int(n.AttrInt("axis", 0)), r)
	if err != nil {
		return nil, err
	}
	var wantBuf [8]int // (on the stack for ranks up to 8)
	want := append(append(append(wantBuf[:0], data.Shape[:ax]...), ind.Shape...), data.Shape[ax+1:]...)
	if err := checkGradShape(n, dy, want); err != nil {
		return nil, err
	}
	st := kern.State[gatherGradState](n)
	outer, inner := 1, 1
	for a, d := range data.Shape {
		switch {
		case a < ax:
			outer *= d
		case a > ax:
			inner *= d
		}
	}
	dim := data.Shape[ax]
	idx := append(st.idx[:0], make([]int, ind.Size())...)
	st.idx = idx
	for i := range idx {
		if idx[i], err = wrapIndex(n, ind.Int(i), dim); err != nil {
			return nil, err
		}
	}
	switch dy.DType {
	case graph.Float32, graph.Float64:
	default:
		return nil, n.Errorf("dtype %v is not supported", dy.DType)
	}
	// The zeros come from the cores together (an embedding's gradient is
	// the whole 50257×768 table for a few hundred rows of dY), then the
	// rows are added in index order on one core, as before.
	out, err := kern.NewUninit(n, dy.DType, data.Shape)
	if err != nil {
		return nil, err
	}
	switch src := dy.Data.(type) {
	case []float32:
		d := out.Data.([]float32)
		st.zero32.d = d
		kern.RunTask("GatherGrad", len(d), gradWorkers(len(d), 1), &st.zero32)
		st.zero32.d = nil
		gatherAdd(d, src, idx, outer, dim, inner)
	case []float64:
		d := out.Data.([]float64)
		st.zero64.d = d
		kern.RunTask("GatherGrad", len(d), gradWorkers(len(d), 1), &st.zero64)
		st.zero64.d = nil
		gatherAdd(d, src, idx, outer, dim, inner)
	}
	return kern.Results(n, out), nil
}

// gatherGradState is what a GatherGrad node keeps between runs: the
// wrapped indices and the zeroing work the cores share.
type gatherGradState struct {
	idx    []int
	zero32 zeroTask[float32]
	zero64 zeroTask[float64]
}

// zeroTask clears d[lo:hi] for each chunk.
type zeroTask[T float32 | float64] struct{ d []T }

func (z *zeroTask[T]) Chunk(lo, hi int) { clear(z.d[lo:hi]) }

// gatherAdd adds src (outer × len(idx) × inner) into dst (outer × dim ×
// inner) at the rows idx names.
func gatherAdd[T float32 | float64](dst, src []T, idx []int, outer, dim, inner int) {
	k := len(idx)
	for o := 0; o < outer; o++ {
		for j, row := range idx {
			s := src[(o*k+j)*inner : (o*k+j+1)*inner]
			d := dst[(o*dim+row)*inner : (o*dim+row+1)*inner]
			for i, v := range s {
				d[i] += v
			}
		}
	}
}

// gatherElementsGrad(dy, data, indices) adds each element of dy into zeros
// shaped like data at the element its index names along axis: the gradient
// of GatherElements (torch.gather).
func gatherElementsGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	dy, data, ind := in[0], in[1], in[2]
	r := data.Rank()
	if r == 0 {
		return nil, n.Errorf("data must have rank 1 or more")
	}
	if !ind.DType.IsInt() {
		return nil, n.Errorf("indices must be an integer tensor, got %v", ind.DType)
	}
	if ind.Rank() != r {
		return nil, n.Errorf("indices has shape %v, data has %v: ranks differ", ind.Shape, data.Shape)
	}
	ax, err := kern.NormAxis(n, int(n.AttrInt("axis", 0)), r)
	if err != nil {
		return nil, err
	}
	for a, d := range ind.Shape {
		if a != ax && d > data.Shape[a] {
			return nil, n.Errorf("indices of shape %v do not fit data of shape %v", ind.Shape, data.Shape)
		}
	}
	if err := checkGradShape(n, dy, ind.Shape); err != nil {
		return nil, err
	}
	st := graph.Strides(data.Shape)
	offs := make([]int, ind.Size())
	coord := make([]int, r)
	base := 0 // offset of coord with the axis coordinate left out
	for i := range offs {
		j, err := wrapIndex(n, ind.Int(i), data.Shape[ax])
		if err != nil {
			return nil, err
		}
		offs[i] = base + j*st[ax]
		for a := r - 1; a >= 0; a-- {
			coord[a]++
			if a != ax {
				base += st[a]
			}
			if coord[a] < ind.Shape[a] {
				break
			}
			if a != ax {
				base -= st[a] * coord[a]
			}
			coord[a] = 0
		}
	}
	out, err := kern.New(n, dy.DType, data.Shape)
	if err != nil {
		return nil, err
	}
	switch src := dy.Data.(type) {
	case []float32:
		dst := out.Data.([]float32)
		for i, o := range offs {
			dst[o] += src[i]
		}
	case []float64:
		dst := out.Data.([]float64)
		for i, o := range offs {
			dst[o] += src[i]
		}
	default:
		return nil, n.Errorf("dtype %v is not supported", dy.DType)
	}
	return kern.Results(n, out), nil
}
