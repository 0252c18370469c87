package graph

import (
	"math"
	"sort"
)

// Resize's arithmetic, shared by its lowering (lowerings_resize.go) and
// by backends' Resize and ResizeGrad kernels, so that the two agree to
// the last bit: how an output index maps to a source coordinate, which
// input indices it combines (the taps) and with which weights.
//
// Resize is separable: along each resized axis, output index o is a
// weighted sum of a few input indices. ResolveResizeAxes turns a node's
// attributes and its scales / sizes / roi into one ResizeAxis per resized
// axis, ResizeMode.Taps lists an axis's taps, and ResizeMode.Passes
// orders the axes as the passes run (shrinking axes first, so that
// intermediates stay small), leaving out the axes that are copied
// unchanged.

// ResizeMode is how a Resize (or Upsample) node turns a source coordinate
// into a value: its attributes, checked.
type ResizeMode struct {
	Interp         string // nearest, linear or cubic
	CoordMode      string // coordinate_transformation_mode
	NearestMode    string // round_prefer_floor, round_prefer_ceil, floor, ceil, or simple (before opset 11)
	CubicA         float64
	ExcludeOutside bool
	Extrapolation  float64
	Antialias      bool
}

// ReadResizeMode reads a Resize or Upsample node's attributes; legacy
// selects the rules of opsets 7-10 (asymmetric coordinates, nearest
// rounding down when upsampling and up when downsampling).
func ReadResizeMode(n *Node, legacy bool) (*ResizeMode, error) {
	m := &ResizeMode{
		Interp:         n.AttrString("mode", "nearest"),
		CoordMode:      n.AttrString("coordinate_transformation_mode", "half_pixel"),
		NearestMode:    n.AttrString("nearest_mode", "round_prefer_floor"),
		CubicA:         float64(n.AttrFloat("cubic_coeff_a", -0.75)),
		ExcludeOutside: n.AttrInt("exclude_outside", 0) != 0,
		Extrapolation:  float64(n.AttrFloat("extrapolation_value", 0)),
		Antialias:      n.AttrInt("antialias", 0) != 0,
	}
	if legacy {
		m.CoordMode, m.NearestMode = "asymmetric", "simple"
	}
	switch m.Interp {
	case "nearest", "linear", "cubic":
	case "bilinear", "trilinear":
		m.Interp = "linear"
	case "bicubic":
		m.Interp = "cubic"
	default:
		return nil, n.Errorf("mode %q is not nearest, linear or cubic", m.Interp)
	}
	switch m.CoordMode {
	case "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize":
	default:
		return nil, n.Errorf("coordinate_transformation_mode %q is not supported", m.CoordMode)
	}
	switch m.NearestMode {
	case "round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple":
	default:
		return nil, n.Errorf("nearest_mode %q is not supported", m.NearestMode)
	}
	return m, nil
}

// ResizeAxis is one resized axis: its input and output lengths, the scale
// the coordinate transformation uses and the tf_crop_and_resize region.
type ResizeAxis struct {
	Axis, In, Out    int
	Scale            float64
	RoiStart, RoiEnd float64
}

