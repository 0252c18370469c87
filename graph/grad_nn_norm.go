package graph

import "fmt"

// Gradient rules of the softmax family, the normalisations, the losses,
// Dropout, CumSum and TopK. The softmax, normalisation and loss backward
// passes are internal ops (SoftmaxGrad, LogSoftmaxGrad,
// BatchNormalizationGrad, LayerNormalizationGrad, GroupNormalizationGrad,
// NegativeLogLikelihoodLossGrad, SoftmaxCrossEntropyLossGrad) that
// recompute the statistics they need from the forward input: one fused pass
// each, numerically better than a chain of primitives, and independent of
// which optional outputs the forward node names.

func init() {
	RegisterGrad("Softmax", softmaxGradRule("SoftmaxGrad"))
	RegisterGrad("LogSoftmax", softmaxGradRule("LogSoftmaxGrad"))
	RegisterGrad("BatchNormalization", batchNormGradRule)
	RegisterGrad("LayerNormalization", layerNormGradRule)
	RegisterGrad("InstanceNormalization", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		return groupNormGradRule(b, n, dy, nil)
	})
	RegisterGrad("GroupNormalization", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		if !n.HasAttr("num_groups") {
			return nil, fmt.Errorf("attribute num_groups is required")
		}
		return groupNormGradRule(b, n, dy, n.Attr("num_groups"))
	})
	RegisterGrad("NegativeLogLikelihoodLoss", nllLossGradRule)
	RegisterGrad("SoftmaxCrossEntropyLoss", sceLossGradRule)
	RegisterGrad("Dropout", dropoutGradRule)
	RegisterGrad("CumSum", cumSumGradRule)
	RegisterGrad("TopK", topKGradRule)
}

// internalMultiOut emits one onnxtrain-domain op with several outputs; want[i]
// says whether output i is needed (unneeded ones are left unnamed). It
// returns the output names, "" where not wanted.
func internalMultiOut(b *GradBuilder, op string, inputs []string, want []bool, attrs ...*Attr) []string {
	outs := make([]string, len(want))
	last := -1
	for i, w := range want {
		if w {
			outs[i] = b.Fresh(op)
			last = i
		}
	}
	if last < 0 {
		return outs
	}
	b.OpTo(op, inputs, outs[:last+1], attrs...)
	b.Nodes[len(b.Nodes)-1].Domain = InternalDomain
	return outs
}

// presentAttrs returns those of n's attributes that are present among names.
func presentAttrs(n *Node, names ...string) []*Attr {
	var out []*Attr
	for _, name := range names {
		if a := n.Attr(name); a != nil {
			out = append(out, a)
		}
	}
	return out
}

// softmaxGradRule differentiates Softmax or LogSoftmax with the internal op
// of the given name, from the forward output. From opset 13 the op runs
// along one axis (default -1); before, the input is coerced to 2-D at axis
// (default 1), every dim from axis on forming one row.
func softmaxGradRule(op string) GradRule {
	return func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		if dy[0] == "" || !b.NeedsGrad(n.Inputs[0]) {
			return []string{""}, nil
		}
		coerce := b.Opset != 0 && b.Opset < 13
		axis := int64(-1)
		if coerce {
			axis = 1
		}
		axis = n.AttrInt("axis", axis)
		var c int64
		if coerce {
			c = 1
		}
		dx := b.Internal(op, []string{dy[0], n.Outputs[0]}, IntAttr("axis", axis), IntAttr("coerce", c))
		return []string{dx}, nil
	}
}

// BatchNormTraining reports whether a BatchNormalization node normalises
// with batch statistics, as the CPU kernel decides it: the training_mode
// attribute from opset 14; before, a node that names more than its first
// output and is not is_test.
func BatchNormTraining(n *Node, opset int64) bool {
	if opset == 0 || opset >= 14 {
		return n.AttrInt("training_mode", 0) != 0
	}
	named := 0
	for _, o := range n.Outputs {
		if o != "" {
			named++
		}
	}
	return named > 1 && n.AttrInt("is_test", 0) == 0
}

