package graph

// Lowerings of ReverseSequence and MaxUnpool: index arithmetic, then one
// Gather or one ScatterElements.

func init() {
	registerTyped("ReverseSequence", lowerReverseSequence)
	registerTyped("MaxUnpool", lowerMaxUnpool)
}

// lowerReverseSequence gathers, over the first two axes flattened, from
// index src(i0, i1): along the time axis t maps to lens[b]-1-t while
// t < lens[b] (lens read at run time), and the rest is copied.
func lowerReverseSequence(l *lowering) error {
	x := l.in(0)
	xs, ok := l.staticShape(x)
	if !ok || len(xs) < 2 {
		return l.unsupported("ReverseSequence needs a static input shape of rank 2 or more")
	}
	batchAxis, timeAxis := l.n.AttrInt("batch_axis", 1), l.n.AttrInt("time_axis", 0)
	if !(batchAxis == 0 && timeAxis == 1 || batchAxis == 1 && timeAxis == 0) {
		return l.unsupported("batch_axis %d and time_axis %d", batchAxis, timeAxis)
	}
	d0, d1 := xs[0], xs[1]
	times, batches := make([]int64, d0*d1), make([]int64, d0*d1)
	for i0 := int64(0); i0 < d0; i0++ {
		for i1 := int64(0); i1 < d1; i1++ {
			b, t := i1, i0
			if batchAxis == 0 {
				b, t = i0, i1
			}
			times[i0*d1+i1], batches[i0*d1+i1] = t, b
		}
	}
	tc := l.b.Const(FromInt64(times, int(d0), int(d1)))
	bc := l.b.Const(FromInt64(batches, int(d0), int(d1)))
	lens := l.opAttrs("Gather", []string{l.cast(l.in(1), Int64), bc}, IntAttr("axis", 0))
	src := l.op("Where", l.op("Less", tc, lens), l.sub(l.sub(lens, l.scalarOf(Int64, 1)), tc), tc)
	var flat string
	if batchAxis == 0 {
		flat = l.add(l.mul(bc, l.scalarOf(Int64, float64(d1))), src)
	} else {
		flat = l.add(l.mul(src, l.scalarOf(Int64, float64(d1))), bc)
	}
	view := l.reshape(x, append([]int64{d0 * d1}, xs[2:]...)...)
	l.finish(0, l.opAttrs("Gather", []string{view, flat}, IntAttr("axis", 0)))
	return nil
}

// lowerMaxUnpool scatters X at the flat indices I into zeros of the
// natural unpooled shape, then pads each axis at its end to output_shape
// (a constant) when given, as the kernel does (a smaller output_shape is
// left to the kernel, which checks that no value falls outside it).
func lowerMaxUnpool(l *lowering) error {
	x, idx := l.in(0), l.in(1)
	xs, ok := l.staticShape(x)
	if !ok || len(xs) < 3 {
		return l.unsupported("MaxUnpool needs a static input shape of rank 3 or more")
	}
	dt := l.dtype(x)
	if dt == Undefined {
		return l.unsupported("MaxUnpool of an unknown dtype")
	}
	r := len(xs) - 2
	kernel := l.n.AttrInts("kernel_shape", nil)
	strides := l.n.AttrInts("strides", nil)
	pads := l.n.AttrInts("pads", nil)
	if strides == nil {
		strides = repeat(1, r)
	}
	if pads == nil {
		pads = repeat(0, 2*r)
	}
	if len(kernel) != r || len(strides) != r || len(pads) != 2*r {
		return l.unsupported("kernel_shape, strides or pads do not match %d spatial axes", r)
	}
	natural := append([]int64{}, xs[:2]...)
	total := xs[0] * xs[1]
	for i := 0; i < r; i++ {
		d := (xs[i+2]-1)*strides[i] + kernel[i] - pads[i] - pads[i+r]
		if d < 0 || strides[i] <= 0 {
			return l.unsupported("negative unpooled size")
		}
		natural = append(natural, d)
		total *= d
	}
	size := int64(1)
	for _, d := range xs {
		size *= d
	}
	flatIdx := l.reshape(l.cast(idx, Int64), size)
	y := l.opAttrs("ScatterElements", []string{l.zerosOf(dt, []int64{total}), flatIdx, l.reshape(x, size)}, IntAttr("axis", 0))
	y = l.reshape(y, natural...)
	if os := l.in(2); os != "" {
		shape, ok := l.int64Values(os)
		if !ok {
			return l.unsupported("output_shape is computed at run time")
		}
		if len(shape) != len(xs) || shape[0] != xs[0] || shape[1] != xs[1] {
			return l.unsupported("output_shape %v", shape)
		}
		p := make([]int64, 2*len(xs))
		changed := false
		for i := range xs {
			p[len(xs)+i] = shape[i] - natural[i]
			changed = changed || p[len(xs)+i] != 0
			if p[len(xs)+i] < 0 {
				// The kernel checks that no value falls outside.
				return l.unsupported("output_shape %v is smaller than the unpooled shape %v", shape, natural)
			}
		}
		switch {
		case !changed:
		case l.opset() > 0 && l.opset() < 11:
			y = l.opAttrs("Pad", []string{y}, IntsAttr("pads", p...))
		default:
			y = l.op("Pad", y, l.int64s(p...))
		}
	}
	l.finish(0, y)
	return nil
}
