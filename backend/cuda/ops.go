package cuda

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/graph"
)

// The ops the planner turns into device steps, by op name: the primitive
// set (graph.PrimitiveOps) and the fast paths. Every other op is lowered
// (graph.LowerGraphFallback) before planning; under PrimitivesOnly the
// fast paths are lowered too.

var binaryOps = map[string]int{"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4, "Max": 5, "Min": 6}

var unaryOps = map[string]int{"Exp": 0, "Log": 1, "Sqrt": 2, "Tanh": 3, "Erf": 4, "Sin": 5, "Cos": 6, "Floor": 7,
	"Neg": 8, "Abs": 9, "Relu": 10, "Sigmoid": 11, "Reciprocal": 12, "Ceil": 13}

var compareOps = map[string]int{"Equal": 0, "Less": 1, "Greater": 2}

// viewOps share their input's memory.
var viewOps = map[string]bool{"Reshape": true, "Identity": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true}

// fastPaths are the fused kernels outside the primitive set.
var fastPaths = map[string]bool{
	"Softmax": true, "LogSoftmax": true, "LayerNormalization": true, "BatchNormalization": true, "Gelu": true,
	"Neg": true, "Abs": true, "Relu": true, "Sigmoid": true, "Reciprocal": true, "Ceil": true, "Greater": true,
	"Flatten": true, "Squeeze": true, "Unsqueeze": true, "Constant": true, "ReduceMean": true,
	"onnxtrain:SoftmaxGrad": true, "onnxtrain:LogSoftmaxGrad": true,
}

var primitiveKernels = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Max": true, "Min": true,
	"Exp": true, "Log": true, "Sqrt": true, "Tanh": true, "Erf": true, "Sin": true, "Cos": true, "Floor": true,
	"Equal": true, "Less": true, "Where": true, "Cast": true,
	"ReduceSum": true, "ReduceMax": true, "ArgMax": true, "CumSum": true,
	"MatMul": true, "Conv": true, "ConvTranspose": true, "MaxPool": true, "AveragePool": true,
	"Reshape": true, "Transpose": true, "Concat": true, "Slice": true, "Gather": true, "GatherElements": true,
	"ScatterElements": true, "Expand": true, "Pad": true, "Identity": true, "Shape": true, "RandomUniformLike": true,
	// Dropout's training form has no lowering (its stream is the
	// backend's); the CPU backend keeps its kernel under PrimitivesOnly too.
	"Dropout": true,
}

// opKey names an op with its domain where it is not ai.onnx.
func opKey(n *graph.Node) string {
	if n.Domain == "" || n.Domain == "ai.onnx" {
		return n.OpType
	}
	return n.Domain + ":" + n.OpType
}

// hasKernel reports whether the planner runs n directly (before shapes are
// known: shape-dependent limits are checked when planning).
func hasKernel(n *graph.Node, primitivesOnly bool) bool {
	k := opKey(n)
	if graph.IsOptimizerOp(n) {
		return true // state updates: always direct, as on the CPU
	}
	if primitiveKernels[k] {
		return true
	}
	if primitivesOnly || !fastPaths[k] {
		return false
	}
	switch k {
	case "BatchNormalization":
		return n.AttrInt("training_mode", 0) == 1
	case "Gelu":
		return true
	}
	return true
}

// lowerNode emits the steps of one node.
func (pl *planner) lowerNode(n *graph.Node) error {
	k := opKey(n)
	switch {
	case graph.IsOptimizerOp(n):
		return pl.optimizerOp(n)
	case viewOps[k]:
		src, err := pl.in(0)
		if err != nil {
			return err
		}
		return pl.alias(0, src)
	}
	if op, ok := binaryOps[k]; ok {
		return pl.binary(n, op)
	}
	if op, ok := unaryOps[k]; ok {
		return pl.unary(op)
	}
	if op, ok := compareOps[k]; ok {
		return pl.compare(op)
	}
	switch k {
	case "Constant":
		t, ok := graph.ConstantValue(n)
		if !ok {
			return n.Errorf("Constant without a tensor value")
		}
		pl.constant(n.Outputs[0], t)
		return nil
	case "Shape":
		return pl.shapeOf(n)
	case "Where":
		return pl.where()
	case "Cast":
		return pl.cast(n)
	case "ReduceSum", "ReduceMax", "ReduceMean":
		return pl.reduce(n)
	case "ArgMax":
		return pl.argmax(n)
	case "CumSum":
		return pl.cumsum(n)
	case "MatMul":
		return pl.matmul()
	case "Conv":
		return pl.conv(n)
	case "ConvTranspose":
		return pl.convTranspose(n)
	case "MaxPool", "AveragePool":
		return pl.pool(n)
	case "Transpose":
		return pl.transpose(n)
	case "Expand":
		return pl.expand()
	case "Slice":
		return pl.slice(n)
	case "Concat":
		return pl.concat(n)
	case "Gather":
		return pl.gather(n)
	case "GatherElements", "ScatterElements":
		return pl.elements(n)
	case "Pad":
		return pl.pad(n)
	case "RandomUniformLike":
		return pl.randomUniform(n)
	case "Dropout":
		return pl.dropout(n)
	case "Softmax", "LogSoftmax":
		return pl.softmax(n, k == "LogSoftmax")
	case "onnxtrain:SoftmaxGrad", "onnxtrain:LogSoftmaxGrad":
		return pl.softmaxGrad(n, k == "onnxtrain:LogSoftmaxGrad")
	case "LayerNormalization":
		return pl.layerNorm(n)
	case "BatchNormalization":
		return pl.batchNorm(n)
	case "Gelu":
		return pl.gelu(n)
	}
	return fmt.Errorf("cuda: node %s (%s): %w: no CUDA kernel and no lowering", n.Label(), k, graph.ErrUnsupportedOp)
}

