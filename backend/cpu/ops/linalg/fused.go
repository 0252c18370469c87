package linalg

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.TransposedMatMul, kern.Spec{Fn: transposedMatMulKernel})
	kern.RegisterSpec(graph.FusedDomain, graph.MatMulAdd, kern.Spec{Fn: matMulAddKernel})
	kern.RegisterSpec(graph.FusedDomain, graph.GemmRelu, kern.Spec{Fn: func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		return gemmRun(ctx, n, in, true)
	}})
}

// matMulAddKernel is graph.MatMulAdd: the product of TransposedMatMul plus
// a bias. A float32 bias row vector (every dim but the last 1, the last the
// product's column count) is added in the GEMM's epilogue, which rounds as
// the separate Add would; anything else runs the product and then the Add
// kernel (broadcasting as Add does).
func matMulAddKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	a, b, bias := in[0], in[1], in[2]
	ta, tb := n.AttrInt("transA", 0) != 0, n.AttrInt("transB", 0) != 0
	p, err := epiloguePlan(n, a, b, ta, tb)
	if err != nil {
		return nil, err
	}
	if p != nil && biasRow(bias, p.outShape) {
		out, err := kern.NewUninit(n, graph.Float32, p.outShape) // every element is written
		if err != nil {
			return nil, err
		}
		// One tall product over the whole batch, the bias in its epilogue.
		runEpilogue(p, a, b, tb, out.Float32s(), gemm.Epilogue{Bias: bias.Float32s()})
		return kern.Results(n, out), nil
	}
	prod, err := transposedMatMulKernel(ctx, n, in[:2])
	if err != nil {
		return nil, err
	}
	return runOp(ctx, n, "", "Add", prod[0], bias)
}

// biasRow reports whether bias is a dense float32 row vector for a
// product of shape out: every dim but the last 1, the last out's last, as
// a GEMM epilogue adds it.
func biasRow(bias *graph.Tensor, out []int) bool {
	if bias.DType != graph.Float32 || len(bias.Float32s()) != bias.Size() || len(bias.Shape) < 1 ||
		len(out) < 1 || len(bias.Shape) > len(out) || bias.Shape[len(bias.Shape)-1] != out[len(out)-1] {
		return false
	}
	for _, d := range bias.Shape[:len(bias.Shape)-1] {
		if d != 1 {
			return false
		}
	}
	return true
}

// runOp runs the kernel registered for domain/op on n's context: the
// fused kernels' general path through the kernels they fuse.
func runOp(ctx *kern.Context, n *graph.Node, domain, op string, args ...*graph.Tensor) ([]*graph.Tensor, error) {
	return kern.RunNested(ctx, n, domain, op, args)
}

// runSubOp runs the kernel of domain:op on in as a node of its own (n's
// name, attrs as its attributes), outside n's memory plan: a fused op's
// general path through the kernels of the ops it replaced (the
// materialising PermutedMatMul, the attention ops' other dtypes).
func runSubOp(ctx *kern.Context, n *graph.Node, domain, op string, in []*graph.Tensor, attrs ...*graph.Attr) (*graph.Tensor, error) {
	sub := &graph.Node{Name: n.Name, OpType: op, Domain: domain, Inputs: make([]string, len(in)),
		Outputs: []string{n.Name + "/" + op}, Attrs: map[string]*graph.Attr{}}
	for _, a := range attrs {
		sub.Attrs[a.Name] = a
	}
	r, err := runOp(ctx, sub, domain, op, in...)
	if err != nil {
		return nil, err
	}
	return r[0], nil
}

