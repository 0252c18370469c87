package training

import (
	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// The cross-process op of data-parallel training graphs (synchronised
// BatchNorm statistics) lives here with the other training-only kernels.
func init() {
	kern.RegisterSpec(graph.InternalDomain, graph.AllReduceSumOp, kern.Spec{Fn: allReduceSum})
}

// allReduceSum implements onnxtrain.AllReduceSum(X): Y is X summed
// element-wise over the processes of the collective that the Run's context
// carries (backend.WithCollective). Without one, or with one process, Y is a
// copy of X. float32 travels as is; float64 (gradient checks) is rounded to
// float32 for the exchange, which is what the collective carries.
func allReduceSum(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if x.DType != graph.Float32 && x.DType != graph.Float64 {
		return nil, n.Errorf("X is %v; %s sums float32 or float64 tensors", x.DType, graph.AllReduceSumOp)
	}
	y, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	var c backend.Collective
	if ctx != nil && ctx.Ctx != nil {
		c = backend.CollectiveFrom(ctx.Ctx)
	}
	switch xs := x.Data.(type) {
	case []float32:
		ys := y.Float32s()
		copy(ys, xs)
		if c == nil || c.WorldSize() <= 1 || len(ys) == 0 {
			return []*graph.Tensor{y}, nil
		}
		if err := c.AllReduceSum(ctx.Ctx, ys); err != nil {
			return nil, n.Errorf("summing %d values over %d processes: %w", len(ys), c.WorldSize(), err)
		}
	case []float64:
		ys := y.Float64s()
		copy(ys, xs)
		if c == nil || c.WorldSize() <= 1 || len(ys) == 0 {
			return []*graph.Tensor{y}, nil
		}
		buf := make([]float32, len(ys))
		for i, v := range ys {
			buf[i] = float32(v)
		}
		if err := c.AllReduceSum(ctx.Ctx, buf); err != nil {
			return nil, n.Errorf("summing %d values over %d processes: %w", len(buf), c.WorldSize(), err)
		}
		for i, v := range buf {
			ys[i] = float64(v)
		}
	}
	return []*graph.Tensor{y}, nil
}
