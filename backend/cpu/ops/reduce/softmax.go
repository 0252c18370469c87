package reduce

import (
	"math"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
	"github.com/onnxtrain/onnxtrain/graph"
)

// softmaxKind selects a member of the softmax family.
type softmaxKind int

const (
	kindSoftmax softmaxKind = iota
	kindLogSoftmax
	kindHardmax
)

func init() {
	kern.Register("Softmax", softmaxKernel(kindSoftmax))
	kern.Register("LogSoftmax", softmaxKernel(kindLogSoftmax))
	kern.Register("Hardmax", softmaxKernel(kindHardmax))
}

// softmaxLayout returns the blocks a softmax-family node normalises over.
// Before opset 13 the input is coerced to 2-D at axis (default 1): every
// dim from axis on is one row. From opset 13 the op runs along the single
// axis (default -1).
func softmaxLayout(opset int64, n *graph.Node, shape []int) (blocks, error) {
	rank := len(shape)
	if rank == 0 {
		return blocks{outer: 1, r: 1, inner: 1}, nil
	}
	if opset != 0 && opset < 13 {
		axis := int(n.AttrInt("axis", 1))
		if axis < -rank || axis > rank {
			return blocks{}, n.Errorf("axis %d is out of range for an input of rank %d", axis, rank)
		}
		if axis < 0 {
			axis += rank
		}
		return blocks{outer: product(shape[:axis]), r: product(shape[axis:]), inner: 1}, nil
	}
	axis, err := kern.NormAxis(n, int(n.AttrInt("axis", -1)), rank)
	if err != nil {
		return blocks{}, err
	}
	return axisBlocks(shape, axis), nil
}

// softmaxKernel returns the kernel of Softmax, LogSoftmax or Hardmax.
func softmaxKernel(kind softmaxKind) kern.Kernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0]
		b, err := softmaxLayout(ctx.Opset, n, x.Shape)
		if err != nil {
			return nil, err
		}
		out, err := kern.NewUninit(n, x.DType, x.Shape) // every element is written
		if err != nil {
			return nil, err
		}
		tri := maskedRows(kind, n, x.Shape, b)
		switch xs := x.Data.(type) {
		case []float32:
			softmaxBlocksWith(kern.State[softmaxTask[float32]](n), kind, xs, out.Data.([]float32), b, tri)
		case []float64:
			softmaxBlocksWith(kern.State[softmaxTask[float64]](n), kind, xs, out.Data.([]float64), b, tri)
		default:
			return nil, n.Errorf("dtype %v is not supported (want a float type)", x.DType)
		}
		return kern.Results(n, out), nil
	}
}

// maskedRows is T where n is a Softmax whose input graph.MarkCausalAttention
// found −inf strictly above the diagonal of its last two axes (hint
// graph.CausalMaskedAttr) and that runs along the last axis of T×T
// matrices: row i of each matrix then has i+1 elements that count, and
// its softmax is +0 past them. 0 otherwise.
func maskedRows(kind softmaxKind, n *graph.Node, shape []int, b blocks) int {
	rank := len(shape)
	if kind != kindSoftmax || n.AttrInt(graph.CausalMaskedAttr, 0) != 1 || rank < 2 || b.inner != 1 {
		return 0
	}
	t := shape[rank-1]
	if shape[rank-2] != t || b.r != t {
		return 0
	}
	return t
}

// MaskedPrefix is how many elements of row i of a masked T×T matrix
// (maskedRows) the softmax computes: the i+1 that count, rounded up to a
// multiple of 8, at most t. The row kernels sum the exponentials in
// float64 lanes that take the elements eight at a time, in order
// (vmath.ExpShift32, also the AVX-512 loops), and the skipped elements'
// exponentials are exact zeros: the prefix's maximum and sum, and so
// every value it writes, are the whole row's bit for bit, and the rest
// of the row is +0, as the whole row's exp(−inf − max)·(1/s) is. The
// fused attention's gradient takes the same prefix of its rows
// (gradient.SoftmaxGradCausalRows32).
func MaskedPrefix(i, t int) int {
	return min(t, (i+8)&^7)
}

// CausalRowEnd is where the part of row i of a causal t×t matrix that a
// reader with the given reach reads ends: a reader whose structured
// products run in tiles or blocks of at most reach columns (the fused
// attention's, gemm.SgemmSerialTri and linalg's causal blocks) reads a row
// no further than the block after the one holding its diagonal. Past it
// nothing is read, and the causal kernels leave it as it was; reach 0:
// the whole row.
func CausalRowEnd(i, t, reach int) int {
	if reach <= 0 {
		return t
	}
	return min(t, (i/reach+2)*reach)
}

