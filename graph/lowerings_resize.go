package graph

import (
	"math"
	"sort"
)

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
// agree to the last bit.
//
// ResizeGrad, the adjoint, runs the passes backwards: each scatter-adds
// the weighted gradient at the same constant indices (ScatterElements with
// reduction add).

func init() {
	registerTyped("Resize", lowerResize)
	registerTyped("Upsample", lowerResize)
	domainLowerings[InternalDomain+":ResizeGrad"] = lowerResizeGrad
}

// resizeSpec is how Resize turns a source coordinate into a value.
type resizeSpec struct {
	interp         string // nearest, linear, cubic
	coordMode      string
	nearestMode    string // round_prefer_floor, round_prefer_ceil, floor, ceil, simple (before opset 11)
	cubicA         float64
	excludeOutside bool
	extrapolation  float64
	antialias      bool
}

// resizeAxisPlan is one resized axis.
type resizeAxisPlan struct {
	axis, in, out    int
	scale            float64
	roiStart, roiEnd float64
}

// resizeTaps are one axis's taps: idx[k][o], w[k][o] for tap k of output
// o (weight 0 where o has fewer taps), and which outputs extrapolate.
type resizeTaps struct {
	axis, in, out int
	idx           [][]int64
	w             [][]float64
	extrap        []bool
	identity      bool
}

func readResizeSpec(n *Node, legacy bool) (*resizeSpec, bool) {
	m := &resizeSpec{
		interp:         n.AttrString("mode", "nearest"),
		coordMode:      n.AttrString("coordinate_transformation_mode", "half_pixel"),
		nearestMode:    n.AttrString("nearest_mode", "round_prefer_floor"),
		cubicA:         float64(n.AttrFloat("cubic_coeff_a", -0.75)),
		excludeOutside: n.AttrInt("exclude_outside", 0) != 0,
		extrapolation:  float64(n.AttrFloat("extrapolation_value", 0)),
		antialias:      n.AttrInt("antialias", 0) != 0,
	}
	if legacy {
		m.coordMode, m.nearestMode = "asymmetric", "simple"
	}
	switch m.interp {
	case "nearest", "linear", "cubic":
	case "bilinear", "trilinear":
		m.interp = "linear"
	case "bicubic":
		m.interp = "cubic"
	default:
		return nil, false
	}
	switch m.coordMode {
	case "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize":
	default:
		return nil, false
	}
	switch m.nearestMode {
	case "round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple":
	default:
		return nil, false
	}
	return m, true
}

// sourceCoord maps output index x to a coordinate on the input axis
// (false: outside the crop region of tf_crop_and_resize).
func (m *resizeSpec) sourceCoord(a *resizeAxisPlan, x int) (float64, bool) {
	fx, in := float64(x), float64(a.in)
	outWidth := a.scale * in
	switch m.coordMode {
	case "align_corners":
		if outWidth == 1 {
			return 0, true
		}
		return fx * (in - 1) / (outWidth - 1), true
	case "asymmetric":
		return fx / a.scale, true
	case "tf_crop_and_resize":
		var v float64
		if a.out > 1 {
			v = a.roiStart*(in-1) + fx*(a.roiEnd-a.roiStart)*(in-1)/(float64(a.out)-1)
		} else {
			v = 0.5 * (a.roiStart + a.roiEnd) * (in - 1)
		}
		return v, v >= 0 && v <= in-1
	case "pytorch_half_pixel":
		if a.out <= 1 {
			return 0, true
		}
		return (fx+0.5)/a.scale - 0.5, true
	case "half_pixel_symmetric":
		adjust := float64(a.out) / outWidth
		return in/2*(1-adjust) + (fx+0.5)/a.scale - 0.5, true
	}
	return (fx+0.5)/a.scale - 0.5, true // half_pixel
}

// nearestIndex rounds a source coordinate as nearest_mode says.
func (m *resizeSpec) nearestIndex(x, scale float64) int {
	f := math.Floor(x)
	frac := x - f
	switch m.nearestMode {
	case "round_prefer_ceil":
		if frac >= 0.5 {
			f++
		}
	case "floor":
	case "ceil":
		f = math.Ceil(x)
	case "simple":
		if scale < 1 {
			f = math.Ceil(x)
		}
	default: // round_prefer_floor
		if frac > 0.5 {
			f++
		}
	}
	return int(f)
}

