package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// maxUnpoolKernel implements MaxUnpool: a zero tensor of the unpooled shape
// with every X value written at the flat position its index in I names.
func maxUnpoolKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x, idx := in[0], in[1]
	if err := spatialInput(n, x, "input X"); err != nil {
		return nil, err
	}
	if !graph.SameShape(x.Shape, idx.Shape) {
		return nil, n.Errorf("indices I have shape %v, want X's shape %v", idx.Shape, x.Shape)
	}
	r := len(x.Shape) - 2
	kernel, err := kernelShapeAttr(n, r)
	if err != nil {
		return nil, err
	}
	strides, err := intsAttr(n, "strides", r, 1)
	if err != nil {
		return nil, err
	}
	pads, err := intsAttr(n, "pads", 2*r, 0)
	if err != nil {
		return nil, err
	}
	// The indices address the inferred (natural) unpooled shape; an
	// explicit output_shape keeps each value's coordinates and pads or crops
	// at the end of each axis.
	inferred := append([]int{}, x.Shape[:2]...)
	for i := 0; i < r; i++ {
		d := (x.Shape[i+2]-1)*strides[i] + kernel[i] - pads[i] - pads[i+r]
		if d < 0 || strides[i] <= 0 {
			return nil, n.Errorf("kernel_shape %v, strides %v and pads %v give a negative output", kernel, strides, pads)
		}
		inferred = append(inferred, d)
	}
	shape := inferred
	if os := kern.Opt(in, 2); os != nil {
		shape = os.Ints()
		if len(shape) != len(x.Shape) {
			return nil, n.Errorf("output_shape %v must have rank %d", shape, len(x.Shape))
		}
		if shape[0] != x.Shape[0] || shape[1] != x.Shape[1] {
			return nil, n.Errorf("output_shape %v does not keep X's batch and channels %v", shape, x.Shape[:2])
		}
	}
	y, err := kern.New(n, x.DType, shape)
	if err != nil {
		return nil, err
	}
	positions := idx.Ints()
	size := prod(inferred)
	remap := !graph.SameShape(shape, inferred)
	inStr, outStr := graph.Strides(inferred), graph.Strides(shape)
	for i, p := range positions {
		if p < 0 || p >= size {
			return nil, n.Errorf("index %d at position %d is outside the unpooled shape %v", p, i, inferred)
		}
		if !remap {
			continue
		}
		q, rem := 0, p
		for j := range inferred {
			c := rem / inStr[j]
			rem %= inStr[j]
			if c >= shape[j] {
				return nil, n.Errorf("index %d at position %d falls outside output_shape %v", p, i, shape)
			}
			q += c * outStr[j]
		}
		positions[i] = q
	}
	switch xd := x.Data.(type) {
	case []float32:
		scatterValues(y.Data.([]float32), xd, positions)
	case []float64:
		scatterValues(y.Data.([]float64), xd, positions)
	case []int8:
		scatterValues(y.Data.([]int8), xd, positions)
	case []uint8:
		scatterValues(y.Data.([]uint8), xd, positions)
	case []int32:
		scatterValues(y.Data.([]int32), xd, positions)
	case []int64:
		scatterValues(y.Data.([]int64), xd, positions)
	default:
		return nil, n.Errorf("dtype %v is not supported", x.DType)
	}
	return []*graph.Tensor{y}, nil
}

// scatterValues sets dst[pos[i]] = src[i].
func scatterValues[T any](dst, src []T, pos []int) {
	for i, p := range pos {
		dst[p] = src[i]
	}
}
