package linalg

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.PermutedMatMulAdd, kern.Spec{Fn: permutedMatMulAddKernel})
}

// permutedMatMulAddKernel is graph.PermutedMatMulAdd(V0, V1, Bias): a
// PermutedMatMul product (grad 0) plus a bias row vector. float32 operands
// whose B is a plain matrix and whose bias runs along the product's last
// axis (permY keeping it last) take permutedFlat with the bias in the
// GEMM's epilogue, which rounds as the separate Add does; anything else
// runs PermutedMatMul's kernel and then the Add kernel (broadcasting as
// Add does).
func permutedMatMulAddKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	if g := n.AttrInt("grad", 0); g != 0 {
		return nil, n.Errorf("PermutedMatMulAdd takes grad 0, got %d", g)
	}
	a, b, bias := in[0], in[1], in[2]
	permY := n.AttrInts("permY", nil)
	lastKept := len(permY) == 0 || permY[len(permY)-1] == int64(len(permY)-1)
	if lastKept && a.DType == graph.Float32 && b.DType == graph.Float32 && bias.DType == graph.Float32 &&
		len(bias.Shape) >= 1 && len(bias.Float32s()) == bias.Size() && a.Validate() == nil && b.Validate() == nil {
		row := true
		for _, d := range bias.Shape[:len(bias.Shape)-1] {
			row = row && d == 1
		}
		var views [2]strided
		big := false
		for i, t := range in[:2] {
			ax, f := viewAttrs(i)
			v, bg, err := viewOf(n, t.Shape, ax, f)
			if err != nil {
				return nil, err
			}
			views[i], big = v, big || bg
		}
		if row && !big && views[1].rank == 2 && views[0].rank > 2 && views[1].shape[1] == bias.Shape[len(bias.Shape)-1] {
			out, ok, err := permutedFlat(n, in[:2], views[:], 0, permY, bias.Float32s())
			if err != nil || ok {
				return out, err
			}
		}
	}
	res, err := permutedMatMulKernel(ctx, n, in[:2])
	if err != nil {
		return nil, err
	}
	return runOp(ctx, n, "", "Add", res[0], bias)
}
