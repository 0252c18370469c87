// Package internal holds the CPU kernels of onnxtrain's own ops (domain
// "onnxtrain"), which autodiff emits: SumToShape and the backward kernels
// of the primitives whose gradients are not compositions of other ops.
package internal

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func register(op string, fn kern.Kernel) {
	kern.RegisterSpec(graph.InternalDomain, op, kern.Spec{Fn: fn})
}

func init() {
	register("SumToShape", sumToShape)
}

// sumToShape reduces in[0] to the shape of in[1] by summing over the
// dimensions that broadcasting expanded (the gradient of broadcasting).
func sumToShape(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	g, like := in[0], in[1]
	if graph.SameShape(g.Shape, like.Shape) {
		return []*graph.Tensor{g}, nil
	}
	target := like.Shape
	if len(target) > len(g.Shape) {
		return nil, n.Errorf("cannot sum shape %v down to %v", g.Shape, target)
	}
	// Align target to g's rank; every dim must be equal or 1.
	off := len(g.Shape) - len(target)
	full := make([]int, len(g.Shape))
	for i := range full {
		full[i] = 1
		if i >= off {
			full[i] = target[i-off]
			if full[i] != g.Shape[i] && full[i] != 1 {
				return nil, n.Errorf("cannot sum shape %v down to %v", g.Shape, target)
			}
		}
	}
	out, err := kern.New(n, g.DType, target)
	if err != nil {
		return nil, err
	}
	// Output strides in g's index space: 0 on summed dims.
	st := kern.BroadcastStrides(full, g.Shape)
	switch src := g.Data.(type) {
	case []float32:
		accumulate(src, out.Data.([]float32), g.Shape, st)
	case []float64:
		accumulate(src, out.Data.([]float64), g.Shape, st)
	default:
		return nil, n.Errorf("dtype %v is not supported", g.DType)
	}
	return []*graph.Tensor{out}, nil
}

// accumulate adds every element of src (of shape shape) into dst at the
// offset given by the strides st (0 on reduced dims).
func accumulate[T float32 | float64](src, dst []T, shape, st []int) {
	rank := len(shape)
	if rank == 0 {
		dst[0] += src[0]
		return
	}
	inner := shape[rank-1]
	innerSt := st[rank-1]
	idx := make([]int, rank-1)
	off := 0
	for base := 0; base < len(src); base += inner {
		row := src[base : base+inner]
		if innerSt == 0 {
			var s T
			for _, v := range row {
				s += v
			}
			dst[off] += s
		} else {
			d := dst[off : off+inner]
			for i, v := range row {
				d[i] += v
			}
		}
		for d := rank - 2; d >= 0; d-- {
			idx[d]++
			off += st[d]
			if idx[d] < shape[d] {
				break
			}
			off -= st[d] * idx[d]
			idx[d] = 0
		}
	}
}
