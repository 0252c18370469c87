package graph

// Pad's index arithmetic, shared by backends' Pad and PadGrad kernels and
// by PadGrad's lowering (lowerings_grad.go).

// PadBounds checks pads (begin values of the padded axes, then end values)
// against the data shape and returns per-axis begin and end pads and the
// padded shape. axes nil means every axis.
func PadBounds(n *Node, shape []int, pads []int64, axes []int) (begin, end []int64, padded []int, err error) {
	r := len(shape)
	if axes == nil {
		axes = make([]int, r)
		for i := range axes {
			axes[i] = i
		}
	}
	if len(pads) != 2*len(axes) {
		return nil, nil, nil, n.Errorf("pads %v must have 2 entries per padded axis (%d axes)", pads, len(axes))
	}
	begin = make([]int64, r)
	end = make([]int64, r)
	for i, a := range axes {
		begin[a], end[a] = pads[i], pads[i+len(axes)]
	}
	padded = make([]int, r)
	for a, d := range shape {
		b, e := begin[a], end[a]
		size := int64(d) + b + e
		if b < -int64(d) || e < -int64(d) || size < 0 || size > MaxElements {
			return nil, nil, nil, n.Errorf("pads %v give axis %d of input %v a size of %d", pads, a, shape, size)
		}
		padded[a] = int(size)
	}
	return begin, end, padded, nil
}

// PadSources maps each index of one padded axis (input size d, b and e
// pads at the two ends; negative pads crop) to the offset (index × stride)
// of the input element Pad copies there in mode constant, reflect, edge or
// wrap, or to fill where the constant goes. Pad's kernels, its gradient's
// (PadGrad, in the training-op domain) and PadGrad's lowering share it.
func PadSources(n *Node, mode string, d, b, e, stride, fill int) ([]int, error) {
	size := d + b + e
	out := make([]int, size)
	// The input region that survives cropping.
	lo, hi := max(-b, 0), d-max(-e, 0)
	m := hi - lo
	if mode != "constant" && m <= 0 && size > 0 {
		return nil, n.Errorf("mode %s cannot pad an axis of size %d (after cropping)", mode, m)
	}
	for i := range out {
		j := i - b // input coordinate
		if j >= lo && j < hi {
			out[i] = j * stride
			continue
		}
		k := j - lo // coordinate relative to the surviving region
		switch mode {
		case "constant":
			out[i] = fill
			continue
		case "edge":
			k = min(max(k, 0), m-1)
		case "reflect":
			if m == 1 {
				k = 0
				break
			}
			p := 2 * (m - 1)
			k %= p
			if k < 0 {
				k += p
			}
			if k >= m {
				k = p - k
			}
		case "wrap":
			k %= m
			if k < 0 {
				k += m
			}
		default:
			return nil, n.Errorf("mode %q is not constant, reflect, edge or wrap", mode)
		}
		out[i] = (lo + k) * stride
	}
	return out, nil
}