// keysCubic is Keys' cubic convolution kernel at distance x >= 0.
func keysCubic(x, a float64) float64 {
	switch {
	case x <= 1:
		return ((a+2)*x-(a+3))*x*x + 1
	case x < 2:
		return ((a*x-5*a)*x+8*a)*x - 4*a
	}
	return 0
}

// coeffs are the weights of taps floor(x)+first, ... for a coordinate of
// fractional part t.
func (m *resizeSpec) coeffs(t, scale float64) (int, []float64) {
	if m.antialias && scale < 1 {
		support := 1.0
		if m.interp == "cubic" {
			support = 2
		}
		start := int(math.Floor(-support/scale)) + 1
		w := make([]float64, 2-2*start)
		var sum float64
		for i := range w {
			d := (float64(start+i) - t) * scale
			if m.interp == "linear" {
				w[i] = math.Max(0, math.Min(1, 1-math.Abs(d)))
			} else {
				w[i] = keysCubic(math.Abs(d), m.cubicA)
			}
			sum += w[i]
		}
		for i := range w {
			w[i] /= sum
		}
		return start, w
	}
	if m.interp == "linear" {
		return 0, []float64{1 - t, t}
	}
	a := m.cubicA
	return -1, []float64{
		((a*(t+1)-5*a)*(t+1)+8*a)*(t+1) - 4*a,
		((a+2)*t-(a+3))*t*t + 1,
		((a+2)*(1-t)-(a+3))*(1-t)*(1-t) + 1,
		((a*(2-t)-5*a)*(2-t)+8*a)*(2-t) - 4*a,
	}
}

// taps computes one axis's taps: taps outside the input clamp to the edge
// (or, with exclude_outside, drop out and the rest renormalise), taps of
// weight zero drop, and neighbouring clamped taps on one index merge.
func (m *resizeSpec) taps(a *resizeAxisPlan) *resizeTaps {
	type tap struct {
		i int
		w float64
	}
	per := make([][]tap, a.out)
	var extrap []bool
	k := 0
	for o := 0; o < a.out; o++ {
		x, inside := m.sourceCoord(a, o)
		if !inside {
			if extrap == nil {
				extrap = make([]bool, a.out)
			}
			extrap[o] = true
			continue
		}
		if m.interp == "nearest" {
			per[o] = []tap{{min(max(m.nearestIndex(x, a.scale), 0), a.in-1), 1}}
			k = max(k, 1)
			continue
		}
		f := math.Floor(x)
		first, w := m.coeffs(x-f, a.scale)
		base := int(f) + first
		if m.excludeOutside {
			var sum float64
			for j := range w {
				if i := base + j; i < 0 || i >= a.in {
					w[j] = 0
				}
				sum += w[j]
			}
			if sum != 0 {
				for j := range w {
					w[j] /= sum
				}
			}
		}
		for j, wj := range w {
			if wj == 0 {
				continue
			}
			i := min(max(base+j, 0), a.in-1)
			if n := len(per[o]); n > 0 && per[o][n-1].i == i {
				per[o][n-1].w += wj
				continue
			}
			per[o] = append(per[o], tap{i, wj})
		}
		k = max(k, len(per[o]))
	}
	t := &resizeTaps{axis: a.axis, in: a.in, out: a.out, extrap: extrap, idx: make([][]int64, k), w: make([][]float64, k)}
	t.identity = extrap == nil && a.in == a.out && k == 1
	for j := 0; j < k; j++ {
		t.idx[j], t.w[j] = make([]int64, a.out), make([]float64, a.out)
		for o := range per {
			if j < len(per[o]) {
				t.idx[j][o], t.w[j][o] = int64(per[o][j].i), per[o][j].w
			}
		}
	}
	for o := 0; t.identity && o < a.out; o++ {
		t.identity = len(per[o]) == 1 && per[o][0].i == o && per[o][0].w == 1
	}
	return t
}

