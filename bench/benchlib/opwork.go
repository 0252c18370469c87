package benchlib

import (
	"reflect"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// opWork returns the work of one kernel call for --op-profile: flops, the
// floating-point operations of a product op (matrix products in all their
// fused and gradient forms, convolutions and their gradients; a
// multiply-add counts 2), or 0 for any other op; and bytes, the bytes of
// the call's inputs and outputs, each counted once (what a memory-bound op
// must at least move), or 0 for ops that only relabel a tensor (reshapes,
// identities, shape queries, and any call whose output is one of its
// inputs' storage, as a CastLike to the type it has), whose time is not a
// bandwidth. Inputs a kernel consults only for their shape or type
// (shapeOnlyInput: GatherGrad's data, SumToShape's target, CastLike's type
// operand) are not counted: the kernel never reads their elements.
func opWork(n *graph.Node, in, out []*graph.Tensor) (flops, bytes float64) {
	switch n.OpType {
	case "Reshape", "Identity", "Shape", "Size", "Unsqueeze", "Squeeze", "Flatten", "Constant":
	default:
		if aliasesInput(in, out) && !overwritesInput(n) {
			break
		}
		for i, t := range in {
			if !shapeOnlyInput(n.OpType, i) {
				bytes += tensorBytes(t)
			}
		}
		for _, t := range out {
			bytes += tensorBytes(t)
		}
	}
	if len(out) == 0 || out[0] == nil {
		return 0, bytes
	}
	y := out[0]
	at := func(ts []*graph.Tensor, i int) *graph.Tensor {
		if i < len(ts) {
			return ts[i]
		}
		return nil
	}
	size := func(t *graph.Tensor) float64 {
		if t == nil {
			return 0
		}
		return float64(t.Size())
	}
	last := func(t *graph.Tensor, fromEnd int) float64 {
		if t == nil || t.Rank() < fromEnd {
			return 0
		}
		return float64(t.Shape[t.Rank()-fromEnd])
	}
	lead := func(t *graph.Tensor) float64 {
		if t == nil || t.Rank() == 0 || t.Shape[0] == 0 {
			return 0
		}
		return float64(t.Shape[0])
	}
	switch n.OpType {
	case "MatMul", graph.TransposedMatMul, graph.MatMulAdd, "Gemm", graph.GemmRelu, graph.MatMulAddGeluErf, graph.MatMulGeluErfGrad, graph.MatMulAddAdd:
		// Y = op(A)·op(B): 2 flops per output element per shared index
		// (the GELU epilogues' elementwise work is not counted).
		a := at(in, 0)
		k := last(a, 1)
		if n.AttrInt("transA", 0) != 0 {
			k = last(a, 2)
		}
		if a != nil && a.Rank() == 1 {
			k = float64(a.Shape[0])
		}
		flops = 2 * size(y) * k
	case "MatMulGradA":
		// dA = dY·Bᵀ, shaped like A: the shared index runs over dY's columns.
		flops = 2 * size(y) * last(at(in, 0), 1)
	case "MatMulGradB":
		// dB = Aᵀ·dY summed over the batch: every element of A meets every
		// column of dY.
		flops = 2 * size(at(in, 1)) * last(at(in, 0), 1)
	case graph.SGDUpdateProductOp, graph.AdamUpdateProductOp:
		// The update's product: MatMulGradB's, A before X, dY after it.
		if lead, _, ok := graph.UpdateOperands(n); ok && lead >= 1 {
			flops = 2 * size(at(in, lead-1)) * last(at(in, lead+1), 1)
		}
	case graph.PermutedMatMul, graph.PermutedMatMulAdd:
		v0 := viewShape(n, at(in, 0), "axes0")
		k := 0.0
		if len(v0) > 0 {
			k = float64(v0[len(v0)-1])
		}
		switch n.AttrInt("grad", 0) {
		case 0, 1: // V0·V1, or dY·V2ᵀ shaped like V1: per output element, k terms
			flops = 2 * size(y) * k
		case 2: // V1ᵀ·dY shaped like V2: every element of V1 meets every column of dY
			flops = 2 * shapeSize(viewShape(n, at(in, 1), "axes1")) * k
		}
	case graph.AttentionSoftmax:
		// Q·Kᵀ then P·V (the Softmax's elementwise work is not counted):
		// P has |O|/Dv·N elements, each of Dk terms, and each element of O
		// has N terms.
		in = packedParts(n, in)
		qv, vv := viewShape(n, at(in, 0), graph.AttnQK+"axes0"), viewShape(n, at(in, 2), graph.AttnPV+"axes1")
		if len(qv) >= 2 && len(vv) >= 2 && vv[len(vv)-1] > 0 {
			dk, nk, dv := float64(qv[len(qv)-1]), float64(vv[len(vv)-2]), float64(vv[len(vv)-1])
			flops = 2*size(y)/dv*nk*dk + 2*size(y)*nk
		}
	case graph.AttentionSoftmaxGrad, graph.AttentionSoftmaxGradConcat:
		// dP = dO·Vᵀ and dV = Pᵀ·dO, Dv terms per element of P each; dQ =
		// dS·K and dK = dSᵀ·Q, Dk terms per element of P each (SoftmaxGrad
		// not counted). Where P is recomputed (graph.AttnRecomputeP, no P
		// operand) it has |dO|/Dv times the keys (V's rows) elements, and
		// the scores' product adds Dk terms for each.
		in = packedParts(n, in)
		ov, qv := viewShape(n, at(in, 0), graph.AttnDP+"axes0"), viewShape(n, at(in, 3), graph.AttnDQ+"axes1")
		if len(ov) >= 1 && len(qv) >= 1 {
			dv, dk, np := float64(ov[len(ov)-1]), float64(qv[len(qv)-1]), size(at(in, 1))
			recompute := n.AttrInt(graph.AttnRecomputeP, 0) == 1
			if recompute {
				if vv := viewShape(n, at(in, 2), graph.AttnDP+"axes2"); len(vv) >= 2 && dv > 0 {
					np = size(at(in, 0)) / dv * float64(vv[len(vv)-2])
				}
			}
			flops = 4 * np * (dv + dk)
			if recompute {
				flops += 2 * np * dk
			}
		}
	case "Conv", "ConvBackwardData":
		// Per output (or input-gradient) element, one multiply-add per
		// filter tap of a group: |W| / C_out of them.
		w := at(in, 1)
		if lead(w) > 0 {
			src := y
			if n.OpType == "ConvBackwardData" {
				src = at(in, 0) // dY
			}
			flops = 2 * size(src) * size(w) / lead(w)
		}
	case "ConvBackwardFilter":
		if lead(y) > 0 {
			flops = 2 * size(at(in, 0)) * size(y) / lead(y)
		}
	case "ConvTranspose", "ConvTransposeBackwardData":
		w := at(in, 1)
		if lead(w) > 0 {
			src := at(in, 0) // X
			if n.OpType == "ConvTransposeBackwardData" {
				src = y // dX
			}
			flops = 2 * size(src) * size(w) / lead(w)
		}
	case "ConvTransposeBackwardFilter":
		if lead(y) > 0 {
			flops = 2 * size(at(in, 1)) * size(y) / lead(y)
		}
	}
	return flops, bytes
}

// shapeOnlyInput reports whether input i of op is read for its shape or
// dtype only: the gradient ops that scatter into or reduce to zeros
// "shaped like" an input (SliceGrad, PadGrad, TileGrad, GatherGrad,
// GatherElementsGrad, SumToShape, UnreduceTo: input 1; SplitLike: every
// input after the first) and CastLike's type operand. Counting them
// credited GatherGrad into a 50257×768 embedding with 154 MB it never
// reads, and a CastLike of a scalar with its (activation-sized) type
// operand.
func shapeOnlyInput(op string, i int) bool {
	switch op {
	case "SplitLike":
		return i >= 1
	case "SliceGrad", "PadGrad", "TileGrad", "GatherGrad", "GatherElementsGrad", "SumToShape", "UnreduceTo", "CastLike":
		return i == 1
	}
	return false
}

// overwritesInput reports whether n's kernel may write its output over an
// input the executor donates (kern.Spec.Overwrites): that output shares
// the input's storage, but the op reads and writes its bytes as with a
// fresh one.
func overwritesInput(n *graph.Node) bool {
	spec, ok := kern.Lookup(n.Domain, n.OpType, 0)
	return ok && len(spec.Overwrites) > 0
}

// aliasesInput reports whether an output shares its storage with an
// input (the op returned a view).
func aliasesInput(in, out []*graph.Tensor) bool {
	for _, o := range out {
		p := dataPointer(o)
		if p == 0 {
			continue
		}
		for _, t := range in {
			if dataPointer(t) == p {
				return true
			}
		}
	}
	return false
}

// dataPointer is the address of a tensor's first element, or 0.
func dataPointer(t *graph.Tensor) uintptr {
	if t == nil || t.Data == nil {
		return 0
	}
	v := reflect.ValueOf(t.Data)
	if v.Kind() != reflect.Slice || v.Len() == 0 {
		return 0
	}
	return v.Pointer()
}

// viewShape is the shape of PermutedMatMul's view of t: the sizes of the
// axes its attribute names, or t's shape when the attribute is absent.
func viewShape(n *graph.Node, t *graph.Tensor, attr string) []int {
	if t == nil {
		return nil
	}
	axes := n.AttrInts(attr, nil)
	if axes == nil {
		return t.Shape
	}
	out := make([]int, 0, len(axes))
	for _, a := range axes {
		if a < 0 {
			a += int64(t.Rank())
		}
		if a < 0 || int(a) >= t.Rank() {
			return nil
		}
		out = append(out, t.Shape[a])
	}
	return out
}

func shapeSize(s []int) float64 {
	if s == nil {
		return 0
	}
	n := 1.0
	for _, d := range s {
		n *= float64(d)
	}
	return n
}

func tensorBytes(t *graph.Tensor) float64 {
	if t == nil || t.IsContainer() || t.DType == graph.String {
		return 0
	}
	return float64(t.Size()) * float64(t.DType.Size())
}

// packedParts is in with, for an attention node that reads q, k and v
// packed in one tensor (graph.AttnPackedQKV), a header of the attribute's
// shape (no data) in place of each of them (graph.AttentionQKV).
func packedParts(n *graph.Node, in []*graph.Tensor) []*graph.Tensor {
	shape := graph.AttnPackedShape(n)
	if shape == nil {
		return in
	}
	part := &graph.Tensor{DType: graph.Float32, Shape: shape}
	out := append([]*graph.Tensor(nil), in...)
	for _, p := range graph.AttentionQKV(n.OpType) {
		if p < len(out) {
			out[p] = part
		}
	}
	return out
}
