package control

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("If", ifKernel)
	kern.RegisterHalf("Loop", loopKernel)
	kern.RegisterHalf("Scan", scanKernel)
}

// bodyAttr returns the subgraph held by attribute name.
func bodyAttr(n *graph.Node, name string) (*graph.Graph, error) {
	a := n.Attr(name)
	if a == nil || a.G == nil {
		return nil, n.Errorf("attribute %q (a graph) is required", name)
	}
	return a.G, nil
}

// runBody runs a subgraph and checks that it returned want outputs.
func runBody(ctx *kern.Context, n *graph.Node, name string, g *graph.Graph, inputs []*graph.Tensor, want int) ([]*graph.Tensor, error) {
	if ctx == nil || ctx.Sub == nil {
		return nil, n.Errorf("cannot run subgraph %q: the kernel has no subgraph runner", name)
	}
	out, err := ctx.Sub.RunSubgraph(g, inputs)
	if err != nil {
		return nil, n.Errorf("%s: %w", name, err)
	}
	if len(out) != want {
		return nil, n.Errorf("%s returned %d outputs, want %d", name, len(out), want)
	}
	for i, t := range out {
		if t == nil {
			return nil, n.Errorf("%s returned no value for output %d", name, i)
		}
	}
	return out, nil
}

// ifKernel runs then_branch or else_branch. The branches take no inputs and
// must each produce one output per output of the node; the shapes may
// differ between branches.
func ifKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	cond, err := truth(n, "cond", in[0])
	if err != nil {
		return nil, err
	}
	branch := "else_branch"
	if cond {
		branch = "then_branch"
	}
	g, err := bodyAttr(n, branch)
	if err != nil {
		return nil, err
	}
	return runBody(ctx, n, branch, g, nil, len(n.Outputs))
}

// loopKernel runs body while the trip count M is not reached and the
// condition holds. The body takes (iteration_num, cond, carried...) and
// returns (cond, carried..., scan_outputs...). The node's outputs are the
// final carried values followed by the scan outputs, each the stack of its
// per-iteration values along a new axis 0. Loop-carried values may be
// tensors, sequences or optionals (they are passed through as they are);
// scan outputs must be tensors.
func loopKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	body, err := bodyAttr(n, "body")
	if err != nil {
		return nil, err
	}
	if len(in) < 2 {
		in = append(in, make([]*graph.Tensor, 2-len(in))...)
	}
	trip, cond := in[0], in[1]
	carried := append([]*graph.Tensor{}, in[2:]...)
	for i, t := range carried {
		if t == nil {
			return nil, n.Errorf("loop-carried input %d (input %d) is missing", i, i+2)
		}
	}
	nCarried := len(carried)
	if len(body.Inputs) != 2+nCarried {
		return nil, n.Errorf("body takes %d inputs, want %d (iteration_num, cond and %d loop-carried values)", len(body.Inputs), 2+nCarried, nCarried)
	}
	nScan := len(body.Outputs) - 1 - nCarried
	if nScan < 0 {
		return nil, n.Errorf("body returns %d outputs, want at least %d (cond and %d loop-carried values)", len(body.Outputs), 1+nCarried, nCarried)
	}
	if len(n.Outputs) > nCarried+nScan {
		return nil, n.Errorf("has %d outputs, but the body yields only %d loop-carried values and %d scan outputs", len(n.Outputs), nCarried, nScan)
	}
	if trip == nil && cond == nil {
		return nil, n.Errorf("neither the trip count M nor cond is given: the loop would never end")
	}
	maxTrip := int64(-1)
	if trip != nil {
		if maxTrip, err = scalarInt(n, "trip count M", trip); err != nil {
			return nil, err
		}
	}
	keepGoing := true
	if cond != nil {
		if keepGoing, err = truth(n, "cond", cond); err != nil {
			return nil, err
		}
	}
	scans := make([][]*graph.Tensor, nScan)
	args := make([]*graph.Tensor, 2+nCarried)
	for i := int64(0); (maxTrip < 0 || i < maxTrip) && keepGoing; i++ {
		args[0] = &graph.Tensor{DType: graph.Int64, Shape: []int{}, Data: []int64{i}}
		args[1] = &graph.Tensor{DType: graph.Bool, Shape: []int{}, Data: []bool{keepGoing}}
		copy(args[2:], carried)
		out, err := runBody(ctx, n, "body", body, args, len(body.Outputs))
		if err != nil {
			return nil, err
		}
		if cond != nil {
			if keepGoing, err = truth(n, "the condition the body returns", out[0]); err != nil {
				return nil, err
			}
		}
		copy(carried, out[1:1+nCarried])
		for k := range scans {
			t := out[1+nCarried+k]
			if t.IsContainer() {
				return nil, n.Errorf("scan output %d is a %v value in iteration %d: scan outputs must be tensors (carry sequences as loop-carried values)", k, t.DType, i)
			}
			scans[k] = append(scans[k], t)
		}
	}
	res := append([]*graph.Tensor{}, carried...)
	for k, parts := range scans {
		d, shape := elemInfo(body.Outputs[1+nCarried+k])
		t, err := stack(parts, 0, false, d, shape)
		if err != nil {
			return nil, n.Errorf("scan output %d: %v", k, err)
		}
		res = append(res, t)
	}
	return res, nil
}
