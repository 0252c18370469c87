package graph

import "fmt"

// Gradient rules of the data-movement ops. They read each node the way it
// was given (attribute or input forms across opsets) and need no static
// shapes: the reshape-like ops reshape dY back to Shape(x), and the ops
// that select or repeat elements have internal backward ops that take the
// forward values they need for shapes and indices:
//
//	SplitLike(dy, like...)            axis: dy cut into pieces as long as each like (Concat)
//	SliceGrad(dy, x[, starts, ends, axes, steps])  starts/ends/axes attrs before opset 10 (Slice)
//	PadGrad(dy, x[, pads, value, axes])            mode, pads/paddings attrs before opset 11 (Pad)
//	TileGrad(dy, x)                   dy summed over the tiles (Tile)
//	GatherGrad(dy, data, indices)     axis: scatter-add along axis (Gather)
//	GatherElementsGrad(dy, data, indices)  axis: element scatter-add (GatherElements)
//
// Integer inputs (shapes, axes, pads, indices, repeats) get no gradient.

func init() {
	reshapeBack := func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		out := make([]string, len(n.Inputs))
		out[0] = reshapeLike(b, dy[0], n.Inputs[0])
		return out, nil
	}
	for _, op := range []string{"Reshape", "Flatten", "Squeeze", "Unsqueeze"} {
		RegisterGrad(op, reshapeBack)
	}
	RegisterGrad("Transpose", transposeGrad)
	RegisterGrad("Concat", concatGrad)
	RegisterGrad("Split", splitGrad)
	RegisterGrad("Slice", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		inputs := append([]string{dy[0]}, n.Inputs...)
		out := make([]string, len(n.Inputs))
		out[0] = b.Internal("SliceGrad", inputs, copyAttrs(n, "starts", "ends", "axes")...)
		return out, nil
	})
	RegisterGrad("Gather", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		return indexedGrad(b, n, dy[0], "GatherGrad")
	})
	RegisterGrad("GatherElements", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		return indexedGrad(b, n, dy[0], "GatherElementsGrad")
	})
	RegisterGrad("Expand", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		out := make([]string, len(n.Inputs))
		out[0] = b.SumToShapeOf(dy[0], n.Inputs[0])
		return out, nil
	})
	RegisterGrad("Tile", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		out := make([]string, len(n.Inputs))
		out[0] = b.Internal("TileGrad", []string{dy[0], n.Inputs[0]})
		return out, nil
	})
	RegisterGrad("Pad", padGrad)

	// Ops whose gradient is the op itself or its inverse.
	RegisterGrad("Trilu", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		// The mask is linear and idempotent: dx = Trilu(dy) with the same k.
		inputs := append([]string{dy[0]}, n.Inputs[1:]...)
		out := make([]string, len(n.Inputs))
		out[0] = b.Op("Trilu", inputs, copyAttrs(n, "upper")...)
		return out, nil
	})
	RegisterGrad("ReverseSequence", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		// Reversing the same prefixes again is the inverse permutation.
		if len(n.Inputs) < 2 {
			return nil, fmt.Errorf("ReverseSequence needs inputs input and sequence_lens, has %d inputs", len(n.Inputs))
		}
		out := make([]string, len(n.Inputs))
		out[0] = b.Op("ReverseSequence", []string{dy[0], n.Inputs[1]}, copyAttrs(n, "batch_axis", "time_axis")...)
		return out, nil
	})
	RegisterGrad("DepthToSpace", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		if mode := n.AttrString("mode", "DCR"); mode != "DCR" {
			return nil, fmt.Errorf("the gradient of DepthToSpace in mode %s is not supported (only DCR, whose inverse is SpaceToDepth)", mode)
		}
		return []string{b.Op("SpaceToDepth", []string{dy[0]}, copyAttrs(n, "blocksize")...)}, nil
	})
	RegisterGrad("SpaceToDepth", func(b *GradBuilder, n *Node, dy []string) ([]string, error) {
		return []string{b.Op("DepthToSpace", []string{dy[0]}, copyAttrs(n, "blocksize")...)}, nil
	})
}

// reshapeLike reshapes v to the run-time shape of like. From opset 14 a 0
// in the shape is taken literally (allowzero), so empty tensors keep their
// shape.
func reshapeLike(b *GradBuilder, v, like string) string {
	shape := b.Op("Shape", []string{like})
	if b.Opset >= 14 {
		return b.Op("Reshape", []string{v, shape}, IntAttr("allowzero", 1))
	}
	return b.Op("Reshape", []string{v, shape})
}

