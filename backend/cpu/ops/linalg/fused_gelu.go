package linalg

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/vmath"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.MatMulAddGeluErf, kern.Spec{Fn: matMulAddGeluErfKernel})
	kern.RegisterSpec(graph.FusedDomain, graph.MatMulGeluErfGrad, kern.Spec{Fn: matMulGeluErfGradKernel})
}

// geluEpilogue is the GELU epilogue of a GEMM (gemm.BlockEpilogue), kept in
// the node's state so that a step allocates nothing. Forward
// (MatMulAddGeluErf): C = C + bias (the bias row added here rather than
// by the GEMM's own bias pass, so that C is read once), y = GeluErf(C).
// Gradient (MatMulGeluErfGrad): C = GeluErfGradX(C, x) in place and, when
// y is not nil, y = GeluErf(x). Each row of a block is one call of
// vmath's GeluErfBias32 or GeluErfGradX32 (one pass, the intermediates d
// and a in registers), which give the bits of the bias add and of the
// GeluErf32 and GeluErfGrad32 functions the GeluErf and GeluErfGradX
// kernels run. y, x have C's layout, row stride ldc; bias has C's columns.
type geluEpilogue struct {
	grad          bool
	y, x, bias    []float32
	c1, c2, c3, k float32
}

func (e *geluEpilogue) ApplyBlock(c []float32, ldc, i0, i1, j0, j1 int) {
	var bias []float32
	if e.bias != nil {
		bias = e.bias[j0:j1]
	}
	for i := i0; i < i1; i++ {
		lo, hi := i*ldc+j0, i*ldc+j1
		if !e.grad {
			vmath.GeluErfBias32(e.y[lo:hi], c[lo:hi], bias, e.c1, e.c2, e.c3)
			continue
		}
		var y []float32
		if e.y != nil {
			y = e.y[lo:hi]
		}
		vmath.GeluErfGradX32(c[lo:hi], y, c[lo:hi], e.x[lo:hi], e.c1, e.c2, e.c3, e.k)
	}
}

// scalarF32 returns t's value when t is a float32 scalar (one element).
func scalarF32(t *graph.Tensor) (float32, bool) {
	if t == nil || t.DType != graph.Float32 || t.Size() != 1 || len(t.Float32s()) != 1 {
		return 0, false
	}
	return t.Float32s()[0], true
}

// epiloguePlan returns the plan of op(a)·op(b) when it runs as one tall
// float32 GEMM whose epilogue can be applied (A neither transposed nor
// broadcast over B's batch, B shared by every product), or nil.
func epiloguePlan(n *graph.Node, a, b *graph.Tensor, ta, tb bool) (*matmulPlan, error) {
	if a.DType != graph.Float32 || b.DType != graph.Float32 || ta || (tb && len(b.Shape) < 2) || len(a.Shape) < 1 {
		return nil, nil
	}
	p, err := transposedPlan(n, a, b, ta, tb)
	if err != nil {
		return nil, err
	}
	// A's matrices one after another (a stride of 1 matrix; one matrix
	// has none), B the same matrix for every product.
	sa, aOK := affine(p.aIdx)
	sb, bOK := affine(p.bIdx)
	if !aOK || (sa != 1 && len(p.aIdx) > 1) || !bOK || sb != 0 || len(a.Float32s()) != a.Size() || len(b.Float32s()) != b.Size() {
		return nil, nil
	}
	return p, nil
}

// runEpilogue computes out = ep(op(a)·op(b)) over the planned batch as one
// tall GEMM.
func runEpilogue(p *matmulPlan, a, b *graph.Tensor, tb bool, out []float32, ep gemm.Epilogue) {
	if p.batch <= 0 || p.m <= 0 || p.n <= 0 {
		return
	}
	ldb := p.n
	if tb {
		ldb = p.k
	}
	gemm.SgemmEpilogue(false, tb, p.batch*p.m, p.n, p.k, 1, a.Float32s(), p.k, b.Float32s(), ldb,
		0, out, p.n, ep)
}

// matMulAddGeluErfKernel is graph.MatMulAddGeluErf(A, B, Bias, C1, C2, C3)
// with outputs (P, Y): P = MatMulAdd(A, B, Bias), Y = GeluErf(P)'s first
// output. With float32 operands, a bias row vector and scalar constants
// the GELU is the GEMM's epilogue after the bias; anything else runs
// MatMulAdd's kernel and then the GELU (vmath's pass for float32, the
// unfused ops otherwise), with the same results.
func matMulAddGeluErfKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 6); err != nil {
		return nil, err
	}
	if len(n.Outputs) != 2 {
		return nil, n.Errorf("MatMulAddGeluErf has %d outputs, want 2 (P, Y)", len(n.Outputs))
	}
	a, b, bias := in[0], in[1], in[2]
	ta, tb := n.AttrInt("transA", 0) != 0, n.AttrInt("transB", 0) != 0
	c1, ok1 := scalarF32(in[3])
	c2, ok2 := scalarF32(in[4])
	c3, ok3 := scalarF32(in[5])
	if ok1 && ok2 && ok3 {
		p, err := epiloguePlan(n, a, b, ta, tb)
		if err != nil {
			return nil, err
		}
		if p != nil && biasRow(bias, p.outShape) {
			prod, err := kern.NewUninit(n, graph.Float32, p.outShape) // every element is written
			if err != nil {
				return nil, err
			}
			y, err := kern.NewUninit(n, graph.Float32, p.outShape)
			if err != nil {
				return nil, err
			}
			e := kern.State[geluEpilogue](n)
			*e = geluEpilogue{y: y.Float32s(), bias: bias.Float32s(), c1: c1, c2: c2, c3: c3}
			runEpilogue(p, a, b, tb, prod.Float32s(), gemm.Epilogue{Block: e})
			*e = geluEpilogue{} // drop the operands
			return kern.Results(n, prod, y), nil
		}
	}
	res, err := matMulAddKernel(ctx, n, in[:3])
	if err != nil {
		return nil, err
	}
	prod := res[0]
	y, err := geluY(ctx, n, prod, in[3], in[4], in[5])
	if err != nil {
		return nil, err
	}
	return kern.Results(n, prod, y), nil
}