// softmaxBlocks applies the op along r in every block of x, writing y.
func softmaxBlocks[F float](kind softmaxKind, x, y []F, b blocks) {
	softmaxBlocksWith(new(softmaxTask[F]), kind, x, y, b, 0)
}

// softmaxTask is softmaxBlocks's work over contiguous rows, kept in a
// node's state.
type softmaxTask[F float] struct {
	kind softmaxKind
	x, y []F
	size int
	// tri: the rows are those of masked tri×tri matrices (maskedRows),
	// whose softmax takes a prefix of each row; 0: whole rows.
	tri int
}

// Chunk applies the op to rows [lo, hi).
func (t *softmaxTask[F]) Chunk(lo, hi int) {
	size := t.size
	var zero F
	for o := lo; o < hi; o++ {
		x, y := t.x[o*size:(o+1)*size], t.y[o*size:(o+1)*size]
		pf := 0 // each row fetches the next one's destination
		if o+1 < hi {
			pf = size * int(unsafe.Sizeof(zero))
		}
		if t.tri > 0 {
			l := MaskedPrefix(o%t.tri, t.tri)
			softmaxRowNext(t.kind, x[:l], y[:l], pf)
			clear(y[l:])
			continue
		}
		softmaxRowNext(t.kind, x, y, pf)
	}
}

// softmaxBlocksWith is softmaxBlocks with the work object t (a node's,
// kept between runs); tri > 0 (maskedRows, contiguous rows only) takes a
// prefix of each row of masked tri×tri matrices.
func softmaxBlocksWith[F float](t *softmaxTask[F], kind softmaxKind, x, y []F, b blocks, tri int) {
	size := b.r * b.inner
	if b.inner == 1 {
		*t = softmaxTask[F]{kind: kind, x: x, y: y, size: size, tri: tri}
		runRows(b.outer, size, t)
		*t = softmaxTask[F]{}
		return
	}
	mx := make([]float64, b.inner)
	acc := make([]float64, b.inner)
	arg := make([]int, b.inner)
	for o := 0; o < b.outer; o++ {
		softmaxStrided(kind, x[o*size:(o+1)*size], y[o*size:(o+1)*size], b.r, mx, acc, arg)
	}
}

// softmaxRow applies the op to one contiguous row.
func softmaxRow[F float](kind softmaxKind, row, dst []F) {
	softmaxRowNext(kind, row, dst, 0)
}

// softmaxRowNext is softmaxRow that, where one assembly call runs the
// row, fetches the lines pf bytes past dst's meanwhile (the next row's
// destination, with pf a row's bytes and the rows end to end:
// vmath.SoftmaxRow32). The results are softmaxRow's.
func softmaxRowNext[F float](kind softmaxKind, row, dst []F, pf int) {
	if len(row) == 0 {
		return
	}
	if r32, is32 := any(row).([]float32); is32 && kind == kindSoftmax {
		// One visit of the row while it sits in L1: the largest
		// element, e^(x-m) summed unrounded, the products with 1/Σ.
		d32 := any(dst).([]float32)
		if useAVX2 && use512 == vmath.AVX512() && &r32[0] != &d32[0] && vmath.SoftmaxRow32(d32, r32, pf) {
			// The three steps below in one assembly call (the row
			// kernels and vmath on the same instruction set).
			return
		}
		s := vmath.ExpShift32(d32, r32, float64(maxRow32(r32)))
		scaleRow32(d32[:len(r32)], 1/s)
		return
	}
	exp := expFunc[F]()
	m, arg := float64(row[0]), 0
	for i, v := range row {
		if f := float64(v); f > m {
			m, arg = f, i
		}
	}
	switch kind {
	case kindHardmax:
		clear(dst)
		dst[arg] = 1
	case kindSoftmax:
		var s float64
		if r32, is32 := any(row).([]float32); is32 {
			// e^(x-m) four float64 lanes at a time, summed unrounded.
			s = vmath.ExpShift32(any(dst).([]float32), r32, m)
		} else {
			for i, v := range row {
				e := exp(float64(v) - m)
				dst[i] = F(e)
				s += e
			}
		}
		inv := 1 / s
		for i, v := range dst {
			dst[i] = F(float64(v) * inv)
		}
	case kindLogSoftmax:
		var s float64
		if r32, is32 := any(row).([]float32); is32 && &row[0] != &dst[0] {
			// dst holds the exponentials until the loop below
			// overwrites it.
			s = vmath.ExpShift32(any(dst).([]float32), r32, m)
		} else {
			for _, v := range row {
				s += exp(float64(v) - m)
			}
		}
		shift := m + math.Log(s)
		for i, v := range row {
			dst[i] = F(float64(v) - shift)
		}
	}
}