// ResolveResizeAxes resolves the resized axes of a Resize or Upsample node
// over an input of shape, from scales (nil when sizes is given), sizes (nil
// when scales is given), roi (tf_crop_and_resize; nil otherwise) and, when
// useAxes, the opset-18 axes and keep_aspect_ratio_policy attributes.
func ResolveResizeAxes(n *Node, shape []int, m *ResizeMode, roi, scales []float64, sizes []int64, useAxes bool) ([]ResizeAxis, error) {
	r := len(shape)
	axes := make([]int, r)
	for i := range axes {
		axes[i] = i
	}
	if v := n.AttrInts("axes", nil); v != nil && useAxes {
		axes = axes[:0]
		seen := map[int]bool{}
		for _, a := range v {
			ax := int(a)
			if ax < -r || ax >= r {
				return nil, n.Errorf("axis %d is out of range for rank %d", ax, r)
			}
			if ax < 0 {
				ax += r
			}
			if seen[ax] {
				return nil, n.Errorf("axes %v repeat axis %d", v, ax)
			}
			seen[ax] = true
			axes = append(axes, ax)
		}
	}
	switch {
	case scales != nil && sizes != nil:
		return nil, n.Errorf("only one of scales and sizes may be given")
	case scales != nil:
		if len(scales) != len(axes) {
			return nil, n.Errorf("scales has %d values, want %d", len(scales), len(axes))
		}
		for _, v := range scales {
			if !(v > 0) {
				return nil, n.Errorf("scales %v must be positive", scales)
			}
		}
	case sizes != nil:
		if len(sizes) != len(axes) {
			return nil, n.Errorf("sizes has %d values, want %d", len(sizes), len(axes))
		}
		for _, s := range sizes {
			if s < 0 || s > MaxElements {
				return nil, n.Errorf("sizes %v must be between 0 and %d", sizes, int64(MaxElements))
			}
		}
	default:
		return nil, n.Errorf("one of scales and sizes is required")
	}
	ras := make([]ResizeAxis, len(axes))
	for i, ax := range axes {
		ras[i] = ResizeAxis{Axis: ax, In: shape[ax], RoiStart: 0, RoiEnd: 1}
	}
	if m.CoordMode == "tf_crop_and_resize" {
		if len(roi) != 2*len(axes) {
			return nil, n.Errorf("tf_crop_and_resize needs roi with %d values", 2*len(axes))
		}
		for i := range ras {
			ras[i].RoiStart, ras[i].RoiEnd = roi[i], roi[i+len(axes)]
		}
	}
	if scales != nil {
		for i := range ras {
			a := &ras[i]
			a.Scale = scales[i]
			ext := float64(a.In) * a.Scale
			if m.CoordMode == "tf_crop_and_resize" {
				ext *= a.RoiEnd - a.RoiStart
			}
			if ext > MaxElements || ext < 0 {
				return nil, n.Errorf("scale %g makes axis %d too large", a.Scale, a.Axis)
			}
			a.Out = int(math.Floor(ext))
		}
	} else {
		switch policy := n.AttrString("keep_aspect_ratio_policy", "stretch"); policy {
		case "stretch":
			for i := range ras {
				ras[i].Out = int(sizes[i])
				if ras[i].In > 0 {
					ras[i].Scale = float64(sizes[i]) / float64(ras[i].In)
				}
			}
		case "not_larger", "not_smaller":
			scale := math.Inf(1)
			if policy == "not_smaller" {
				scale = math.Inf(-1)
			}
			for i := range ras {
				s := float64(sizes[i]) / float64(ras[i].In)
				if policy == "not_larger" {
					scale = math.Min(scale, s)
				} else {
					scale = math.Max(scale, s)
				}
			}
			for i := range ras {
				ras[i].Scale = scale
				ras[i].Out = int(math.Floor(scale*float64(ras[i].In) + 0.5))
			}
		default:
			return nil, n.Errorf("keep_aspect_ratio_policy %q is not stretch, not_larger or not_smaller", policy)
		}
	}
	for i := range ras {
		if ras[i].Out > 0 && ras[i].In == 0 {
			return nil, n.Errorf("cannot resize the empty axis %d to %d", ras[i].Axis, ras[i].Out)
		}
		if ras[i].Out > 0 && !(ras[i].Scale > 0) {
			return nil, n.Errorf("axis %d: scale %g must be positive", ras[i].Axis, ras[i].Scale)
		}
	}
	return ras, nil
}

// SourceCoord maps output index x of axis a to a coordinate on the input
// axis, as coordinate_transformation_mode says; false: outside the crop
// region of tf_crop_and_resize (the output takes the extrapolation value).
func (m *ResizeMode) SourceCoord(a *ResizeAxis, x int) (float64, bool) {
	fx, in := float64(x), float64(a.In)
	outWidth := a.Scale * in // possibly fractional
	switch m.CoordMode {
	case "align_corners":
		if outWidth == 1 {
			return 0, true
		}
		return fx * (in - 1) / (outWidth - 1), true
	case "asymmetric":
		return fx / a.Scale, true
	case "tf_crop_and_resize":
		var v float64
		if a.Out > 1 {
			v = a.RoiStart*(in-1) + fx*(a.RoiEnd-a.RoiStart)*(in-1)/(float64(a.Out)-1)
		} else {
			v = 0.5 * (a.RoiStart + a.RoiEnd) * (in - 1)
		}
		return v, v >= 0 && v <= in-1
	case "pytorch_half_pixel":
		if a.Out <= 1 {
			return 0, true
		}
		return (fx+0.5)/a.Scale - 0.5, true
	case "half_pixel_symmetric":
		adjust := float64(a.Out) / outWidth
		return in/2*(1-adjust) + (fx+0.5)/a.Scale - 0.5, true
	}
	return (fx+0.5)/a.Scale - 0.5, true // half_pixel
}

