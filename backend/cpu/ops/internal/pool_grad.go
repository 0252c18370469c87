package internal

import (
	"math"
	"sort"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Backward kernels of the pools and of Resize/Upsample (the rules are in
// graph/grad_conv.go):
//
//	MaxPoolGrad(dy, X[, Indices])  dy goes to the first maximum of each window
//	                               (recomputed from X, or read from Indices)
//	GlobalMaxPoolGrad(dy, X)       dy goes to the first maximum of each plane
//	AveragePoolGrad(dy, shape(X))  dy spreads evenly over each window
//	ResizeGrad(dy, shape(X), roi, scales, sizes)
//	                               dy scatters back with the interpolation weights
//
// Each takes the forward node's attributes and resolves the same windows
// (or interpolation taps) the forward kernel does.

func init() {
	register("MaxPoolGrad", maxPoolGrad)
	register("GlobalMaxPoolGrad", globalMaxPoolGrad)
	register("AveragePoolGrad", averagePoolGrad)
	register("ResizeGrad", resizeGrad)
}

// poolGradPlan lists, per spatial axis and output coordinate, the input
// indices of the window taps that fall inside the input (in tap order) and
// how many taps fall inside the padded extent.
type poolGradPlan struct {
	win      *gradWindow
	inStride []int
	start    [][]int // start[j][o]..start[j][o+1] index idx[j]
	idx      [][]int
	padded   [][]int
}

func newPoolGradPlan(w *gradWindow) *poolGradPlan {
	r := len(w.in)
	p := &poolGradPlan{win: w, inStride: make([]int, r), start: make([][]int, r), idx: make([][]int, r), padded: make([][]int, r)}
	acc := 1
	for j := r - 1; j >= 0; j-- {
		p.inStride[j] = acc
		acc *= w.in[j]
	}
	for j := 0; j < r; j++ {
		p.start[j] = make([]int, w.out[j]+1)
		p.padded[j] = make([]int, w.out[j])
		for o := 0; o < w.out[j]; o++ {
			p.start[j][o] = len(p.idx[j])
			s := o*w.strides[j] - w.padBegin[j]
			for t := 0; t < w.kernel[j]; t++ {
				i := s + t*w.dilations[j]
				if i >= 0 && i < w.in[j] {
					p.idx[j] = append(p.idx[j], i)
				}
				if i >= -w.padBegin[j] && i < w.in[j]+w.padEnd[j] {
					p.padded[j][o]++
				}
			}
		}
		p.start[j][w.out[j]] = len(p.idx[j])
	}
	return p
}

// forWindows calls fn for every output position of one plane, in row-major
// order, with the plane offsets of its window's taps inside the input in
// row-major tap order (the order the forward kernels scan) and the count of
// its taps inside the padded extent. taps is reused between calls.
func (p *poolGradPlan) forWindows(fn func(out int, taps []int, padded int)) {
	w := p.win
	r := len(w.in)
	if w.outSize == 0 {
		return
	}
	o := make([]int, r)
	var taps, tmp []int
	for pos := 0; pos < w.outSize; pos++ {
		taps = append(taps[:0], 0)
		padded := 1
		for j := 0; j < r; j++ {
			list := p.idx[j][p.start[j][o[j]]:p.start[j][o[j]+1]]
			padded *= p.padded[j][o[j]]
			tmp = tmp[:0]
			for _, b := range taps {
				for _, i := range list {
					tmp = append(tmp, b+i*p.inStride[j])
				}
			}
			taps, tmp = tmp, taps
		}
		fn(pos, taps, padded)
		for j := r - 1; j >= 0; j-- {
			o[j]++
			if o[j] < w.out[j] {
				break
			}
			o[j] = 0
		}
	}
}

// poolGradWindow reads a pool's kernel_shape and resolves its window over
// the spatial dims of shape.
func poolGradWindow(n *graph.Node, shape []int) (*gradWindow, error) {
	if len(shape) < 3 {
		return nil, n.Errorf("input X must have rank >= 3 (N, C, spatial...), has shape %v", shape)
	}
	if !n.HasAttr("kernel_shape") {
		return nil, n.Errorf("attribute kernel_shape is required")
	}
	kernel, err := nn.IntsAttr(n, "kernel_shape", len(shape)-2, 1)
	if err != nil {
		return nil, err
	}
	return resolveGradWindow(n, shape[2:], kernel, true)
}

// checkPoolGrad checks dy's dtype and that its shape is (N, C, w.out...).
func checkPoolGrad(n *graph.Node, dy *graph.Tensor, shape []int, w *gradWindow) error {
	if dy.DType != graph.Float32 && dy.DType != graph.Float64 {
		return n.Errorf("dtype %v is not supported (float32, float64)", dy.DType)
	}
	want := append([]int{shape[0], shape[1]}, w.out...)
	if !graph.SameShape(dy.Shape, want) {
		return n.Errorf("gradient has shape %v, the forward output %v", dy.Shape, want)
	}
	return nil
}

// maxPoolGrad implements MaxPoolGrad(dy, X[, Indices]).
func maxPoolGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, x, indices := in[0], in[1], kern.Opt(in, 2)
	w, err := poolGradWindow(n, x.Shape)
	if err != nil {
		return nil, err
	}
	if err := checkPoolGrad(n, dy, x.Shape, w); err != nil {
		return nil, err
	}
	if x.DType != dy.DType {
		return nil, n.Errorf("gradient has dtype %v, the forward input %v", dy.DType, x.DType)
	}
	dx, err := kern.New(n, dy.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	planes := x.Shape[0] * x.Shape[1]
	if indices != nil {
		if !graph.SameShape(indices.Shape, dy.Shape) || indices.DType != graph.Int64 {
			return nil, n.Errorf("indices have %v of shape %v, want int64 of shape %v", indices.DType, indices.Shape, dy.Shape)
		}
		colMajor := n.AttrInt("storage_order", 0) != 0
		switch d := dy.Data.(type) {
		case []float32:
			err = scatterPoolIndices(n, d, dx.Data.([]float32), indices.Int64s(), w, planes, colMajor)
		case []float64:
			err = scatterPoolIndices(n, d, dx.Data.([]float64), indices.Int64s(), w, planes, colMajor)
		}
		if err != nil {
			return nil, err
		}
		return []*graph.Tensor{dx}, nil
	}
	plan := newPoolGradPlan(w)
	switch d := dy.Data.(type) {
	case []float32:
		maxPoolBackward(plan, d, x.Data.([]float32), dx.Data.([]float32), planes)
	case []float64:
		maxPoolBackward(plan, d, x.Data.([]float64), dx.Data.([]float64), planes)
	}
	return []*graph.Tensor{dx}, nil
}

// maxPoolBackward adds each window's gradient to the window's first maximum
// (the first tap in row-major order holding the largest value, as the
// forward kernel and PyTorch pick it).
func maxPoolBackward[T float32 | float64](p *poolGradPlan, dy, x, dx []T, planes int) {
	inSize, outSize := p.win.inSize, p.win.outSize
	workers := gradWorkers(planes, outSize*max(p.win.kernelSize, 1))
	convGradParallel(planes, workers, false, func(_, c int) {
		xp := x[c*inSize : (c+1)*inSize]
		dxp := dx[c*inSize : (c+1)*inSize]
		dyp := dy[c*outSize : (c+1)*outSize]
		p.forWindows(func(out int, taps []int, _ int) {
			best, at := T(math.Inf(-1)), -1
			for _, t := range taps {
				if v := xp[t]; v > best || at < 0 {
					best, at = v, t
				}
			}
			if at >= 0 {
				dxp[at] += dyp[out]
			}
		})
	})
}

// scatterPoolIndices adds dy to dx at MaxPool's Indices output: flat
// indices into X, the within-plane part column-major when colMajor
// (storage_order=1); -1 marks a window with no input tap.
func scatterPoolIndices[T float32 | float64](n *graph.Node, dy, dx []T, idx []int64, w *gradWindow, planes int, colMajor bool) error {
	inSize, outSize := w.inSize, w.outSize
	total := int64(planes * inSize)
	r := len(w.in)
	strides := make([]int, r)
	acc := 1
	for j := r - 1; j >= 0; j-- {
		strides[j] = acc
		acc *= w.in[j]
	}
	for k, v := range idx {
		if v < 0 {
			continue
		}
		if v >= total {
			return n.Errorf("index %d is outside the input's %d elements", v, total)
		}
		at := int(v)
		if colMajor {
			// Decode the column-major offset (axis 0 fastest) and re-encode
			// it row-major (last axis fastest).
			plane, off := at/inSize, at%inSize
			rowMajor := 0
			for j := 0; j < r; j++ {
				rowMajor += (off % w.in[j]) * strides[j]
				off /= w.in[j]
			}
			at = plane*inSize + rowMajor
		}
		if at/inSize != k/outSize {
			return n.Errorf("index %d of output %d points outside its plane", v, k)
		}
		dx[at] += dy[k]
	}
	return nil
}

// globalMaxPoolGrad implements GlobalMaxPoolGrad(dy, X): each plane's
// gradient goes to its first maximum.
func globalMaxPoolGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, x := in[0], in[1]
	if len(x.Shape) < 3 {
		return nil, n.Errorf("input X must have rank >= 3 (N, C, spatial...), has shape %v", x.Shape)
	}
	if dy.DType != graph.Float32 && dy.DType != graph.Float64 {
		return nil, n.Errorf("dtype %v is not supported (float32, float64)", dy.DType)
	}
	if x.DType != dy.DType {
		return nil, n.Errorf("gradient has dtype %v, the forward input %v", dy.DType, x.DType)
	}
	planes := x.Shape[0] * x.Shape[1]
	if dy.Size() != planes || len(dy.Shape) != len(x.Shape) {
		return nil, n.Errorf("gradient has shape %v, want (N, C, 1, ...) for input %v", dy.Shape, x.Shape)
	}
	dx, err := kern.New(n, dy.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	size := product(x.Shape[2:])
	switch d := dy.Data.(type) {
	case []float32:
		globalMaxBackward(d, x.Data.([]float32), dx.Data.([]float32), planes, size)
	case []float64:
		globalMaxBackward(d, x.Data.([]float64), dx.Data.([]float64), planes, size)
	}
	return []*graph.Tensor{dx}, nil
}

func globalMaxBackward[T float32 | float64](dy, x, dx []T, planes, size int) {
	if size == 0 {
		return
	}
	for c := 0; c < planes; c++ {
		xp := x[c*size : (c+1)*size]
		best, at := xp[0], 0
		for i, v := range xp {
			if v > best {
				best, at = v, i
			}
		}
		dx[c*size+at] = dy[c]
	}
}

// averagePoolGrad implements AveragePoolGrad(dy, shape(X)): each window's
// gradient divided by the window's count (taps inside the input, or inside
// the padded input with count_include_pad) goes to every tap inside the
// input.
func averagePoolGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, shapeT := in[0], in[1]
	if !shapeT.DType.IsInt() || len(shapeT.Shape) != 1 {
		return nil, n.Errorf("input 1 must be a 1-D integer shape, has %v of shape %v", shapeT.DType, shapeT.Shape)
	}
	shape := shapeT.Ints()
	w, err := poolGradWindow(n, shape)
	if err != nil {
		return nil, err
	}
	if err := checkPoolGrad(n, dy, shape, w); err != nil {
		return nil, err
	}
	dx, err := kern.New(n, dy.DType, shape)
	if err != nil {
		return nil, err
	}
	plan := newPoolGradPlan(w)
	includePad := n.AttrInt("count_include_pad", 0) != 0
	planes := shape[0] * shape[1]
	switch d := dy.Data.(type) {
	case []float32:
		avgPoolBackward(plan, d, dx.Data.([]float32), planes, includePad)
	case []float64:
		avgPoolBackward(plan, d, dx.Data.([]float64), planes, includePad)
	}
	return []*graph.Tensor{dx}, nil
}

func avgPoolBackward[T float32 | float64](p *poolGradPlan, dy, dx []T, planes int, includePad bool) {
	inSize, outSize := p.win.inSize, p.win.outSize
	workers := gradWorkers(planes, outSize*max(p.win.kernelSize, 1))
	convGradParallel(planes, workers, false, func(_, c int) {
		dxp := dx[c*inSize : (c+1)*inSize]
		dyp := dy[c*outSize : (c+1)*outSize]
		p.forWindows(func(out int, taps []int, padded int) {
			div := len(taps)
			if includePad {
				div = padded
			}
			if div == 0 {
				return
			}
			g := dyp[out] / T(div)
			for _, t := range taps {
				dxp[t] += g
			}
		})
	})
}

// resizeGradMode is how Resize (or Upsample) turned source coordinates into
// values.
type resizeGradMode struct {
	interp         string // nearest, linear, cubic
	coordMode      string
	nearestMode    string
	cubicA         float64
	excludeOutside bool
	antialias      bool
}

// resizeGradAxis is one resized axis.
type resizeGradAxis struct {
	axis, in, out    int
	scale            float64
	roiStart, roiEnd float64
}

// resizeGradTaps lists, per output index of one axis, the input indices and
// weights it combined (CSR layout); an extrapolated output has none.
type resizeGradTaps struct {
	start []int
	idx   []int
	w     []float64
}

func readResizeGradMode(n *graph.Node, legacy bool) (*resizeGradMode, error) {
	m := &resizeGradMode{
		interp:         n.AttrString("mode", "nearest"),
		coordMode:      n.AttrString("coordinate_transformation_mode", "half_pixel"),
		nearestMode:    n.AttrString("nearest_mode", "round_prefer_floor"),
		cubicA:         float64(n.AttrFloat("cubic_coeff_a", -0.75)),
		excludeOutside: n.AttrInt("exclude_outside", 0) != 0,
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

// sourceCoord maps output index x to an input coordinate; false when it
// falls outside the crop (tf_crop_and_resize extrapolates there).
func (m *resizeGradMode) sourceCoord(a *resizeGradAxis, x int) (float64, bool) {
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
	return (fx+0.5)/a.scale - 0.5, true
}

// nearestIndex rounds a source coordinate as nearest_mode says.
func (m *resizeGradMode) nearestIndex(x, scale float64) int {
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
	default:
		if frac > 0.5 {
			f++
		}
	}
	return int(f)
}

// cubicWeight is Keys' cubic convolution kernel at distance x >= 0.
func cubicWeight(x, a float64) float64 {
	switch {
	case x <= 1:
		return ((a+2)*x-(a+3))*x*x + 1
	case x < 2:
		return ((a*x-5*a)*x+8*a)*x - 4*a
	}
	return 0
}

// coeffs returns the weights of the taps floor(x)+first, ... for a
// coordinate with fractional part t.
func (m *resizeGradMode) coeffs(t, scale float64) (first int, w []float64) {
	if m.antialias && scale < 1 {
		support := 1.0
		if m.interp == "cubic" {
			support = 2
		}
		start := int(math.Floor(-support/scale)) + 1
		w = make([]float64, 2-2*start)
		var sum float64
		for i := range w {
			d := (float64(start+i) - t) * scale
			if m.interp == "linear" {
				w[i] = math.Max(0, math.Min(1, 1-math.Abs(d)))
			} else {
				w[i] = cubicWeight(math.Abs(d), m.cubicA)
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
	return -1, []float64{
		cubicWeight(1+t, m.cubicA), cubicWeight(t, m.cubicA),
		cubicWeight(1-t, m.cubicA), cubicWeight(2-t, m.cubicA),
	}
}

// taps computes the taps of every output index of one axis the way the
// forward kernel does: taps outside the input clamp to the edge (or are
// dropped and the rest renormalised under exclude_outside).
func (m *resizeGradMode) taps(a *resizeGradAxis) *resizeGradTaps {
	t := &resizeGradTaps{start: make([]int, a.out+1)}
	for o := 0; o < a.out; o++ {
		t.start[o] = len(t.idx)
		x, inside := m.sourceCoord(a, o)
		if !inside {
			continue
		}
		if m.interp == "nearest" {
			t.idx = append(t.idx, min(max(m.nearestIndex(x, a.scale), 0), a.in-1))
			t.w = append(t.w, 1)
			continue
		}
		f := math.Floor(x)
		first, w := m.coeffs(x-f, a.scale)
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
			t.idx = append(t.idx, min(max(base+k, 0), a.in-1))
			t.w = append(t.w, wk)
		}
	}
	t.start[a.out] = len(t.idx)
	return t
}

// identity reports whether the taps copy the axis unchanged.
func (t *resizeGradTaps) identity(in int) bool {
	if len(t.start)-1 != in || len(t.idx) != in {
		return false
	}
	for o := 0; o < in; o++ {
		if t.start[o] != o || t.idx[o] != o || t.w[o] != 1 {
			return false
		}
	}
	return true
}

// resizeGrad implements ResizeGrad(dy, shape(X), roi, scales, sizes), the
// adjoint of Resize: the forward is a separable linear map (one set of taps
// per axis), so its adjoint scatters dy back axis by axis. The legacy
// attribute (set for Upsample and Resize before opset 11) selects the
// opset 7-10 rules, where the scales may also be the attribute scales.
func resizeGrad(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	dy, shapeT := in[0], in[1]
	roi, scales, sizes := kern.Opt(in, 2), kern.Opt(in, 3), kern.Opt(in, 4)
	if dy.DType != graph.Float32 && dy.DType != graph.Float64 {
		return nil, n.Errorf("dtype %v is not supported (float32, float64)", dy.DType)
	}
	if !shapeT.DType.IsInt() || len(shapeT.Shape) != 1 {
		return nil, n.Errorf("input 1 must be a 1-D integer shape, has %v of shape %v", shapeT.DType, shapeT.Shape)
	}
	xShape := shapeT.Ints()
	legacy := n.AttrInt("legacy", 0) != 0
	m, err := readResizeGradMode(n, legacy)
	if err != nil {
		return nil, err
	}
	ras, err := resizeGradAxes(n, xShape, roi, scales, sizes, m, legacy)
	if err != nil {
		return nil, err
	}
	yShape := append([]int{}, xShape...)
	for _, a := range ras {
		yShape[a.axis] = a.out
	}
	if !graph.SameShape(dy.Shape, yShape) {
		return nil, n.Errorf("gradient has shape %v, the forward output %v", dy.Shape, yShape)
	}
	type pass struct {
		axis int
		taps *resizeGradTaps
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
	// Shrink first (the adjoint of the largest upsampling first) so the
	// intermediates stay small.
	sort.SliceStable(passes, func(i, j int) bool {
		ri := float64(xShape[passes[i].axis]) / float64(yShape[passes[i].axis])
		rj := float64(xShape[passes[j].axis]) / float64(yShape[passes[j].axis])
		return ri < rj
	})
	if product(xShape) == 0 || product(yShape) == 0 {
		dx, err := kern.New(n, dy.DType, xShape)
		if err != nil {
			return nil, err
		}
		return []*graph.Tensor{dx}, nil
	}
	cur := dy
	shape := append([]int{}, yShape...)
	for _, p := range passes {
		next := append([]int{}, shape...)
		next[p.axis] = xShape[p.axis]
		t, err := kern.New(n, dy.DType, next)
		if err != nil {
			return nil, err
		}
		outer, inner := product(shape[:p.axis]), product(shape[p.axis+1:])
		switch src := cur.Data.(type) {
		case []float32:
			resizeScatter(t.Data.([]float32), src, outer, shape[p.axis], next[p.axis], inner, p.taps)
		case []float64:
			resizeScatter(t.Data.([]float64), src, outer, shape[p.axis], next[p.axis], inner, p.taps)
		}
		cur, shape = t, next
	}
	if cur == dy {
		cur = dy.Clone()
	}
	return []*graph.Tensor{cur}, nil
}

// resizeGradAxes resolves the resized axes from the scales or sizes the
// forward node used.
func resizeGradAxes(n *graph.Node, xShape []int, roi, scales, sizes *graph.Tensor, m *resizeGradMode, legacy bool) ([]resizeGradAxis, error) {
	r := len(xShape)
	axes := make([]int, r)
	for i := range axes {
		axes[i] = i
	}
	if v := n.AttrInts("axes", nil); v != nil && !legacy {
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
	if sizes != nil && sizes.Size() == 0 {
		sizes = nil
	}
	if scaleVals != nil && sizes != nil {
		return nil, n.Errorf("only one of scales and sizes may be given")
	}
	ras := make([]resizeGradAxis, len(axes))
	for i, ax := range axes {
		ras[i] = resizeGradAxis{axis: ax, in: xShape[ax], roiEnd: 1}
	}
	if m.coordMode == "tf_crop_and_resize" {
		if roi == nil || roi.Size() != 2*len(axes) {
			return nil, n.Errorf("tf_crop_and_resize needs roi with %d values", 2*len(axes))
		}
		for i := range ras {
			ras[i].roiStart, ras[i].roiEnd = roi.Float(i), roi.Float(i+len(axes))
		}
	}
	switch {
	case scaleVals != nil:
		if len(scaleVals) != len(axes) {
			return nil, n.Errorf("scales has %d values, want %d", len(scaleVals), len(axes))
		}
		for i := range ras {
			a := &ras[i]
			a.scale = scaleVals[i]
			if !(a.scale > 0) {
				return nil, n.Errorf("scales %v must be positive", scaleVals)
			}
			ext := float64(a.in) * a.scale
			if m.coordMode == "tf_crop_and_resize" {
				ext *= a.roiEnd - a.roiStart
			}
			if ext > graph.MaxElements || ext < 0 {
				return nil, n.Errorf("scale %g makes axis %d too large", a.scale, a.axis)
			}
			a.out = int(math.Floor(ext))
		}
	case sizes != nil:
		want := sizes.Ints()
		if len(want) != len(axes) {
			return nil, n.Errorf("sizes has %d values, want %d", len(want), len(axes))
		}
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
	default:
		return nil, n.Errorf("one of scales and sizes is required")
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

// resizeScatter is the adjoint of one axis pass: src is outer × out × inner,
// dst outer × in × inner, and dst[b, idx, :] += w·src[b, o, :] over the taps
// of every output index o. dst is zero on entry.
func resizeScatter[T float32 | float64](dst, src []T, outer, out, in, inner int, taps *resizeGradTaps) {
	workers := gradWorkers(outer, out*inner*2)
	convGradParallel(outer, workers, false, func(_, b int) {
		s := src[b*out*inner : (b+1)*out*inner]
		d := dst[b*in*inner : (b+1)*in*inner]
		for o := 0; o < out; o++ {
			row := s[o*inner : (o+1)*inner]
			for k := taps.start[o]; k < taps.start[o+1]; k++ {
				wk := T(taps.w[k])
				drow := d[taps.idx[k]*inner : (taps.idx[k]+1)*inner]
				drow = drow[:len(row)]
				for j, v := range row {
					drow[j] += wk * v
				}
			}
		}
	})
}
