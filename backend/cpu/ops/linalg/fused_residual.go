package linalg

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.MatMulAddAdd, kern.Spec{Fn: matMulAddAddKernel})
}

// residualEpilogue adds r (C's layout) to each finished block of C, as
// gemm.BlockEpilogue: each sum rounded to float32 as the Add kernel rounds
// it (vectorised through gemm.AddRowVector, one row at a time).
type residualEpilogue struct{ r []float32 }

func (e *residualEpilogue) ApplyBlock(c []float32, ldc, i0, i1, j0, j1 int) {
	for i := i0; i < i1; i++ {
		gemm.AddRowVector(c[i*ldc+j0:i*ldc+j1], j1-j0, 1, j1-j0, e.r[i*ldc+j0:i*ldc+j1])
	}
}

// matMulAddAddKernel is graph.MatMulAddAdd(A, B, Bias, R): MatMulAdd's
// product and bias, then R added. float32 operands, a bias row vector and
// R of the product's shape take one GEMM with the bias and R in its
// epilogue (the same roundings as MatMulAdd then Add); anything else runs
// MatMulAdd's kernel and then the Add kernel.
func matMulAddAddKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 4); err != nil {
		return nil, err
	}
	a, b, bias, r := in[0], in[1], in[2], in[3]
	ta, tb := n.AttrInt("transA", 0) != 0, n.AttrInt("transB", 0) != 0
	if r.DType == graph.Float32 && len(r.Float32s()) == r.Size() {
		p, err := epiloguePlan(n, a, b, ta, tb)
		if err != nil {
			return nil, err
		}
		if p != nil && biasRow(bias, p.outShape) && graph.SameShape(r.Shape, p.outShape) {
			out, err := kern.NewUninit(n, graph.Float32, p.outShape) // every element is written
			if err != nil {
				return nil, err
			}
			e := kern.State[residualEpilogue](n)
			e.r = r.Float32s()
			runEpilogue(p, a, b, tb, out.Float32s(), gemm.Epilogue{Bias: bias.Float32s(), Block: e})
			e.r = nil // drop the operand
			return kern.Results(n, out), nil
		}
	}
	res, err := matMulAddKernel(ctx, n, in[:3])
	if err != nil {
		return nil, err
	}
	return runOp(ctx, n, "", "Add", r, res[0])
}
