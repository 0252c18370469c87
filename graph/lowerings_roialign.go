package graph

// RoiAlign lowered to primitives when sampling_ratio is positive (a fixed
// gh×gw grid of samples per output bin; with sampling_ratio 0 the count
// depends on each region's size, a run-time value, and the node keeps its
// kernel). Each region's sample coordinates are computed from rois at run
// time; a sample is RoiAlign's bilinear interpolation (points more than a
// pixel outside the image give zero, the rest clamp to the border) over
// the planes of the region's image, fetched with Gather (the image) and
// GatherElements (the four taps). The arithmetic follows the CPU kernel
// (backend/cpu/ops/nn/roi.go) step for step, including the order of its
// sums, in float32 (float64 for float64 inputs; the kernel computes in
// float64): avg adds a bin's samples in row order and divides by
// their count, max keeps the first sample and replaces it by a larger one.
// X's channels and spatial size must be known; the batch and the number
// of regions may be symbolic.

func init() {
	registerTyped("RoiAlign", lowerRoiAlign)
}

func lowerRoiAlign(l *lowering) error {
	x, rois, bi := l.in(0), l.in(1), l.in(2)
	t := l.typ(x)
	if t == nil || !t.HasShape || len(t.Shape) != 4 || !t.Shape[1].Known || !t.Shape[2].Known || !t.Shape[3].Known {
		return l.unsupported("RoiAlign needs an input (N, C, H, W) of known C, H and W")
	}
	dt := l.dtype(x)
	if !dt.IsFloat() {
		return l.unsupported("RoiAlign of %v", dt)
	}
	work := workFloat(dt)
	c, h, w := t.Shape[1].Value, t.Shape[2].Value, t.Shape[3].Value
	halfPixel := true
	mode := "half_pixel"
	if l.opset() > 0 && l.opset() < 16 {
		mode = "output_half_pixel"
	}
	switch m := l.n.AttrString("coordinate_transformation_mode", mode); m {
	case "half_pixel":
	case "output_half_pixel":
		halfPixel = false
	default:
		return l.unsupported("coordinate_transformation_mode %q", m)
	}
	maxMode := false
	switch m := l.n.AttrString("mode", "avg"); m {
	case "avg":
	case "max":
		maxMode = true
	default:
		return l.unsupported("mode %q", m)
	}
	ph, pw := l.n.AttrInt("output_height", 1), l.n.AttrInt("output_width", 1)
	sr := l.n.AttrInt("sampling_ratio", 0)
	if ph <= 0 || pw <= 0 || sr <= 0 || c == 0 || h == 0 || w == 0 {
		return l.unsupported("sampling_ratio %d (0: a sample count per region that depends on its size), output %dx%d", sr, ph, pw)
	}
	scale := float64(l.n.AttrFloat("spatial_scale", 1))
	offset := 0.0
	if halfPixel {
		offset = 0.5
	}
	f := func(v float64) string { return l.scalarOf(work, v) }
	scalarIdx := func(i int64) string { return l.b.Const(&Tensor{DType: Int64, Shape: []int{}, Data: []int64{i}}) }
	r64 := l.cast(rois, work)
	coord := func(i int64) string { // [R, 1, 1]
		v := l.sub(l.mul(l.opAttrs("Gather", []string{r64, scalarIdx(i)}, IntAttr("axis", 1)), f(scale)), f(offset))
		return l.reshape(v, -1, 1, 1)
	}
	x1, y1, x2, y2 := coord(0), coord(1), coord(2), coord(3)
	rw, rh := l.sub(x2, x1), l.sub(y2, y1)
	if !halfPixel {
		rw, rh = l.op("Max", rw, f(1)), l.op("Max", rh, f(1))
	}
	binH, binW := l.div(rh, f(float64(ph))), l.div(rw, f(float64(pw)))
	// positions(start, bin, p, g): start + p·bin + (i+0.5)·bin/g for bin p
	// and sample i, shaped [R, p, g] (the kernel's order of operations).
	positions := func(start, bin string, p int64) string {
		ps := Zeros(work, 1, int(p), 1)
		for i := 0; i < int(p); i++ {
			ps.SetFloat(i, float64(i))
		}
		is := Zeros(work, 1, 1, int(sr))
		for i := 0; i < int(sr); i++ {
			is.SetFloat(i, float64(i)+0.5)
		}
		base := l.add(start, l.mul(l.b.Const(ps), bin))
		return l.add(base, l.div(l.mul(l.b.Const(is), bin), f(float64(sr))))
	}
	// axis returns, for coordinates v along an axis of size d, whether
	// they sample (not more than a pixel outside), the low and high taps'
	// indices and their weights (hi·(1-frac), lo·frac order as the kernel).
	axis := func(v string, d int64) (ok, lo, hi, wLo, wHi string) {
		fd := float64(d)
		ok = l.op("Where", l.op("Less", v, f(-1)), f(0), l.op("Where", l.op("Less", f(fd), v), f(0), f(1)))
		v = l.op("Max", v, f(0))
		low := l.op("Floor", v)
		edge := l.op("Less", low, f(fd-1)) // false: at or past the last pixel
		low = l.op("Where", edge, low, f(fd-1))
		high := l.op("Where", edge, l.add(low, f(1)), f(fd-1))
		v = l.op("Where", edge, v, f(fd-1))
		frac := l.sub(v, low)
		return ok, low, high, l.sub(f(1), frac), frac
	}
	yy := positions(y1, binH, ph) // [R, ph, gh]
	xx := positions(x1, binW, pw) // [R, pw, gw]
	yOK, yl, yh, hy, ly := axis(yy, h)
	xOK, xl, xh, hx, lx := axis(xx, w)
	// Samples laid out [R, ph, pw, gh, gw]: y terms [R, ph, 1, gh, 1], x
	// terms [R, 1, pw, 1, gw].
	ya := func(v string) string { return l.reshape(v, -1, ph, 1, sr, 1) }
	xa := func(v string) string { return l.reshape(v, -1, 1, pw, 1, sr) }
	ok := l.mul(ya(yOK), xa(xOK))
	valid := l.op("Equal", ok, f(1))
	samples := ph * pw * sr * sr
	planes := l.opAttrs("Gather", []string{l.reshape(l.cast(x, work), -1, c, h*w), bi}, IntAttr("axis", 0)) // [R, C, H·W]
	tap := func(yi, xi, wy, wx string) string {
		pos := l.add(l.mul(ya(yi), f(float64(w))), xa(xi))
		pos = l.cast(l.op("Where", valid, pos, f(0)), Int64)
		wt := l.op("Where", valid, l.mul(ya(wy), xa(wx)), f(0))
		at := l.op("Expand", l.reshape(pos, -1, 1, samples), l.int64s(1, c, 1))
		return l.mul(l.reshape(wt, -1, 1, samples), l.opAttrs("GatherElements", []string{planes, at}, IntAttr("axis", 2)))
	}
	t0, t1, t2, t3 := tap(yl, xl, hy, hx), tap(yl, xh, hy, lx), tap(yh, xl, ly, hx), tap(yh, xh, ly, lx)
	var v string
	if maxMode {
		v = l.op("Max", l.op("Max", t0, t1), l.op("Max", t2, t3))
	} else {
		v = l.add(l.add(l.add(t0, t1), t2), t3)
	}
	v = l.reshape(v, -1, c, ph, pw, sr*sr) // [R, C, ph, pw, samples of a bin]
	var acc string
	for s := int64(0); s < sr*sr; s++ {
		vs := l.opAttrs("Gather", []string{v, scalarIdx(s)}, IntAttr("axis", 4))
		switch {
		case s == 0 && maxMode:
			acc = vs
		case s == 0:
			acc = l.add(f(0), vs)
		case maxMode:
			acc = l.op("Where", l.op("Less", acc, vs), vs, acc)
		default:
			acc = l.add(acc, vs)
		}
	}
	if !maxMode {
		acc = l.div(acc, f(float64(sr*sr)))
	}
	l.finish(0, l.cast(acc, dt))
	return nil
}
