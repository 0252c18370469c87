package graph

// Lowerings of Resize, Upsample and ResizeGrad.
//
// Resize is separable: along each resized axis, output index o combines
// a few input indices with fixed weights (the taps), which depend only on
// the attributes, the sizes and the scales. With those known at lowering
// time (a static input shape and constant scales, sizes and roi), one axis
// becomes K Gathers at constant indices, each scaled by a constant weight
// vector, summed (K = 1 for nearest, 2 for linear, 4 for cubic, more with
// antialias); nearest is a single Gather and copies exactly. Outputs that
// fall outside the input under tf_crop_and_resize take the extrapolation
// value through a Where. Axes are resampled one at a time, in the order of
// the CPU kernel (shrinking axes first), with the kernel's taps: the
// weights and their summation order are the kernel's, so float results
// agree to the last bit (the arithmetic is resize.go's, which kernels
// call too).
//
// ResizeGrad, the adjoint, runs the passes backwards: each scatter-adds
// the weighted gradient at the same constant indices (ScatterElements with
// reduction add).

func init() {
	registerTyped("Resize", lowerResize)
	registerTyped("Upsample", lowerResize)
	domainLowerings[InternalDomain+":ResizeGrad"] = lowerResizeGrad
}

// resizeTaps are one axis's taps in the dense layout the lowering
// builds from: idx[k][o], w[k][o] for tap k of output o (weight 0 where o
// has fewer taps), and which outputs extrapolate.
type resizeTaps struct {
	axis, in, out int
	idx           [][]int64
	w             [][]float64
	extrap        []bool
}

// denseTaps lays t out as tap k of every output.
func denseTaps(t *ResizeTaps) *resizeTaps {
	k := t.MaxTaps()
	d := &resizeTaps{axis: t.Axis, in: t.In, out: t.Out, extrap: t.Extrap, idx: make([][]int64, k), w: make([][]float64, k)}
	for j := 0; j < k; j++ {
		d.idx[j], d.w[j] = make([]int64, t.Out), make([]float64, t.Out)
		for o := 0; o < t.Out; o++ {
			if p := t.Start[o] + j; p < t.Start[o+1] {
				d.idx[j][o], d.w[j][o] = int64(t.Idx[p]), t.W[p]
			}
		}
	}
	return d
}

// resizePlan resolves the taps of a Resize, Upsample or ResizeGrad node
// over an input of shape, in the order the passes run, with the
// arithmetic of resize.go that kernels use too. Anything not known at
// lowering time, or that a kernel would reject, is ErrUnsupportedOp.
func (l *lowering) resizePlan(shape []int64, roi, scales, sizes string, legacy bool) ([]*resizeTaps, error) {
	n := l.n
	m, err := ReadResizeMode(n, legacy)
	if err != nil {
		return nil, l.unsupported("%v", err)
	}
	values := func(name string) (*Tensor, error) {
		if name == "" {
			return nil, nil
		}
		t := l.constant(name)
		if t == nil {
			return nil, l.unsupported("%s is computed at run time", name)
		}
		return t, nil
	}
	var scaleVals []float64
	if a := n.Attr("scales"); a != nil && legacy {
		for _, s := range a.Floats {
			scaleVals = append(scaleVals, float64(s))
		}
	} else {
		t, err := values(scales)
		if err != nil {
			return nil, err
		}
		scaleVals = ResizeFloats(t)
	}
	sizesT, err := values(sizes)
	if err != nil {
		return nil, err
	}
	var roiVals []float64
	if m.CoordMode == "tf_crop_and_resize" {
		t, err := values(roi)
		if err != nil {
			return nil, err
		}
		roiVals = ResizeFloats(t)
	}
	ishape := make([]int, len(shape))
	for i, d := range shape {
		ishape[i] = int(d)
	}
	ras, err := ResolveResizeAxes(n, ishape, m, roiVals, scaleVals, ResizeSizes(sizesT), !legacy)
	if err != nil {
		return nil, l.unsupported("%v", err)
	}
	for i := range ras {
		if a := &ras[i]; a.In <= 0 || a.Out <= 0 || !(a.Scale > 0) {
			return nil, l.unsupported("an empty axis or output")
		}
	}
	var passes []*resizeTaps
	for _, t := range m.Passes(ras) {
		passes = append(passes, denseTaps(t))
	}
	return passes, nil
}

// resizeInputs returns Resize's (or Upsample's) roi, scales and sizes and
// whether the node has the rules before opset 11.
func (l *lowering) resizeInputs() (roi, scales, sizes string, legacy bool) {
	if l.n.OpType == "Upsample" || (l.opset() > 0 && l.opset() < 11) {
		return "", l.in(1), "", true
	}
	return l.in(1), l.in(2), l.in(3), false
}

// axisView is the shape [n, 1, ..., 1] of a vector that broadcasts along
// axis of a rank-r value.
func axisView(n, axis, r int) []int {
	out := make([]int, r-axis)
	for i := range out {
		out[i] = 1
	}
	out[0] = n
	return out
}

