package nn

import (
	"math"
	"sort"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// resizeMode is how Resize turns a source coordinate into a value.
type resizeMode struct {
	interp         string // nearest, linear, cubic
	coordMode      string // coordinate_transformation_mode
	nearestMode    string // round_prefer_floor, round_prefer_ceil, floor, ceil, or simple (opset < 11)
	cubicA         float64
	excludeOutside bool
	extrapolation  float64
	antialias      bool
}

// resizeAxis is one resized axis: sizes, the scale the coordinate
// transformation uses and the tf_crop_and_resize region.
type resizeAxis struct {
	axis, in, out    int
	scale            float64
	roiStart, roiEnd float64
}

// axisTaps lists, per output index along one axis, the input indices and
// weights it combines (CSR layout), or that it takes the extrapolation value.
type axisTaps struct {
	start  []int
	idx    []int
	w      []float64
	extrap []bool
}

// sourceCoord maps output index x to a coordinate on the input axis, as
// coordinate_transformation_mode says. outWidth is the possibly fractional
// output length scale*in.
func (m *resizeMode) sourceCoord(a *resizeAxis, x int) (float64, bool) {
	fx := float64(x)
	in := float64(a.in)
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
		adjustment := float64(a.out) / outWidth
		offset := in / 2 * (1 - adjustment)
		return offset + (fx+0.5)/a.scale - 0.5, true
	}
	return (fx+0.5)/a.scale - 0.5, true // half_pixel
}

