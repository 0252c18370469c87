package linalg

import (
	"github.com/onnxtrain/onnxtrain/graph"
)

// numeric is every Go element type a linalg kernel computes on. Float16 and
// BFloat16 never reach the kernels: the executor converts them to float32.
type numeric interface {
	~float32 | ~float64 | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint8 | ~uint16 | ~uint32 | ~uint64
}

// isNumeric reports whether a kernel here can compute on dtype d.
func isNumeric(d graph.DType) bool {
	switch d {
	case graph.Float32, graph.Float64, graph.Int8, graph.Int16, graph.Int32, graph.Int64,
		graph.Uint8, graph.Uint16, graph.Uint32, graph.Uint64:
		return true
	}
	return false
}

// linalgMatMulGeneric computes c = a·b for row-major a (m×k), b (k×n) and
// c (m×n), overwriting c.
func linalgMatMulGeneric[T numeric](m, n, k int, a, b, c []T) {
	c = c[:m*n]
	clear(c)
	for i := 0; i < m; i++ {
		row := c[i*n : i*n+n]
		for p := 0; p < k; p++ {
			av := a[i*k+p]
			brow := b[p*n : p*n+n]
			for j, bv := range brow {
				row[j] += av * bv
			}
		}
	}
}

// stridedCopy fills dst (contiguous, row-major over shape) from src read
// through strides (one per dim; 0 broadcasts, a sum of strides walks a
// diagonal).
func stridedCopy[T any](dst, src []T, shape, strides []int) {
	total := 1
	for _, d := range shape {
		total *= d
	}
	if total == 0 {
		return
	}
	rank := len(shape)
	if rank == 0 {
		dst[0] = src[0]
		return
	}
	inner, innerStride := shape[rank-1], strides[rank-1]
	counter := make([]int, rank)
	off := 0
	for o := 0; o < total; o += inner {
		row := dst[o : o+inner]
		if innerStride == 1 {
			copy(row, src[off:off+inner])
		} else {
			s := off
			for j := range row {
				row[j] = src[s]
				s += innerStride
			}
		}
		for d := rank - 2; d >= 0; d-- {
			counter[d]++
			off += strides[d]
			if counter[d] < shape[d] {
				break
			}
			off -= strides[d] * counter[d]
			counter[d] = 0
		}
	}
}

// contiguousStrides returns the row-major strides of shape.
func contiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
	return st
}

// product multiplies the dims of shape.
func product(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