// matMulGeluErfGradKernel is graph.MatMulGeluErfGrad(A, B, X, C1, C2, C3,
// K) with outputs (dX, Y): dX = GeluErfGradX(TransposedMatMul(A, B), X,
// C1, C2, C3, K), Y = GeluErf(X)'s first output (not computed when the
// output is unnamed). With float32 operands of the product's shape and
// scalar constants both are the GEMM's epilogue, dX written over the
// product; anything else runs the product, GeluErfGradX's kernel and the
// GELU, with the same results.
func matMulGeluErfGradKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 7); err != nil {
		return nil, err
	}
	if len(n.Outputs) != 2 {
		return nil, n.Errorf("MatMulGeluErfGrad has %d outputs, want 2 (dX, Y)", len(n.Outputs))
	}
	a, b, x := in[0], in[1], in[2]
	ta, tb := n.AttrInt("transA", 0) != 0, n.AttrInt("transB", 0) != 0
	wantY := n.Outputs[1] != ""
	c1, ok1 := scalarF32(in[3])
	c2, ok2 := scalarF32(in[4])
	c3, ok3 := scalarF32(in[5])
	k, ok4 := scalarF32(in[6])
	if ok1 && ok2 && ok3 && ok4 && x.DType == graph.Float32 && len(x.Float32s()) == x.Size() {
		p, err := epiloguePlan(n, a, b, ta, tb)
		if err != nil {
			return nil, err
		}
		if p != nil && graph.SameShape(p.outShape, x.Shape) {
			dx, err := kern.NewUninit(n, graph.Float32, p.outShape) // every element is written
			if err != nil {
				return nil, err
			}
			var y *graph.Tensor
			e := kern.State[geluEpilogue](n)
			*e = geluEpilogue{grad: true, x: x.Float32s(), c1: c1, c2: c2, c3: c3, k: k}
			if wantY {
				if y, err = kern.NewUninit(n, graph.Float32, p.outShape); err != nil {
					return nil, err
				}
				e.y = y.Float32s()
			}
			runEpilogue(p, a, b, tb, dx.Float32s(), gemm.Epilogue{Block: e})
			*e = geluEpilogue{} // drop the operands
			return kern.Results(n, dx, y), nil
		}
	}
	res, err := transposedMatMulKernel(ctx, n, in[:2])
	if err != nil {
		return nil, err
	}
	dy := res[0]
	res, err = runOp(ctx, n, graph.FusedDomain, graph.GeluErfGradX, dy, x, in[3], in[4], in[5], in[6])
	if err != nil {
		return nil, err
	}
	dx := res[0]
	var y *graph.Tensor
	if wantY {
		if y, err = geluY(ctx, n, x, in[3], in[4], in[5]); err != nil {
			return nil, err
		}
	}
	return kern.Results(n, dx, y), nil
}

// geluY is GeluErf(x, c1, c2, c3)'s first output outside an epilogue:
// vmath's pass for float32 x and scalar constants, otherwise the GeluErf
// kernel's first output.
func geluY(ctx *kern.Context, n *graph.Node, x, c1, c2, c3 *graph.Tensor) (*graph.Tensor, error) {
	v1, ok1 := scalarF32(c1)
	v2, ok2 := scalarF32(c2)
	v3, ok3 := scalarF32(c3)
	if ok1 && ok2 && ok3 && x.DType == graph.Float32 && len(x.Float32s()) == x.Size() {
		y, err := kern.NewUninit(n, graph.Float32, x.Shape)
		if err != nil {
			return nil, err
		}
		// x is only read (no bias).
		vmath.GeluErfBias32(y.Float32s(), x.Float32s(), nil, v1, v2, v3)
		return y, nil
	}
	// Anything else: the GeluErf kernel (its unfused chain), output Y, on a
	// node of GeluErf's outputs (Y alone named).
	sub := &graph.Node{Name: n.Name, OpType: graph.GeluErf, Domain: graph.FusedDomain,
		Inputs: n.Inputs, Outputs: []string{"y", "", ""}}
	res, err := runOp(ctx, sub, graph.FusedDomain, graph.GeluErf, x, c1, c2, c3)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}
