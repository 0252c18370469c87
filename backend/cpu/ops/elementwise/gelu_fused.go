package elementwise

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.GeluErf, kern.Spec{Fn: geluErfKernel})
}

// geluErfKernel is graph.GeluErf(X, C1, C2, C3) with outputs (Y, D, A):
// D = X/C1, A = Erf(D)+C2, Y = (X·A)·C3, rounding after each op as the
// unfused Div, Erf, Add, Mul, Mul kernels do (so the results are bit for bit
// theirs). One pass for float32 X and scalar float32 C1-C3; anything else
// runs the unfused kernels.
func geluErfKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 4); err != nil {
		return nil, err
	}
	if len(n.Outputs) != 3 {
		return nil, n.Errorf("GeluErf has %d outputs, want 3 (Y, D, A)", len(n.Outputs))
	}
	if err := validateData(n, in); err != nil {
		return nil, err
	}
	x, c1, c2, c3 := in[0], in[1], in[2], in[3]
	if xs, ok := x.Data.([]float32); ok && c1.DType == x.DType && c2.DType == x.DType && c3.DType == x.DType &&
		c1.Size() == 1 && c2.Size() == 1 && c3.Size() == 1 {
		if n.Outputs[1] == "" && n.Outputs[2] == "" { // D and A unread (gelu_recompute.go)
			return geluErfOnlyY(n, x, c1.Data.([]float32)[0], c2.Data.([]float32)[0], c3.Data.([]float32)[0])
		}
		var outs [3]*graph.Tensor
		for i := range outs {
			t, err := newFull(n, x.DType, x.Shape)
			if err != nil {
				return nil, err
			}
			outs[i] = t
		}
		t := kern.State[geluErfTask](n)
		*t = geluErfTask{y: outs[0].Data.([]float32), d: outs[1].Data.([]float32), a: outs[2].Data.([]float32), x: xs,
			c1: c1.Data.([]float32)[0], c2: c2.Data.([]float32)[0], c3: c3.Data.([]float32)[0]}
		parallelTask(len(xs), parallelGrain, t)
		*t = geluErfTask{} // drop the operands
		return kern.Results(n, outs[0], outs[1], outs[2]), nil
	}
	// The unfused chain.
	step := func(op string, args ...*graph.Tensor) (*graph.Tensor, error) { return unfusedStep(ctx, n, op, args...) }
	d, a, err := geluErfTerms(step, x, c1, c2)
	if err != nil {
		return nil, err
	}
	m, err := step("Mul", x, a)
	if err != nil {
		return nil, err
	}
	y, err := step("Mul", m, c3)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{y, d, a}, nil
}

// geluErfTask is GeluErf's float32 pass as a kern.Chunker, kept in the
// node's state so that a step fans it out without allocating.
type geluErfTask struct {
	y, d, a, x []float32
	c1, c2, c3 float32
}

func (t *geluErfTask) Chunk(lo, hi int) {
	geluErfRange(t.y[lo:hi], t.d[lo:hi], t.a[lo:hi], t.x[lo:hi], t.c1, t.c2, t.c3)
}

// geluErfRange computes GeluErf's outputs for one range of x: vmath's
// fused pass (Div, Erf, Add, Mul, Mul per element in registers, each
// array read or written once).
func geluErfRange(y, d, a, x []float32, c1, c2, c3 float32) {
	vmath.GeluErf32(y, d, a, x[:len(y)], c1, c2, c3)
}

// geluErfTerms is the unfused chain's D = X/c1 and A = Erf(D)+c2, the
// terms GeluErf writes beside Y and GeluErfGradX recomputes.
func geluErfTerms(step func(string, ...*graph.Tensor) (*graph.Tensor, error), x, c1, c2 *graph.Tensor) (d, a *graph.Tensor, err error) {
	if d, err = step("Div", x, c1); err != nil {
		return nil, nil, err
	}
	e, err := step("Erf", d)
	if err != nil {
		return nil, nil, err
	}
	if a, err = step("Add", e, c2); err != nil {
		return nil, nil, err
	}
	return d, a, nil
}
