package gemm

import (
	"fmt"
)

// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices, where
// op(X) is X or its transpose. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb
// and ldc are the row strides of A, B and C as stored. When beta is 0, C is
// overwritten without being read (NaNs in C do not propagate). A and B are
// always read, even when alpha is 0, so that NaNs in them propagate as they
// would in alpha*(A·B) (0*NaN is NaN).
//
// The caller guarantees that the slices are long enough for the given shapes
// and strides (Check validates them); Sgemm panics otherwise, like an
// out-of-range slice index.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if p, ok := newProblem(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); ok {
		p.run()
	}
}

// newProblem sets up Sgemm's product, or computes it and reports false
// when it is empty or small enough for the direct loops.
func newProblem(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) (problem, bool) {
	if m <= 0 || n <= 0 {
		return problem{}, false
	}
	if k <= 0 {
		scaleC(m, n, beta, c, ldc)
		return problem{}, false
	}
	p := problem{
		transA: transA, transB: transB,
		m: m, n: n, k: k, alpha: alpha, beta: beta,
		a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc,
	}
	if DirectLoops(m, n, k) {
		scaleC(m, n, beta, c, ldc)
		p.direct(0, m, 0, n)
		return problem{}, false
	}
	return p, true
}

// Epilogue is what SgemmEpilogue applies to each element of C after the
// product: the bias of its column, then the activation. Each C block gets
// it right after its last k slice is stored, while the block is in cache,
// so it costs no separate pass over C.
type Epilogue struct {
	// Bias, if not nil, has n elements: Bias[j] is added to column j.
	Bias []float32
	// Relu replaces negative results by 0 (after the bias; NaN stays NaN,
	// as Relu does).
	Relu bool
	// Block, if not nil, is applied last (after Bias and Relu) to each
	// finished block of C, while it is in cache.
	Block BlockEpilogue
}

// BlockEpilogue is an elementwise epilogue over blocks of C: ApplyBlock
// gets the whole of C (row stride ldc) and rewrites rows [i0, i1) and
// columns [j0, j1) of it, which hold their final product (bias and ReLU
// applied). It may read and write other arrays of C's layout at the same
// indices. Blocks are disjoint and may be applied from several workers at
// once.
type BlockEpilogue interface {
	ApplyBlock(c []float32, ldc, i0, i1, j0, j1 int)
}

// SgemmEpilogue computes C = ep(alpha*op(A)*op(B) + beta*C): the result
// rounded to float32 as Sgemm stores it, then ep applied element by element
// (each step rounded), so that the result is bit for bit Sgemm's followed
// by adding the bias and applying the activation in separate passes.
func SgemmEpilogue(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, ep Epilogue) {
	sgemmEpilogue(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc, ep)
}

// SgemmRowC computes C = ep(alpha*op(A)*op(B) + beta*R), where every row
// of the m×n matrix R is row (n elements; Gemm's bias as ONNX broadcasts
// it): bit for bit what filling each row of C with row and then calling
// SgemmEpilogue with beta gives, without that separate pass over C. Each
// block of C is filled just before its first k slice reads it, while the
// kernel is about to use it. beta 0 ignores row (C is overwritten).
func SgemmRowC(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, row, c []float32, ldc int, ep Epilogue) {
	if m > 0 && n > 0 && beta != 0 {
		_ = row[n-1] // bounds, before any work
	} else {
		row = nil
	}
	sgemmEpilogue(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, row, c, ldc, ep)
}

// sgemmEpilogue is SgemmEpilogue, with C's rows first set to cRow when
// cRow is not nil (SgemmRowC).
func sgemmEpilogue(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, cRow, c []float32, ldc int, ep Epilogue) {
	if m <= 0 || n <= 0 {
		return
	}
	if ep.Bias != nil {
		_ = ep.Bias[n-1] // bounds, before any work
	}
	if k <= 0 || DirectLoops(m, n, k) {
		if cRow != nil {
			fillRows(c, ldc, 0, m, 0, n, cRow)
		}
		Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		ep.apply(c, ldc, 0, m, 0, n)
		return
	}
	p := &problem{
		transA: transA, transB: transB,
		m: m, n: n, k: k, alpha: alpha, beta: beta,
		a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc, ep: ep, cRow: cRow,
	}
	p.run()
}

