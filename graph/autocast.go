package graph

import (
	"fmt"
	"strings"
)

// Automatic mixed precision, as torch.autocast does it on the CPU, applied to
// a graph instead of to eager calls.
//
// AutoCast sorts every op into one of three classes:
//
//   - low precision: MatMul, Gemm, Conv, ConvTranspose and Einsum take their
//     float inputs cast to the low type (bfloat16 or float16); their kernels
//     accumulate in float32 and round the result to the low type.
//   - float32: softmax, normalisations, losses, reductions and the
//     functions whose range or accuracy suffers in half precision (Exp, Log,
//     Pow, Sqrt, Reciprocal, CumSum, ...) take their half inputs cast to
//     float32.
//   - everything else runs in the widest float type among its inputs (like
//     PyTorch's type promotion): a bfloat16 tensor added to a float32 one is
//     added in float32. Scalar constants do not widen (a bfloat16 tensor
//     divided by a float32 constant stays bfloat16), and neither does the
//     bias added to the output of a MatMul or Gemm (an exported Linear layer
//     is MatMul + Add; torch's linear runs in the low type with its bias).
//
// Graph inputs (the parameters: float32 master weights) and graph outputs
// keep their types: casts are inserted inside the graph, so reverse-mode
// autodiff applied afterwards (the gradient of Cast casts back) gives
// float32 gradients of float32 parameters.

// AutoCastLowOps are the ops AutoCast runs in the low-precision type.
var AutoCastLowOps = map[string]bool{
	"MatMul": true, "Gemm": true, "Conv": true, "ConvTranspose": true, "Einsum": true,
}

// AutoCastFloat32Ops are the ops AutoCast runs in float32.
var AutoCastFloat32Ops = map[string]bool{
	"Softmax": true, "LogSoftmax": true, "SoftmaxCrossEntropyLoss": true, "NegativeLogLikelihoodLoss": true,
	"LayerNormalization": true, "BatchNormalization": true, "InstanceNormalization": true,
	"GroupNormalization": true, "MeanVarianceNormalization": true, "LpNormalization": true, "LRN": true,
	"ReduceSum": true, "ReduceMean": true, "ReduceMax": true, "ReduceMin": true, "ReduceProd": true,
	"ReduceL1": true, "ReduceL2": true, "ReduceLogSum": true, "ReduceLogSumExp": true, "ReduceSumSquare": true,
	"Exp": true, "Log": true, "Pow": true, "Sqrt": true, "Reciprocal": true, "CumSum": true,
	"Softplus": true, "Softsign": true, "LpPool": true, "GlobalLpPool": true,
}

// autoCastKeep are ops whose output types come from attributes or a second
// input, never from their data input: AutoCast leaves them alone.
var autoCastKeep = map[string]bool{"Cast": true, "CastLike": true, "Shape": true, "Size": true}

