package graph

import "sort"

// Gradient rules of the convolutions, the pools and Resize/Upsample. The
// backward passes are internal ops that take the forward node's attributes
// and resolve the same geometry at run time, so no rule needs static shapes:
//
//	Conv:          dX = ConvBackwardData(dy, W, Shape(X))
//	               dW = ConvBackwardFilter(dy, X, Shape(W))
//	ConvTranspose: dX = ConvTransposeBackwardData(dy, W, Shape(X))
//	               dW = ConvTransposeBackwardFilter(dy, X, Shape(W))
//	               dB = ReduceSum of dy over N and the spatial dims (both)
//	MaxPool:       dX = MaxPoolGrad(dy, X[, Indices])
//	AveragePool:   dX = AveragePoolGrad(dy, Shape(X))
//	GlobalMaxPool: dX = GlobalMaxPoolGrad(dy, X)
//	GlobalAveragePool: dX = Expand(dy / (Size(X)/Size(Y)), Shape(X))
//	Resize, Upsample:  dX = ResizeGrad(dy, Shape(X), roi, scales, sizes)
//
// The semantics are PyTorch autograd's: a max pool's gradient goes to the
// first maximum of each window, and Resize's to the input taps with the
// interpolation weights.

func init() {
	RegisterGrad("Conv", convFamilyGradRule("ConvBackwardData", "ConvBackwardFilter"))
	RegisterGrad("ConvTranspose", convFamilyGradRule("ConvTransposeBackwardData", "ConvTransposeBackwardFilter"))
	RegisterGrad("MaxPool", maxPoolGradRule)
	RegisterGrad("AveragePool", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		out := make([]string, len(n.Inputs))
		if dy[0] == "" || !b.NeedsGrad(n.Inputs[0]) {
			return out, nil
		}
		shape := b.Op("Shape", []string{n.Inputs[0]})
		out[0] = b.Internal("AveragePoolGrad", []string{dy[0], shape}, windowOpAttrs(n)...)
		return out, nil
	})
	RegisterGrad("GlobalMaxPool", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		out := make([]string, len(n.Inputs))
		if dy[0] == "" || !b.NeedsGrad(n.Inputs[0]) {
			return out, nil
		}
		out[0] = b.Internal("GlobalMaxPoolGrad", []string{dy[0], n.Inputs[0]})
		return out, nil
	})
	RegisterGrad("GlobalAveragePool", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		out := make([]string, len(n.Inputs))
		x := n.Inputs[0]
		if dy[0] == "" || !b.NeedsGrad(x) {
			return out, nil
		}
		// The mean's share of each element, dy/count, is divided once per
		// plane and then broadcast (the same values as dividing the
		// broadcast planes, without a pass over them).
		count := b.Op("Div", []string{b.Op("CastLike", []string{b.Op("Size", []string{x}), x}),
			b.Op("CastLike", []string{b.Op("Size", []string{n.Outputs[0]}), x})})
		out[0] = b.Op("Expand", []string{b.Op("Div", []string{dy[0], count}), b.Op("Shape", []string{x})})
		return out, nil
	})
	RegisterGrad("Resize", resizeGradRule)
	RegisterGrad("Upsample", resizeGradRule)
}

// windowOpAttrs returns n's attributes in name order, for the internal op
// that resolves the same geometry.
func windowOpAttrs(n *Node) []*Attr {
	names := make([]string, 0, len(n.Attrs))
	for k := range n.Attrs {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]*Attr, len(names))
	for i, k := range names {
		out[i] = n.Attrs[k]
	}
	return out
}

// convFamilyGradRule differentiates Conv or ConvTranspose with the named
// internal data and filter ops; the bias gradient sums dy over the batch and
// the spatial dims.
func convFamilyGradRule(dataOp, filterOp string) GradRule {
	return func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		out := make([]string, len(n.Inputs))
		if dy[0] == "" {
			return out, nil
		}
		x, w := n.Input(0), n.Input(1)
		attrs := windowOpAttrs(n)
		if b.NeedsGrad(x) {
			out[0] = b.Internal(dataOp, []string{dy[0], w, b.Op("Shape", []string{x})}, attrs...)
		}
		if b.NeedsGrad(w) {
			out[1] = b.Internal(filterOp, []string{dy[0], x, b.Op("Shape", []string{w})}, attrs...)
		}
		if bias := n.Input(2); bias != "" && b.NeedsGrad(bias) {
			out[2] = convBiasGrad(b, dy[0])
		}
		return out, nil
	}
}

// convBiasGrad sums an (N, C, spatial...) value over every dim but C: it is
// viewed as (N, C, rest) and reduced over axes 0 and 2.
func convBiasGrad(b *GradBuilder, v string) string {
	flat := b.Op("Reshape", []string{v, b.Const(FromInt64([]int64{0, 0, -1}, 3))})
	keep := IntAttr("keepdims", 0)
	if b.Opset != 0 && b.Opset < 13 {
		return b.Op("ReduceSum", []string{flat}, IntsAttr("axes", 0, 2), keep)
	}
	return b.Op("ReduceSum", []string{flat, b.Const(FromInt64([]int64{0, 2}, 2))}, keep)
}

// maxPoolGradRule routes dy to each window's first maximum, read from the
// Indices output when the forward node names it.
func maxPoolGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	out := make([]string, len(n.Inputs))
	x := n.Inputs[0]
	if dy[0] == "" || !b.NeedsGrad(x) {
		return out, nil
	}
	inputs := []string{dy[0], x}
	if len(n.Outputs) > 1 && n.Outputs[1] != "" {
		inputs = append(inputs, n.Outputs[1])
	}
	out[0] = b.Internal("MaxPoolGrad", inputs, windowOpAttrs(n)...)
	return out, nil
}

// resizeGradRule scatters dy back through Resize (any opset) or Upsample.
// The internal op takes Resize-13's input layout (dy, Shape(X), roi, scales,
// sizes); Upsample and Resize before opset 11 get the legacy attribute,
// which selects their coordinate rules.
func resizeGradRule(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	out := make([]string, len(n.Inputs))
	x := n.Inputs[0]
	if dy[0] == "" || !b.NeedsGrad(x) {
		return out, nil
	}
	attrs := windowOpAttrs(n)
	inputs := []string{dy[0], b.Op("Shape", []string{x})}
	if n.OpType == "Upsample" || (b.Opset != 0 && b.Opset < 11) {
		attrs = append(attrs, IntAttr("legacy", 1))
		inputs = append(inputs, "", n.Input(1))
	} else {
		inputs = append(inputs, n.Input(1), n.Input(2), n.Input(3))
	}
	for len(inputs) > 2 && inputs[len(inputs)-1] == "" {
		inputs = inputs[:len(inputs)-1]
	}
	out[0] = b.Internal("ResizeGrad", inputs, attrs...)
	return out, nil
}