// nearestIndex rounds a source coordinate as nearest_mode says.
func (m *resizeMode) nearestIndex(x, scale float64) int {
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

// resizeCoeffs returns the weights of the taps floor(x)+first, ... for a
// coordinate whose fractional part is t.
func (m *resizeMode) resizeCoeffs(t, scale float64) (first int, w []float64) {
	if m.antialias && scale < 1 {
		if m.interp == "linear" {
			start := int(math.Floor(-1/scale)) + 1
			n := 2 - 2*start
			w = make([]float64, n)
			var sum float64
			for i := range w {
				v := 1 - math.Abs((float64(start+i)-t)*scale)
				w[i] = math.Max(0, math.Min(1, v))
				sum += w[i]
			}
			for i := range w {
				w[i] /= sum
			}
			return start, w
		}
		start := int(math.Floor(-2/scale)) + 1
		n := 2 - 2*start
		w = make([]float64, n)
		var sum float64
		for i := range w {
			w[i] = cubicKernel(math.Abs((float64(start+i)-t)*scale), m.cubicA)
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

// cubicKernel is Keys' cubic convolution kernel at distance x >= 0.
func cubicKernel(x, a float64) float64 {
	switch {
	case x <= 1:
		return ((a+2)*x-(a+3))*x*x + 1
	case x < 2:
		return ((a*x-5*a)*x+8*a)*x - 4*a
	}
	return 0
}

// taps computes the taps of every output index of one axis. Taps outside
// the input clamp to the edge, or are dropped (with the rest renormalised)
// under exclude_outside; taps of zero weight are dropped.
func (m *resizeMode) taps(a *resizeAxis) *axisTaps {
	t := &axisTaps{start: make([]int, a.out+1)}
	for o := 0; o < a.out; o++ {
		t.start[o] = len(t.idx)
		x, inside := m.sourceCoord(a, o)
		if !inside {
			if t.extrap == nil {
				t.extrap = make([]bool, a.out)
			}
			t.extrap[o] = true
			continue
		}
		if m.interp == "nearest" {
			i := min(max(m.nearestIndex(x, a.scale), 0), a.in-1)
			t.idx = append(t.idx, i)
			t.w = append(t.w, 1)
			continue
		}
		f := math.Floor(x)
		first, w := m.resizeCoeffs(x-f, a.scale)
		base := int(f) + first
		if m.excludeOutside {
			var sum float64
			for k := range w {
				if i := base + k; i < 0 || i >= a.in {
					w[k] = 0
				}
				sum += w[k]
			}
			if sum != 0 {
				for k := range w {
					w[k] /= sum
				}
			}
		}
		for k, wk := range w {
			if wk == 0 {
				continue
			}
			i := min(max(base+k, 0), a.in-1)
			// Merge clamped taps that land on the same index.
			if n := len(t.idx); n > t.start[o] && t.idx[n-1] == i {
				t.w[n-1] += wk
				continue
			}
			t.idx = append(t.idx, i)
			t.w = append(t.w, wk)
		}
	}
	t.start[a.out] = len(t.idx)
	return t
}

// identity reports whether the taps copy the axis unchanged.
func (t *axisTaps) identity(in int) bool {
	if t.extrap != nil || len(t.start)-1 != in || len(t.idx) != in {
		return false
	}
	for o := 0; o < in; o++ {
		if t.start[o] != o || t.idx[o] != o || t.w[o] != 1 {
			return false
		}
	}
	return true
}

// resizeKernel implements Resize for every opset: the scales / sizes / roi
// input layouts of opsets 10, 11 and 13, and the axes,
// keep_aspect_ratio_policy and antialias attributes of opset 18.
func resizeKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	var roi, scales, sizes *graph.Tensor
	legacy := ctx.Opset > 0 && ctx.Opset < 11
	if legacy {
		if err := kern.Need(n, in, 2); err != nil {
			return nil, err
		}
		scales = in[1]
	} else {
		roi, scales, sizes = kern.Opt(in, 1), kern.Opt(in, 2), kern.Opt(in, 3)
	}
	m, err := readResizeMode(n, legacy)
	if err != nil {
		return nil, err
	}
	if scales != nil && scales.Size() == 0 {
		scales = nil
	}
	var scaleVals []float64
	if scales != nil {
		scaleVals = make([]float64, scales.Size())
		for i := range scaleVals {
			scaleVals[i] = scales.Float(i)
		}
	}
	ras, err := resolveResizeAxes(n, x.Shape, roi, scaleVals, sizes, m, true)
	if err != nil {
		return nil, err
	}
	return resizeRun(n, x, m, ras)
}

// resolveResizeAxes resolves the resized axes of a Resize or Upsample node
// over an input of shape: from scaleVals (nil when sizes is given), sizes,
// roi (tf_crop_and_resize), and, when useAxes, the opset-18 axes and
// keep_aspect_ratio_policy attributes.
func resolveResizeAxes(n *graph.Node, shape []int, roi *graph.Tensor, scaleVals []float64, sizes *graph.Tensor, m *resizeMode, useAxes bool) ([]resizeAxis, error) {
	r := len(shape)
	axes := make([]int, r)
	for i := range axes {
		axes[i] = i
	}
	if v := n.AttrInts("axes", nil); v != nil && useAxes {
		axes = axes[:0]
		seen := map[int]bool{}
		for _, a := range v {
			ax, err := kern.NormAxis(n, int(a), r)
			if err != nil {
				return nil, err
			}
			if seen[ax] {
				return nil, n.Errorf("axes %v repeat axis %d", v, ax)
			}
			seen[ax] = true
			axes = append(axes, ax)
		}
	}
	if sizes != nil && sizes.Size() == 0 {
		sizes = nil
	}
	if scaleVals != nil && sizes != nil {
		return nil, n.Errorf("only one of scales and sizes may be given")
	}
	switch {
	case scaleVals != nil:
		if len(scaleVals) != len(axes) {
			return nil, n.Errorf("scales has %d values, want %d", len(scaleVals), len(axes))
		}
		for _, v := range scaleVals {
			if !(v > 0) {
				return nil, n.Errorf("scales %v must be positive", scaleVals)
			}
		}
	case sizes != nil:
		if sizes.Size() != len(axes) {
			return nil, n.Errorf("sizes has %d values, want %d", sizes.Size(), len(axes))
		}
	default:
		return nil, n.Errorf("one of scales and sizes is required")
	}
	ras := make([]resizeAxis, len(axes))
	for i, ax := range axes {
		ras[i] = resizeAxis{axis: ax, in: shape[ax], roiStart: 0, roiEnd: 1}
	}
	if m.coordMode == "tf_crop_and_resize" {
		if roi == nil || roi.Size() != 2*len(axes) {
			return nil, n.Errorf("tf_crop_and_resize needs roi with %d values", 2*len(axes))
		}
		for i := range ras {
			ras[i].roiStart, ras[i].roiEnd = roi.Float(i), roi.Float(i+len(axes))
		}
	}
	if scaleVals != nil {
		for i := range ras {
			a := &ras[i]
			a.scale = scaleVals[i]
			ext := float64(a.in) * a.scale
			if m.coordMode == "tf_crop_and_resize" {
				ext *= a.roiEnd - a.roiStart
			}
			if ext > graph.MaxElements || ext < 0 {
				return nil, n.Errorf("scale %g makes axis %d too large", a.scale, a.axis)
			}
			a.out = int(math.Floor(ext))
		}
	} else {
		want := sizes.Ints()
		for _, s := range want {
			if s < 0 {
				return nil, n.Errorf("sizes %v must not be negative", want)
			}
		}
		switch policy := n.AttrString("keep_aspect_ratio_policy", "stretch"); policy {
		case "stretch":
			for i := range ras {
				ras[i].out = want[i]
				if ras[i].in > 0 {
					ras[i].scale = float64(want[i]) / float64(ras[i].in)
				}
			}
		case "not_larger", "not_smaller":
			scale := math.Inf(1)
			if policy == "not_smaller" {
				scale = math.Inf(-1)
			}
			for i := range ras {
				s := float64(want[i]) / float64(ras[i].in)
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
			return nil, n.Errorf("keep_aspect_ratio_policy %q is not stretch, not_larger or not_smaller", policy)
		}
	}
	for i := range ras {
		if ras[i].out > 0 && ras[i].in == 0 {
			return nil, n.Errorf("cannot resize the empty axis %d to %d", ras[i].axis, ras[i].out)
		}
		if ras[i].out > 0 && !(ras[i].scale > 0) {
			return nil, n.Errorf("axis %d: scale %g must be positive", ras[i].axis, ras[i].scale)
		}
	}
	return ras, nil
}

// ResizeTaps is one resized axis of a Resize or Upsample node: for each
// output index o, the input indices Idx[Start[o]:Start[o+1]] and weights W
// the forward pass combines (an extrapolated output has none).
type ResizeTaps struct {
	Axis, In, Out int
	Start, Idx    []int
	W             []float64
}

// ResizePlan resolves a Resize node (legacy: before opset 11, or Upsample,
// whose scales may be an attribute) over an input of shape, exactly as the
// forward kernels do, for the backward pass.
func ResizePlan(n *graph.Node, shape []int, roi, scales, sizes *graph.Tensor, legacy bool) ([]ResizeTaps, error) {
	m, err := readResizeMode(n, legacy)
	if err != nil {
		return nil, err
	}
	var scaleVals []float64
	if a := n.Attr("scales"); a != nil && legacy {
		for _, s := range a.Floats {
			scaleVals = append(scaleVals, float64(s))
		}
	} else if scales != nil && scales.Size() > 0 {
		for i := 0; i < scales.Size(); i++ {
			scaleVals = append(scaleVals, scales.Float(i))
		}
	}
	ras, err := resolveResizeAxes(n, shape, roi, scaleVals, sizes, m, !legacy)
	if err != nil {
		return nil, err
	}
	out := make([]ResizeTaps, len(ras))
	for i := range ras {
		a := &ras[i]
		out[i] = ResizeTaps{Axis: a.axis, In: a.in, Out: a.out}
		if a.out == 0 || a.in == 0 {
			continue
		}
		t := m.taps(a)
		if t.identity(a.in) {
			continue
		}
		out[i].Start, out[i].Idx, out[i].W = t.start, t.idx, t.w
	}
	return out, nil
}

// readResizeMode reads Resize's (or Upsample's) attributes; legacy selects
// the opset 7-10 behaviour (asymmetric coordinates, nearest rounding down
// when upsampling and up when downsampling).
func readResizeMode(n *graph.Node, legacy bool) (*resizeMode, error) {
	m := &resizeMode{
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
		return nil, n.Errorf("mode %q is not nearest, linear or cubic", m.interp)
	}
	switch m.coordMode {
	case "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize":
	default:
		return nil, n.Errorf("coordinate_transformation_mode %q is not supported", m.coordMode)
	}
	switch m.nearestMode {
	case "round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple":
	default:
		return nil, n.Errorf("nearest_mode %q is not supported", m.nearestMode)
	}
	return m, nil
}

// resizeRun applies the per-axis taps one axis at a time, shrinking axes
// first so the intermediates stay small.
func resizeRun(n *graph.Node, x *graph.Tensor, m *resizeMode, ras []resizeAxis) ([]*graph.Tensor, error) {
	shape := append([]int{}, x.Shape...)
	for _, a := range ras {
		shape[a.axis] = a.out
	}
	if _, err := graph.NumElements(shape); err != nil {
		return nil, n.Errorf("output of shape %v: %w", shape, err)
	}
	type pass struct {
		axis int
		taps *axisTaps
	}
	var passes []pass
	for i := range ras {
		a := &ras[i]
		if a.out == 0 || a.in == 0 {
			continue
		}
		t := m.taps(a)
		if t.identity(a.in) {
			continue
		}
		passes = append(passes, pass{a.axis, t})
	}
	sort.SliceStable(passes, func(i, j int) bool {
		ri := float64(shape[passes[i].axis]) / float64(x.Shape[passes[i].axis])
		rj := float64(shape[passes[j].axis]) / float64(x.Shape[passes[j].axis])
		return ri < rj
	})
	if prod(shape) == 0 {
		y, err := kern.New(n, x.DType, shape)
		if err != nil {
			return nil, err
		}
		return []*graph.Tensor{y}, nil
	}
	cur := x
	curShape := append([]int{}, x.Shape...)
	for _, p := range passes {
		next := append([]int{}, curShape...)
		next[p.axis] = len(p.taps.start) - 1
		outer, inner := prod(curShape[:p.axis]), prod(curShape[p.axis+1:])
		y, err := resizeAxisPass(n, cur, next, outer, curShape[p.axis], inner, p.taps, m)
		if err != nil {
			return nil, err
		}
		cur, curShape = y, next
	}
	if cur == x {
		cur = x.Clone()
	}
	return []*graph.Tensor{cur}, nil
}

// resizeAxisPass resamples one axis of t (viewed as outer × in × inner) into
// a tensor of shape next. Floats interpolate in their own type; integers
// interpolate in float64 and truncate toward zero; nearest on other types
// copies elements.
func resizeAxisPass(n *graph.Node, t *graph.Tensor, next []int, outer, in, inner int, taps *axisTaps, m *resizeMode) (*graph.Tensor, error) {
	y, err := kern.New(n, t.DType, next)
	if err != nil {
		return nil, err
	}
	gather := m.interp == "nearest" && taps.extrap == nil
	switch src := t.Data.(type) {
	case []float32:
		resizeLerp(y.Data.([]float32), src, outer, in, inner, taps, float32(m.extrapolation))
	case []float64:
		resizeLerp(y.Data.([]float64), src, outer, in, inner, taps, m.extrapolation)
	case []bool:
		if !gather {
			return nil, n.Errorf("mode %s with extrapolation needs a numeric input, have %v", m.interp, t.DType)
		}
		resizeGather(y.Data.([]bool), src, outer, in, inner, taps)
	case []string:
		if !gather {
			return nil, n.Errorf("mode %s with extrapolation needs a numeric input, have %v", m.interp, t.DType)
		}
		resizeGather(y.Data.([]string), src, outer, in, inner, taps)
	default:
		if gather {
			switch s := src.(type) {
			case []int8:
				resizeGather(y.Data.([]int8), s, outer, in, inner, taps)
			case []int16:
				resizeGather(y.Data.([]int16), s, outer, in, inner, taps)
			case []int32:
				resizeGather(y.Data.([]int32), s, outer, in, inner, taps)
			case []int64:
				resizeGather(y.Data.([]int64), s, outer, in, inner, taps)
			case []uint8:
				resizeGather(y.Data.([]uint8), s, outer, in, inner, taps)
			case []uint16:
				resizeGather(y.Data.([]uint16), s, outer, in, inner, taps)
			case []uint32:
				resizeGather(y.Data.([]uint32), s, outer, in, inner, taps)
			case []uint64:
				resizeGather(y.Data.([]uint64), s, outer, in, inner, taps)
			default:
				return nil, n.Errorf("dtype %v is not supported", t.DType)
			}
			return y, nil
		}
		if !t.DType.IsInt() {
			return nil, n.Errorf("dtype %v is not supported", t.DType)
		}
		f, err := kern.Cast(t, graph.Float64)
		if err != nil {
			return nil, n.Errorf("%v", err)
		}
		fy := make([]float64, y.Size())
		resizeLerp(fy, f.Data.([]float64), outer, in, inner, taps, m.extrapolation)
		for i, v := range fy {
			kern.SetInt(y, i, int64(v))
		}
	}
	return y, nil
}

// resizeLerp computes dst[b, o, :] = Σ w·src[b, idx, :] over the taps of o.
func resizeLerp[F poolFloat](dst, src []F, outer, in, inner int, taps *axisTaps, extrap F) {
	out := len(taps.start) - 1
	workers := nnWorkers(outer, out*inner*2)
	parallelFor(outer, workers, func(_, b int) {
		s := src[b*in*inner : (b+1)*in*inner]
		d := dst[b*out*inner : (b+1)*out*inner]
		for o := 0; o < out; o++ {
			row := d[o*inner : (o+1)*inner]
			if taps.extrap != nil && taps.extrap[o] {
				for j := range row {
					row[j] = extrap
				}
				continue
			}
			ts, te := taps.start[o], taps.start[o+1]
			if ts == te {
				clear(row)
				continue
			}
			w0 := F(taps.w[ts])
			s0 := s[taps.idx[ts]*inner : (taps.idx[ts]+1)*inner]
			s0 = s0[:len(row)]
			for j := range row {
				row[j] = w0 * s0[j]
			}
			for k := ts + 1; k < te; k++ {
				wk := F(taps.w[k])
				sk := s[taps.idx[k]*inner : (taps.idx[k]+1)*inner]
				sk = sk[:len(row)]
				for j := range row {
					row[j] += wk * sk[j]
				}
			}
		}
	})
}

// resizeGather copies dst[b, o, :] = src[b, idx(o), :] (nearest mode).
func resizeGather[T any](dst, src []T, outer, in, inner int, taps *axisTaps) {
	out := len(taps.start) - 1
	for b := 0; b < outer; b++ {
		s := src[b*in*inner : (b+1)*in*inner]
		d := dst[b*out*inner : (b+1)*out*inner]
		if inner == 1 {
			for o := range d {
				d[o] = s[taps.idx[o]]
			}
			continue
		}
		for o := 0; o < out; o++ {
			i := taps.idx[taps.start[o]]
			copy(d[o*inner:(o+1)*inner], s[i*inner:(i+1)*inner])
		}
	}
}

// upsampleKernel implements Upsample: scales from the attribute (opset 7)
// or the second input (opset 9), with Resize-10's coordinate rules.
func upsampleKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	var scales []float64
	if a := n.Attr("scales"); a != nil {
		for _, s := range a.Floats {
			scales = append(scales, float64(s))
		}
	} else if t := kern.Opt(in, 1); t != nil {
		for i := 0; i < t.Size(); i++ {
			scales = append(scales, t.Float(i))
		}
	} else {
		return nil, n.Errorf("scales (attribute or input 1) is required")
	}
	if len(scales) != len(x.Shape) {
		return nil, n.Errorf("scales has %d values, want one per axis of %v", len(scales), x.Shape)
	}
	m, err := readResizeMode(n, true)
	if err != nil {
		return nil, err
	}
	ras, err := resolveResizeAxes(n, x.Shape, nil, scales, nil, m, false)
	if err != nil {
		return nil, err
	}
	return resizeRun(n, x, m, ras)
}
