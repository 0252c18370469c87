package graph

import "fmt"

// AllReduceSumOp is the internal (InternalDomain) op that replaces a float
// tensor by its element-wise sum over the processes of a data-parallel
// group; on one process it is the identity. Synchronised BatchNorm sends its
// per-channel statistics through it. Every process must run the same
// AllReduceSum nodes in the same order, which a graph that is identical on
// every process gives.
const AllReduceSumOp = "AllReduceSum"

func init() {
	RegisterGrad(InternalDomain+"."+AllReduceSumOp, allReduceSumGradRule)
	internalInferRules[AllReduceSumOp] = inferAllReduceSum
}

// inferAllReduceSum: Y has X's type. X's value, even when known, is not
// Y's (that is the sum over the processes), so no constant propagates.
func inferAllReduceSum(c *inferCall) error {
	if len(c.n.Inputs) != 1 {
		return c.errorf("%s takes 1 input, has %d", AllReduceSumOp, len(c.n.Inputs))
	}
	if t := c.typ(0); t != nil && len(c.n.Outputs) > 0 && c.n.Outputs[0] != "" {
		c.st.types[c.n.Outputs[0]] = cloneType(t)
	}
	return nil
}

// allReduceSumGradRule differentiates y = AllReduceSum(x). Every process
// holds the same y = Σ_s x_s, and the loss being minimised is the sum of the
// processes' losses, so dL/dx_s = Σ_r dL_r/dy: the gradient of an all-reduce
// sum is the all-reduce sum of the incoming gradients.
func allReduceSumGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	if len(n.Inputs) != 1 {
		return nil, fmt.Errorf("%s takes 1 input, has %d", AllReduceSumOp, len(n.Inputs))
	}
	if dy[0] == "" || !b.NeedsGrad(n.Inputs[0]) {
		return []string{""}, nil
	}
	return []string{b.Internal(AllReduceSumOp, []string{dy[0]})}, nil
}