// ---- helpers -----------------------------------------------------------

func (pl *planner) launch1D(kernel string, n int64, args ...Arg) {
	grid, block := grid1D(n)
	pl.emit(&Launch{Kernel: kernel, Grid: grid, Block: block, Args: args})
}

func (pl *planner) launchRows(kernel string, rows int64, args ...Arg) {
	grid, block, _ := gridRows(rows)
	pl.emit(&Launch{Kernel: kernel, Grid: grid, Block: block, Args: args})
}

// contiguousStrides are the element strides of a row-major shape.
func contiguousStrides(shape []int) []int64 {
	s := make([]int64, len(shape))
	acc := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= int64(shape[i])
	}
	return s
}

// broadcastIndex indexes operands of the given shapes (numpy broadcasting,
// right-aligned) from an output of shape out. Operand 0..len(ins)-1 go to
// Strides[0..]; at most three.
func broadcastIndex(out []int, ins ...[]int) (Index, error) {
	var x Index
	if len(out) > MaxRank {
		return x, fmt.Errorf("rank %d is above the kernels' %d", len(out), MaxRank)
	}
	x.Rank = int64(len(out))
	for d, v := range out {
		x.Dims[d] = int64(v)
	}
	for k, s := range ins {
		if len(s) > len(out) {
			return x, fmt.Errorf("operand of shape %v does not broadcast to %v", s, out)
		}
		st := contiguousStrides(s)
		off := len(out) - len(s)
		for d := range s {
			switch {
			case s[d] == out[d+off]:
				x.Strides[k][d+off] = st[d]
			case s[d] == 1:
				x.Strides[k][d+off] = 0
			default:
				return x, fmt.Errorf("operand of shape %v does not broadcast to %v", s, out)
			}
		}
	}
	if x.Rank == 0 { // a scalar: one dim of 1 keeps the kernels' loop simple
		x.Rank, x.Dims[0] = 1, 1
	}
	return x, nil
}

func normAxis(axis int64, rank int) (int, error) {
	if axis < 0 {
		axis += int64(rank)
	}
	if axis < 0 || (rank > 0 && axis >= int64(rank)) || (rank == 0 && axis != 0) {
		return 0, fmt.Errorf("axis %d out of range for rank %d", axis, rank)
	}
	return int(axis), nil
}

// split3 views shape as [outer, shape[lo:hi] product, inner].
func split3(shape []int, lo, hi int) (outer, mid, inner int64) {
	outer, mid, inner = 1, 1, 1
	for i, d := range shape {
		switch {
		case i < lo:
			outer *= int64(d)
		case i < hi:
			mid *= int64(d)
		default:
			inner *= int64(d)
		}
	}
	return
}

// constInts reads a constant int64 input (Slice starts, Pad pads, axes).
func (pl *planner) constInts(i int) ([]int64, bool, error) {
	name := pl.node.Input(i)
	if name == "" {
		return nil, false, nil
	}
	b, ok := pl.p.values[name]
	if !ok || b.root().Kind != BufConst {
		return nil, false, pl.node.Errorf("input %q must be a constant once shapes are known (the CUDA backend plans static shapes)", name)
	}
	t := b.root().Const
	out := make([]int64, t.Size())
	for k := range out {
		out[k] = t.Int(k)
	}
	return out, true, nil
}

func (pl *planner) constFloat(i int) (float64, bool) {
	name := pl.node.Input(i)
	b, ok := pl.p.values[name]
	if name == "" || !ok || b.root().Kind != BufConst || b.root().Const.Size() == 0 {
		return 0, false
	}
	return b.root().Const.Float(0), true
}

// ---- elementwise -------------------------------------------------------

