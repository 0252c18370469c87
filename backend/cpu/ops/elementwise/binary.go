package elementwise

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	for op, code := range map[string]arithOp{"Add": opAdd, "Sub": opSub, "Mul": opMul, "Div": opDiv} {
		kern.RegisterSpec("", op, kern.Spec{Fn: arithKernel(code), Overwrites: []int{0, 1}})
	}
	kern.Register("Max", variadicKernel(opMax, false))
	kern.Register("Min", variadicKernel(opMin, false))
	kern.Register("Sum", variadicKernel(opAdd, false))
	kern.Register("Mean", variadicKernel(opAdd, true))
}

// arithKernel is the kernel of a two-input arithmetic op.
func arithKernel(op arithOp) kern.Kernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 2); err != nil {
			return nil, err
		}
		b, err := legacyBroadcast(ctx, n, in[0], in[1])
		if err != nil {
			return nil, err
		}
		// Over an input the executor donated and the result's shape
		// (not one that broadcasts): a residual gradient's sum, the
		// scores plus a mask.
		var overBuf [2]*graph.Tensor
		over := overBuf[:0]
		if ctx.MayOverwrite(0) {
			over = append(over, in[0])
		}
		if ctx.MayOverwrite(1) {
			over = append(over, b)
		}
		out, err := arithOver(n, op, in[0], b, over)
		if err != nil {
			return nil, err
		}
		return kern.Results(n, out), nil
	}
}

// legacyBroadcast implements the broadcast attribute of opsets before 7:
// with broadcast=1 and an axis, b's dims line up with a's starting at axis,
// which is numpy broadcasting once b gets trailing ones. Without axis (or
// from opset 7 on) b is returned unchanged and numpy rules apply.
func legacyBroadcast(ctx *kern.Context, n *graph.Node, a, b *graph.Tensor) (*graph.Tensor, error) {
	if ctx == nil || ctx.Opset >= 7 || ctx.Opset == 0 || n.AttrInt("broadcast", 0) == 0 || !n.HasAttr("axis") {
		return b, nil
	}
	axis := int(n.AttrInt("axis", 0))
	if axis < 0 {
		axis += a.Rank()
	}
	if axis < 0 || axis+b.Rank() > a.Rank() {
		return nil, n.Errorf("broadcast axis %d does not fit a shape %v for b shape %v", n.AttrInt("axis", 0), a.Shape, b.Shape)
	}
	shape := append([]int{}, b.Shape...)
	for len(shape) < a.Rank()-axis {
		shape = append(shape, 1)
	}
	return kern.Reshape(b, shape), nil
}

// variadicKernel folds op over any number of inputs (Max, Min, Sum) and, for
// Mean, divides by the input count.
func variadicKernel(op arithOp, mean bool) kern.Kernel {
	return func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		var present []*graph.Tensor
		for _, t := range in {
			if t != nil {
				present = append(present, t)
			}
		}
		if len(present) == 0 {
			return nil, n.Errorf("needs at least one input")
		}
		if err := sameType(n, present); err != nil {
			return nil, err
		}
		acc := present[0]
		if len(present) == 1 {
			if !isNumeric(acc) {
				return nil, errDType(n, acc)
			}
			acc = acc.Clone()
		}
		for _, t := range present[1:] {
			var err error
			if acc, err = arith(n, op, acc, t); err != nil {
				return nil, err
			}
		}
		if mean {
			if !acc.DType.IsFloat() {
				return nil, errDType(n, acc)
			}
			cnt := graph.Scalar(acc.DType, float64(len(present)))
			var err error
			if acc, err = arith(n, opDiv, acc, cnt); err != nil {
				return nil, err
			}
		}
		return one(acc), nil
	}
}
