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
	begin, end, shape, err := graph.PadBounds(n, x.Shape, pads, axes)
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
		table, err := graph.PadSources(n, mode, d, int(b), int(e), st[a], padOffset)
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
