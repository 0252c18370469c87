package nn

import (
	"github.com/onnxtrain/onnxtrain/graph"
)

// window is the resolved geometry of a sliding-window op (Conv, the pools)
// over the spatial dims of an (N, C, D1, ..., Dk) tensor.
type window struct {
	in        []int // input spatial dims
	out       []int // output spatial dims
	kernel    []int
	strides   []int
	dilations []int
	padBegin  []int
	padEnd    []int
}

// rank is the number of spatial dims.
func (w *window) rank() int { return len(w.in) }

// windowOpts says how a node's attributes are read.
type windowOpts struct {
	// ceil allows ceil_mode (pools).
	ceil bool
}

// intsAttr reads an ints attribute of length want (default fill when absent).
func intsAttr(n *graph.Node, name string, want, fill int) ([]int, error) {
	v := n.AttrInts(name, nil)
	out := make([]int, want)
	if v == nil {
		for i := range out {
			out[i] = fill
		}
		return out, nil
	}
	if len(v) != want {
		return nil, n.Errorf("attribute %s has %d values, want %d (one per spatial axis)", name, len(v), want)
	}
	for i, x := range v {
		out[i] = int(x)
	}
	return out, nil
}

// resolveWindow reads kernel (given: from the weight or kernel_shape),
// strides, dilations, pads, auto_pad and ceil_mode, and computes the output
// spatial dims for input spatial dims in.
func resolveWindow(n *graph.Node, in, kernel []int, o windowOpts) (*window, error) {
	r := len(in)
	w := &window{in: in, kernel: kernel}
	var err error
	if w.strides, err = intsAttr(n, "strides", r, 1); err != nil {
		return nil, err
	}
	if w.dilations, err = intsAttr(n, "dilations", r, 1); err != nil {
		return nil, err
	}
	pads, err := intsAttr(n, "pads", 2*r, 0)
	if err != nil {
		return nil, err
	}
	w.padBegin, w.padEnd = pads[:r], pads[r:]
	for i := 0; i < r; i++ {
		if w.kernel[i] <= 0 {
			return nil, n.Errorf("kernel shape %v must be positive", kernel)
		}
		if w.strides[i] <= 0 {
			return nil, n.Errorf("strides %v must be positive", w.strides)
		}
		if w.dilations[i] <= 0 {
			return nil, n.Errorf("dilations %v must be positive", w.dilations)
		}
		if w.padBegin[i] < 0 || w.padEnd[i] < 0 {
			return nil, n.Errorf("pads %v must not be negative", pads)
		}
	}
	ceil := o.ceil && n.AttrInt("ceil_mode", 0) != 0
	autoPad := n.AttrString("auto_pad", "NOTSET")
	w.out = make([]int, r)
	for i := 0; i < r; i++ {
		dk := (w.kernel[i]-1)*w.dilations[i] + 1
		s := w.strides[i]
		switch autoPad {
		case "NOTSET", "":
			span := in[i] + w.padBegin[i] + w.padEnd[i] - dk
			if span < 0 {
				return nil, n.Errorf("kernel %v (dilated extent %d) is larger than the padded input %d on spatial axis %d", kernel, dk, in[i]+w.padBegin[i]+w.padEnd[i], i)
			}
			if ceil {
				w.out[i] = (span+s-1)/s + 1
				// A window that would start in the end padding is dropped.
				if (w.out[i]-1)*s >= in[i]+w.padBegin[i] {
					w.out[i]--
				}
			} else {
				w.out[i] = span/s + 1
			}
		case "VALID":
			w.padBegin[i], w.padEnd[i] = 0, 0
			if in[i] < dk {
				return nil, n.Errorf("kernel %v (dilated extent %d) is larger than the input %d on spatial axis %d", kernel, dk, in[i], i)
			}
			w.out[i] = (in[i]-dk)/s + 1
		case "SAME_UPPER", "SAME_LOWER":
			w.out[i] = (in[i] + s - 1) / s
			total := (w.out[i]-1)*s + dk - in[i]
			if total < 0 {
				total = 0
			}
			if autoPad == "SAME_UPPER" {
				w.padBegin[i] = total / 2
			} else {
				w.padBegin[i] = total - total/2
			}
			w.padEnd[i] = total - w.padBegin[i]
		default:
			return nil, n.Errorf("auto_pad %q is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", autoPad)
		}
	}
	return w, nil
}

// kernelShapeAttr reads the required kernel_shape attribute for r spatial dims.
func kernelShapeAttr(n *graph.Node, r int) ([]int, error) {
	if !n.HasAttr("kernel_shape") {
		return nil, n.Errorf("attribute kernel_shape is required")
	}
	return intsAttr(n, "kernel_shape", r, 1)
}

// spatialInput checks that x is (N, C, D1, ..., Dk) with k >= 1.
func spatialInput(n *graph.Node, x *graph.Tensor, what string) error {
	if len(x.Shape) < 3 {
		return n.Errorf("%s must have rank >= 3 (N, C, spatial...), has shape %v", what, x.Shape)
	}
	return nil
}

// prod multiplies ints.
func prod(v []int) int {
	p := 1
	for _, d := range v {
		p *= d
	}
	return p
}

// concatShape joins a prefix and spatial dims into a new shape.
func concatShape(prefix []int, rest []int) []int {
	s := make([]int, 0, len(prefix)+len(rest))
	s = append(s, prefix...)
	return append(s, rest...)
}

// Window is the geometry of a convolution or pooling window over the
// spatial dims: In are the image dims, Out the window positions. The
// backward kernels (backend/cpu/ops/gradient) resolve it through
// ResolveWindow and ConvTransposeWindow so that forward and backward read a
// node's attributes the same way.
type Window struct {
	In, Out, Kernel, Strides, Dilations, PadBegin, PadEnd []int
}

func (w *window) export() Window {
	return Window{In: w.in, Out: w.out, Kernel: w.kernel, Strides: w.strides, Dilations: w.dilations, PadBegin: w.padBegin, PadEnd: w.padEnd}
}

// ResolveWindow reads the window of a Conv or pooling node over image dims
// in (ceil allows the pools' ceil_mode).
func ResolveWindow(n *graph.Node, in, kernel []int, ceil bool) (Window, error) {
	if len(in) == 0 || len(kernel) != len(in) {
		return Window{}, n.Errorf("kernel %v does not match the %d spatial dims", kernel, len(in))
	}
	w, err := resolveWindow(n, in, kernel, windowOpts{ceil: ceil})
	if err != nil {
		return Window{}, err
	}
	return w.export(), nil
}

// ConvTransposeWindow reads a ConvTranspose node's geometry as the window
// of the equivalent convolution (In is the ConvTranspose output, Out its
// input positions in).
func ConvTransposeWindow(n *graph.Node, in, kernel []int) (Window, error) {
	if len(in) == 0 || len(kernel) != len(in) {
		return Window{}, n.Errorf("kernel %v does not match the %d spatial dims", kernel, len(in))
	}
	w, err := convTransposeWindow(n, in, kernel)
	if err != nil {
		return Window{}, err
	}
	return w.export(), nil
}

// IntsAttr reads an ints attribute with want values (fill when absent).
func IntsAttr(n *graph.Node, name string, want, fill int) ([]int, error) {
	return intsAttr(n, name, want, fill)
}