// batchNormGradRule differentiates BatchNormalization(X, scale, B, mean,
// var). In training mode the gradients of X, scale and B flow through the
// batch statistics as in PyTorch; the running statistics (inputs 3 and 4,
// and the outputs computed from them) get none. In inference mode the op is
// an affine map and every input gets its exact gradient.
func batchNormGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	out := make([]string, len(n.Inputs))
	if dy[0] == "" {
		return out, nil
	}
	if len(n.Inputs) < 5 {
		return nil, fmt.Errorf("needs 5 inputs, has %d", len(n.Inputs))
	}
	training := BatchNormTraining(n, b.Opset)
	want := make([]bool, 5)
	for i := range want {
		want[i] = b.NeedsGrad(n.Inputs[i]) && (!training || i < 3)
	}
	mode := int64(0)
	if training {
		mode = 1
	}
	attrs := append(presentAttrs(n, "epsilon"), IntAttr("training_mode", mode))
	inputs := []string{dy[0], n.Inputs[0], n.Inputs[1], n.Inputs[3], n.Inputs[4]}
	grads := internalMultiOut(b, "BatchNormalizationGrad", inputs, want, attrs...)
	copy(out, grads)
	return out, nil
}

// layerNormGradRule differentiates LayerNormalization(X, Scale[, B]). The
// optional Mean and InvStdDev outputs get no gradient. Scale and B may
// broadcast to X.shape[axis:], so their gradients are summed down to their
// shapes.
func layerNormGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	out := make([]string, len(n.Inputs))
	if dy[0] == "" {
		return out, nil
	}
	bias := n.Input(2)
	want := []bool{b.NeedsGrad(n.Inputs[0]), b.NeedsGrad(n.Inputs[1]), b.NeedsGrad(bias)}
	grads := internalMultiOut(b, "LayerNormalizationGrad", []string{dy[0], n.Inputs[0], n.Inputs[1]}, want,
		presentAttrs(n, "axis", "epsilon")...)
	out[0] = grads[0]
	if grads[1] != "" {
		out[1] = b.SumToShapeOf(grads[1], n.Inputs[1])
	}
	if grads[2] != "" {
		out[2] = b.SumToShapeOf(grads[2], bias)
	}
	return out, nil
}

// groupNormGradRule differentiates GroupNormalization(X, scale, bias) and,
// with groups nil (one group per channel), InstanceNormalization.
func groupNormGradRule(b *GradBuilder, n *Node, dy []string, groups *Attr) ([]string, error) {
	out := make([]string, len(n.Inputs))
	if dy[0] == "" {
		return out, nil
	}
	if len(n.Inputs) < 3 {
		return nil, fmt.Errorf("needs 3 inputs, has %d", len(n.Inputs))
	}
	want := []bool{b.NeedsGrad(n.Inputs[0]), b.NeedsGrad(n.Inputs[1]), b.NeedsGrad(n.Inputs[2])}
	attrs := presentAttrs(n, "epsilon")
	if groups != nil {
		attrs = append(attrs, groups)
	}
	grads := internalMultiOut(b, "GroupNormalizationGrad", []string{dy[0], n.Inputs[0], n.Inputs[1]}, want, attrs...)
	copy(out, grads)
	return out, nil
}

// nllLossGradRule differentiates NegativeLogLikelihoodLoss(input, target[,
// weight]) with respect to input; target and weight get no gradient.
func nllLossGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	out := make([]string, len(n.Inputs))
	x := n.Inputs[0]
	if dy[0] == "" || !b.NeedsGrad(x) {
		return out, nil
	}
	shape := b.Op("Shape", []string{x})
	out[0] = b.Internal("NegativeLogLikelihoodLossGrad", []string{dy[0], shape, n.Inputs[1], n.Input(2)},
		presentAttrs(n, "reduction", "ignore_index")...)
	return out, nil
}

// sceLossGradRule differentiates SoftmaxCrossEntropyLoss(scores, labels[,
// weights]) with respect to scores, from the gradients of both its outputs
// (the loss and the optional log_prob).
func sceLossGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	out := make([]string, len(n.Inputs))
	x := n.Inputs[0]
	if !b.NeedsGrad(x) {
		return out, nil
	}
	dlogp := ""
	if len(dy) > 1 {
		dlogp = dy[1]
	}
	if dy[0] == "" && dlogp == "" {
		return out, nil
	}
	out[0] = b.Internal("SoftmaxCrossEntropyLossGrad", []string{dy[0], x, n.Inputs[1], n.Input(2), dlogp},
		presentAttrs(n, "reduction", "ignore_index")...)
	return out, nil
}

