package linalg

import (
	"slices"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("MatMul", matMulKernel)
	kern.Register("Gemm", gemmKernel)
}

// matmulPlan is the shape analysis of a numpy-style matmul: batch dims
// broadcast, 1-D operands promoted to matrices and the promoted dim dropped
// from the output.
type matmulPlan struct {
	m, n, k int
	// batch is the number of matrix products; aIdx[i] and bIdx[i] are the
	// matrices of A and B that product i reads.
	batch      int
	aIdx, bIdx []int
	outShape   []int
}

// newMatmulPlan checks the operand shapes and plans the batched product.
func newMatmulPlan(n *graph.Node, as, bs []int) (*matmulPlan, error) {
	if len(as) == 0 || len(bs) == 0 {
		return nil, n.Errorf("operands must have rank >= 1, got shapes %v and %v", as, bs)
	}
	aMat, bMat := as, bs
	if len(as) == 1 {
		aMat = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bMat = []int{bs[0], 1}
	}
	p := &matmulPlan{
		m: aMat[len(aMat)-2], k: aMat[len(aMat)-1],
		n: bMat[len(bMat)-1],
	}
	if kb := bMat[len(bMat)-2]; kb != p.k {
		return nil, n.Errorf("inner dimensions differ: A has shape %v, B has shape %v", as, bs)
	}
	aBatch, bBatch := aMat[:len(aMat)-2], bMat[:len(bMat)-2]
	batch, err := kern.BroadcastShape(aBatch, bBatch)
	if err != nil {
		return nil, n.Errorf("batch dimensions of A %v and B %v do not broadcast", as, bs)
	}
	p.batch = product(batch)
	p.aIdx = kern.BroadcastIndex(aBatch, batch)
	p.bIdx = kern.BroadcastIndex(bBatch, batch)
	p.outShape = append([]int{}, batch...)
	if len(as) > 1 {
		p.outShape = append(p.outShape, p.m)
	}
	if len(bs) > 1 {
		p.outShape = append(p.outShape, p.n)
	}
	return p, nil
}

// planState is a node's matmul plan kept between runs (kern.State), with
// the operand shapes and transposes it was made for: a node that runs
// again on the same shapes reuses it instead of planning (and allocating)
// again.
type planState struct {
	as, bs []int
	ta, tb bool
	valid  bool
	p      matmulPlan
}

// nodePlan is the plan of op(A)·op(B) for operands of shapes as and bs,
// op swapping the last two axes where ta (tb) is set: the node's kept plan
// when the shapes match it, a new one (kept for the next run) otherwise.
// The plan belongs to the node; a kernel uses it only until it plans
// another product of the same node.
func nodePlan(n *graph.Node, as, bs []int, ta, tb bool) (*matmulPlan, error) {
	st := kern.State[planState](n)
	if st.valid && st.ta == ta && st.tb == tb && slices.Equal(st.as, as) && slices.Equal(st.bs, bs) {
		return &st.p, nil
	}
	st.valid = false
	pa, pb := as, bs
	if ta {
		pa = swappedShape(as)
	}
	if tb {
		pb = swappedShape(bs)
	}
	p, err := newMatmulPlan(n, pa, pb)
	if err != nil {
		return nil, err
	}
	st.p = *p
	st.as = append(st.as[:0], as...)
	st.bs = append(st.bs[:0], bs...)
	st.ta, st.tb, st.valid = ta, tb, true
	return &st.p, nil
}