// resizePlan resolves the taps of a Resize, Upsample or ResizeGrad node
// over an input of shape, in the order the passes run. Anything not known
// at lowering time, or that the kernel would reject, is ErrUnsupportedOp.
func (l *lowering) resizePlan(shape []int64, roi, scales, sizes string, legacy bool) ([]*resizeTaps, error) {
	n := l.n
	m, ok := readResizeSpec(n, legacy)
	if !ok {
		return nil, l.unsupported("resize mode or coordinate transformation not covered")
	}
	floats := func(name string) ([]float64, bool, error) {
		if name == "" {
			return nil, false, nil
		}
		t := l.constant(name)
		if t == nil {
			return nil, false, l.unsupported("%s is computed at run time", name)
		}
		if t.Size() == 0 {
			return nil, false, nil
		}
		v := make([]float64, t.Size())
		for i := range v {
			v[i] = t.Float(i)
		}
		return v, true, nil
	}
	var scaleVals []float64
	if a := n.Attr("scales"); a != nil && legacy {
		for _, s := range a.Floats {
			scaleVals = append(scaleVals, float64(s))
		}
	} else {
		v, ok, err := floats(scales)
		if err != nil {
			return nil, err
		}
		if ok {
			scaleVals = v
		}
	}
	sizeVals, hasSizes, err := floats(sizes)
	if err != nil {
		return nil, err
	}
	r := len(shape)
	axes := make([]int, r)
	for i := range axes {
		axes[i] = i
	}
	if v := n.AttrInts("axes", nil); v != nil && !legacy {
		axes = axes[:0]
		seen := map[int]bool{}
		for _, a := range v {
			if a < 0 {
				a += int64(r)
			}
			if a < 0 || a >= int64(r) || seen[int(a)] {
				return nil, l.unsupported("axes %v", v)
			}
			seen[int(a)] = true
			axes = append(axes, int(a))
		}
	}
	if (scaleVals != nil) == hasSizes {
		return nil, l.unsupported("exactly one of scales and sizes must be given")
	}
	ras := make([]resizeAxisPlan, len(axes))
	for i, ax := range axes {
		ras[i] = resizeAxisPlan{axis: ax, in: int(shape[ax]), roiStart: 0, roiEnd: 1}
	}
	if m.coordMode == "tf_crop_and_resize" {
		rv, ok, err := floats(roi)
		if err != nil {
			return nil, err
		}
		if !ok || len(rv) != 2*len(axes) {
			return nil, l.unsupported("tf_crop_and_resize needs roi with %d values", 2*len(axes))
		}
		for i := range ras {
			ras[i].roiStart, ras[i].roiEnd = rv[i], rv[i+len(axes)]
		}
	}
	if scaleVals != nil {
		if len(scaleVals) != len(axes) {
			return nil, l.unsupported("scales has %d values for %d axes", len(scaleVals), len(axes))
		}
		for i := range ras {
			a := &ras[i]
			a.scale = scaleVals[i]
			ext := float64(a.in) * a.scale
			if m.coordMode == "tf_crop_and_resize" {
				ext *= a.roiEnd - a.roiStart
			}
			if !(a.scale > 0) || ext > MaxElements || ext < 0 {
				return nil, l.unsupported("scale %g", a.scale)
			}
			a.out = int(math.Floor(ext))
		}
	} else {
		if len(sizeVals) != len(axes) {
			return nil, l.unsupported("sizes has %d values for %d axes", len(sizeVals), len(axes))
		}
		switch policy := n.AttrString("keep_aspect_ratio_policy", "stretch"); policy {
		case "stretch":
			for i := range ras {
				ras[i].out = int(sizeVals[i])
				if ras[i].in > 0 {
					ras[i].scale = sizeVals[i] / float64(ras[i].in)
				}
			}
		case "not_larger", "not_smaller":
			scale := math.Inf(1)
			if policy == "not_smaller" {
				scale = math.Inf(-1)
			}
			for i := range ras {
				s := float64(int64(sizeVals[i])) / float64(ras[i].in)
				if policy == "not_larger" {
					scale = math.Min(scale, s)
				} else {
					scale = math.Max(scale, s)
				}
			}
			for i := range ras {
				ras[i].scale = scale
				ras[i].out = int(math.Floor(scale*float64(ras[i].in) + 0.5))
			}
		default:
			return nil, l.unsupported("keep_aspect_ratio_policy %q", policy)
		}
	}
	var passes []*resizeTaps
	for i := range ras {
		a := &ras[i]
		if a.in <= 0 || a.out <= 0 || !(a.scale > 0) {
			return nil, l.unsupported("an empty axis or output")
		}
		if t := m.taps(a); !t.identity {
			passes = append(passes, t)
		}
	}
	// The kernel's order: shrinking axes first.
	sort.SliceStable(passes, func(i, j int) bool {
		return float64(passes[i].out)/float64(passes[i].in) < float64(passes[j].out)/float64(passes[j].in)
	})
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
