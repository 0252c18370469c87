package control

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/graph"
)

// copyRunsT copies count runs of run elements from src to dst; run i starts
// at srcOff+i*srcStride in src and dstOff+i*dstStride in dst.
func copyRunsT[T any](dst, src []T, dstOff, dstStride, srcOff, srcStride, count, run int) {
	if run == 1 {
		for i := 0; i < count; i++ {
			dst[dstOff+i*dstStride] = src[srcOff+i*srcStride]
		}
		return
	}
	for i := 0; i < count; i++ {
		d := dstOff + i*dstStride
		s := srcOff + i*srcStride
		copy(dst[d:d+run], src[s:s+run])
	}
}

// copyRuns is copyRunsT for the typed slices a graph.Tensor holds; dst and
// src must hold the same Go type.
func copyRuns(dst, src any, dstOff, dstStride, srcOff, srcStride, count, run int) error {
	if count == 0 || run == 0 {
		return nil
	}
	mismatch := fmt.Errorf("cannot copy %T into %T", src, dst)
	switch d := dst.(type) {
	case []float32:
		s, ok := src.([]float32)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []float64:
		s, ok := src.([]float64)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []int8:
		s, ok := src.([]int8)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []int16:
		s, ok := src.([]int16)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []int32:
		s, ok := src.([]int32)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []int64:
		s, ok := src.([]int64)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []uint8:
		s, ok := src.([]uint8)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []uint16:
		s, ok := src.([]uint16)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []uint32:
		s, ok := src.([]uint32)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []uint64:
		s, ok := src.([]uint64)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []bool:
		s, ok := src.([]bool)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	case []string:
		s, ok := src.([]string)
		if !ok {
			return mismatch
		}
		copyRunsT(d, s, dstOff, dstStride, srcOff, srcStride, count, run)
	default:
		return fmt.Errorf("unsupported tensor data %T", dst)
	}
	return nil
}

// axisSplit views shape as [outer, shape[axis], inner].
func axisSplit(shape []int, axis int) (outer, dim, inner int) {
	outer, inner = 1, 1
	for _, d := range shape[:axis] {
		outer *= d
	}
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	return outer, shape[axis], inner
}

// takeAxis returns the slice of t at position idx along axis (rank one less).
func takeAxis(t *graph.Tensor, axis, idx int) (*graph.Tensor, error) {
	outer, dim, inner := axisSplit(t.Shape, axis)
	shape := make([]int, 0, len(t.Shape)-1)
	shape = append(shape, t.Shape[:axis]...)
	shape = append(shape, t.Shape[axis+1:]...)
	out, err := graph.NewTensor(t.DType, shape)
	if err != nil {
		return nil, err
	}
	if err := copyRuns(out.Data, t.Data, 0, inner, idx*inner, dim*inner, outer, inner); err != nil {
		return nil, err
	}
	return out, nil
}

// narrowAxis returns the first length positions of t along axis.
func narrowAxis(t *graph.Tensor, axis, length int) (*graph.Tensor, error) {
	if t.Shape[axis] == length {
		return t, nil
	}
	outer, dim, inner := axisSplit(t.Shape, axis)
	shape := append([]int{}, t.Shape...)
	shape[axis] = length
	out, err := graph.NewTensor(t.DType, shape)
	if err != nil {
		return nil, err
	}
	if err := copyRuns(out.Data, t.Data, 0, length*inner, 0, dim*inner, outer, length*inner); err != nil {
		return nil, err
	}
	return out, nil
}

// stack joins same-shaped tensors along a new axis placed at position axis
// of the result (0 <= axis <= rank of the parts). When reverse is set the
// last part comes first. elemType and elemShape describe the parts when
// there are none.
func stack(parts []*graph.Tensor, axis int, reverse bool, elemType graph.DType, elemShape []int) (*graph.Tensor, error) {
	if len(parts) > 0 {
		elemType, elemShape = parts[0].DType, parts[0].Shape
		for i, p := range parts {
			if p.DType != elemType || !graph.SameShape(p.Shape, elemShape) {
				return nil, fmt.Errorf("iteration %d produced %v%v, iteration 0 produced %v%v: scan outputs must keep their dtype and shape", i, p.DType, p.Shape, elemType, elemShape)
			}
		}
	}
	if axis < 0 || axis > len(elemShape) {
		return nil, fmt.Errorf("stack axis %d is out of range for parts of rank %d", axis, len(elemShape))
	}
	count := len(parts)
	shape := make([]int, 0, len(elemShape)+1)
	shape = append(shape, elemShape[:axis]...)
	shape = append(shape, count)
	shape = append(shape, elemShape[axis:]...)
	out, err := graph.NewTensor(elemType, shape)
	if err != nil {
		return nil, err
	}
	outer, _, inner := axisSplit(shape, axis)
	for i, p := range parts {
		pos := i
		if reverse {
			pos = count - 1 - i
		}
		if err := copyRuns(out.Data, p.Data, pos*inner, count*inner, 0, inner, outer, inner); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// elemInfo returns the dtype and shape a body output declares, for scan
// outputs of loops that ran zero times: unknown dims become 0, an unknown
// rank becomes rank 0, an unknown dtype float32.
func elemInfo(vi *graph.ValueInfo) (graph.DType, []int) {
	d := graph.Float32
	var shape []int
	if vi != nil && vi.Type != nil && vi.Type.Kind == graph.KindTensor {
		if vi.Type.DType != graph.Undefined {
			d = vi.Type.DType
		}
		if vi.Type.HasShape {
			for _, dim := range vi.Type.Shape {
				if dim.Known {
					shape = append(shape, int(dim.Value))
				} else {
					shape = append(shape, 0)
				}
			}
		}
	}
	return d, shape
}

// truth reads a condition tensor: exactly one element, nonzero is true.
func truth(n *graph.Node, what string, t *graph.Tensor) (bool, error) {
	if t == nil {
		return false, n.Errorf("%s is missing", what)
	}
	if t.Size() != 1 {
		return false, n.Errorf("%s must hold exactly one element, has shape %v", what, t.Shape)
	}
	switch s := t.Data.(type) {
	case []bool:
		return s[0], nil
	case []string:
		return false, n.Errorf("%s has dtype string", what)
	}
	return t.Float(0) != 0, nil
}

// scalarInt reads a one-element integer (or float) tensor.
func scalarInt(n *graph.Node, what string, t *graph.Tensor) (int64, error) {
	if t == nil {
		return 0, n.Errorf("%s is missing", what)
	}
	if t.Size() != 1 {
		return 0, n.Errorf("%s must be a scalar, has shape %v", what, t.Shape)
	}
	if t.DType == graph.String {
		return 0, n.Errorf("%s has dtype string", what)
	}
	return t.Int(0), nil
}

// errShapeMismatch reports a batch entry whose scan output differs from the
// others.
func errShapeMismatch(b int, p *graph.Tensor, d graph.DType, elem []int) error {
	return fmt.Errorf("batch entry %d produced elements of %v%v, others %v%v", b, p.DType, p.Shape[1:], d, elem)
}