// dropoutGradRule differentiates Dropout. Where the node is in training mode
// (opset 12 on, with a training_mode input) the gradient is
// dy·mask/(1 - ratio), read from the node's mask output, which the node must
// therefore name; training_mode is a run-time value, so the scale is chosen
// at run time (1 when it is false, and the mask is then all true).
// Otherwise Dropout is the identity. ratio and training_mode get no
// gradient.
func dropoutGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	out := make([]string, len(n.Inputs))
	x := n.Inputs[0]
	if dy[0] == "" || !b.NeedsGrad(x) {
		return out, nil
	}
	modern := b.Opset == 0 || b.Opset >= 12
	trainingMode := n.Input(2)
	if !modern || trainingMode == "" {
		out[0] = dy[0]
		return out, nil
	}
	if len(n.Outputs) < 2 || n.Outputs[1] == "" {
		return nil, fmt.Errorf("the mask output (output 1) must be named to differentiate Dropout with a training_mode input")
	}
	// A constant ratio of 0 or a constant training_mode of false keeps
	// every element unscaled (the mask is all true, the scale 1): the
	// gradient is dY itself, bit for bit, without the mask pass
	// (torchvision's ViT and nn.TransformerEncoderLayer with dropout=0
	// export one such Dropout per block, three per MLP).
	if r := b.Constant(n.Input(1)); r != nil && r.DType.IsFloat() && r.Size() == 1 && r.Float(0) == 0 {
		out[0] = dy[0]
		return out, nil
	}
	if t := b.Constant(trainingMode); t != nil && t.DType == Bool && t.Size() == 1 && !t.Bools()[0] {
		out[0] = dy[0]
		return out, nil
	}
	mask := n.Outputs[1]
	one := b.ScalarLike(1, x)
	ratio := b.ScalarLike(0.5, x)
	if r := n.Input(1); r != "" {
		ratio = b.Op("CastLike", []string{r, x})
	}
	scale := b.Op("Div", []string{one, b.Op("Sub", []string{one, ratio})})
	scale = b.Op("Where", []string{trainingMode, scale, one})
	out[0] = b.Op("Where", []string{mask, b.Op("Mul", []string{dy[0], scale}), b.ScalarLike(0, x)})
	return out, nil
}

// cumSumGradRule differentiates CumSum(x, axis): the gradient of a running
// sum is the running sum of dy in the other direction, with the same
// exclusive flag.
func cumSumGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	out := make([]string, len(n.Inputs))
	if dy[0] == "" || !b.NeedsGrad(n.Inputs[0]) {
		return out, nil
	}
	reverse := int64(1)
	if n.AttrInt("reverse", 0) != 0 {
		reverse = 0
	}
	attrs := append(presentAttrs(n, "exclusive"), IntAttr("reverse", reverse))
	out[0] = b.Op("CumSum", []string{dy[0], n.Inputs[1]}, attrs...)
	return out, nil
}

// topKGradRule differentiates TopK(x, k): dy of the values is scattered to
// the positions the indices output names, zeros elsewhere. A node that does
// not name its indices output is run again in the backward graph to get
// them.
func topKGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	out := make([]string, len(n.Inputs))
	x := n.Inputs[0]
	if dy[0] == "" || !b.NeedsGrad(x) {
		return out, nil
	}
	indices := ""
	if len(n.Outputs) > 1 {
		indices = n.Outputs[1]
	}
	if indices == "" {
		values, idx := b.Fresh("TopK"), b.Fresh("TopK")
		b.OpTo("TopK", append([]string{}, n.Inputs...), []string{values, idx}, presentAttrs(n, "axis", "largest", "sorted", "k")...)
		indices = idx
	}
	zeros := b.Op("ConstantOfShape", []string{b.Op("Shape", []string{x})})
	zeros = b.Op("CastLike", []string{zeros, x})
	out[0] = b.Op("ScatterElements", []string{zeros, indices, dy[0]}, IntAttr("axis", n.AttrInt("axis", -1)))
	return out, nil
}