// affine reports whether idx[i] == i*stride for every i, returning stride.
func affine(idx []int) (int, bool) {
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

// runF32 computes the planned product with Sgemm.
func (p *matmulPlan) runF32(a, b, c []float32) { p.runF32Trans(false, false, a, b, c) }

// runF32Trans computes the planned product with Sgemm, where a transposed
// operand (ta, tb) is stored with its last two axes swapped (A's matrices
// k×m, B's n×k) and read in place.
func (p *matmulPlan) runF32Trans(ta, tb bool, a, b, c []float32) {
	m, n, k := p.m, p.n, p.k
	if p.batch == 0 || m == 0 || n == 0 {
		return
	}
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	sa, aOK := affine(p.aIdx)
	sb, bOK := affine(p.bIdx)
	switch {
	case !ta && aOK && sa == 1 && bOK && sb == 0:
		// Every product shares B and A's matrices are consecutive: one
		// tall product (the usual activation × weight case).
		gemm.Sgemm(false, tb, p.batch*m, n, k, 1, a, lda, b, ldb, 0, c, n)
	case aOK && bOK:
		gemm.SgemmStrided(ta, tb, m, n, k, 1, a, lda, sa*m*k, b, ldb, sb*k*n, 0, c, n, m*n, p.batch)
	default:
		for i := 0; i < p.batch; i++ {
			gemm.Sgemm(ta, tb, m, n, k, 1, a[p.aIdx[i]*m*k:], lda, b[p.bIdx[i]*k*n:], ldb, 0, c[i*m*n:], n)
		}
	}
}

// linalgMatMulRun computes the planned product with generic loops.
func linalgMatMulRun[T numeric](p *matmulPlan, a, b, c []T) {
	m, n, k := p.m, p.n, p.k
	for i := 0; i < p.batch; i++ {
		linalgMatMulGeneric(m, n, k, a[p.aIdx[i]*m*k:], b[p.bIdx[i]*k*n:], c[i*m*n:])
	}
}

// matMulKernel is MatMul: numpy matmul with batch broadcasting.
func matMulKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	a, b := in[0], in[1]
	if a.DType != b.DType {
		return nil, n.Errorf("A is %v but B is %v", a.DType, b.DType)
	}
	p, err := nodePlan(n, a.Shape, b.Shape, false, false)
	if err != nil {
		return nil, err
	}
	alloc := kern.New
	if a.DType == graph.Float32 {
		alloc = kern.NewUninit // runF32 overwrites every element
	}
	out, err := alloc(n, a.DType, p.outShape)
	if err != nil {
		return nil, err
	}
	if err := matmulDispatch(n, p, a, b, out); err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// matmulDispatch runs p on a and b (same dtype) into out.
func matmulDispatch(n *graph.Node, p *matmulPlan, a, b, out *graph.Tensor) error {
	switch ad := a.Data.(type) {
	case []float32:
		p.runF32(ad, b.Data.([]float32), out.Data.([]float32))
	case []float64:
		linalgMatMulRun(p, ad, b.Data.([]float64), out.Data.([]float64))
	case []int8:
		linalgMatMulRun(p, ad, b.Data.([]int8), out.Data.([]int8))
	case []int16:
		linalgMatMulRun(p, ad, b.Data.([]int16), out.Data.([]int16))
	case []int32:
		linalgMatMulRun(p, ad, b.Data.([]int32), out.Data.([]int32))
	case []int64:
		linalgMatMulRun(p, ad, b.Data.([]int64), out.Data.([]int64))
	case []uint8:
		linalgMatMulRun(p, ad, b.Data.([]uint8), out.Data.([]uint8))
	case []uint16:
		linalgMatMulRun(p, ad, b.Data.([]uint16), out.Data.([]uint16))
	case []uint32:
		linalgMatMulRun(p, ad, b.Data.([]uint32), out.Data.([]uint32))
	case []uint64:
		linalgMatMulRun(p, ad, b.Data.([]uint64), out.Data.([]uint64))
	default:
		return n.Errorf("dtype %v is not supported", a.DType)
	}
	return nil
}

// gemmKernel is Gemm: Y = alpha*op(A)*op(B) + beta*C with C broadcast
// unidirectionally to (M, N). C is optional (required before opset 11 by the
// spec; a missing C is accepted as zero in every opset). Before opset 7 C
// broadcasts only when the broadcast attribute is set.
func gemmKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	return gemmRun(ctx, n, in, false)
}

// gemmRun is Gemm, followed by Relu when relu is set (graph.GemmRelu; in
// the float32 path's GEMM epilogue, rounding as the separate Relu would).
func gemmRun(ctx *kern.Context, n *graph.Node, in []*graph.Tensor, relu bool) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	a, b, c := in[0], in[1], kern.Opt(in, 2)
	if a.DType != b.DType || (c != nil && c.DType != a.DType) {
		return nil, n.Errorf("inputs must share one dtype")
	}
	if len(a.Shape) != 2 || len(b.Shape) != 2 {
		return nil, n.Errorf("A and B must be 2-D, got shapes %v and %v", a.Shape, b.Shape)
	}
	transA, transB := n.AttrInt("transA", 0) != 0, n.AttrInt("transB", 0) != 0
	alpha, beta := n.AttrFloat("alpha", 1), n.AttrFloat("beta", 1)
	m, k := a.Shape[0], a.Shape[1]
	if transA {
		m, k = k, m
	}
	kb, nn := b.Shape[0], b.Shape[1]
	if transB {
		kb, nn = nn, kb
	}
	if k != kb {
		return nil, n.Errorf("inner dimensions differ: op(A) is %d×%d, op(B) is %d×%d", m, k, kb, nn)
	}
	// The output shape lives in the node's state: a new slice would be
	// allocated on every call (the allocator keeps a copy).
	st := kern.State[gemmState](n)
	st.outShape = append(st.outShape[:0], m, nn)
	outShape := st.outShape
	alloc := kern.New
	if a.DType == graph.Float32 {
		alloc = kern.NewUninit // the float32 path below overwrites every element
	}
	out, err := alloc(n, a.DType, outShape)
	if err != nil {
		return nil, err
	}
	useC := c != nil && beta != 0
	if useC {
		if err := gemmCheckC(ctx, n, c.Shape, outShape); err != nil {
			return nil, err
		}
	}
	var bcast []int
	if useC && a.DType != graph.Float32 {
		bcast = kern.BroadcastIndex(c.Shape, outShape)
	}
	switch ad := a.Data.(type) {
	case []float32:
		y := out.Data.([]float32)
		bd := b.Data.([]float32)
		if useC && biasRowOf(c.Shape, nn) {
			// A bias row (the linear layers' C): the GEMM writes it
			// into each block of Y just before reading it, instead
			// of a separate pass over Y first (same bits).
			gemm.SgemmRowC(transA, transB, m, nn, k, alpha, ad, a.Shape[1], bd, b.Shape[1], beta, c.Data.([]float32), y, nn, gemm.Epilogue{Relu: relu})
			return kern.Results(n, out), nil
		}
		cBeta := float32(0)
		if useC {
			fillBroadcastRows(y, c.Data.([]float32), c.Shape, m, nn)
			cBeta = beta
		}
		gemm.SgemmEpilogue(transA, transB, m, nn, k, alpha, ad, a.Shape[1], bd, b.Shape[1], cBeta, y, nn, gemm.Epilogue{Relu: relu})
		return kern.Results(n, out), nil
	case []float64:
		gemmGeneric(ad, b.Data.([]float64), c, out.Data.([]float64), m, nn, k, transA, transB, alpha, beta, bcast)
	case []int32:
		gemmGeneric(ad, b.Data.([]int32), c, out.Data.([]int32), m, nn, k, transA, transB, alpha, beta, bcast)
	case []int64:
		gemmGeneric(ad, b.Data.([]int64), c, out.Data.([]int64), m, nn, k, transA, transB, alpha, beta, bcast)
	case []uint32:
		gemmGeneric(ad, b.Data.([]uint32), c, out.Data.([]uint32), m, nn, k, transA, transB, alpha, beta, bcast)
	case []uint64:
		gemmGeneric(ad, b.Data.([]uint64), c, out.Data.([]uint64), m, nn, k, transA, transB, alpha, beta, bcast)
	default:
		return nil, n.Errorf("dtype %v is not supported", a.DType)
	}
	if relu {
		switch o := out.Data.(type) {
		case []float64:
			reluInPlace(o)
		case []int32:
			reluInPlace(o)
		case []int64:
			reluInPlace(o)
		}
	}
	return kern.Results(n, out), nil
}