func lowerResize(l *lowering) error {
	x := l.in(0)
	xs, ok := l.staticShape(x)
	if !ok {
		return l.unsupported("Resize needs a static input shape")
	}
	roi, scales, sizes, legacy := l.resizeInputs()
	passes, err := l.resizePlan(xs, roi, scales, sizes, legacy)
	if err != nil {
		return err
	}
	dt := l.dtype(x)
	cur := x
	for _, p := range passes {
		cur, err = l.resamplePass(cur, dt, len(xs), p)
		if err != nil {
			return err
		}
	}
	if cur == x {
		cur = l.op("Identity", x)
	}
	l.finish(0, cur)
	return nil
}

// resamplePass resamples one axis of cur (dtype dt, rank r).
func (l *lowering) resamplePass(cur string, dt DType, r int, p *resizeTaps) (string, error) {
	gather := func(v string, k int) string {
		return l.opAttrs("Gather", []string{v, l.int64s(p.idx[k]...)}, IntAttr("axis", int64(p.axis)))
	}
	if len(p.idx) == 1 && p.extrap == nil && p.w[0] != nil && allOnes(p.w[0]) {
		return gather(cur, 0), nil // nearest: a copy
	}
	work := dt
	switch {
	case dt == Float32 || dt == Float64:
	case dt.IsInt():
		work = Float64
		cur = l.cast(cur, Float64)
	default:
		return "", l.unsupported("interpolating %v", dt)
	}
	view := axisView(p.out, p.axis, r)
	weights := func(w []float64) string {
		t := Zeros(work, view...)
		for i, v := range w {
			t.SetFloat(i, v)
		}
		return l.b.Const(t)
	}
	var sum string
	for k := range p.idx {
		term := l.mul(gather(cur, k), weights(p.w[k]))
		if sum == "" {
			sum = term
		} else {
			sum = l.add(sum, term)
		}
	}
	if sum == "" {
		// Every output extrapolates: zeros of the output's shape, then the
		// extrapolation value below.
		sum = l.mul(gather(cur, 0), l.scalarOf(work, 0))
	}
	if p.extrap != nil {
		mask := &Tensor{DType: Bool, Shape: view, Data: append([]bool{}, p.extrap...)}
		sum = l.op("Where", l.b.Const(mask), l.scalarOf(work, float64(l.n.AttrFloat("extrapolation_value", 0))), sum)
	}
	if work != dt {
		sum = l.cast(sum, dt)
	}
	return sum, nil
}

func allOnes(w []float64) bool {
	for _, v := range w {
		if v != 1 {
			return false
		}
	}
	return true
}

// lowerResizeGrad: ResizeGrad(dy, Shape(X), roi, scales, sizes) with the
// forward node's attributes (legacy: the rules before opset 11).
func lowerResizeGrad(l *lowering) error {
	dy := l.in(0)
	xs, ok := l.int64Values(l.in(1))
	if !ok {
		if xs, ok = l.staticShape(l.n.Outputs[0]); !ok {
			return l.unsupported("ResizeGrad needs the input's shape")
		}
	}
	dt := l.dtype(dy)
	if dt != Float32 && dt != Float64 {
		return l.unsupported("ResizeGrad of %v", dt)
	}
	legacy := l.n.AttrInt("legacy", 0) != 0
	passes, err := l.resizePlan(xs, l.in(2), l.in(3), l.in(4), legacy)
	if err != nil {
		return err
	}
	// shapes[i] is the shape before pass i.
	shapes := [][]int64{append([]int64{}, xs...)}
	for _, p := range passes {
		next := append([]int64{}, shapes[len(shapes)-1]...)
		next[p.axis] = int64(p.out)
		shapes = append(shapes, next)
	}
	if ds, ok := l.staticShape(dy); ok && !equalInt64s(ds, shapes[len(shapes)-1]) {
		return l.unsupported("gradient of shape %v for an output of shape %v", ds, shapes[len(shapes)-1])
	}
	r := len(xs)
	cur := dy
	for i := len(passes) - 1; i >= 0; i-- {
		p := passes[i]
		in, out := shapes[i], shapes[i+1]
		view := axisView(p.out, p.axis, r)
		var idx, upd []string
		for k := range p.idx {
			it := &Tensor{DType: Int64, Shape: view, Data: append([]int64{}, p.idx[k]...)}
			idx = append(idx, l.op("Expand", l.b.Const(it), l.int64s(out...)))
			wt := Zeros(dt, view...)
			for o, v := range p.w[k] {
				wt.SetFloat(o, v)
			}
			upd = append(upd, l.mul(cur, l.b.Const(wt)))
		}
		ix, up := idx[0], upd[0]
		if len(idx) > 1 {
			ix = l.opAttrs("Concat", idx, IntAttr("axis", int64(p.axis)))
			up = l.opAttrs("Concat", upd, IntAttr("axis", int64(p.axis)))
		}
		cur = l.scatterAdd(l.zerosOf(dt, in), ix, up, int64(p.axis))
	}
	if cur == dy {
		cur = l.op("Identity", dy)
	}
	l.finish(0, cur)
	return nil
}

func equalInt64s(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
