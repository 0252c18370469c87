package shape

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Pad", padKernel)
}

// padKernel implements Pad in constant, reflect, edge and wrap modes. Pads
// (and the constant) are attributes before opset 11 and inputs from it; the
// axes input arrived in opset 18. Negative pads crop.
func padKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	r := x.Rank()
	mode := n.AttrString("mode", "constant")
	switch mode {
	case "constant", "reflect", "edge", "wrap":
	default:
		return nil, n.Errorf("mode %q is not constant, reflect, edge or wrap", mode)
	}
	var (
		pads []int64
		axes []int
		fill any // a one-element slice of x's Go type; nil means zero
		err  error
	)
	if t := kern.Opt(in, 1); t != nil {
		if pads, err = readInts1D(n, t, "pads"); err != nil {
			return nil, err
		}
		if c := kern.Opt(in, 2); c != nil {
			if err := checkData(n, c, "constant_value"); err != nil {
				return nil, err
			}
			if c.DType != x.DType {
				return nil, n.Errorf("constant_value has dtype %v, data %v", c.DType, x.DType)
			}
			if c.Size() != 1 {
				return nil, n.Errorf("constant_value must hold one element, has shape %v", c.Shape)
			}
			fill = c.Data
		}
		if a := kern.Opt(in, 3); a != nil {
			raw, err := readInts1D(n, a, "axes")
			if err != nil {
				return nil, err
			}
			if axes, err = normAxes(n, raw, r); err != nil {
				return nil, err
			}
		}
	} else {
		a := n.Attr("pads")
		if a == nil {
			a = n.Attr("paddings")
		}
		if a == nil {
			return nil, n.Errorf("input pads is required")
		}
		pads = a.Ints
		if v := n.AttrFloat("value", 0); v != 0 {
			c := graph.Zeros(x.DType, 1)
			c.SetFloat(0, float64(v))
			fill = c.Data
		}
	}
	begin, end, shape, err := PadBounds(n, x.Shape, pads, axes)
	if err != nil {
		return nil, err
	}
	st := graph.Strides(x.Shape)
	maps := make([]axisMap, r)
	for a, d := range x.Shape {
		b, e := begin[a], end[a]
		if b == 0 && e == 0 {
			maps[a] = arith(d, 0, st[a])
			continue
		}
		table, err := PadSources(n, mode, d, int(b), int(e), st[a], padOffset)
		if err != nil {
			return nil, err
		}
		maps[a] = tabled(table)
	}
	if err := checkedShape(n, shape); err != nil {
		return nil, err
	}
	out, err := gatherInto(n, x, shape, 0, maps, fill)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out}, nil
}

// PadBounds checks pads (begin values of the padded axes, then end values)
// against the data shape and returns per-axis begin and end pads and the
// padded shape. axes nil means every axis. Pad's kernel and PadGrad share it.
func PadBounds(n *graph.Node, shape []int, pads []int64, axes []int) (begin, end []int64, padded []int, err error) {
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
		if b < -int64(d) || e < -int64(d) || size < 0 || size > graph.MaxElements {
			return nil, nil, nil, n.Errorf("pads %v give axis %d of input %v a size of %d", pads, a, shape, size)
		}
		padded[a] = int(size)
	}
	return begin, end, padded, nil
}

// PadSources maps each index of one padded axis (input size d, b and e
// pads at the two ends; negative pads crop) to the offset (index × stride)
// of the input element Pad copies there in mode constant, reflect, edge or
// wrap, or to fill where the constant goes. Pad's kernel and its gradient
// (PadGrad, in the training-op domain) share it.
func PadSources(n *graph.Node, mode string, d, b, e, stride, fill int) ([]int, error) {
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
