package train

import (
	"fmt"
	"math"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Synchronised BatchNorm (--sync-batchnorm), as torch.nn.SyncBatchNorm: on
// N data-parallel processes with per-process batch b, every training-mode
// BatchNormalization normalises with the statistics of the whole global
// batch N·b, so training gives the losses, gradients and running statistics
// of one process with batch N·b.
//
// SyncBatchNorm rewrites each such node into primitives around two
// onnxtrain.AllReduceSum nodes (graph.AllReduceSumOp):
//
//	x viewed as [N, C, S]
//	[Σx, count] per channel  ─AllReduceSum─▶  mean = Σx / count
//	Σ(x - mean)² per channel ─AllReduceSum─▶  var  = Σ(x - mean)² / count
//	y = (x - mean) · scale/√(var + ε) + B
//
// Two exchanges rather than one of Σx and Σx² keep the variance as accurate
// as the fused kernel's two passes (Σx² - count·mean² cancels badly in
// float32 when |mean| ≫ std). The running statistics are updated with the
// global mean and the global unbiased variance (PyTorch's count/(count-1)
// when the node carries graph.UnbiasedVarAttr). Autodiff differentiates the
// primitives; the gradient of an all-reduce sum is the all-reduce sum of the
// incoming gradient (graph/grad_collective.go), which gives PyTorch's
// synchronised backward (the per-channel sums of dy and dy·x̂ summed over
// the processes). Per step that is 2 small all-reduces forward and 2
// backward per BatchNorm layer, of C+1 and C floats.
//
// The kernel reads the collective from the Run's context (the
// Accelerator's communicator, comm.go); without one (one process)
// AllReduceSum is the identity and the rewritten graph computes
// plain training-mode BatchNormalization.

// SyncBatchNorm rewrites every training-mode BatchNormalization of g (opset
// opset) into primitives whose batch statistics are summed across processes.
// It returns the number of nodes rewritten. Nodes in inference mode are left
// alone. Training-mode nodes of opsets before 14 (which tell training by
// their extra outputs) are refused with an error naming the node.
func SyncBatchNorm(g *graph.Graph, opset int64) (int, error) {
	types := map[string]graph.DType{}
	for _, in := range g.Inputs {
		if in.Type != nil {
			types[in.Name] = in.Type.DType
		}
	}
	for name, t := range g.Initializers {
		types[name] = t.DType
	}
	dtypeOf := func(name string) graph.DType { return types[name] }
	var out []*graph.Node
	added := map[string]*graph.Tensor{}
	rewritten := 0
	for _, n := range g.Nodes {
		if n.OpType != "BatchNormalization" || (n.Domain != "" && n.Domain != "ai.onnx") || !graph.BatchNormTraining(n, opset) {
			out = append(out, n)
			continue
		}
		if opset > 0 && opset < 14 {
			return 0, fmt.Errorf("train: --sync-batchnorm: %w", n.Errorf("training-mode BatchNormalization of opset %d is not supported (export with opset 14 or newer)", opset))
		}
		nodes, consts, err := syncBatchNormNode(n, dtypeOf)
		if err != nil {
			return 0, fmt.Errorf("train: --sync-batchnorm: %w", err)
		}
		for k, v := range consts {
			if _, dup := g.Initializers[k]; dup {
				return 0, fmt.Errorf("train: --sync-batchnorm: %w", n.Errorf("the rewrite reuses the name %q", k))
			}
			added[k] = v
		}
		out = append(out, nodes...)
		rewritten++
	}
	// g changes only once every node has been rewritten.
	for k, v := range added {
		g.Initializers[k] = v
	}
	g.Nodes = out
	return rewritten, nil
}

// syncBatchNormNode emits the synchronised form of one opset-14+
// training-mode BatchNormalization node: outputs Y and, where named, the
// updated running mean and variance. dtypeOf gives the dtype of a graph
// input or initializer (Undefined for other values).
//
// Autodiff differentiates every node on a path from a parameter to the
// loss, so the rewrite uses no CastLike there (it has no gradient rule and
// cannot be lowered without types): constants take the dtype of scale, and
// X, scale and B are assumed to share it, as they do in float32 training.
func syncBatchNormNode(n *graph.Node, dtypeOf func(string) graph.DType) ([]*graph.Node, map[string]*graph.Tensor, error) {
	if len(n.Inputs) < 5 {
		return nil, nil, n.Errorf("BatchNormalization needs 5 inputs (X, scale, B, input_mean, input_var), has %d", len(n.Inputs))
	}
	for i, name := range []string{"X", "scale", "B", "input_mean", "input_var"} {
		if n.Inputs[i] == "" {
			return nil, nil, n.Errorf("input %d (%s) is required", i, name)
		}
	}
	if len(n.Outputs) == 0 || n.Outputs[0] == "" {
		return nil, nil, n.Errorf("output Y is not named")
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	momentum := float64(n.AttrFloat("momentum", 0.9))
	unbiased := n.AttrInt(graph.UnbiasedVarAttr, 0) == 1
	x, scale, bias, runMean, runVar := n.Inputs[0], n.Inputs[1], n.Inputs[2], n.Inputs[3], n.Inputs[4]
	dt := dtypeOf(scale)
	if dt == graph.Undefined {
		dt = graph.Float32
	}
	if !dt.IsFloat() {
		return nil, nil, n.Errorf("scale is %v; BatchNormalization needs float parameters", dt)
	}

	b := graph.NewBuilder(n.Label()+"/syncbn", 0)
	ints := func(v ...int64) string { return b.Const(graph.FromInt64(v, len(v))) }
	scalar := func(d graph.DType, v float64) string { return b.Const(graph.Scalar(d, v)) }
	allReduce := func(v string) string {
		out := b.Op(graph.AllReduceSumOp, []string{v})
		b.Nodes[len(b.Nodes)-1].Domain = graph.InternalDomain
		return out
	}
	channelAxes := ints(0, 2)
	perChannel := func(v string) string { // [C] -> [1, C, 1]
		return b.Op("Reshape", []string{v, ints(1, -1, 1)})
	}

	// X as [N, C, S].
	view := b.Op("Reshape", []string{x, ints(0, 0, -1)})
	sum := b.Op("ReduceSum", []string{view, channelAxes}, graph.IntAttr("keepdims", 0)) // [C]
	// count = N·S = Size(X)/C elements per channel on this process. Size
	// has no gradient, so the backward pass stops right there.
	asFloat := func(v string) string { return b.Op("Cast", []string{v}, graph.IntAttr("to", int64(dt))) }
	count := b.Op("Div", []string{asFloat(b.Op("Size", []string{view})), asFloat(b.Op("Size", []string{sum}))})
	count = b.Op("Reshape", []string{count, ints(1)}) // [1]

	// First exchange: the per-channel sums and the count, in one message.
	packed := allReduce(b.Op("Concat", []string{sum, count}, graph.IntAttr("axis", 0)))
	globalSum := b.Op("Slice", []string{packed, ints(0), ints(-1)})
	total := b.Op("Slice", []string{packed, ints(-1), ints(math.MaxInt64)})
	mean := b.Op("Div", []string{globalSum, total}) // [C]

	// Second exchange: the per-channel sums of squared deviations.
	centred := b.Op("Sub", []string{view, perChannel(mean)})
	sq := b.Op("ReduceSum", []string{b.Op("Mul", []string{centred, centred}), channelAxes}, graph.IntAttr("keepdims", 0))
	variance := b.Op("Div", []string{allReduce(sq), total}) // population variance, [C]

	invStd := b.Op("Reciprocal", []string{b.Op("Sqrt", []string{b.Op("Add", []string{variance, scalar(dt, eps)})})})
	gain := b.Op("Mul", []string{invStd, scale})
	y := b.Op("Add", []string{b.Op("Mul", []string{centred, perChannel(gain)}), perChannel(bias)})
	b.OpTo("Reshape", []string{y, b.Op("Shape", []string{x})}, []string{n.Outputs[0]})

	// Running statistics: running·momentum + batch·(1 - momentum), in the
	// running statistics' dtype. These nodes do not lead to the loss.
	update := func(running, batch, out string) {
		rt := dtypeOf(running)
		if rt == graph.Undefined {
			rt = dt
		}
		if rt != dt {
			batch = b.Op("Cast", []string{batch}, graph.IntAttr("to", int64(rt)))
		}
		b.OpTo("Add", []string{
			b.Op("Mul", []string{running, scalar(rt, momentum)}),
			b.Op("Mul", []string{batch, scalar(rt, 1-momentum)}),
		}, []string{out})
	}
	if len(n.Outputs) > 1 && n.Outputs[1] != "" {
		update(runMean, mean, n.Outputs[1])
	}
	if len(n.Outputs) > 2 && n.Outputs[2] != "" {
		v := variance
		if unbiased {
			// count/(count-1), or 1 for a single element, as the kernel.
			denom := b.Op("Max", []string{b.Op("Sub", []string{total, scalar(dt, 1)}), scalar(dt, 1)})
			v = b.Op("Mul", []string{variance, b.Op("Div", []string{total, denom})})
		}
		update(runVar, v, n.Outputs[2])
	}
	return b.Nodes, b.Consts, nil
}
