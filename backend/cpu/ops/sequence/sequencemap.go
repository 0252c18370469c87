package sequence

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("SequenceMap", sequenceMapKernel)
}

// sequenceMapKernel runs the body once per element of the first input
// sequence. Sequence inputs (which must all have the first one's length)
// give the body their i-th element; tensor inputs are passed whole to every
// run. Each node output is the sequence of the body's values for it.
func sequenceMapKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	a := n.Attr("body")
	if a == nil || a.G == nil {
		return nil, n.Errorf("attribute body (a graph) is required")
	}
	body := a.G
	first, err := seqInput(n, in, 0, "input_sequence")
	if err != nil {
		return nil, err
	}
	count := len(first)
	for i, t := range in {
		if t == nil {
			return nil, n.Errorf("input %d is missing", i)
		}
		if t.DType == graph.OptionalOf {
			return nil, n.Errorf("input %d is an optional value; SequenceMap takes tensors and sequences", i)
		}
		if t.DType == graph.SequenceOf && len(t.Items()) != count {
			return nil, n.Errorf("input sequence %d has %d elements, input 0 has %d", i, len(t.Items()), count)
		}
	}
	if len(body.Inputs) != len(in) {
		return nil, n.Errorf("body takes %d inputs, the node has %d", len(body.Inputs), len(in))
	}
	if len(body.Outputs) != len(n.Outputs) {
		return nil, n.Errorf("body returns %d outputs, the node has %d", len(body.Outputs), len(n.Outputs))
	}
	if count > 0 && (ctx == nil || ctx.Sub == nil) {
		return nil, n.Errorf("cannot run the body: the kernel has no subgraph runner")
	}
	results := make([][]*graph.Tensor, len(n.Outputs))
	args := make([]*graph.Tensor, len(in))
	for i := 0; i < count; i++ {
		for j, t := range in {
			if t.DType == graph.SequenceOf {
				args[j] = t.Items()[i]
			} else {
				args[j] = t
			}
		}
		out, err := ctx.Sub.RunSubgraph(body, args)
		if err != nil {
			return nil, n.Errorf("body, element %d: %w", i, err)
		}
		if len(out) != len(results) {
			return nil, n.Errorf("body returned %d outputs, want %d", len(out), len(results))
		}
		for k, t := range out {
			if t == nil || t.IsContainer() {
				return nil, n.Errorf("body output %d for element %d is not a tensor", k, i)
			}
			results[k] = append(results[k], t)
		}
	}
	res := make([]*graph.Tensor, len(results))
	for k, items := range results {
		res[k] = graph.NewSequence(items)
	}
	return res, nil
}
