package elementwise

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.GeluErfGradX, kern.Spec{Fn: geluErfGradXKernel})
}

// geluErfGradXKernel is graph.GeluErfGradX(dY, X, C1, C2, C3, K): D =
// X/C1 and A = Erf(D)+C2 recomputed as GeluErf computes them and
// GeluErfGrad's formula applied in the same pass (vmath.GeluErfGradX32,
// D and A in registers), so dX is GeluErfGrad's with the forward's D and
// A bit for bit.
// Anything but float32 operands of one shape and scalar float32 constants
// computes D and A with the unfused kernels and runs GeluErfGrad's kernel.
func geluErfGradXKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 6); err != nil {
		return nil, err
	}
	if err := validateData(n, in); err != nil {
		return nil, err
	}
	dy, x, c1, c2, c3, k := in[0], in[1], in[2], in[3], in[4], in[5]
	fast := true
	for _, t := range in {
		fast = fast && t.DType == graph.Float32
	}
	fast = fast && graph.SameShape(x.Shape, dy.Shape) && c1.Size() == 1 && c2.Size() == 1 && c3.Size() == 1 && k.Size() == 1
	if fast {
		out, err := newFull(n, dy.DType, dy.Shape)
		if err != nil {
			return nil, err
		}
		t := kern.State[geluErfGradXTask](n)
		*t = geluErfGradXTask{dst: out.Data.([]float32), dy: dy.Data.([]float32), x: x.Data.([]float32),
			c1: c1.Data.([]float32)[0], c2: c2.Data.([]float32)[0], c3: c3.Data.([]float32)[0], k: k.Data.([]float32)[0]}
		parallelTask(len(t.dst), parallelGrain, t)
		*t = geluErfGradXTask{} // drop the operands
		return kern.Results(n, out), nil
	}
	step := func(op string, args ...*graph.Tensor) (*graph.Tensor, error) { return unfusedStep(ctx, n, op, args...) }
	d, a, err := geluErfTerms(step, x, c1, c2)
	if err != nil {
		return nil, err
	}
	return geluErfGradKernel(ctx, n, []*graph.Tensor{dy, x, d, a, c1, c3, k})
}

// geluErfGradXTask is GeluErfGradX's float32 pass as a kern.Chunker.
type geluErfGradXTask struct {
	dst, dy, x    []float32
	c1, c2, c3, k float32
}

func (t *geluErfGradXTask) Chunk(lo, hi int) {
	vmath.GeluErfGradX32(t.dst[lo:hi], nil, t.dy[lo:hi], t.x[lo:hi], t.c1, t.c2, t.c3, t.k)
}

// geluErfYTask is GeluErf's float32 pass when only Y is kept (the D and A
// outputs unnamed: graph.RecomputeGeluErfGrad): vmath.GeluErfBias32
// without a bias gives GeluErf32's y without storing the intermediates, so
// the pass writes one array instead of three.
type geluErfYTask struct {
	y, x       []float32
	c1, c2, c3 float32
}

func (t *geluErfYTask) Chunk(lo, hi int) {
	// (With a nil bias, x is only read.)
	vmath.GeluErfBias32(t.y[lo:hi], t.x[lo:hi], nil, t.c1, t.c2, t.c3)
}

// geluErfOnlyY runs GeluErf's float32 pass writing Y alone into a new
// tensor; the caller has checked the operands as for the three-output pass.
func geluErfOnlyY(n *graph.Node, x *graph.Tensor, c1, c2, c3 float32) ([]*graph.Tensor, error) {
	y, err := newFull(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	t := kern.State[geluErfYTask](n)
	*t = geluErfYTask{y: y.Data.([]float32), x: x.Data.([]float32), c1: c1, c2: c2, c3: c3}
	parallelTask(len(t.x), parallelGrain, t)
	*t = geluErfYTask{}
	return kern.Results(n, y, nil, nil), nil
}