// softmaxStrided applies the op along r rows of inner = len(mx) elements;
// mx, acc and arg are scratch buffers of that length.
func softmaxStrided[F float](kind softmaxKind, block, dst []F, r int, mx, acc []float64, arg []int) {
	inner := len(mx)
	if r == 0 {
		return
	}
	exp := expFunc[F]()
	for i, v := range block[:inner] {
		mx[i] = float64(v)
		arg[i] = 0
	}
	for k := 1; k < r; k++ {
		for i, v := range block[k*inner : (k+1)*inner] {
			if f := float64(v); f > mx[i] {
				mx[i], arg[i] = f, k
			}
		}
	}
	switch kind {
	case kindHardmax:
		clear(dst)
		for i, k := range arg {
			dst[k*inner+i] = 1
		}
		return
	case kindSoftmax:
		clear(acc)
		for k := 0; k < r; k++ {
			src := block[k*inner : (k+1)*inner]
			row := dst[k*inner : (k+1)*inner]
			for i, v := range src {
				e := exp(float64(v) - mx[i])
				row[i] = F(e)
				acc[i] += e
			}
		}
		for i := range acc {
			acc[i] = 1 / acc[i]
		}
		for k := 0; k < r; k++ {
			row := dst[k*inner : (k+1)*inner]
			for i, v := range row {
				row[i] = F(float64(v) * acc[i])
			}
		}
	case kindLogSoftmax:
		clear(acc)
		for k := 0; k < r; k++ {
			for i, v := range block[k*inner : (k+1)*inner] {
				acc[i] += exp(float64(v) - mx[i])
			}
		}
		for i := range acc {
			acc[i] = mx[i] + math.Log(acc[i])
		}
		for k := 0; k < r; k++ {
			src := block[k*inner : (k+1)*inner]
			row := dst[k*inner : (k+1)*inner]
			for i, v := range src {
				row[i] = F(float64(v) - acc[i])
			}
		}
	}
}

// SoftmaxRow32 writes the softmax of row into dst[:len(row)] (dst must
// not overlap row): the Softmax kernel's arithmetic on one contiguous
// row, bit for bit (the fused attention kernel's rows, linalg).
func SoftmaxRow32(dst, row []float32) {
	softmaxRow(kindSoftmax, row, dst[:len(row)])
}

// SoftmaxCausalRows32 is the Softmax of a Softmax node with the causal
// hint (graph.CausalMaskedAttr) over t rows of t elements that src holds
// end to end, into dst's, with that kernel's bits: row i's elements past
// i are taken as −inf (src's are overwritten so: what the mask makes of
// them), the softmax takes the row's MaskedPrefix and writes +0 past it.
// dst may be src; row (t elements at least) is then where each row's
// result is made before it is copied back.
func SoftmaxCausalRows32(dst, src, row []float32, t int) {
	SoftmaxCausalRowsReach32(dst, src, row, t, 0)
}

// SoftmaxCausalRowsReach32 is SoftmaxCausalRows32 for a reader with the
// given reach (CausalRowEnd): the +0 past each row's prefix goes only as
// far as that reader reads; the rest of dst is left as it was.
func SoftmaxCausalRowsReach32(dst, src, row []float32, t, reach int) {
	if t <= 0 {
		return
	}
	negInf := float32(math.Inf(-1))
	for r := 0; r < len(src)/t; r++ {
		x, y := src[r*t:(r+1)*t], dst[r*t:(r+1)*t]
		l := MaskedPrefix(r%t, t)
		for j := r%t + 1; j < l; j++ {
			x[j] = negInf
		}
		pf := 0
		if (r+1)*t < len(src) {
			pf = 4 * t
		}
		if &x[0] == &y[0] {
			softmaxRowNext(kindSoftmax, x[:l], row[:l], pf)
			copy(y, row[:l])
		} else {
			softmaxRowNext(kindSoftmax, x[:l], y[:l], pf)
		}
		clear(y[l:CausalRowEnd(r%t, t, reach)])
	}
}

// SoftmaxRows32 is SoftmaxRow32 over each row of cols elements that src
// holds end to end, into dst's (not overlapping src), with the same bits;
// each row fetches the next row's destination lines while it computes,
// as the Softmax kernel's rows do (the fused attention's P, written to
// memory a head at a time).
func SoftmaxRows32(dst, src []float32, cols int) {
	if cols <= 0 {
		return
	}
	rows := len(src) / cols
	for r := 0; r < rows; r++ {
		pf := 0
		if r+1 < rows {
			pf = 4 * cols
		}
		softmaxRowNext(kindSoftmax, src[r*cols:(r+1)*cols], dst[r*cols:(r+1)*cols], pf)
	}
}