// AutoCast rewrites g (opset is its ai.onnx opset) for mixed precision with
// low (BFloat16 or Float16) as the low-precision type; see the comment above
// for the policy. Graph inputs and outputs keep their types. Run it on a
// forward (and loss) graph before Gradients. Nodes holding subgraphs (If,
// Loop, Scan) are refused: their bodies read outer values by name, whose
// types the pass would change under them.
func AutoCast(g *Graph, opset int64, low DType) error {
	if low != BFloat16 && low != Float16 {
		return fmt.Errorf("graph: autocast: the low-precision type must be bfloat16 or float16, not %v", low)
	}
	for _, n := range g.Nodes {
		for _, a := range n.Attrs {
			if a != nil && (a.G != nil || len(a.Graphs) > 0) {
				return fmt.Errorf("graph: autocast: node %q (%s) holds a subgraph; mixed precision does not support control flow", n.Label(), n.OpType)
			}
		}
	}
	types, err := InferShapes(g, opset, nil)
	if err != nil {
		return fmt.Errorf("graph: autocast: %w", err)
	}
	ac := &autoCaster{g: g, low: low, types: types, dt: map[string]DType{}, names: map[string]bool{},
		casts: map[string]string{}, isOutput: map[string]bool{}, weak: map[string]bool{}, producer: map[string]*Node{}}
	for name, t := range types {
		if t != nil {
			ac.dt[name] = t.DType
		}
		ac.names[name] = true
	}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			ac.names[o] = true
		}
		if n.OpType == "Constant" && n.Domain == "" && len(n.Outputs) == 1 {
			if t := types[n.Outputs[0]]; t != nil && t.HasShape && len(t.Shape) <= 1 && (len(t.Shape) == 0 || t.Shape[0].Known && t.Shape[0].Value <= 1) {
				ac.weak[n.Outputs[0]] = true
			}
		}
	}
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		isInput[in.Name] = true
	}
	for name, t := range g.Initializers {
		if !isInput[name] && t != nil && t.Size() <= 1 {
			ac.weak[name] = true
		}
	}
	for _, o := range g.Outputs {
		ac.isOutput[o.Name] = true
	}
	out := make([]*Node, 0, len(g.Nodes)+len(g.Nodes)/2)
	for _, n := range g.Nodes {
		out = ac.node(out, n)
	}
	g.Nodes = out
	for name, vi := range g.ValueInfo {
		if vi != nil && vi.Type != nil && vi.Type.Kind == KindTensor {
			if d, ok := ac.dt[name]; ok && d != vi.Type.DType && vi.Type.DType != Undefined {
				c := *vi.Type
				c.DType = d
				g.ValueInfo[name] = &ValueInfo{Name: vi.Name, Type: &c}
			}
		}
	}
	return nil
}

type autoCaster struct {
	g     *Graph
	low   DType
	types map[string]*Type
	// dt is the dtype of every value after the rewrite so far.
	dt       map[string]DType
	names    map[string]bool
	casts    map[string]string // value + "\x00" + dtype -> cast value
	isOutput map[string]bool
	weak     map[string]bool
	producer map[string]*Node
}

func isHalf(d DType) bool { return d == BFloat16 || d == Float16 }

// autoCastable reports whether a value of dtype d takes part in autocast
// (float32 and the half types; float64 is left alone, as torch does).
func autoCastable(d DType) bool { return d == Float32 || isHalf(d) }

// castTo returns a value holding name converted to d, adding the Cast node
// to out (once per value and type).
func (ac *autoCaster) castTo(out []*Node, name string, d DType) ([]*Node, string) {
	if ac.dt[name] == d {
		return out, name
	}
	key := name + "\x00" + d.String()
	if c, ok := ac.casts[key]; ok {
		return out, c
	}
	c := ac.fresh("onnxtrain/autocast/" + strings.TrimPrefix(name, "onnxtrain/autocast/") + "/" + d.String())
	out = append(out, &Node{Name: c, OpType: "Cast", Inputs: []string{name}, Outputs: []string{c},
		Attrs: map[string]*Attr{"to": IntAttr("to", int64(d))}})
	ac.casts[key] = c
	ac.dt[c] = d
	return out, c
}