// fillRows sets rows [i0, i1) and columns [j0, j1) of C (row stride ldc)
// to row[j0:j1].
func fillRows(c []float32, ldc, i0, i1, j0, j1 int, row []float32) {
	src := row[j0:j1]
	for i := i0; i < i1; i++ {
		copy(c[i*ldc+j0:i*ldc+j1], src)
	}
}

// active reports whether the epilogue changes anything.
func (ep *Epilogue) active() bool {
	return ep != nil && (ep.Bias != nil || ep.Relu || ep.Block != nil)
}

// apply runs the epilogue over rows [i0, i1) and columns [j0, j1) of C.
func (ep *Epilogue) apply(c []float32, ldc, i0, i1, j0, j1 int) {
	if !ep.active() || i1 <= i0 || j1 <= j0 {
		return
	}
	if ep.Bias != nil || ep.Relu {
		var bias []float32
		if ep.Bias != nil {
			bias = ep.Bias[j0:j1]
		}
		epilogueRowsFn(c[i0*ldc+j0:], ldc, i1-i0, j1-j0, bias, ep.Relu)
	}
	if ep.Block != nil {
		ep.Block.ApplyBlock(c, ldc, i0, i1, j0, j1)
	}
}

// AddRowVector adds v[j] to column j of rows rows of C (row stride ldc,
// n columns), each sum rounded to float32: the bias epilogue on its own
// (vectorised where the epilogue is), for kernels that add a row to data
// they have just written.
func AddRowVector(c []float32, ldc, rows, n int, v []float32) {
	if rows <= 0 || n <= 0 {
		return
	}
	epilogueRowsFn(c, ldc, rows, n, v[:n], false)
}

// epilogueRowsFn is epilogueRowsGo, replaced by assembly where available.
var epilogueRowsFn = epilogueRowsGo

// epilogueRowsGo applies the epilogue to rows rows of C (ldc apart from
// c[0]) and their first n columns: bias[j] added to column j (bias nil:
// none), then negatives replaced by 0 when relu is set (NaN stays NaN).
func epilogueRowsGo(c []float32, ldc, rows, n int, bias []float32, relu bool) {
	for i := 0; i < rows; i++ {
		row := c[i*ldc : i*ldc+n]
		if bias != nil {
			b := bias[:len(row)]
			for j, v := range b {
				row[j] += v
			}
		}
		if relu {
			for j, v := range row {
				if v < 0 {
					row[j] = 0
				}
			}
		}
	}
}