// gemmState is what a Gemm node keeps between runs.
type gemmState struct{ outShape []int }

// biasRowOf reports whether Gemm's C of shape cs broadcasts as one row of
// n elements repeated over every row of Y ([n] or [1, n]).
func biasRowOf(cs []int, n int) bool {
	switch len(cs) {
	case 1:
		return cs[0] == n
	case 2:
		return cs[0] == 1 && cs[1] == n
	}
	return false
}

// fillBroadcastRows writes C, of a shape gemmCheckC accepted (rank ≤ 2,
// each dim 1 or the output's), broadcast to the m×n matrix y, row by row
// (a bias vector is copied into every row, without an index per element).
func fillBroadcastRows(y, c []float32, cs []int, m, n int) {
	rows, cols := 1, 1
	switch len(cs) {
	case 1:
		cols = cs[0]
	case 2:
		rows, cols = cs[0], cs[1]
	}
	for i := 0; i < m; i++ {
		src := c[:cols]
		if rows == m {
			src = c[i*cols : (i+1)*cols]
		}
		dst := y[i*n : (i+1)*n]
		if cols == n {
			copy(dst, src)
			continue
		}
		v := src[0]
		for j := range dst {
			dst[j] = v
		}
	}
}

// reluInPlace replaces the negative elements of s by 0.
func reluInPlace[T float64 | int32 | int64](s []T) {
	for i, v := range s {
		if v < 0 {
			s[i] = 0
		}
	}
}

// gemmCheckC checks that C broadcasts unidirectionally to (M, N).
func gemmCheckC(ctx *kern.Context, n *graph.Node, cs, outShape []int) error {
	if ctx != nil && ctx.Opset < 7 && n.AttrInt("broadcast", 0) == 0 {
		if len(cs) != 2 || cs[0] != outShape[0] || cs[1] != outShape[1] {
			return n.Errorf("C has shape %v, want %v (set broadcast=1 to broadcast it)", cs, outShape)
		}
		return nil
	}
	if len(cs) > 2 {
		return n.Errorf("C has shape %v, which does not broadcast to %v", cs, outShape)
	}
	off := 2 - len(cs)
	for i, d := range cs {
		if d != 1 && d != outShape[off+i] {
			return n.Errorf("C has shape %v, which does not broadcast to %v", cs, outShape)
		}
	}
	return nil
}

// gemmGeneric is Gemm for dtypes without a fast path. The scalings happen in
// float64 and are converted back to T.
func gemmGeneric[T numeric](a, b []T, c *graph.Tensor, y []T, m, n, k int, transA, transB bool, alpha, beta float32, bcast []int) {
	if transA {
		t := make([]T, m*k)
		stridedCopy(t, a, []int{m, k}, []int{1, m})
		a = t
	}
	if transB {
		t := make([]T, k*n)
		stridedCopy(t, b, []int{k, n}, []int{1, k})
		b = t
	}
	linalgMatMulGeneric(m, n, k, a, b, y)
	if alpha != 1 {
		for i, v := range y {
			y[i] = T(float64(alpha) * float64(v))
		}
	}
	if bcast != nil {
		cd := c.Data.([]T)
		for i, j := range bcast {
			y[i] += T(float64(beta) * float64(cd[j]))
		}
	}
}