func (ac *autoCaster) fresh(base string) string {
	name := base
	for i := 1; ac.names[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	ac.names[name] = true
	return name
}

// node rewrites one node: casts its float inputs to the type the policy
// picks, records its outputs' new types, and keeps graph outputs in their
// declared types.
func (ac *autoCaster) node(out []*Node, n *Node) []*Node {
	for _, o := range n.Outputs {
		ac.producer[o] = n
	}
	if n.Domain == "" && autoCastKeep[n.OpType] {
		if n.OpType == "CastLike" && len(n.Inputs) > 1 && len(n.Outputs) > 0 {
			if d, ok := ac.dt[n.Inputs[1]]; ok && d != Undefined {
				ac.dt[n.Outputs[0]] = d // CastLike takes its type from input 1
			}
		}
		return append(out, n)
	}
	if n.Domain != "" {
		// An op of another domain keeps the input types it was built
		// for: inputs that the pass changed are cast back.
		out, n = ac.restoreInputs(out, n)
		return append(out, n)
	}
	float := false
	for _, in := range n.Inputs {
		if in != "" && autoCastable(ac.dt[in]) {
			float = true
		}
	}
	if !float {
		return append(out, n)
	}
	var to DType
	switch {
	case AutoCastLowOps[n.OpType]:
		to = ac.low
	case AutoCastFloat32Ops[n.OpType]:
		to = Float32
	default:
		to = ac.widest(n)
	}
	inputs := append([]string(nil), n.Inputs...)
	changed := false
	for i, in := range inputs {
		if in == "" || !autoCastable(ac.dt[in]) || ac.dt[in] == to {
			continue
		}
		var c string
		out, c = ac.castTo(out, in, to)
		inputs[i] = c
		changed = true
	}
	if changed {
		c := *n
		c.Inputs = inputs
		n = &c
	}
	// Outputs that were float32 (or half) take the compute type; a graph
	// output keeps its type through a cast back.
	var fix []*Node
	outsCopied := false
	for j, o := range n.Outputs {
		if o == "" {
			continue
		}
		t := ac.types[o]
		if t == nil || !autoCastable(t.DType) || t.DType == to {
			if t != nil {
				ac.dt[o] = t.DType
			}
			continue
		}
		if !ac.isOutput[o] {
			ac.dt[o] = to
			continue
		}
		if !outsCopied {
			c := *n
			c.Outputs = append([]string(nil), n.Outputs...)
			n = &c
			outsCopied = true
		}
		inner := ac.fresh("onnxtrain/autocast/" + o + "/" + to.String())
		n.Outputs[j] = inner
		ac.dt[inner] = to
		ac.dt[o] = t.DType
		fix = append(fix, &Node{Name: o + "/autocast", OpType: "Cast", Inputs: []string{inner}, Outputs: []string{o},
			Attrs: map[string]*Attr{"to": IntAttr("to", int64(t.DType))}})
	}
	out = append(out, n)
	return append(out, fix...)
}

// restoreInputs casts the inputs of n whose type the pass changed back to
// their original types, adding the casts to out, and returns n or a copy
// that reads the casts.
func (ac *autoCaster) restoreInputs(out []*Node, n *Node) ([]*Node, *Node) {
	var inputs []string
	for i, in := range n.Inputs {
		t := ac.types[in]
		if in == "" || t == nil || !autoCastable(ac.dt[in]) || ac.dt[in] == t.DType {
			continue
		}
		if inputs == nil {
			inputs = append([]string(nil), n.Inputs...)
		}
		out, inputs[i] = ac.castTo(out, in, t.DType)
	}
	if inputs == nil {
		return out, n
	}
	c := *n
	c.Inputs = inputs
	return out, &c
}

// widest is the float type a promoting op computes in: float32 when any of
// its (strong) float inputs is float32, the low type when all are low.
// Scalar constants are weak, and so is the bias of Add(MatMul/Gemm output,
// bias).
func (ac *autoCaster) widest(n *Node) DType {
	to := Undefined
	for i, in := range n.Inputs {
		d := ac.dt[in]
		if in == "" || !autoCastable(d) || ac.weak[in] || ac.isBias(n, i) {
			continue
		}
		switch {
		case to == Undefined, d == Float32:
			to = d
		}
		if to == Float32 {
			break
		}
	}
	if to == Undefined {
		// Only weak inputs: the first float one decides.
		for _, in := range n.Inputs {
			if in != "" && autoCastable(ac.dt[in]) {
				return ac.dt[in]
			}
		}
	}
	return to
}

// isBias reports whether input i of an Add is a 1-D float32 tensor added to
// the low-precision output of a MatMul or Gemm.
func (ac *autoCaster) isBias(n *Node, i int) bool {
	if n.OpType != "Add" || len(n.Inputs) != 2 {
		return false
	}
	other := n.Inputs[1-i]
	p := ac.producer[other]
	if p == nil || (p.OpType != "MatMul" && p.OpType != "Gemm") || !isHalf(ac.dt[other]) {
		return false
	}
	t := ac.types[n.Inputs[i]]
	return t != nil && t.HasShape && len(t.Shape) == 1
}
