package graph

// GridSample lowered to primitives: for each output point, each spatial
// axis gives a few input indices (1 for nearest, 2 for linear, 4 for
// cubic) with weights computed at run time from the grid; the point's
// value is the sum, over every combination of one tap per axis, of the
// combination's weight times the input at its flat offset, fetched with
// GatherElements. The arithmetic follows the CPU kernel
// (backend/cpu/ops/nn/gridsample.go) step for step, in float32 (float64
// for float64 inputs; the kernel computes in float64, PyTorch in the
// input's type, and float32 keeps the form runnable where a backend has
// no float64 kernels):
// the unnormalised coordinate, nearest's rounding half to even, padding
// (border clamps, reflection folds at the borders, zeros drops taps
// outside the input), the weights (f+1-x and x-f for linear, Keys' cubic
// with a = -0.75), combinations with a zero weight or a dropped tap
// contributing nothing, and the sum in the kernel's order (the last axis's
// tap varying fastest). X's channels and spatial size and the grid's
// output size must be known (the batch may be symbolic); float32,
// float64, float16 and bfloat16 inputs lower (the last two computed in
// float32, as autocast runs grid_sample), others keep the kernel. Ops without a gradient
// rule lower before autodiff (LowerForAutodiff), so GridSample trains
// through this form, with respect to its input and its grid.

func init() {
	registerTyped("GridSample", lowerGridSample)
}

func lowerGridSample(l *lowering) error {
	x, grid := l.in(0), l.in(1)
	// Every dimension but the batch must be known (the batch may be
	// symbolic: the reshapes below infer it).
	known := func(name string) ([]int64, bool) {
		t := l.typ(name)
		if t == nil || !t.HasShape {
			return nil, false
		}
		out := make([]int64, len(t.Shape))
		for i, d := range t.Shape {
			if !d.Known && i > 0 {
				return nil, false
			}
			out[i] = d.Value
		}
		return out, true
	}
	xs, ok := known(x)
	if !ok || len(xs) < 3 {
		return l.unsupported("GridSample needs an input of known channels and spatial size")
	}
	gs, ok := known(grid)
	r := len(xs) - 2
	if !ok || len(gs) != r+2 || gs[r+1] != int64(r) {
		return l.unsupported("GridSample needs a grid of known shape (N, out..., %d)", r)
	}
	dt := l.dtype(x)
	if !dt.IsFloat() {
		return l.unsupported("GridSample of %v", dt)
	}
	work := workFloat(dt)
	interp := l.n.AttrString("mode", "linear")
	switch interp {
	case "bilinear":
		interp = "linear"
	case "bicubic":
		interp = "cubic"
	case "linear", "nearest", "cubic":
	default:
		return l.unsupported("mode %q", interp)
	}
	padding := l.n.AttrString("padding_mode", "zeros")
	switch padding {
	case "zeros", "border", "reflection":
	default:
		return l.unsupported("padding_mode %q", padding)
	}
	align := l.n.AttrInt("align_corners", 0) != 0
	c := xs[1]
	inSize, outSize := int64(1), int64(1)
	for _, d := range xs[2:] {
		inSize *= d
	}
	for _, d := range gs[1 : r+1] {
		outSize *= d
	}
	if c == 0 || inSize == 0 || outSize == 0 {
		return l.unsupported("an empty input or output")
	}
	g := &gridLowering{l: l, align: align, interp: interp, padding: padding, work: work}
	g64 := l.cast(grid, work)
	// Per axis j (X's axis 2+j; the grid lists the innermost axis first):
	// each tap's flat-offset term, weight and validity (1 or 0).
	type tap struct{ off, w, valid string }
	axes := make([][]tap, r)
	stride := int64(1)
	for j := r - 1; j >= 0; j-- {
		d := xs[2+j]
		v := l.opAttrs("Gather", []string{g64, l.b.Const(&Tensor{DType: Int64, Shape: []int{}, Data: []int64{int64(r - 1 - j)}})}, IntAttr("axis", int64(r+1)))
		idx, w, valid := g.axisTaps(v, d)
		for k := range idx {
			off := l.cast(idx[k], Int64)
			if stride != 1 {
				off = l.mul(off, l.b.Const(Scalar(Int64, float64(stride))))
			}
			axes[j] = append(axes[j], tap{off, w[k], valid[k]})
		}
		stride *= d
	}
	flat := l.reshape(l.cast(x, work), -1, c, inSize)
	expandTo := l.int64s(1, c, 1)
	zero := l.scalarOf(work, 0)
	var sum string
	count := make([]int, r)
	for {
		var off, w, valid string
		for j := 0; j < r; j++ {
			t := axes[j][count[j]]
			if j == 0 {
				off, w, valid = t.off, l.mul(l.scalarOf(work, 1), t.w), t.valid
				continue
			}
			off, w, valid = l.add(off, t.off), l.mul(w, t.w), l.mul(valid, t.valid)
		}
		// The kernel skips a combination that touches a dropped tap or has
		// weight zero: Where keeps 0·Inf and 0·NaN out of the sum.
		skip := l.op("Where", l.op("Equal", valid, zero), l.boolConst(true), l.op("Equal", w, zero))
		at := l.op("Expand", l.reshape(off, -1, 1, outSize), expandTo)
		term := l.mul(l.reshape(w, -1, 1, outSize), l.opAttrs("GatherElements", []string{flat, at}, IntAttr("axis", 2)))
		term = l.op("Where", l.reshape(skip, -1, 1, outSize), zero, term)
		if sum == "" {
			sum = l.add(zero, term)
		} else {
			sum = l.add(sum, term)
		}
		j := r - 1
		for ; j >= 0; j-- {
			count[j]++
			if count[j] < len(axes[j]) {
				break
			}
			count[j] = 0
		}
		if j < 0 {
			break
		}
	}
	out := append([]int64{-1, c}, gs[1:r+1]...)
	l.finish(0, l.cast(l.reshape(sum, out...), dt))
	return nil
}

