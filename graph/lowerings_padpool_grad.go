package graph

// Lowerings of PadGrad and AveragePoolGrad, the gradient ops autodiff
// emits for Pad and AveragePool.
//
// PadGrad sends each element of dY back to the element of x Pad copied it
// from: in constant mode a Slice of dY (and zeros where negative pads
// cropped x); in reflect, edge and wrap modes, axis by axis, a scatter-add
// at the constant source indices of Pad's own arithmetic (pad.go).
//
// AveragePoolGrad divides each window's gradient by the window's count (a
// constant: taps inside the input, or inside the padded input with
// count_include_pad, as the kernels count them) and spreads it over the
// window with a ConvTranspose of ones, one group per channel, whose output
// covers the padded input; the input's part is sliced out of it.

func init() {
	domainLowerings[InternalDomain+":PadGrad"] = lowerPadGrad
	domainLowerings[InternalDomain+":AveragePoolGrad"] = lowerAveragePoolGrad
}

// padOrSlice returns v padded (positive) or cropped (negative) by the
// begin and end amounts per axis.
func (l *lowering) padOrSlice(v string, shape, begin, end []int64) string {
	r := int64(len(shape))
	for a := int64(0); a < r; a++ {
		if b, e := begin[a], end[a]; b < 0 || e < 0 {
			v = l.sliceAxis(v, a, max(-b, 0), shape[a]-max(-e, 0))
		}
	}
	pads := make([]int64, 2*r)
	padded := false
	for a := int64(0); a < r; a++ {
		pads[a], pads[r+a] = max(begin[a], 0), max(end[a], 0)
		padded = padded || pads[a] > 0 || pads[r+a] > 0
	}
	if !padded {
		return v
	}
	if l.opset() > 0 && l.opset() < 11 {
		return l.opAttrs("Pad", []string{v}, IntsAttr("pads", pads...))
	}
	return l.op("Pad", v, l.int64s(pads...))
}

func lowerPadGrad(l *lowering) error {
	dy, x := l.in(0), l.in(1)
	xs, ok := l.staticShape(x)
	if !ok {
		return l.unsupported("PadGrad needs a static input shape")
	}
	r := len(xs)
	var pads []int64
	var axes []int
	if l.in(2) != "" {
		if pads, ok = l.int64Values(l.in(2)); !ok {
			return l.unsupported("PadGrad needs constant pads")
		}
		if l.in(4) != "" {
			raw, ok := l.int64Values(l.in(4))
			if !ok {
				return l.unsupported("PadGrad needs constant axes")
			}
			for _, a := range raw {
				if a < 0 {
					a += int64(r)
				}
				if a < 0 || a >= int64(r) {
					return l.unsupported("axes %v", raw)
				}
				axes = append(axes, int(a))
			}
		}
	} else {
		a := l.n.Attr("pads")
		if a == nil {
			a = l.n.Attr("paddings")
		}
		if a == nil {
			return l.unsupported("PadGrad without pads")
		}
		pads = a.Ints
	}
	shape := make([]int, r)
	for i, d := range xs {
		shape[i] = int(d)
	}
	begin, end, padded, err := PadBounds(l.n, shape, pads, axes)
	if err != nil {
		return l.unsupported("%v", err)
	}
	mode := l.n.AttrString("mode", "constant")
	if mode == "constant" {
		// The inverse crop: dY's middle is x's surviving region.
		neg := func(v []int64) []int64 {
			out := make([]int64, len(v))
			for i, p := range v {
				out[i] = -p
			}
			return out
		}
		ps := make([]int64, r)
		for i, d := range padded {
			ps[i] = int64(d)
		}
		v := l.padOrSlice(dy, ps, neg(begin), neg(end))
		if v == dy {
			v = l.op("Identity", dy)
		}
		l.finish(0, v)
		return nil
	}
	dt := l.dtype(dy)
	cur := dy
	curShape := make([]int64, r)
	for i, d := range padded {
		curShape[i] = int64(d)
	}
	for a := 0; a < r; a++ {
		if begin[a] == 0 && end[a] == 0 {
			continue
		}
		src, err := PadSources(l.n, mode, shape[a], int(begin[a]), int(end[a]), 1, -1)
		if err != nil {
			return l.unsupported("%v", err)
		}
		view := axisView(len(src), a, r)
		idx := make([]int64, len(src))
		for i, s := range src {
			idx[i] = int64(s)
		}
		next := append([]int64{}, curShape...)
		next[a] = xs[a]
		it := l.op("Expand", l.b.Const(&Tensor{DType: Int64, Shape: view, Data: idx}), l.int64s(curShape...))
		cur = l.scatterAdd(l.zerosOf(dt, next), it, cur, int64(a))
		curShape = next
	}
	if cur == dy {
		cur = l.op("Identity", dy)
	}
	l.finish(0, cur)
	return nil
}

