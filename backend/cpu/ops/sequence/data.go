package sequence

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// seqCopyRunsOf copies count runs of run elements from src (which must be a
// []T) to dst; run i starts at srcOff+i*srcStride in src and
// dstOff+i*dstStride in dst.
func seqCopyRunsOf[T any](dst []T, src any, dstOff, dstStride, srcOff, srcStride, count, run int) error {
	s, ok := src.([]T)
	if !ok {
		return fmt.Errorf("cannot copy %T into %T", src, dst)
	}
	if run == 1 {
		for i := 0; i < count; i++ {
			dst[dstOff+i*dstStride] = s[srcOff+i*srcStride]
		}
		return nil
	}
	for i := 0; i < count; i++ {
		d := dstOff + i*dstStride
		o := srcOff + i*srcStride
		copy(dst[d:d+run], s[o:o+run])
	}
	return nil
}

// seqCopyRuns is seqCopyRunsOf for the typed slices a graph.Tensor holds;
// dst and src must hold the same Go type.
func seqCopyRuns(dst, src any, dstOff, dstStride, srcOff, srcStride, count, run int) error {
	if count == 0 || run == 0 {
		return nil
	}
	switch d := dst.(type) {
	case []float32:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []float64:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []int8:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []int16:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []int32:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []int64:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []uint8:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []uint16:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []uint32:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []uint64:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []bool:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	case []string:
		return seqCopyRunsOf(d, src, dstOff, dstStride, srcOff, srcStride, count, run)
	}
	return fmt.Errorf("unsupported tensor data %T", dst)
}

// seqAxisSplit views shape as [outer, shape[axis], inner].
func seqAxisSplit(shape []int, axis int) (outer, dim, inner int) {
	outer, inner = 1, 1
	for _, d := range shape[:axis] {
		outer *= d
	}
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	return outer, shape[axis], inner
}

// seqView returns a tensor that shares t's data (kernels never modify their
// inputs) under its own shape slice.
func seqView(t *graph.Tensor) *graph.Tensor {
	return &graph.Tensor{DType: t.DType, Shape: append([]int{}, t.Shape...), Data: t.Data}
}

// seqInput returns input i as a sequence value, or an error naming what it
// is instead.
func seqInput(n *graph.Node, in []*graph.Tensor, i int, what string) ([]*graph.Tensor, error) {
	t := kern.Opt(in, i)
	if t == nil {
		return nil, n.Errorf("%s (input %d) is required", what, i)
	}
	if t.DType != graph.SequenceOf {
		return nil, n.Errorf("%s (input %d) must be a sequence, got a %v value", what, i, t.DType)
	}
	return t.Items(), nil
}

// seqTensorInput checks that input i is present and a tensor (not a
// sequence or optional value).
func seqTensorInput(n *graph.Node, in []*graph.Tensor, i int, what string) (*graph.Tensor, error) {
	t := kern.Opt(in, i)
	if t == nil {
		return nil, n.Errorf("%s (input %d) is required", what, i)
	}
	if t.IsContainer() {
		return nil, n.Errorf("%s (input %d) must be a tensor, got a %v value", what, i, t.DType)
	}
	return t, nil
}

// seqScalarInt reads a position input: a one-element integer tensor.
func seqScalarInt(n *graph.Node, what string, t *graph.Tensor) (int64, error) {
	if t.IsContainer() || !t.DType.IsInt() {
		return 0, n.Errorf("%s must be an int32 or int64 tensor, got %v", what, t.DType)
	}
	if t.Size() != 1 || len(t.Shape) > 1 {
		return 0, n.Errorf("%s must be a scalar, has shape %v", what, t.Shape)
	}
	return t.Int(0), nil
}