// gridLowering builds one axis's taps of a GridSample.
type gridLowering struct {
	l       *lowering
	align   bool
	interp  string
	padding string
	work    DType // the type coordinates and sums are computed in
}

func (g *gridLowering) c(v float64) string { return g.l.scalarOf(g.work, v) }

// reflect folds x into [lo, hi] at the nearer border, repeatedly (the
// kernel's gridReflect).
func (g *gridLowering) reflect(x string, lo, hi float64) string {
	l := g.l
	rng := hi - lo
	if rng <= 0 {
		return l.op("Expand", g.c(lo), l.op("Shape", x))
	}
	fold := func(dx string, near, far float64, sign float64) string {
		k := l.op("Floor", l.div(dx, g.c(rng)))
		rem := l.sub(dx, l.mul(k, g.c(rng)))
		parity := l.sub(k, l.mul(g.c(2), l.op("Floor", l.div(k, g.c(2)))))
		even := l.add(g.c(near), l.mul(g.c(sign), rem))
		odd := l.sub(g.c(far), l.mul(g.c(sign), rem))
		return l.op("Where", l.op("Equal", parity, g.c(0)), even, odd)
	}
	below := fold(l.sub(g.c(lo), x), lo, hi, 1)
	above := fold(l.sub(x, g.c(hi)), hi, lo, -1)
	return l.op("Where", l.op("Less", x, g.c(lo)), below, l.op("Where", l.op("Less", g.c(hi), x), above, x))
}

// clamp is min(max(x, lo), hi).
func (g *gridLowering) clamp(x string, lo, hi float64) string {
	return g.l.op("Min", g.l.op("Max", x, g.c(lo)), g.c(hi))
}

// axisTaps returns, for normalised coordinates v along an axis of size d,
// each tap's input index (float64, integer valued), weight and validity.
func (g *gridLowering) axisTaps(v string, d int64) (idx, w, valid []string) {
	l := g.l
	fd := float64(d)
	var x string
	var lo, hi float64
	if g.align {
		x = l.mul(l.div(l.add(v, g.c(1)), g.c(2)), g.c(fd-1))
		lo, hi = 0, fd-1
	} else {
		x = l.div(l.sub(l.mul(l.add(v, g.c(1)), g.c(fd)), g.c(1)), g.c(2))
		lo, hi = -0.5, fd-0.5
	}
	if g.interp == "nearest" {
		x = l.op("Round", x) // half to even
	}
	switch g.padding {
	case "border":
		clamped := g.clamp(x, 0, fd-1)
		x = l.op("Where", l.op("Less", x, g.c(lo)), clamped, l.op("Where", l.op("Less", g.c(hi), x), clamped, x))
	case "reflection":
		x = g.reflect(x, lo, hi)
	}
	finite := l.op("Equal", l.sub(x, x), g.c(0)) // false for NaN and ±Inf
	one, zero := g.c(1), g.c(0)
	// pixel maps an integer-valued index f through the padding mode and
	// says whether it is a sample (zeros drops what lies outside).
	pixel := func(f string) (string, string) {
		ok := l.op("Where", finite, one, zero)
		f = l.op("Where", finite, f, zero)
		switch g.padding {
		case "zeros":
			in := l.op("Where", l.op("Less", f, zero), zero, l.op("Where", l.op("Less", g.c(fd-1), f), zero, one))
			ok = l.mul(ok, in)
		case "reflection":
			f = l.op("Floor", g.reflect(f, lo, hi))
		}
		return g.clamp(f, 0, fd-1), ok
	}
	add := func(f string, weight string) {
		i, ok := pixel(f)
		idx, w, valid = append(idx, i), append(w, weight), append(valid, ok)
	}
	switch g.interp {
	case "nearest":
		add(x, l.op("Expand", one, l.op("Shape", x)))
	case "linear":
		f := l.op("Floor", x)
		add(f, l.sub(l.add(f, one), x))
		add(l.add(f, one), l.sub(x, f))
	default: // cubic
		f := l.op("Floor", x)
		t := l.sub(x, f)
		const a = -0.75
		// Keys' kernel at t+1 and 2-t (in [1, 2]) and at t and 1-t (in
		// [0, 1]); both pieces are exactly 0 where they meet at 1 and 2.
		outer := func(s string) string {
			p := l.add(l.mul(l.sub(l.mul(g.c(a), s), g.c(5*a)), s), g.c(8*a))
			return l.sub(l.mul(p, s), g.c(4*a))
		}
		inner := func(s string) string {
			p := l.sub(l.mul(g.c(a+2), s), g.c(a+3))
			return l.add(l.mul(l.mul(p, s), s), one)
		}
		add(l.sub(f, one), outer(l.add(t, one)))
		add(f, inner(t))
		add(l.add(f, one), inner(l.sub(one, t)))
		add(l.add(f, g.c(2)), outer(l.sub(g.c(2), t)))
	}
	return idx, w, valid
}

// workFloat is the type the GridSample and RoiAlign lowerings compute in
// for inputs of type dt: float64 for float64, float32 otherwise.
func workFloat(dt DType) DType {
	if dt == Float64 {
		return Float64
	}
	return Float32
}
