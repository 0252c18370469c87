package graph

import "sort"

// Gradient rules of the recurrent layers. RNN, GRU and LSTM differentiate
// into one internal op each (RNNGrad, GRUGrad, LSTMGrad) that re-runs the
// forward pass and backpropagates through time; it takes the forward
// node's attributes, its inputs padded to eight (X, W, R, B, sequence_lens,
// initial_h, initial_c, P) and the gradients of Y, Y_h and Y_c, and returns
// the gradients of X, W, R, B, initial_h, initial_c and P.

func init() {
	for _, op := range []string{"RNN", "GRU", "LSTM"} {
		RegisterGrad(op, recurrentGradRule(op+"Grad"))
	}
}

func recurrentGradRule(op string) GradRule {
	return func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		out := make([]string, len(n.Inputs))
		flows := false
		for _, d := range dy {
			flows = flows || d != ""
		}
		if !flows {
			return out, nil
		}
		inputs := make([]string, 11)
		copy(inputs, n.Inputs)
		copy(inputs[8:], dy)
		// Output i of the grad op is the gradient of input i, except that
		// sequence_lens (input 4) has none: outputs 4-6 are inputs 5-7.
		inputOf := []int{0, 1, 2, 3, 5, 6, 7}
		want := make([]bool, len(inputOf))
		for k, i := range inputOf {
			want[k] = i < len(n.Inputs) && b.NeedsGrad(n.Inputs[i])
		}
		names := make([]string, 0, len(n.Attrs))
		for name := range n.Attrs {
			names = append(names, name)
		}
		sort.Strings(names)
		var attrs []*Attr
		for _, name := range names {
			attrs = append(attrs, n.Attrs[name])
		}
		grads := internalMultiOut(b, op, inputs, want, attrs...)
		for k, i := range inputOf {
			if i < len(out) {
				out[i] = grads[k]
			}
		}
		return out, nil
	}
}