func (pl *planner) binary(n *graph.Node, op int) error {
	a, err := pl.in(0)
	if err != nil {
		return err
	}
	for k := 1; k < len(n.Inputs); k++ {
		b, err := pl.in(k)
		if err != nil {
			return err
		}
		var o *Buffer
		if k == len(n.Inputs)-1 {
			if o, err = pl.out(0); err != nil {
				return err
			}
		} else {
			o = pl.scratch(a.DType, broadcastShape(a.Shape, b.Shape)...)
		}
		x, err := broadcastIndex(o.Shape, a.Shape, b.Shape)
		if err != nil {
			return n.Errorf("%v", err)
		}
		if b.DType != a.DType {
			return n.Errorf("%s of %v and %v: cast the exponent first", n.OpType, a.DType, b.DType)
		}
		switch {
		case isFloatKernelType(a.DType):
			pl.launch1D("binary_fp", o.Elements(), Ptr(a), Ptr(b), Ptr(o), I64(o.Elements()), I32(op), I32(int(a.DType)), Idx(x))
		case a.DType == graph.Int64:
			pl.launch1D("binary_i64", o.Elements(), Ptr(a), Ptr(b), Ptr(o), I64(o.Elements()), I32(op), Idx(x))
		default:
			return n.Errorf("%s on %v tensors: the CUDA backend has float32, float16, bfloat16 and int64 kernels", n.OpType, a.DType)
		}
		a = o
	}
	if len(n.Inputs) == 1 {
		return pl.alias(0, a)
	}
	return nil
}

func broadcastShape(a, b []int) []int {
	r := max(len(a), len(b))
	out := make([]int, r)
	for i := range r {
		da, db := 1, 1
		if j := i - (r - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (r - len(b)); j >= 0 {
			db = b[j]
		}
		out[i] = max(da, db)
		if da == 0 || db == 0 {
			out[i] = 0
		}
	}
	return out
}

func (pl *planner) unary(op int) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	if !isFloatKernelType(x.DType) {
		if op == 8 && x.DType == graph.Int64 { // Neg on int64: 0 - x
			o, err := pl.out(0)
			if err != nil {
				return err
			}
			zero := pl.constant(o.Name+".zero", &graph.Tensor{DType: graph.Int64, Shape: []int{}, Data: []int64{0}})
			ix, _ := broadcastIndex(o.Shape, nil, x.Shape)
			pl.launch1D("binary_i64", o.Elements(), Ptr(zero), Ptr(x), Ptr(o), I64(o.Elements()), I32(1), Idx(ix))
			return nil
		}
		return pl.node.Errorf("%s on %v: the CUDA backend's unary kernels are float32, float16 and bfloat16", pl.node.OpType, x.DType)
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	pl.launch1D("unary_fp", o.Elements(), Ptr(x), Ptr(o), I64(o.Elements()), I32(op), I32(int(x.DType)))
	return nil
}

func (pl *planner) compare(op int) error {
	a, err := pl.in(0)
	if err != nil {
		return err
	}
	b, err := pl.in(1)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	x, err := broadcastIndex(o.Shape, a.Shape, b.Shape)
	if err != nil {
		return pl.node.Errorf("%v", err)
	}
	pl.launch1D("compare_any", o.Elements(), Ptr(a), Ptr(b), Ptr(o), I64(o.Elements()), I32(op), I32(int(a.DType)), Idx(x))
	return nil
}

func (pl *planner) where() error {
	c, err := pl.in(0)
	if err != nil {
		return err
	}
	a, err := pl.in(1)
	if err != nil {
		return err
	}
	b, err := pl.in(2)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	x, err := broadcastIndex(o.Shape, c.Shape, a.Shape, b.Shape)
	if err != nil {
		return pl.node.Errorf("%v", err)
	}
	pl.launch1D("where_any", o.Elements(), Ptr(c), Ptr(a), Ptr(b), Ptr(o), I64(o.Elements()), I32(o.DType.Size()), Idx(x))
	return nil
}

func (pl *planner) cast(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	if x.DType == o.DType {
		pl.p.Steps = append(pl.p.Steps, Step{Node: n.Label(), CopyDst: o, CopySrc: x, CopyBytes: o.Bytes})
		pl.touch([]Arg{Ptr(o), Ptr(x)})
		return nil
	}
	pl.launch1D("cast_any", o.Elements(), Ptr(x), Ptr(o), I64(o.Elements()), I32(int(x.DType)), I32(int(o.DType)))
	return nil
}

func (pl *planner) shapeOf(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	r := len(x.Shape)
	start, end := int(n.AttrInt("start", 0)), int(n.AttrInt("end", int64(r)))
	if start < 0 {
		start += r
	}
	if end < 0 {
		end += r
	}
	start, end = min(max(start, 0), r), min(max(end, 0), r)
	vals := []int64{}
	for i := start; i < end; i++ {
		vals = append(vals, int64(x.Shape[i]))
	}
	pl.constant(n.Outputs[0], &graph.Tensor{DType: graph.Int64, Shape: []int{len(vals)}, Data: vals})
	return nil
}

// isFloatKernelType reports whether the floating-point kernels (binary_fp,
// unary_fp, reduce_fp) take dt: they compute in float32 and round once.
func isFloatKernelType(dt graph.DType) bool {
	return dt == graph.Float32 || dt == graph.Float16 || dt == graph.BFloat16
}