// SgemmStrided runs batch independent Sgemm products. Matrix i of A starts at
// a[i*strideA] (likewise for B and C). A stride of 0 reuses the same matrix
// for every product (broadcasting). Small products are spread over
// goroutines by batch; large ones parallelise inside Sgemm.
func SgemmStrided(transA, transB bool, m, n, k int, alpha float32,
	a []float32, lda, strideA int, b []float32, ldb, strideB int,
	beta float32, c []float32, ldc, strideC int, batch int) {
	if batch <= 0 || m <= 0 || n <= 0 {
		return
	}
	work := m * n * k
	if work >= parallelWork || batch == 1 || work*batch < parallelWork {
		// In sequence (each product splits itself if large): no closure,
		// so no allocation.
		for i := 0; i < batch; i++ {
			Sgemm(transA, transB, m, n, k, alpha,
				a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
		}
		return
	}
	t := stridedTaskPool.Get().(*stridedTask)
	*t = stridedTask{transA, transB, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC}
	parallelFor(batch, t)
	*t = stridedTask{} // drop the operands
	stridedTaskPool.Put(t)
}

// stridedTask is a parallel SgemmStrided call in flight: index i runs
// product i. Pooled, so the fan-out allocates nothing.
type stridedTask struct {
	transA, transB bool
	m, n, k        int
	alpha          float32
	a              []float32
	lda, strideA   int
	b              []float32
	ldb, strideB   int
	beta           float32
	c              []float32
	ldc, strideC   int
}

var stridedTaskPool = keepPool{New: func() any { return new(stridedTask) }}

func (t *stridedTask) at(i int) {
	Sgemm(t.transA, t.transB, t.m, t.n, t.k, t.alpha,
		t.a[i*t.strideA:], t.lda, t.b[i*t.strideB:], t.ldb, t.beta, t.c[i*t.strideC:], t.ldc)
}

// Check validates Sgemm's arguments against the slice lengths and returns a
// descriptive error instead of the panic Sgemm would raise.
func Check(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("gemm: negative size m=%d n=%d k=%d", m, n, k)
	}
	if m == 0 || n == 0 {
		return nil
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if err := checkMatrix("A", a, ar, ac, lda); err != nil {
		return err
	}
	if err := checkMatrix("B", b, br, bc, ldb); err != nil {
		return err
	}
	return checkMatrix("C", c, m, n, ldc)
}

func checkMatrix(name string, x []float32, rows, cols, ld int) error {
	if rows == 0 || cols == 0 {
		return nil
	}
	if ld < cols {
		return fmt.Errorf("gemm: %s is %d×%d but its row stride is %d", name, rows, cols, ld)
	}
	if need := (rows-1)*ld + cols; len(x) < need {
		return fmt.Errorf("gemm: %s is %d×%d with stride %d and needs %d elements, has %d", name, rows, cols, ld, need, len(x))
	}
	return nil
}

// scaleC applies C = beta*C, writing zeros without reading C when beta is 0.
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// problem is one C = alpha*op(A)*op(B) + beta*C. The packed path applies
// beta while storing the first k block; the direct path expects C to have
// been scaled by beta already and adds to it.
type problem struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a              []float32
	lda            int
	b              []float32
	ldb            int
	c              []float32
	ldc            int
	// ep is applied to each C block after its last k slice (held by
	// value, so that a product handed to other workers does not move
	// the caller's Epilogue to the heap).
	ep Epilogue
	// cRow, if not nil, is C's every row before the product (n
	// elements, SgemmRowC): blocked writes it into each block of C
	// before the block's first k slice reads C (beta not 0).
	cRow []float32
	// after is what the last block prefetches while it computes: the
	// operands of the product the caller runs next (SgemmSerialNext),
	// or nothing.
	after [2]Region
}

// direct computes rows [i0, i1) and columns [j0, j1) of C without packing. It
// is used for small or degenerate (single row or column) problems.
func (p *problem) direct(i0, i1, j0, j1 int) {
	n, k := j1-j0, p.k
	if p.transB || n == 1 {
		// C[i][j] += alpha * dot(row i of op(A), column j of op(B)), with
		// strided operands gathered into contiguous vectors first.
		var arow, bcol []float32
		if p.transA {
			arow = make([]float32, k)
		}
		if !p.transB { // then n == 1: gather the single column once
			bcol = make([]float32, k)
			for q := range bcol {
				bcol[q] = p.b[q*p.ldb+j0]
			}
		}
		for i := i0; i < i1; i++ {
			if p.transA {
				for q := range arow {
					arow[q] = p.a[q*p.lda+i]
				}
			} else {
				arow = p.a[i*p.lda : i*p.lda+k]
			}
			row := p.c[i*p.ldc+j0 : i*p.ldc+j1]
			for j := range row {
				if p.transB {
					bcol = p.b[(j0+j)*p.ldb : (j0+j)*p.ldb+k]
				}
				row[j] += p.alpha * dot(arow, bcol)
			}
		}
		return
	}
	for i := i0; i < i1; i++ {
		row := p.c[i*p.ldc+j0 : i*p.ldc+j1]
		for q := 0; q < k; q++ {
			var av float32
			if p.transA {
				av = p.a[q*p.lda+i]
			} else {
				av = p.a[i*p.lda+q]
			}
			axpy(p.alpha*av, p.b[q*p.ldb+j0:q*p.ldb+j0+n], row)
		}
	}
}

// dot returns the inner product of x and y (len(y) >= len(x)).
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy computes y += alpha*x (len(y) >= len(x)).
func axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}