// NearestIndex rounds a source coordinate as nearest_mode says.
func (m *ResizeMode) NearestIndex(x, scale float64) int {
	f := math.Floor(x)
	frac := x - f
	switch m.NearestMode {
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

// KeysCubic is Keys' cubic convolution kernel at distance x >= 0.
func KeysCubic(x, a float64) float64 {
	switch {
	case x <= 1:
		return ((a+2)*x-(a+3))*x*x + 1
	case x < 2:
		return ((a*x-5*a)*x+8*a)*x - 4*a
	}
	return 0
}

// Coeffs returns the weights of the taps floor(x)+first, ... for a
// coordinate whose fractional part is t (linear and cubic; antialias
// widens the support when downsampling and normalises the weights).
func (m *ResizeMode) Coeffs(t, scale float64) (first int, w []float64) {
	if m.Antialias && scale < 1 {
		support := 1.0
		if m.Interp == "cubic" {
			support = 2
		}
		start := int(math.Floor(-support/scale)) + 1
		w = make([]float64, 2-2*start)
		var sum float64
		for i := range w {
			d := (float64(start+i) - t) * scale
			if m.Interp == "linear" {
				w[i] = math.Max(0, math.Min(1, 1-math.Abs(d)))
			} else {
				w[i] = KeysCubic(math.Abs(d), m.CubicA)
			}
			sum += w[i]
		}
		for i := range w {
			w[i] /= sum
		}
		return start, w
	}
	if m.Interp == "linear" {
		return 0, []float64{1 - t, t}
	}
	a := m.CubicA
	return -1, []float64{
		((a*(t+1)-5*a)*(t+1)+8*a)*(t+1) - 4*a,
		((a+2)*t-(a+3))*t*t + 1,
		((a+2)*(1-t)-(a+3))*(1-t)*(1-t) + 1,
		((a*(2-t)-5*a)*(2-t)+8*a)*(2-t) - 4*a,
	}
}

// ResizeTaps are one resized axis's taps: output index o combines the
// input indices Idx[Start[o]:Start[o+1]] with the weights W at the same
// positions, summed in that order; Extrap[o] (when Extrap is not nil)
// says that o takes the extrapolation value instead.
type ResizeTaps struct {
	Axis, In, Out int
	Start, Idx    []int
	W             []float64
	Extrap        []bool
}

// Taps lists the taps of every output index of axis a. Taps outside the
// input clamp to the edge, or under exclude_outside drop out and the rest
// renormalise; taps of zero weight drop; neighbouring clamped taps that
// land on one index merge.
func (m *ResizeMode) Taps(a *ResizeAxis) *ResizeTaps {
	t := &ResizeTaps{Axis: a.Axis, In: a.In, Out: a.Out, Start: make([]int, a.Out+1)}
	for o := 0; o < a.Out; o++ {
		t.Start[o] = len(t.Idx)
		x, inside := m.SourceCoord(a, o)
		if !inside {
			if t.Extrap == nil {
				t.Extrap = make([]bool, a.Out)
			}
			t.Extrap[o] = true
			continue
		}
		if m.Interp == "nearest" {
			t.Idx = append(t.Idx, min(max(m.NearestIndex(x, a.Scale), 0), a.In-1))
			t.W = append(t.W, 1)
			continue
		}
		f := math.Floor(x)
		first, w := m.Coeffs(x-f, a.Scale)
		base := int(f) + first
		if m.ExcludeOutside {
			var sum float64
			for k := range w {
				if i := base + k; i < 0 || i >= a.In {
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
			i := min(max(base+k, 0), a.In-1)
			if n := len(t.Idx); n > t.Start[o] && t.Idx[n-1] == i {
				t.W[n-1] += wk
				continue
			}
			t.Idx = append(t.Idx, i)
			t.W = append(t.W, wk)
		}
	}
	t.Start[a.Out] = len(t.Idx)
	return t
}

// Identity reports whether the taps copy the axis unchanged.
func (t *ResizeTaps) Identity() bool {
	if t.Extrap != nil || t.In != t.Out || len(t.Idx) != t.In {
		return false
	}
	for o := 0; o < t.In; o++ {
		if t.Start[o] != o || t.Idx[o] != o || t.W[o] != 1 {
			return false
		}
	}
	return true
}

// MaxTaps is the largest number of taps of one output index.
func (t *ResizeTaps) MaxTaps() int {
	k := 0
	for o := 0; o < t.Out; o++ {
		k = max(k, t.Start[o+1]-t.Start[o])
	}
	return k
}

// Passes returns the taps of each axis of ras that is not copied
// unchanged, in the order the passes run: shrinking axes first (stable:
// ties keep the order of ras). Empty axes and outputs have no pass.
func (m *ResizeMode) Passes(ras []ResizeAxis) []*ResizeTaps {
	var passes []*ResizeTaps
	for i := range ras {
		a := &ras[i]
		if a.Out == 0 || a.In == 0 {
			continue
		}
		if t := m.Taps(a); !t.Identity() {
			passes = append(passes, t)
		}
	}
	sort.SliceStable(passes, func(i, j int) bool {
		return float64(passes[i].Out)/float64(passes[i].In) < float64(passes[j].Out)/float64(passes[j].In)
	})
	return passes
}

// ResizeFloats returns a roi or scales input's values; nil for an absent
// (nil) or empty input, which Resize treats alike.
func ResizeFloats(t *Tensor) []float64 {
	if t == nil || t.Size() == 0 {
		return nil
	}
	v := make([]float64, t.Size())
	for i := range v {
		v[i] = t.Float(i)
	}
	return v
}

// ResizeSizes returns a sizes input's values; nil for an absent or empty
// input.
func ResizeSizes(t *Tensor) []int64 {
	if t == nil || t.Size() == 0 {
		return nil
	}
	v := make([]int64, t.Size())
	for i := range v {
		v[i] = t.Int(i)
	}
	return v
}