// transposedMatMulKernel is graph.TransposedMatMul: MatMul(opA(A), opB(B))
// with opX swapping the last two axes of X when transX is set. float32
// runs as GEMMs that read the transposed operands in place; other dtypes
// materialise the transposes and run MatMul.
func transposedMatMulKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	a, b := in[0], in[1]
	ta, tb := n.AttrInt("transA", 0) != 0, n.AttrInt("transB", 0) != 0
	if (ta && len(a.Shape) < 2) || (tb && len(b.Shape) < 2) {
		return nil, n.Errorf("a transposed operand must have rank >= 2, got A %v (transA %v) and B %v (transB %v)", a.Shape, ta, b.Shape, tb)
	}
	if a.DType != b.DType {
		return nil, n.Errorf("A is %v but B is %v", a.DType, b.DType)
	}
	if a.DType != graph.Float32 {
		var err error
		if ta {
			if a, err = swapLast2(n, a); err != nil {
				return nil, err
			}
		}
		if tb {
			if b, err = swapLast2(n, b); err != nil {
				return nil, err
			}
		}
		return matMulKernel(ctx, n, []*graph.Tensor{a, b})
	}
	p, err := transposedPlan(n, a, b, ta, tb)
	if err != nil {
		return nil, err
	}
	out, err := kern.NewUninit(n, graph.Float32, p.outShape) // every element is written
	if err != nil {
		return nil, err
	}
	if len(a.Float32s()) != a.Size() || len(b.Float32s()) != b.Size() {
		return nil, n.Errorf("operand data does not match its shape (A %v, B %v)", a.Shape, b.Shape)
	}
	p.runF32Trans(ta, tb, a.Float32s(), b.Float32s(), out.Float32s())
	return kern.Results(n, out), nil
}

// swappedShape is shape with its last two dims swapped.
func swappedShape(shape []int) []int {
	s := append([]int{}, shape...)
	r := len(s)
	s[r-2], s[r-1] = s[r-1], s[r-2]
	return s
}

// swapLast2 returns a copy of t (rank >= 2) with its last two axes swapped.
func swapLast2(n *graph.Node, t *graph.Tensor) (*graph.Tensor, error) {
	if err := t.Validate(); err != nil {
		return nil, n.Errorf("%v", err)
	}
	out, err := graph.NewTensor(t.DType, swappedShape(t.Shape))
	if err != nil {
		return nil, n.Errorf("transposed operand: %w", err)
	}
	r, c := t.Shape[len(t.Shape)-2], t.Shape[len(t.Shape)-1]
	if r*c == 0 {
		return out, nil
	}
	batch := t.Size() / (r * c)
	switch s := t.Data.(type) {
	case []float64:
		transposeBatch(out.Data.([]float64), s, batch, r, c)
	case []int8:
		transposeBatch(out.Data.([]int8), s, batch, r, c)
	case []int16:
		transposeBatch(out.Data.([]int16), s, batch, r, c)
	case []int32:
		transposeBatch(out.Data.([]int32), s, batch, r, c)
	case []int64:
		transposeBatch(out.Data.([]int64), s, batch, r, c)
	case []uint8:
		transposeBatch(out.Data.([]uint8), s, batch, r, c)
	case []uint16:
		transposeBatch(out.Data.([]uint16), s, batch, r, c)
	case []uint32:
		transposeBatch(out.Data.([]uint32), s, batch, r, c)
	case []uint64:
		transposeBatch(out.Data.([]uint64), s, batch, r, c)
	default:
		return nil, n.Errorf("dtype %v is not supported", t.DType)
	}
	return out, nil
}

// transposeBatch transposes batch consecutive r×c matrices of src into dst.
func transposeBatch[T any](dst, src []T, batch, r, c int) {
	for b := 0; b < batch; b++ {
		s, d := src[b*r*c:(b+1)*r*c], dst[b*r*c:(b+1)*r*c]
		for i := 0; i < r; i++ {
			for j, v := range s[i*c : (i+1)*c] {
				d[j*r+i] = v
			}
		}
	}
}

// transposedPlan is the MatMul plan of op(a)·op(b), op swapping the last
// two axes where ta (tb) is set (the node's kept plan, see nodePlan).
func transposedPlan(n *graph.Node, a, b *graph.Tensor, ta, tb bool) (*matmulPlan, error) {
	return nodePlan(n, a.Shape, b.Shape, ta, tb)
}