func lowerAveragePoolGrad(l *lowering) error {
	dy := l.in(0)
	xs, ok := l.int64Values(l.in(1))
	if !ok {
		if xs, ok = l.staticShape(l.n.Outputs[0]); !ok {
			return l.unsupported("AveragePoolGrad needs the input's shape")
		}
	}
	ys, ok := l.staticShape(dy)
	if !ok || len(ys) != len(xs) || len(xs) < 3 {
		return l.unsupported("AveragePoolGrad needs a static gradient shape")
	}
	dt := l.dtype(dy)
	if !dt.IsFloat() {
		return l.unsupported("AveragePoolGrad of %v", dt)
	}
	kernel := l.n.AttrInts("kernel_shape", nil)
	r := len(xs) - 2
	if len(kernel) != r {
		return l.unsupported("kernel_shape %v for %d spatial axes", kernel, r)
	}
	c := xs[1]
	g, err := l.convGeometryOf(xs, append([]int64{c, 1}, kernel...))
	if err != nil {
		return err
	}
	includePad := l.n.AttrInt("count_include_pad", 0) != 0
	// Each window's count is the product of its per-axis counts.
	counts := make([][]int64, r)
	for j := 0; j < r; j++ {
		counts[j] = make([]int64, ys[j+2])
		for o := range counts[j] {
			start := int64(o)*g.strides[j] - g.padBegin[j]
			for t := int64(0); t < g.kernel[j]; t++ {
				i := start + t*g.dilations[j]
				inside := i >= 0 && i < g.in[j]
				if includePad {
					inside = i >= -g.padBegin[j] && i < g.in[j]+g.padEnd[j]
				}
				if inside {
					counts[j][o]++
				}
			}
		}
	}
	outDims := make([]int, r)
	for j := range outDims {
		outDims[j] = int(ys[j+2])
	}
	div := Zeros(dt, append([]int{1, 1}, outDims...)...)
	for k := 0; k < div.Size(); k++ {
		n, rem := int64(1), k
		for j := r - 1; j >= 0; j-- {
			n *= counts[j][rem%outDims[j]]
			rem /= outDims[j]
		}
		if n == 0 {
			n = 1 // no tap inside: the window's share lands outside x
		}
		div.SetFloat(k, float64(n))
	}
	ones := Zeros(dt, append([]int{int(c), 1}, IntsToInt(kernel)...)...)
	for k := 0; k < ones.Size(); k++ {
		ones.SetFloat(k, 1)
	}
	full := l.opAttrs("ConvTranspose", []string{l.div(dy, l.b.Const(div)), l.b.Const(ones)},
		IntsAttr("strides", g.strides...), IntsAttr("dilations", g.dilations...), IntAttr("group", c))
	// full covers the padded input from its first padded position; x is
	// [padBegin, padBegin + in) of it (zeros past its end).
	shape := append([]int64{}, ys[:2]...)
	begin, end := make([]int64, r+2), make([]int64, r+2)
	for j := 0; j < r; j++ {
		ext := g.strides[j]*(ys[j+2]-1) + g.dilations[j]*(g.kernel[j]-1) + 1
		shape = append(shape, ext)
		begin[j+2], end[j+2] = -g.padBegin[j], g.padBegin[j]+g.in[j]-ext
	}
	l.finish(0, l.padOrSlice(full, shape, begin, end))
	return nil
}
