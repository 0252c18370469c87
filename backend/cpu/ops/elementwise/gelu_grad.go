package elementwise

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.GeluErfGrad, kern.Spec{Fn: geluErfGradKernel})
}

// geluErfGradKernel is graph.GeluErfGrad(dY, X, D, A, C1, C3, K):
//
//	M = dY·C3; dX = M·A + ((M·X)·(K·exp(-(D·D))))/C1
//
// rounding after each op as the unfused Mul, Mul, Mul, ErfGrad, Div and Add
// kernels do (exp through vmath.Exp32, as ErfGrad), so the result is theirs
// bit for bit. One pass for float32 operands of one shape and scalar
// float32 constants; anything else runs the unfused kernels.
func geluErfGradKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 7); err != nil {
		return nil, err
	}
	if err := validateData(n, in); err != nil {
		return nil, err
	}
	dy, x, d, a, c1, c3, k := in[0], in[1], in[2], in[3], in[4], in[5], in[6]
	fast := dy.DType == graph.Float32
	for _, t := range in[1:] {
		fast = fast && t.DType == graph.Float32
	}
	for _, t := range []*graph.Tensor{x, d, a} {
		fast = fast && graph.SameShape(t.Shape, dy.Shape)
	}
	fast = fast && c1.Size() == 1 && c3.Size() == 1 && k.Size() == 1
	if fast {
		out, err := newFull(n, dy.DType, dy.Shape)
		if err != nil {
			return nil, err
		}
		t := kern.State[geluErfGradTask](n)
		*t = geluErfGradTask{dst: out.Data.([]float32), dy: dy.Data.([]float32), x: x.Data.([]float32), d: d.Data.([]float32),
			a: a.Data.([]float32), c1: c1.Data.([]float32)[0], c3: c3.Data.([]float32)[0], k: k.Data.([]float32)[0]}
		parallelTask(len(t.dst), parallelGrain, t)
		*t = geluErfGradTask{} // drop the operands
		return kern.Results(n, out), nil
	}
	// The unfused chain.
	step := func(op string, args ...*graph.Tensor) (*graph.Tensor, error) { return unfusedStep(ctx, n, op, args...) }
	m, err := step("Mul", dy, c3)
	if err != nil {
		return nil, err
	}
	dx1, err := step("Mul", m, a)
	if err != nil {
		return nil, err
	}
	da, err := step("Mul", m, x)
	if err != nil {
		return nil, err
	}
	dd, err := erfGradKernel(ctx, n, []*graph.Tensor{da, d, k})
	if err != nil {
		return nil, err
	}
	dx2, err := step("Div", dd[0], c1)
	if err != nil {
		return nil, err
	}
	dx, err := step("Add", dx1, dx2)
	if err != nil {
		return nil, err
	}
	return one(dx), nil
}

// geluErfGradTask is GeluErfGrad's float32 pass as a kern.Chunker, kept in
// the node's state so that a step fans it out without allocating.
type geluErfGradTask struct {
	dst, dy, x, d, a []float32
	c1, c3, k        float32
}

func (t *geluErfGradTask) Chunk(lo, hi int) {
	geluErfGradRange(t.dst[lo:hi], t.dy[lo:hi], t.x[lo:hi], t.d[lo:hi], t.a[lo:hi], t.c1, t.c3, t.k)
}

// geluErfGradRange computes GeluErfGrad for one range: vmath's fused pass.
func geluErfGradRange(dst, dy, x, d, a []float32, c1, c3, k float32) {
	vmath.GeluErfGrad32(dst, dy, x, d, a, c1, c3, k)
}