// copyAttrs returns those of the named attributes n has.
func copyAttrs(n *Node, names ...string) []*Attr {
	var out []*Attr
	for _, name := range names {
		if a := n.Attr(name); a != nil {
			out = append(out, a)
		}
	}
	return out
}

// transposeGrad transposes dY by the inverse permutation (the default perm
// reverses the dims and is its own inverse).
func transposeGrad(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	perm := n.AttrInts("perm", nil)
	if perm == nil {
		return []string{b.Op("Transpose", []string{dy[0]})}, nil
	}
	inv := make([]int64, len(perm))
	seen := make([]bool, len(perm))
	for i, p := range perm {
		if p < 0 || p >= int64(len(perm)) || seen[p] {
			return nil, fmt.Errorf("Transpose perm %v is not a permutation", perm)
		}
		seen[p] = true
		inv[p] = int64(i)
	}
	return []string{b.Op("Transpose", []string{dy[0]}, IntsAttr("perm", inv...))}, nil
}

// concatGrad cuts dY back into pieces shaped like the inputs.
func concatGrad(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	axis := n.AttrInt("axis", 1) // Concat-1 defaulted to 1; later versions require it
	out := make([]string, len(n.Inputs))
	any := false
	for i, in := range n.Inputs {
		if b.NeedsGrad(in) {
			out[i] = b.Fresh("SplitLike")
			any = true
		}
	}
	if !any {
		return out, nil
	}
	b.OpTo("SplitLike", append([]string{dy[0]}, n.Inputs...), append([]string{}, out...), IntAttr("axis", axis))
	b.Nodes[len(b.Nodes)-1].Domain = InternalDomain
	return out, nil
}

// splitGrad concatenates the outputs' gradients, with zeros for outputs no
// gradient reached. The split sizes (attribute, input or num_outputs) do not
// matter: the pieces are the outputs themselves.
func splitGrad(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	parts := make([]string, len(n.Outputs))
	for k, o := range n.Outputs {
		switch {
		case dy[k] != "":
			parts[k] = dy[k]
		case o == "":
			return nil, fmt.Errorf("Split output %d is unnamed, so the shape of its zero gradient is unknown", k)
		default:
			parts[k] = zerosLike(b, o)
		}
	}
	out := make([]string, len(n.Inputs))
	if len(parts) == 1 {
		out[0] = parts[0]
	} else {
		out[0] = b.Op("Concat", parts, IntAttr("axis", n.AttrInt("axis", 0)))
	}
	return out, nil
}

// zerosLike is a tensor of zeros with v's shape and dtype.
func zerosLike(b *GradBuilder, v string) string {
	z := b.Op("ConstantOfShape", []string{b.Op("Shape", []string{v})},
		TensorAttr("value", FromFloat32([]float32{0}, 1)))
	return b.Op("CastLike", []string{z, v})
}

// indexedGrad is the gradient of Gather and GatherElements (data,
// indices): an internal scatter-add op with the node's axis.
func indexedGrad(b *GradBuilder, n *Node, dy, op string) ([]string, error) {
	if len(n.Inputs) < 2 {
		return nil, fmt.Errorf("%s needs inputs data and indices, has %d inputs", n.OpType, len(n.Inputs))
	}
	out := make([]string, len(n.Inputs))
	out[0] = b.Internal(op, []string{dy, n.Inputs[0], n.Inputs[1]}, IntAttr("axis", n.AttrInt("axis", 0)))
	return out, nil
}

// padGrad sends each element of dY back to the element of x it was copied
// from (PadGrad); in constant mode a constant_value input that needs a
// gradient gets the sum of dY over the padded positions.
func padGrad(b *GradBuilder, n *Node, dy []string) ([]string, error) {
	inputs := append([]string{dy[0]}, n.Inputs...)
	dx := b.Internal("PadGrad", inputs, copyAttrs(n, "mode", "pads", "paddings")...)
	out := make([]string, len(n.Inputs))
	out[0] = dx
	if len(n.Inputs) > 2 && b.NeedsGrad(n.Inputs[2]) && n.AttrString("mode", "constant") == "constant" {
		c := n.Inputs[2]
		sumAll := func(v string) string { return b.Op("ReduceSum", []string{v}, IntAttr("keepdims", 0)) }
		out[2] = reshapeLike(b, b.Op("Sub", []string{sumAll(dy[0]), sumAll(dx)}), c)
	}
	return out, nil
}
